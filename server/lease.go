package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/guard"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/server/restore"
	"github.com/flowstate-io/flowstate/server/restore/gate"
)

// keeper is flowstated's liveness: it renews the guard's lease while the
// engine is healthy, keeps a guard running (GuardSpawn), judges the guard's
// proof (its heartbeat), and reports health (gRPC health, /healthz,
// Config.Liveness for the systemd watchdog).
//
// The guard is trusted on proof, never because it holds the lock. At every
// renewal, and at once when a spawned guard exits:
//
//  1. The lease is renewed (re-created if its path went away) with the
//     identity of flowstated's own OVSDB.
//  2. Some guard must hold the lock; in spawn mode one is started if none
//     does.
//  3. The lock holder's heartbeat must be younger than guard.StaleAfter,
//     name the Open_vSwitch row flowstated's OVSDB has, and carry a grace no
//     longer than flowstated's (guard.Heartbeat.Check).
//  4. A change of verdict is logged (an error naming the failing field when
//     the proof lapses), published as an event, and handed to the engine
//     (GuardChanged), which disarms the flag it armed at once, and arms it
//     again once a proven guard is back.
type keeper struct {
	cfg    GuardConfig
	ovsdb  string
	engine engineHealth // set before run
	flag   restore.Flag // told of every change of verdict: it arms only on a proven guard
	events *events.Log
	hs     *health.Server
	log    *slog.Logger
	notify func(healthy bool, status string)

	lease *guard.Lease
	obs   *guard.Observer
	// relays are the OpenFlow proxy sockets a spawned guard holds too
	// (guard.Relay); set before run.
	relays []guard.Relay
	// writers are flowstated's --module-writer rules, which the guard
	// holds the relayed controllers to.
	writers Writers

	// exited receives the pid of a spawned guard that exited, or of the
	// adopted guard that watched watches (watchExit); child is the one this
	// flowstated spawned (0: none), watched the one an earlier flowstated
	// spawned (0: none). All belong to run.
	exited  chan int
	child   int
	watched int

	identity atomic.Pointer[string] // flowstated's own Open_vSwitch _uuid ("" unknown)
	proof    atomic.Pointer[proofState]
	present  atomic.Bool
	wedged   atomic.Pointer[string]

	provenOnce sync.Once
	proven     chan struct{} // closed at the first proof
	started    atomic.Bool   // past the start-up wait: lapses are errors
}

// engineHealth is what the keeper reports of the engine: whether an
// operation wedged it, and the one-line state of its gate and bridges
// (statusLine).
type engineHealth interface {
	Wedged() string
	Gate() gate.Status
	Status() []restore.BridgeStatus
}

// proofState is the keeper's last verdict on the guard.
type proofState struct {
	err *guard.ProofError // nil: proven
	hb  guard.Heartbeat   // zero without a heartbeat
}

func newKeeper(cfg GuardConfig, ovsdb string, log *slog.Logger, notify func(bool, string)) *keeper {
	k := &keeper{cfg: cfg, ovsdb: ovsdb, log: log, notify: notify, exited: make(chan int, 1), proven: make(chan struct{})}
	k.proof.Store(&proofState{err: &guard.ProofError{Field: guard.FieldRunning, Msg: "not checked yet"}})
	if cfg.Mode == GuardOff {
		k.proof.Store(&proofState{})
		k.provenOnce.Do(func() { close(k.proven) })
	}
	return k
}

// guardPresent is restore.Config.GuardPresent: whether a proven guard would
// release the node, and if not, why.
func (k *keeper) guardPresent() (bool, string) {
	if k.cfg.Mode == GuardOff {
		return true, ""
	}
	if p := k.proof.Load(); p.err != nil {
		return false, p.err.Error()
	}
	return true, ""
}

// renewInterval paces renewals: several per grace, at most one a second.
func (k *keeper) renewInterval() time.Duration {
	return min(max(k.cfg.Grace/5, 10*time.Millisecond), time.Second)
}

// startTick paces the keeper until the first proof, so start-up waits for a
// guard's first heartbeat, not for a renewal.
const startTick = 25 * time.Millisecond

