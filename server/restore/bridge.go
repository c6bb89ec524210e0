package restore

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/mirror"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/poison"
)

// bridge is the engine's view of one bridge. mu serialises everything that
// talks to the switch or reads the desired state for it (replays, writes), so
// a write never slips between a replay's read of the store and its bundle.
//
// Who holds mu when: the bridge goroutine (runBridge) for a replay or an
// audit; the write owner (runWrites) for one write transaction, or for the
// whole life of a pipe, whose storer goroutine then works under the owner's
// lock (the owner waits for it before it unlocks, pipe.close); a
// controller's TLV table change (tlv.go) for its transaction; Diff and
// Reconcile for their call; the bridge's own methods briefly, to read or
// publish its state. The fields mu guards change only through the
// methods in this file (setConn, replayedLocked, driftFoundLocked,
// markDivergedLocked, liftQuarantineLocked, quarantineLocked, ...), and
// poison only through its own methods (package poison).
type bridge struct {
	name string
	kick chan struct{}

	// writes is the write queue (writequeue.go).
	writes writeQueue

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
	// out because they crashed vswitchd or are suspected to (poison.go).
	quarantine quarantineSet
	// listed is the sample of quarantine a status lists, taken at version
	// listedVersion of the set.
	listed        []listedQ
	listedVersion uint64
	// quarantineGauge follows quarantine.len().
	quarantineGauge prometheus.Gauge
	// poison follows the vswitchd deaths during replays and the entries
	// held out for them (package poison); guarded by mu.
	poison *poison.Tracker

	// status is a copy of the fields above, published after every change, so
	// Status never waits for a replay in progress.
	status atomic.Pointer[BridgeStatus]
	// excused says why the flag was cleared without this bridge (missing
	// from OVSDB, or held the node for MaxHold); set by the flag logic.
	excused atomic.Pointer[string]
	// busySince is when the current replay or write started waiting for or
	// holding mu (unix nanoseconds, 0 when idle), for Engine.Wedged.
	busySince atomic.Int64
	// owner says whether this engine may change the bridge (owner.go).
	owner ownerState
	// drift is what the audits found (audit.go); guarded by mu.
	drift driftState
	// foreignSettled is true once the current connection needs no restore
	// of foreign entries (cookie.go); guarded by mu.
	foreignSettled bool
	// kept holds what unrecorded controllers behind the proxy installed,
	// left alone (kept.go); its own lock.
	kept keptSet
	// adopt is the learning of a relayed controller's state pending for
	// the first reconcile (adopt.go), nil when none.
	adopt atomic.Pointer[adoption]
}

// Quarantined is an entry the switch refused during a replay.
type Quarantined struct {
	Bridge string
	Entry  entry.Entry
	Reason string
	Since  time.Time
	// predicted: not refused by the switch but expected to be; derived
	// again at every replay (see predictRefusals).
	predicted bool
	// damaged: the store found it damaged (damage.go), not the switch.
	damaged bool
}

// BridgeStatus is the state of one bridge.
type BridgeStatus struct {
	Name      string
	Connected bool
	Converged bool
	// Since is when Converged last changed.
	Since time.Time
	// Reason says why the bridge is not converged: the dial error, the
	// replay error, or that the gate holds replays.
	Reason string
	// Excused says why flow-restore-wait was cleared without waiting for
	// this bridge (missing from OVSDB, or it held the node for MaxHold).
	Excused string
	Last    plan.Replay
	// Quarantined lists at most MaxListedQuarantined quarantined entries
	// (those that crashed vswitchd first, then in key order), read from the
	// store by Engine.Status; QuarantinedTotal counts them all, and
	// QuarantineCauses counts them per module, kind and reason.
	Quarantined      []Quarantined
	QuarantinedTotal int
	QuarantineCauses []QuarantineCause
	listed           []listedQ
	// Poison says what the crash-loop protection holds out (package poison).
	Poison poison.Status
	// Mirror is set for an unmanaged bridge the engine mirrors (package
	// mirror).
	Mirror *mirror.State
	// DriftFound counts the audits that found the switch different from
	// the store since flowstated started; LastDrift is the last one.
	DriftFound int
	LastDrift  time.Time
	// LeftAlone counts the entries on the switch that controllers the
	// OpenFlow proxy relays without recording installed (OpenFlow < 1.5):
	// left alone, never deleted, and not restored after a vswitchd
	// restart (kept.go), as of the last dump. LeftAloneAll: there were
	// more than the engine tracks, and every undeclared entry is left
	// alone until vswitchd restarts.
	LeftAlone    int
	LeftAloneAll bool
}

