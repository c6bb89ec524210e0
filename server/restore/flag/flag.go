package flag

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// Store is what the flag keeps across flowstated restarts: the vswitchd a
// clear last released and when, so a restarted flowstated neither counts a
// release twice nor holds a vswitchd released before. *store.Store is one.
type Store interface {
	Vswitchd() (string, error)
	SetVswitchd(id string) error
	Last() (time.Time, error)
	SetLast(at time.Time) error
}

// Bridge is what the flag reads of one managed bridge.
type Bridge struct {
	Name      string
	Connected bool
	Converged bool
	// Since is when Converged last changed; Reason says why the bridge is
	// not converged.
	Since  time.Time
	Reason string
	// Excused is the excuse last given (Node.Excuse), "" when none.
	Excused string
	// StandingAside: another store manages the bridge, so this flowstated
	// has nothing of its own to restore there.
	StandingAside bool
}

// Node is what the flag needs of the rest of flowstated to decide whether
// anything still holds the node.
type Node interface {
	// Bridges are the managed bridges, in flag order. It must not block:
	// the flag calls it under its lock.
	Bridges() []Bridge
	// Excuse records why a bridge does not hold the node ("" when it
	// does, or is converged) and reports whether that changed.
	Excuse(bridge, why string) (changed bool)
	// GateOpened is when the cold-start gate opened (zero while closed).
	GateOpened() time.Time
	// MirrorsSettled reports whether every unmanaged bridge of c was
	// restored, or needs no restore, or gave up; called under the flag's
	// lock. One that waits calls Recheck when its wait ends.
	MirrorsSettled(c *ovsconfig.Client) bool
	// Wedged names an operation that has run for too long ("" when none):
	// a wedged node is not armed on request.
	Wedged() string
}

// Config wires a Flag. OVSDB, RunDir, Store and Node are required, and the
// durations must be positive.
type Config struct {
	// OVSDB is the ovsdb-server address, e.g. "unix:/var/run/openvswitch/db.sock".
	OVSDB string
	// RunDir holds ovs-vswitchd's pidfile, which names the running vswitchd.
	RunDir string
	// AckTimeout bounds the wait for vswitchd to acknowledge a flag change.
	AckTimeout time.Duration
	// RetryInterval paces the OVSDB dial and a failed flag change, and the
	// wait for the gate and the mirrors.
	RetryInterval time.Duration
	// MaxHold bounds how long one managed bridge that cannot be restored
	// holds the node (settle).
	MaxHold time.Duration
	// Rearm sets the flag back once vswitchd acknowledged its clearing, so
	// a vswitchd that crashes and is started plainly comes back gated too.
	Rearm bool
	// GuardPresent reports whether a proven guard would release the node if
	// flowstated died, and if not, why; the flag is armed only while it
	// says so. Nil: always (no guard configured).
	GuardPresent func() (ok bool, why string)
	Store        Store
	Node         Node
	// BeforeClear runs right before each clear (tests' fault injection).
	BeforeClear func()
	// Publish sends an event (nil: none are sent).
	Publish func(events.Event)
	Logger  *slog.Logger
	Metrics *Metrics
}

// Flag owns other_config:flow-restore-wait and the OVSDB connection: its
// goroutine (Run) clears the flag once nothing holds the node and arms it
// again; Arm and Release are the operator's; Close leaves it as a stop must.
type Flag struct {
	cfg Config
	log *slog.Logger

	// mu serialises flag changes and the shutdown of ovsdb, which is set
	// once Run has connected; readers (Status) load it without the lock,
	// so they never wait for an acknowledgement.
	mu    sync.Mutex
	ovsdb atomic.Pointer[ovsconfig.Client]
	// up is closed once ovsdb is set.
	up chan struct{}
	// converged is signalled when a bridge converges, so Run re-checks
	// whether all have; recheck asks it to re-evaluate a pending release
	// (a mirror settled, a hold ran out) without starting one.
	converged chan struct{}
	recheck   chan struct{}
	// busySince is when the running flag operation started (unix
	// nanoseconds, 0 when idle), for BusySince.
	busySince atomic.Int64
	// Guarded by mu: the vswitchd (ovsconfig.VswitchdIdentity) last
	// released, a clear whose acknowledgement never came, and whether the
	// missing guard was logged.
	releasedVswitchd string
	unackedClear     bool
	guardMissing     bool
	// notArmedFor says why nothing is armed ("" when something can be
	// restored), as last logged; vswitchdUnheld is the running vswitchd
	// last seen with the flag cleared. Guarded by mu.
	notArmedFor    string
	vswitchdUnheld string
	// seenReleased is the vswitchd last seen running with the flag off and
	// acknowledged (noteReleased); noIdentity is true while vswitchd has
	// no pidfile (logged once). Guarded by mu.
	seenReleased string
	noIdentity   bool
	// Owned by Run (watchVswitchd): the vswitchd last seen and when it was
	// first seen.
	vswitchdLast  string
	vswitchdSince time.Time
	// lastRelease is when a clear last released a held vswitchd (unix
	// nanoseconds), for LastRelease.
	lastRelease atomic.Int64
	// unheldView is vswitchdUnheld for State, which must not wait for mu.
	unheldView atomic.Pointer[string]
}