// run renews until ctx ends. The lease is left in place when it returns: a
// lease that stops changing is how the guard learns that flowstated is gone.
func (k *keeper) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if k.cfg.Mode != GuardOff {
		k.obs = guard.NewObserver(k.cfg.Lease)
		wg.Go(func() { k.readIdentity(ctx) })
	}
	interval := k.renewInterval()
	t := time.NewTicker(min(startTick, interval))
	defer t.Stop()
	fast := true
	var lastWedged, lastErr string
	var wedgedAt time.Time
	for {
		wedged := k.engine.Wedged()
		// The reason carries its growing duration: one line when an
		// operation wedges and one when it ends, not one a second.
		if what := wedgedWhat(wedged); what != wedgedWhat(lastWedged) {
			switch {
			case wedged != "" && lastWedged == "":
				wedgedAt = time.Now()
				k.log.Error("engine wedged: health NOT_SERVING, guard lease no longer renewed", "reason", wedged)
				k.hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
			case wedged != "":
				k.log.Error("engine still wedged, by another operation", "reason", wedged)
			default:
				k.log.Info("engine responsive again", "wedged_for", time.Since(wedgedAt).Round(time.Second), "was", lastWedged)
				k.hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			}
		}
		lastWedged = wedged
		k.wedged.Store(&wedged)
		if err := k.tend(wedged == ""); err != nil && err.Error() != lastErr {
			k.log.Error("guard", "err", err)
			lastErr = err.Error()
		} else if err == nil {
			lastErr = ""
		}
		// A guard holds its lock until it exits, so the one watched stays
		// the holder until its exit clears watched: no lock file read per
		// renewal meanwhile.
		if k.watched == 0 {
			if pid := k.adopted(); pid != 0 {
				k.watched = pid
				wg.Go(func() { k.watchExit(ctx, pid) })
			}
		}
		if k.notify != nil {
			k.notify(wedged == "", k.statusLine(wedged))
		}
		if fast && (k.isProven() || k.started.Load()) {
			fast = false
			t.Reset(interval)
		}
		select {
		case <-ctx.Done():
			k.markStopped(wedged)
			return
		case <-t.C:
		case pid := <-k.exited:
			// Noticed at once, not at the next renewal: flowstated may
			// die next, and the flag must not stay armed on a dead guard.
			switch pid {
			case k.child:
				k.child = 0
				k.log.Warn("the guard flowstated spawned exited", "pid", pid)
			case k.watched:
				k.watched = 0
				k.log.Warn("the guard an earlier flowstated spawned exited", "pid", pid)
			}
		}
	}
}

// markStopped tells the guard that flowstated stops in order, so its release
// after the grace is not logged as a dead flowstated. A wedged engine is not
// an orderly stop: its lease is left as it is, and the guard says so.
func (k *keeper) markStopped(wedged string) {
	if k.cfg.Mode == GuardOff || k.lease == nil || wedged != "" {
		return
	}
	if err := k.lease.MarkStopped(k.ownIdentity()); err != nil {
		k.log.Warn("guard: the guard will log this stop as a dead flowstated", "err", err)
	}
}

// adopted is the pid of the running guard when an earlier flowstated
// spawned it (this one adopted it at start), 0 otherwise. Only in spawn
// mode: an external guard may run in another pid namespace, where its pid
// names another process here.
func (k *keeper) adopted() int {
	if k.cfg.Mode != GuardSpawn || !k.present.Load() {
		return 0
	}
	if pid := guard.Holder(k.cfg.Lease); pid != k.child {
		return pid
	}
	return 0
}

// wedgedWhat is the operation an engineHealth.Wedged answer names, without
// its duration ("bridge br-int busy for 3m2s": "bridge br-int").
func wedgedWhat(w string) string {
	what, _, _ := strings.Cut(w, " busy for ")
	return what
}