// publishLocked snapshots the state for readers; b.mu must be held.
func (b *bridge) publishLocked() {
	converged := b.conn != nil && b.converged
	if prev := b.status.Load(); prev == nil || prev.Converged != converged {
		b.since = time.Now()
	}
	st := &BridgeStatus{Name: b.name, Connected: b.conn != nil, Converged: converged, Since: b.since, Last: b.last,
		DriftFound: b.drift.found, LastDrift: b.drift.last}
	if !converged {
		st.Reason = b.reason
	}
	if b.listedVersion != b.quarantine.version || b.listed == nil {
		b.listed = b.quarantine.sample(MaxListedQuarantined, b.poison.Crashed)
		b.listedVersion = b.quarantine.version
	}
	st.listed, st.QuarantinedTotal, st.QuarantineCauses = b.listed, b.quarantine.len(), b.quarantine.causes()
	st.Poison = b.poison.Status()
	if b.quarantineGauge != nil {
		b.quarantineGauge.Set(float64(b.quarantine.len()))
	}
	b.status.Store(st)
}

func (b *bridge) snapshot() BridgeStatus {
	st := BridgeStatus{Name: b.name, Reason: "not connected yet"}
	if s := b.status.Load(); s != nil {
		st = *s
	}
	if x := b.excused.Load(); x != nil && !st.Converged {
		st.Excused = *x
	}
	return st
}

// setReason records why the bridge is not converged.
func (b *bridge) setReason(reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reason != reason {
		b.reason = reason
		b.publishLocked()
	}
}

// busy marks the start of an operation on the switch, for Engine.Wedged;
// call the returned function when it is over.
func (b *bridge) busy() (done func()) {
	b.busySince.CompareAndSwap(0, time.Now().UnixNano())
	return func() { b.busySince.Store(0) }
}

func (b *bridge) setConn(c *ofconn.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.conn = c
	b.converged = false
	if c != nil {
		b.reason = "connected, replay pending"
	}
	b.quarantine.reset() // a new switch may accept what the old one refused
	b.foreignSettled = false
	b.publishLocked()
}

// liftQuarantineLocked forgets the quarantine of entries a module wrote
// again, given as entries or as keys: the write itself tells whether the
// switch accepts them now. b.mu must be held.
func (b *bridge) liftQuarantineLocked(keys []string, es ...[]entry.Entry) {
	if b.quarantine.len() == 0 {
		return
	}
	removed := false
	for _, k := range keys {
		removed = b.quarantine.remove(k) || removed
	}
	for _, es := range es {
		for _, en := range es {
			removed = b.quarantine.remove(plan.Key(en.Kind, en.ID)) || removed
		}
	}
	if removed {
		b.publishLocked()
	}
}

// quarantineLocked leaves q out of the bridge's replays from now on.
// b.mu must be held.
func (b *bridge) quarantineLocked(q quarantining, now time.Time) {
	b.quarantine.add(q.key, q.kind, q.module, q.reason, now, q.predicted)
}

// quarantineDamagedLocked leaves out q, an entry the store found damaged.
// b.mu must be held.
func (b *bridge) quarantineDamagedLocked(q Quarantined) {
	b.quarantine.addDamaged(plan.Key(q.Entry.Kind, q.Entry.ID), q.Entry.Kind, q.Entry.Module, q.Reason, q.Since)
}

// replayedLocked records the replay r: the bridge is converged if it
// succeeded. b.mu must be held.
func (b *bridge) replayedLocked(r plan.Replay) {
	b.last = r
	b.converged = r.Err == nil
	b.reason = ""
	if r.Err != nil {
		b.reason = "replay failed: " + r.Err.Error()
	}
	b.publishLocked()
}

// driftFoundLocked records that an audit found the switch different from
// the store (why): unconverged until the replay that corrects it.
// b.mu must be held.
func (b *bridge) driftFoundLocked(why string) {
	b.converged = false
	b.reason = why
	b.drift.found++
	b.drift.last = time.Now()
	b.publishLocked()
}