// New validates cfg and returns a flag whose OVSDB is not dialled yet (Run).
func New(cfg Config) (*Flag, error) {
	if cfg.OVSDB == "" || cfg.RunDir == "" || cfg.Store == nil || cfg.Node == nil {
		return nil, errors.New("flag: ovsdb, rundir, store and node are required")
	}
	if cfg.AckTimeout <= 0 || cfg.RetryInterval <= 0 || cfg.MaxHold <= 0 {
		return nil, errors.New("flag: ack timeout, retry interval and max hold must be positive")
	}
	if cfg.GuardPresent == nil {
		cfg.GuardPresent = func() (bool, string) { return true, "" }
	}
	if cfg.BeforeClear == nil {
		cfg.BeforeClear = func() {}
	}
	if cfg.Publish == nil {
		cfg.Publish = func(events.Event) {}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	return &Flag{
		cfg:       cfg,
		log:       cfg.Logger,
		up:        make(chan struct{}),
		converged: make(chan struct{}, 1),
		recheck:   make(chan struct{}, 1),
	}, nil
}

// OVSDB is the OVSDB client, nil until Run has connected and after Close.
// It reconnects by itself (package ovsconfig).
func (f *Flag) OVSDB() *ovsconfig.Client { return f.ovsdb.Load() }

// OVSDBUp is closed once OVSDB has connected for the first time.
func (f *Flag) OVSDBUp() <-chan struct{} { return f.up }

// BusySince is when the running flag change started (zero when none runs):
// one that does not end wedges the node.
func (f *Flag) BusySince() time.Time {
	if n := f.busySince.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// BridgeConverged tells Run that a bridge converged: the flag may be cleared.
func (f *Flag) BridgeConverged() { signal(f.converged) }

// Recheck asks Run to re-evaluate the flag now (a mirror settled, a hold ran
// out) without starting a release.
func (f *Flag) Recheck() { signal(f.recheck) }

// GuardChanged tells the flag that GuardPresent's answer changed: the flag
// is disarmed (or armed again) now, not at the next periodic check.
func (f *Flag) GuardChanged() { f.Recheck() }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run dials OVSDB until it succeeds, then clears the flag whenever every
// bridge has converged after a (re)connection, and checks it periodically.
// It returns when ctx is cancelled; the client stays open until Close.
func (f *Flag) Run(ctx context.Context) {
	var c *ovsconfig.Client
	for c == nil {
		var err error
		c, err = ovsconfig.Dial(ctx, f.cfg.OVSDB, ovsconfig.Options{Logger: f.log})
		if err != nil {
			f.log.Warn("ovsdb unreachable, retrying", "addr", f.cfg.OVSDB, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(f.cfg.RetryInterval):
			}
		}
	}
	f.ovsdb.Store(c)
	close(f.up)
	f.log.Info("ovsdb connected", "addr", f.cfg.OVSDB)
	// A bridge may have converged before OVSDB answered.
	f.BridgeConverged()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	// The periodic check re-arms a flag the guard cleared while this
	// flowstated was frozen, and disarms it when the guard is gone.
	check := time.NewTicker(checkInterval)
	defer check.Stop()
	release := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.converged:
			release = true
		case <-f.recheck:
		case <-retry.C:
		case <-check.C:
		}
		recheck, err := f.sync(ctx, release)
		switch {
		case err != nil:
			f.log.Error("flow-restore-wait not in its intended state, retrying", "err", err)
			retry.Reset(f.cfg.RetryInterval)
		case recheck > 0:
			retry.Reset(recheck) // a bridge's MaxHold runs out then
		default:
			release = false
		}
	}
}

// checkInterval paces the periodic flag check of Run.
const checkInterval = time.Second

// Close runs once Run and every user of OVSDB have returned: with Rearm it
// disarms the flag unless something still holds the node, then closes the
// client.
func (f *Flag) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.ovsdb.Swap(nil)
	if c == nil {
		return
	}
	if f.cfg.Rearm {
		if why := f.holding(); why != "" {
			// Disarming now would release a vswitchd that waits for
			// a gate or a restore with a half-built pipeline: leave it
			// to the next flowstated, or to the guard after its grace.
			f.log.Warn("flow-restore-wait left armed on stop: the node is held; the guard releases it if no flowstated takes over within its grace", "held_by", why)
		} else {
			f.disarm(c)
		}
	}
	c.Close()
}

// holding says what the node waits for ("" for nothing): the cold-start gate,
// or a bridge not restored yet that still holds it.
func (f *Flag) holding() string {
	if f.cfg.Node.GateOpened().IsZero() {
		return "the cold-start gate"
	}
	for _, b := range f.cfg.Node.Bridges() {
		if !b.Converged && b.Excused == "" && !b.StandingAside {
			return "bridge " + b.Name
		}
	}
	return ""
}

// disarm clears the flag when flowstated stops with nothing held: a flag left
// true with nobody to clear it would keep the next vswitchd from forwarding.
func (f *Flag) disarm(c *ovsconfig.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.AckTimeout)
	defer cancel()
	if err := c.SetFlowRestoreWait(ctx, false, false); err != nil {
		f.log.Error("could not disarm flow-restore-wait on stop; a vswitchd restarted now stays gated until it is cleared", "err", err)
		return
	}
	f.log.Info("flow-restore-wait disarmed for shutdown")
}