// readIdentity keeps flowstated's own OVSDB identity current (one round trip
// a renewal) until ctx ends. The last identity read stays while the server
// does not answer: a database does not change by being unreachable, and the
// engine cannot touch the flag meanwhile anyway.
func (k *keeper) readIdentity(ctx context.Context) {
	var c *ovsconfig.Client
	for c == nil {
		var err error
		// No logger: this second connection to the engine's own
		// ovsdb-server would log each of its losses and reconnects
		// twice; its failures show as the guard's proof (FieldOVSDB).
		c, err = ovsconfig.Dial(ctx, k.ovsdb, ovsconfig.Options{})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			k.log.Warn("guard: ovsdb unreachable, retrying: no guard can be proven meanwhile", "addr", k.ovsdb, "err", err)
		}
	}
	defer c.Close()
	t := time.NewTicker(k.renewInterval())
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, max(k.renewInterval(), time.Second))
		id, err := c.Identity(rctx)
		cancel()
		if err == nil {
			if old := k.identity.Swap(&id); old != nil && *old != id && *old != "" {
				k.log.Warn("guard: flowstated's OVSDB has a new identity (its database was replaced)", "was", *old, "now", id)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (k *keeper) ownIdentity() string {
	if p := k.identity.Load(); p != nil {
		return *p
	}
	return ""
}

func (k *keeper) isProven() bool { ok, _ := k.guardPresent(); return ok }

// tend renews the lease when healthy, makes sure a guard runs and judges its
// proof (see keeper).
func (k *keeper) tend(healthy bool) error {
	if k.cfg.Mode == GuardOff {
		return nil
	}
	var errs []error
	if healthy {
		recreated, err := k.lease.Renew(k.ownIdentity())
		if err != nil {
			errs = append(errs, err)
		} else if recreated {
			k.log.Warn("guard: the lease file had been removed or replaced: re-created", "lease", k.cfg.Lease)
		}
	}
	present, err := guard.Present(k.cfg.Lease)
	if err != nil {
		errs = append(errs, err)
	}
	if present != k.present.Load() {
		k.present.Store(present)
		if present {
			k.log.Info("guard running", "lease", k.cfg.Lease, "pid", guard.Holder(k.cfg.Lease))
		}
	}
	// Judged before a spawn: a guard gone disarms the flag now, while
	// the new guard's fork and exec take their time (flowstated may be
	// killed next, and an armed flag with no guard holds the next
	// vswitchd start until flowstated is back).
	k.judge(present)
	if !present && k.cfg.Mode == GuardSpawn && healthy && k.child == 0 {
		if err := k.spawn(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// judge checks the guard's proof and reports a change of verdict.
func (k *keeper) judge(present bool) {
	var next proofState
	switch {
	case !present:
		next.err = &guard.ProofError{Field: guard.FieldRunning, Msg: "no guard holds " + guard.LockPath(k.cfg.Lease)}
		if k.cfg.Mode == GuardExternal {
			next.err.Msg += ": start the flowstate guard (unit or container)"
		}
	default:
		hb, age, err := k.obs.Observe(time.Now())
		next.hb = hb
		if err == nil {
			err = hb.Check(guard.Want{OVSDB: k.ownIdentity(), Grace: k.cfg.Grace}, age, guard.Holder(k.cfg.Lease))
		}
		var perr *guard.ProofError
		if errors.As(err, &perr) {
			next.err = perr
		}
	}
	prev := k.proof.Swap(&next)
	switch {
	case next.err == nil && prev.err != nil:
		k.log.Info("guard proven: flow-restore-wait may be armed", "pid", next.hb.PID, "grace", next.hb.Grace, "ovsdb", next.hb.OVSDB)
		k.publish(events.Event{Type: events.GuardProven, Message: fmt.Sprintf("guard pid %d proves it would release the node", next.hb.PID),
			Attrs: map[string]string{"pid": fmt.Sprint(next.hb.PID), "grace": next.hb.Grace.String(), "ovsdb": next.hb.OVSDB}})
		k.provenOnce.Do(func() { close(k.proven) })
		k.engineChanged()
	case next.err != nil && prev.err == nil:
		k.unproven(next.err)
		k.engineChanged()
	case next.err != nil && prev.err.Field != next.err.Field && k.started.Load():
		// Before the start-up wait ends a guard is still coming (no
		// lock, then no heartbeat, then proven): waitProven reports the
		// outcome, and a normal start reports nothing.
		k.unproven(next.err)
	}
}

// unproven says why the guard is not trusted: an error naming the field, and
// an event.
func (k *keeper) unproven(err *guard.ProofError) {
	k.log.Error("guard not proven: flow-restore-wait disarmed until a proven guard is back",
		"field", err.Field, "reason", err.Msg)
	k.publish(events.Event{Type: events.GuardUnproven, Message: err.Error(),
		Attrs: map[string]string{"field": err.Field, "reason": err.Msg}})
}

func (k *keeper) publish(ev events.Event) {
	if k.events != nil {
		k.events.Publish(ev)
	}
}

func (k *keeper) engineChanged() {
	if k.flag != nil {
		k.flag.GuardChanged()
	}
}

// waitProven waits, at most cfg.StartTimeout, until a proven guard is
// present; past it the node is served unprotected (the flag disarmed) and
// an error says why.
func (k *keeper) waitProven(ctx context.Context) {
	defer k.started.Store(true)
	t := time.NewTimer(k.cfg.StartTimeout)
	defer t.Stop()
	start := time.Now()
	select {
	case <-k.proven:
		if k.cfg.Mode != GuardOff {
			k.log.Info("guard proven before serving", "waited", time.Since(start).Round(time.Millisecond))
		}
	case <-ctx.Done():
	case <-t.C:
		p := k.proof.Load()
		if p.err == nil {
			return // proven just now
		}
		k.log.Error("serving without a proven guard: flow-restore-wait stays disarmed until one proves itself",
			"waited", k.cfg.StartTimeout, "field", p.err.Field, "reason", p.err.Msg)
		k.publish(events.Event{Type: events.GuardUnproven, Message: p.err.Error(),
			Attrs: map[string]string{"field": p.err.Field, "reason": p.err.Msg}})
	}
}