// settleForeignLocked records that the current connection needs no restore
// of foreign entries any more (cookie.go). b.mu must be held.
func (b *bridge) settleForeignLocked() { b.foreignSettled = true }

// markDivergedLocked records that the switch may differ from the store: the
// bridge is unconverged until a replay makes them equal. b.mu must be held.
func (b *bridge) markDivergedLocked() {
	b.converged = false
	b.publishLocked()
}

func (b *bridge) isConverged() bool { return b.snapshot().Converged }

// requestReplay asks the bridge goroutine for a replay; it never blocks.
func (b *bridge) requestReplay() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// runBridge owns the OpenFlow connection of one bridge: dial, serve, repeat.
func (e *Engine) runBridge(ctx context.Context, b *bridge) {
	log := e.log.With("bridge", b.name)
	e.keepConnected(ctx, b.name, log, connHooks{
		set: func(conn *ofconn.Conn, why string) {
			b.setConn(conn)
			switch {
			case conn == nil:
				b.setReason(why)
			case !e.gate.IsOpen():
				b.setReason("waiting for the cold-start gate: " + e.gate.Status().Reason)
			}
		},
		serve:       func(conn *ofconn.Conn) { e.serveConn(ctx, b, conn, log) },
		unreachable: b.setReason,
	})
}

// serveConn replays once the gate is open, then again when kicked or at
// every audit tick, until the connection dies or ctx ends.
func (e *Engine) serveConn(ctx context.Context, b *bridge, conn *ofconn.Conn, log *slog.Logger) {
	select {
	case <-e.gate.Opened():
	case <-ctx.Done():
		return
	case <-conn.Done():
		return
	}
	// Store identity: nothing is sent before this store may manage the bridge.
	if !e.claim(ctx, b, conn, log) {
		return
	}
	retry := time.NewTimer(0)
	defer retry.Stop()
	var audit <-chan time.Time
	if e.cfg.AuditInterval > 0 {
		t := time.NewTicker(e.cfg.AuditInterval)
		defer t.Stop()
		audit = t.C
	}
	first := true
	// survive fires SurviveAfter after a replay that sent something, if
	// vswitchd is still up (package poison).
	survive := time.NewTimer(time.Hour)
	survive.Stop()
	defer survive.Stop()
	for {
		auditing := false
		select {
		case <-ctx.Done():
			return
		case <-conn.Done():
			if ctx.Err() == nil {
				e.connLost(ctx, b, log)
			}
			return
		case <-survive.C:
			b.mu.Lock()
			err := b.poison.Survived(b.quarantine.has, log)
			b.mu.Unlock()
			if err != nil {
				log.Error("recording a replay vswitchd survived failed", "err", err)
			}
			continue
		case <-b.kick:
		case <-retry.C:
		case <-audit:
			if !e.audit(ctx, b, conn, log) {
				continue // the switch holds what the store says
			}
			auditing = true
		}
		r, err := e.reconcile(ctx, b, conn, log)
		if r.Messages > 0 && err == nil {
			survive.Reset(e.cfg.SurviveAfter)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error("replay failed", "err", err)
			retry.Reset(e.cfg.RetryInterval)
			continue
		}
		if auditing && r.Changes() > 0 {
			e.cfg.Metrics.drift.WithLabelValues(b.name).Add(float64(r.Changes()))
			log.Warn("drift corrected", "changes", r.Changes())
			e.publish(events.Event{Type: events.DriftCorrected, Bridge: b.name,
				Message: fmt.Sprintf("audit found and corrected %d differences", r.Changes()),
				Attrs:   map[string]string{"changes": strconv.Itoa(r.Changes())}})
		}
		if first {
			first = false
			e.flag.BridgeConverged()
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "closed"
	}
	return err.Error()
}

func errAttrs(err error) map[string]string {
	if err == nil {
		return nil
	}
	return map[string]string{"error": err.Error()}
}

// connected returns b's connection, or ErrUnavailable while there is none.
func (b *bridge) connected() (*ofconn.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn == nil {
		return nil, fmt.Errorf("restore: bridge %s is not connected: %w", b.name, errdefs.ErrUnavailable)
	}
	return b.conn, nil
}
