package bridge

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/poison"
)

// State is the engine's view of one bridge. Its lock (Lock, Unlock)
// serialises everything that talks to the switch or reads the desired state
// for it (replays, writes), so a write never slips between a replay's read
// of the store and its bundle. The fields it guards change only through the
// methods of this package (see the package doc for who holds the lock when).
type State struct {
	name string
	kick chan struct{}

	mu        sync.Mutex
	conn      *ofconn.Conn // nil while disconnected
	converged bool
	last      plan.Replay
	// since is when converged last changed; reason says why the bridge is
	// not converged ("" when it is).
	since  time.Time
	reason string
	// quarantine holds entries the switch refused in a replay of this
	// connection, by key; they are retried on the next connection, or when
	// their module writes them again. It also holds the refusals a replay
	// predicted, which the next replay derives again, and the entries held
	// out because they crashed vswitchd or are suspected to (package poison).
	quarantine Quarantine
	// listed is the sample of quarantine a status lists, taken at version
	// listedVersion of the set.
	listed        []listed
	listedVersion uint64
	// quarantineGauge follows quarantine.Len().
	quarantineGauge prometheus.Gauge
	// poison follows the vswitchd deaths during replays and the entries
	// held out for them (package poison); guarded by mu.
	poison *poison.Tracker

	// status is a copy of the fields above, published after every change, so
	// Snapshot never waits for a replay in progress.
	status atomic.Pointer[Snapshot]
	// excused says why the flag was cleared without this bridge (missing
	// from OVSDB, or held the node for MaxHold); set by the flag logic.
	excused atomic.Pointer[string]
	// busySince is when the current replay or write started waiting for or
	// holding mu (unix nanoseconds, 0 when idle), for the engine's Wedged.
	busySince atomic.Int64
	// drift is what the audits found; guarded by mu.
	drift driftState
	// foreignSettled is true once the current connection needs no restore
	// of foreign entries (entries outside the owned cookie space); guarded
	// by mu.
	foreignSettled bool
	// resets counts the times the switch was made equal to the store (a
	// replay) or replaced (a new connection); guarded by mu.
	resets uint64
}

// driftState counts the drift the audits of a bridge found.
type driftState struct {
	found int
	last  time.Time
}

// New returns the state of bridge name, not connected yet; gauge follows
// the size of its quarantine (nil: none), and crashes configures its
// crash-loop protection (package poison).
func New(name string, gauge prometheus.Gauge, crashes poison.Config) *State {
	s := &State{name: name, kick: make(chan struct{}, 1), quarantineGauge: gauge}
	s.poison = poison.NewTracker(crashes, name, s)
	return s
}

// Name is the bridge's name.
func (s *State) Name() string { return s.name }

// Lock takes the bridge: see the package doc.
func (s *State) Lock() { s.mu.Lock() }

// Unlock releases the bridge.
func (s *State) Unlock() { s.mu.Unlock() }

// Kicked receives when a replay was asked for (RequestReplay).
func (s *State) Kicked() <-chan struct{} { return s.kick }

// RequestReplay asks the bridge goroutine for a replay; it never blocks. It
// is also the tracker's poison.Replayer: the next probe of the suspects is
// sent by that replay.
func (s *State) RequestReplay() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Take starts an operation on the switch under the bridge's lock: it marks
// the bridge busy (BusySince, for the engine's Wedged), then locks it;
// release unlocks it, then ends the operation.
func (s *State) Take() (release func()) {
	s.busySince.CompareAndSwap(0, time.Now().UnixNano())
	s.mu.Lock()
	return func() { s.mu.Unlock(); s.busySince.Store(0) }
}

// BusySince is when the current operation on the switch started, zero when
// none runs.
func (s *State) BusySince() time.Time {
	if n := s.busySince.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// SetConn records a new connection (nil: disconnected). A new switch may
// accept what the old one refused: the quarantine is emptied.
func (s *State) SetConn(c *ofconn.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conn = c
	s.converged = false
	s.resets++
	if c != nil {
		s.reason = "connected, replay pending"
	}
	s.quarantine.reset()
	s.foreignSettled = false
	s.publishLocked()
}

// SetReason records why the bridge is not converged.
func (s *State) SetReason(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason != reason {
		s.reason = reason
		s.publishLocked()
	}
}

// Connected returns the bridge's connection, or ErrUnavailable while there
// is none.
func (s *State) Connected() (*ofconn.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil, fmt.Errorf("restore: bridge %s is not connected: %w", s.name, errdefs.ErrUnavailable)
	}
	return s.conn, nil
}

