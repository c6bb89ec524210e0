package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"

	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/guard"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/server/restore"
)

// Guard modes (Config.Guard.Mode).
const (
	// GuardOff: no guard; the flag is armed regardless (tests, or an
	// operator who accepts a node held by a dead flowstated).
	GuardOff = "off"
	// GuardSpawn: flowstated starts a guard process when none runs.
	GuardSpawn = "spawn"
	// GuardExternal: a guard runs as its own unit or container; without
	// one, flowstated does not arm the flag.
	GuardExternal = "external"
)

// GuardConfig configures the guard side of flowstated (package guard).
type GuardConfig struct {
	// Mode is GuardOff (the zero value ""), GuardSpawn or GuardExternal.
	Mode string
	// Lease is the lease file. Required unless Mode is off.
	Lease string
	// Grace is how long the lease may go unrenewed before the guard
	// releases the node; a guard that waits longer is not trusted. Default
	// guard.DefaultGrace.
	Grace time.Duration
	// StartTimeout bounds how long start-up waits for a proven guard before
	// it serves without one (the flag disarmed). Default
	// DefaultGuardStartTimeout.
	StartTimeout time.Duration
	// Command starts a guard for GuardSpawn: the program and its leading
	// arguments, to which the guard flags are appended. Default: this
	// executable with "guard".
	Command []string
	// Log is the guard's log file for GuardSpawn. Default: Lease + ".guard.log".
	Log string
}

// DefaultGuardStartTimeout is GuardConfig.StartTimeout's default: a spawned
// guard proves itself in well under a second, an external one starts with
// flowstated's unit.
const DefaultGuardStartTimeout = 10 * time.Second

func (g *GuardConfig) validate() error {
	if g.Grace <= 0 {
		g.Grace = guard.DefaultGrace
	}
	if g.StartTimeout <= 0 {
		g.StartTimeout = DefaultGuardStartTimeout
	}
	switch g.Mode {
	case "", GuardOff:
		g.Mode = GuardOff
		return nil
	case GuardSpawn, GuardExternal:
	default:
		return fmt.Errorf("server: guard mode %q: want off, spawn or external", g.Mode)
	}
	if g.Lease == "" {
		return fmt.Errorf("server: guard mode %s needs a lease file", g.Mode)
	}
	if g.Log == "" {
		g.Log = g.Lease + ".guard.log"
	}
	return nil
}

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
	engine *restore.Engine
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

// watchExit sends pid on exited once that process has exited, or returns
// when ctx ends. A guard an earlier flowstated spawned is no child of this
// one, so no Wait tells of its exit: a pidfd does (Linux 5.3), readable
// once the process is gone. Without one, the next renewal notices instead.
// A pid reused by another process costs one extra check, nothing more: the
// exit only makes run judge the guard again.
func (k *keeper) watchExit(ctx context.Context, pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			k.noteExit(pid) // gone between the check and the open
		}
		return
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for ctx.Err() == nil {
		// The timeout only bounds how long a stop waits.
		n, err := unix.Poll(fds, 200)
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			k.log.Warn("guard: watching the adopted guard's exit failed; the renewals still check it", "pid", pid, "err", err)
			return
		case n > 0:
			k.noteExit(pid)
			return
		}
	}
}

// noteExit tells run that guard pid exited; a full channel already has run
// judging the guard again.
func (k *keeper) noteExit(pid int) {
	select {
	case k.exited <- pid:
	default:
	}
}

// wedgedWhat is the operation a restore.Engine.Wedged answer names, without
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
	if !present && k.cfg.Mode == GuardSpawn && healthy && k.child == 0 {
		if err := k.spawn(); err != nil {
			errs = append(errs, err)
		}
	}
	k.judge(present)
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
	if k.engine != nil {
		k.engine.Flag().GuardChanged()
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

// spawn starts a guard in its own session, so that it outlives flowstated
// however flowstated ends; it exits by itself once it is not needed.
func (k *keeper) spawn() error {
	argv := k.cfg.Command
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("server: spawning a guard: %w", err)
		}
		argv = []string{exe, "guard"}
	}
	logf, err := os.OpenFile(k.cfg.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("server: spawning a guard: %w", err)
	}
	defer logf.Close()
	args := append(argv[1:len(argv):len(argv)], "--lease", k.cfg.Lease, "--ovsdb", k.ovsdb,
		"--grace", k.cfg.Grace.String(), "--exit-when-idle")
	cmd := exec.Command(argv[0], args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The proxies' sockets, shared: the guard relays them while this
	// flowstated is away (descriptors 3, 4, ... in flag order).
	for _, r := range k.relays {
		f, err := guard.ListenerFile(r.Listener)
		if err != nil {
			closeFiles(cmd.ExtraFiles)
			return fmt.Errorf("server: spawning a guard: %w", err)
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
		cmd.Args = append(cmd.Args, "--openflow-relay", r.Module+"="+r.Bridge)
	}
	if len(k.relays) > 0 {
		cmd.Args = append(cmd.Args, "--openflow-relay-inherit",
			"--openflow-proxy-dir", filepath.Dir(k.relays[0].Listen), "--ovs-rundir", filepath.Dir(k.relays[0].Upstream))
		cmd.Args = append(cmd.Args, k.writers.Args()...)
	}
	err = cmd.Start()
	closeFiles(cmd.ExtraFiles)
	if err != nil {
		return fmt.Errorf("server: spawning a guard: %w", err)
	}
	pid := cmd.Process.Pid
	k.child = pid
	k.log.Info("guard spawned", "pid", pid, "log", k.cfg.Log)
	// Reaps the guard and tells run at once; ends when the guard exits
	// (a guard outlives flowstated by design, and this goroutine with it
	// only until the process ends).
	go func() {
		_ = cmd.Wait()
		k.noteExit(pid)
	}()
	return nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// statusLine is the one-line state for systemd's STATUS=.
func (k *keeper) statusLine(wedged string) string {
	if wedged != "" {
		return "wedged: " + wedged
	}
	if g := k.engine.Gate(); !g.Open {
		left := time.Until(g.Deadline).Round(time.Second)
		return fmt.Sprintf("cold-start gate: waiting for %s (readiness timeout in %v)", strings.Join(g.WaitingFor, ", "), left)
	}
	var pending []string
	for _, b := range k.engine.Status() {
		if !b.Converged {
			pending = append(pending, b.Name)
		}
	}
	if len(pending) > 0 {
		return "restoring or waiting for " + strings.Join(pending, ", ")
	}
	return "all bridges converged"
}

// status is the guard's part of Status.
func (k *keeper) status() *flowstatev1.Guard {
	g := &flowstatev1.Guard{Mode: k.cfg.Mode, Running: k.cfg.Mode != GuardOff && k.present.Load(),
		Grace: durationpb.New(k.cfg.Grace), Lease: k.cfg.Lease, Ovsdb: k.ownIdentity()}
	if k.cfg.Mode == GuardOff {
		g.Proven = true
		return g
	}
	p := k.proof.Load()
	g.Proven = p.err == nil
	if p.err != nil {
		g.UnprovenField, g.Reason = p.err.Field, p.err.Msg
	}
	if hb := p.hb; hb.PID != 0 {
		g.Pid, g.GuardGrace, g.GuardOvsdb = int32(hb.PID), durationpb.New(hb.Grace), hb.OVSDB
		g.LastRoundTrip = timestamppb.New(hb.RoundTrip)
	}
	return g
}

// wedgedReason is the engine's last Wedged answer.
func (k *keeper) wedgedReason() string {
	if p := k.wedged.Load(); p != nil {
		return *p
	}
	return ""
}

// healthz serves /healthz: 200 while the engine is responsive, 503 with the
// reason while it is wedged.
func (k *keeper) healthz(w http.ResponseWriter, _ *http.Request) {
	if w2 := k.wedgedReason(); w2 != "" {
		http.Error(w, "wedged: "+w2, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}