// ConnLocked returns the connection (nil while disconnected) and whether
// the bridge is converged on it. The lock must be held.
func (s *State) ConnLocked() (conn *ofconn.Conn, converged bool) {
	return s.conn, s.conn != nil && s.converged
}

// Quarantine is the bridge's quarantine, to read under the lock; it changes
// only through the Locked methods below.
func (s *State) Quarantine() *Quarantine { return &s.quarantine }

// Poison is the bridge's crash-loop protection; its calls but Death are
// made under the lock (package poison).
func (s *State) Poison() *poison.Tracker { return s.poison }

// LiftQuarantineLocked forgets the quarantine of entries a module wrote
// again, given as entries or as keys: the write itself tells whether the
// switch accepts them now. The lock must be held.
func (s *State) LiftQuarantineLocked(keys []string, es ...[]entry.Entry) {
	if s.quarantine.Len() == 0 {
		return
	}
	removed := false
	for _, k := range keys {
		removed = s.quarantine.remove(k) || removed
	}
	for _, es := range es {
		for _, en := range es {
			removed = s.quarantine.remove(plan.Key(en.Kind, en.ID)) || removed
		}
	}
	if removed {
		s.publishLocked()
	}
}

// Quarantining is an entry to quarantine (QuarantineLocked).
type Quarantining struct {
	Key       string
	Kind      entry.Kind
	Module    string
	Reason    string
	Predicted bool
}

// QuarantineLocked leaves qs out of the bridge's replays from now on and
// publishes the state. The lock must be held.
func (s *State) QuarantineLocked(qs []Quarantining, now time.Time) {
	for _, q := range qs {
		s.quarantine.add(q.Key, q.Kind, q.Module, q.Reason, now, q.Predicted)
	}
	s.publishLocked()
}

// QuarantineDamagedLocked leaves out qs, entries the store found damaged,
// and publishes the state. The lock must be held.
func (s *State) QuarantineDamagedLocked(qs []Quarantined) {
	for _, q := range qs {
		s.quarantine.addDamaged(plan.Key(q.Entry.Kind, q.Entry.ID), q.Entry.Kind, q.Entry.Module, q.Reason, q.Since)
	}
	s.publishLocked()
}

// ReplayedLocked records the replay r: the bridge is converged if it
// succeeded. The lock must be held.
func (s *State) ReplayedLocked(r plan.Replay) {
	s.last = r
	s.resets++
	s.converged = r.Err == nil
	s.reason = ""
	if r.Err != nil {
		s.reason = "replay failed: " + r.Err.Error()
	}
	s.publishLocked()
}

// DriftFoundLocked records that an audit found the switch different from
// the store (why): unconverged until the replay that corrects it.
// The lock must be held.
func (s *State) DriftFoundLocked(why string) {
	s.converged = false
	s.reason = why
	s.drift.found++
	s.drift.last = time.Now()
	s.publishLocked()
}

// ResetsLocked counts the replays and connections of the bridge: when it
// changes, the switch holds what the store held (or nothing) and no longer
// what a write left on it apart from the store (a resync's, package write).
// A failed replay counts too: it may have sent part of its changes. The
// lock must be held.
func (s *State) ResetsLocked() uint64 { return s.resets }

// SettleForeignLocked records that the current connection needs no restore
// of foreign entries any more. The lock must be held.
func (s *State) SettleForeignLocked() { s.foreignSettled = true }

// ForeignSettledLocked reports whether SettleForeignLocked was called on
// the current connection. The lock must be held.
func (s *State) ForeignSettledLocked() bool { return s.foreignSettled }

// MarkDivergedLocked records that the switch may differ from the store: the
// bridge is unconverged until a replay makes them equal. The lock must be
// held.
func (s *State) MarkDivergedLocked() {
	s.converged = false
	s.publishLocked()
}

// PublishLocked publishes the state again, after a change of the poison
// tracker. The lock must be held.
func (s *State) PublishLocked() { s.publishLocked() }

// NotManaged is the error of a request for bridge name, which this
// flowstated does not manage.
func NotManaged(name string) error {
	return fmt.Errorf("restore: bridge %q is not managed by this flowstated (see --bridge): %w", name, errdefs.ErrFailedPrecondition)
}
