package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/guard"
)

// Invariant names, as reports count them.
const (
	InvHold      = "hold"
	InvDeny      = "deny"
	InvAcked     = "acked"
	InvConverged = "converged"
	InvCrashloop = "crashloop"
	InvLeftover  = "leftover"
	InvExit      = "flowstated-exit"
	InvProtected = "protected"
	InvRefused   = "refused"
	InvDiskFull  = "disk-full"
	InvDamage    = "damage"
	InvBarrier   = "barrier-delay"
	InvPoisoned  = "poisoned"
	InvPath      = "path"
	InvKept      = "kept"
	InvForeign   = "foreign"
	InvReadonly  = "readonly-guard"
)

// guardDetect is how long flowstated may take to see that its guard is
// frozen: the heartbeat goes stale, the next renewal judges it, and slack
// for a loaded machine. A flowstated killed or frozen sooner leaves the
// flag armed with a guard that cannot release it: that is the window the
// product documents (an external guard covers it), not a broken promise.
var guardDetect = guard.StaleAfter(guardGrace) + guardGrace/5 + 2*time.Second

// holdBound is the longest a running vswitchd may go without forwarding
// after a disruption: the guard's grace (flowstated silent), then the
// longest bounded hold (a stuck bridge, or the cold-start gate), and slack
// for a loaded two-core machine.
const holdBound = guardGrace + readinessTimeout + 6*time.Second

// lastingBound is how long the faults that must outlast the hold promise
// last (a guard frozen, flowstated out): the promise, counted from a
// vswitchd restart a few steps after the fault began.
const lastingBound = holdBound + 8*time.Second

// Config configures Run.
type Config struct {
	// Seed draws the schedule and the writers' operations. Required unless
	// Schedule is set (then it still seeds the writers).
	Seed uint64
	// Steps is the schedule's length when it is drawn from Seed.
	Steps int
	// Faults restricts the draw to these kinds (default AllFaults).
	Faults []FaultKind
	// Schedule, if set, runs instead of a drawn one (a replay, a shrink).
	Schedule Schedule
	// Coverage, if set, weights the drawn schedule toward the kinds, pairs
	// and triples it has not seen run (GenerateCovered); Run does not
	// change it (the caller adds Report.Schedule and Report.Ran).
	Coverage *Coverage
	// Flowstated is the flowstated binary. Required.
	Flowstated string
	// NoRelay runs flowstated with --openflow-proxy-relay=false: its guard
	// relays nobody while it is away, as for a controller that shares its
	// bridge with other modules (flowstate-chaos -relay=false).
	NoRelay bool
	// Settle bounds the wait for rest at quiescence (default 60 s).
	Settle time.Duration
	// Logger receives the harness's progress (optional).
	Logger *slog.Logger
}

// Violation is one broken promise.
type Violation struct {
	Invariant string
	// Step is the schedule step running (1-based; 0 before the first,
	// len+1 at quiescence).
	Step   int
	At     time.Duration
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("[%s] at %v, step %d: %s", v.Invariant, v.At.Round(time.Millisecond), v.Step, v.Detail)
}

// Report is what a run executed and found.
type Report struct {
	Seed       uint64
	Schedule   Schedule
	Ops        *counter
	Faults     *counter
	Checks     *counter
	Violations []Violation
	Elapsed    time.Duration
	// Skipped holds the 0-based indexes of the steps skipped (a lasting
	// fault of their kind, or one they exclude, was on).
	Skipped []int
	// BarrierMax is the longest delay seen from a barrier reply of the
	// proxied controller to the switch holding its change.
	BarrierMax time.Duration
	// Logs holds flowstated's and the guard's logs when a violation was
	// found.
	Logs string
}

// Ran reports whether step i (0-based) of the schedule ran.
func (r *Report) Ran(i int) bool { return !slices.Contains(r.Skipped, i) }

// Failed reports whether any invariant was violated.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

// Print writes the report: counts, then every violation with the seed and
// the schedule up to it.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "seed %d: %d steps in %v, %d violations\n", r.Seed, len(r.Schedule), r.Elapsed.Round(time.Millisecond), len(r.Violations))
	fmt.Fprintf(w, "schedule (replay: -seed %d -schedule %q)\n", r.Seed, r.Schedule.Encode())
	fmt.Fprintf(w, "operations (%d):\n%s", r.Ops.Total(), r.Ops)
	fmt.Fprintf(w, "faults (%d):\n%s", r.Faults.Total(), r.Faults)
	fmt.Fprintf(w, "invariant checks (%d; failed = violated):\n%s", r.Checks.Total(), r.Checks)
	fmt.Fprintf(w, "longest delay from a barrier reply to the switch: %v\n", r.BarrierMax.Round(time.Millisecond))
	for _, v := range r.Violations {
		upTo := min(max(v.Step, 0), len(r.Schedule))
		fmt.Fprintf(w, "VIOLATION %s\n  seed %d, schedule up to it (replay: -schedule %q):\n%s",
			v, r.Seed, r.Schedule[:upTo].Encode(), r.Schedule[:upTo])
	}
}

// run is the state of one Run.
type run struct {
	cfg   Config
	log   *slog.Logger
	n     *node
	start time.Time
	rep   *Report

	mu        sync.Mutex
	step      int
	epoch     int       // flowstated runs started
	vsFrozen  bool      // vswitchd frozen by a fault
	vsDown    bool      // vswitchd stopped by a fault
	disrupted time.Time // last time forwarding was legitimately interrupted
	lastFwd   map[string]time.Time
	vsStart   time.Time // the running vswitchd's start
	strict    bool      // that start found the flag armed under a live flowstated
	excusedAt time.Time // last flowstated, guard or bridge fault: deny excused for vswitchd started before it ends
	crashes   int       // vswitchd deaths in a row that no fault caused
	unarmed   bool      // some vswitchd start found the flag clear: br-ex may be plain OVS's
	rebuilt   int       // br-ex rebuilds so far
	// rebuiltLive: br-ex was rebuilt on a vswitchd seen forwarding (released)
	// and no vswitchd started since: it must hold what vswitchd made, never
	// the mirror's old flows. A rebuild of a held vswitchd is a restore's to
	// finish; after a restart br-ex is the mirror's, which may or may not
	// have seen the rebuild (plainOK).
	rebuiltLive bool
	guards      map[int]bool
	holdWarned  time.Time
	full        bool // the store's file system is full (disk-full)
	// fullUntil is when a kept record lost to the full disk is surely
	// stored again (kept).
	fullUntil time.Time
	// guardFrozenAt is when the guard was frozen (zero while it is not);
	// blind is set when flowstated stopped before it could see that
	// (guardDetect): nobody can release the node until the guard thaws.
	guardFrozenAt time.Time
	blind         bool
	writers       []*writer
	// gate pauses the writers: each call holds it shared, a fault that
	// needs the store quiet holds it alone.
	gate    sync.RWMutex
	running map[FaultKind]bool // lasting faults still on
	// faultAt is when a fault step last began or ended: the barrier-delay
	// check excuses a change whose window it falls in.
	faultAt time.Time
	// replays fires at each replay_started of br-int, resyncs at each
	// clear of the proxied controller (trigger.go).
	replays, resyncs signal
	// What watchEvents saw: replay spans, the last event and the
	// flowstated run it came from, crash quarantines; vsKills are the
	// harness's SIGKILLs of vswitchd (the poisoned check).
	spans            []span
	lastEvent        time.Time
	eventEpoch       int
	crashQuarantines []string
	vsKills          []vsKill
	// barrierMax is the longest delay seen from a barrier reply to the
	// switch holding the change.
	barrierMax time.Duration
	// What leaseLoop saw of the lease (path.go): its last change, a
	// silence (the guard may relay), and until when the guard may still
	// relay after it changed again; pathOK counts the controller's
	// successful paths through the relay.
	leaseChanged time.Time
	leaseQuiet   bool
	relayEnd     time.Time
	pathOK       int
	// guardAtDeath: a guard held the lock when flowstated was last
	// stopped by a fault; guardKilledAt is the harness's last SIGKILL of
	// a guard (the path check excuses what follows it).
	guardAtDeath  bool
	guardKilledAt time.Time
	// foreignIPs are the flows the foreign writer tried (foreign.go).
	foreignIPs []string
	// brGen counts br-int's deletions and re-creations (managed-recreate):
	// a flow installed before one is gone with the bridge.
	brGen int
}

// Run executes one seeded run. The error is for a harness that could not
// run (no OVS, no binary); broken promises are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Flowstated == "" {
		return nil, errors.New("chaos: Config.Flowstated is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 60 * time.Second
	}
	sched := cfg.Schedule
	if sched == nil {
		sched = generate(cfg.Seed, cfg.Steps, cfg.Faults, cfg.Coverage)
	}
	r := &run{cfg: cfg, log: cfg.Logger, start: time.Now(), lastFwd: map[string]time.Time{}, guards: map[int]bool{}, running: map[FaultKind]bool{},
		rep: &Report{Seed: cfg.Seed, Schedule: sched, Ops: newCounter(), Faults: newCounter(), Checks: newCounter()}}
	foreign := slices.ContainsFunc(sched, func(st Step) bool { return st.Kind == ForeignWrites })
	n, err := newNode(ctx, cfg.Flowstated, cfg.Logger, foreign)
	if n != nil {
		n.noRelay = cfg.NoRelay
		if slices.ContainsFunc(sched, func(st Step) bool { return st.Kind == StoreBulk }) {
			n.surviveAfter = loopSurviveAfter
		}
	}
	if err != nil {
		return nil, err
	}
	r.n = n
	defer n.close()
	if err := r.bringUp(ctx); err != nil {
		return nil, fmt.Errorf("chaos: bring-up: %w\n%s", err, n.logs())
	}

	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	writers := []*writer{
		newWriter("pod", 10, 1, cfg.Seed*3+1, n.c, r.currentEpoch),
		newWriter("route", 20, 2, cfg.Seed*3+2, n.c, r.currentEpoch),
		newWriter(Proxied, 30, 3, cfg.Seed*3+3, n.c, r.currentEpoch),
	}
	writers[2].proxy = n.proxySocket()
	writers[2].mayRelay = r.mayRelay
	writers[2].acks = map[string]*ack{}
	writers[2].onResync = r.resyncs.fire
	defer writers[2].closeProxy()
	r.writers = writers
	for _, w := range writers {
		w.onErr = r.checkWriteErr
		wg.Go(func() { r.writeLoop(wctx, w) })
	}
	wg.Go(func() { r.policyLoop(wctx) })
	wg.Go(func() { r.probeLoop(wctx) })
	wg.Go(func() { r.superviseLoop(wctx) })
	wg.Go(func() { r.barrierLoop(wctx, writers[2]) })
	of13 := newOF13Ctl(n.proxySocket(), cfg.Seed*3+4, r.mayRelay, r.vswitchdGen, r.storeState)
	wg.Go(func() { r.of13Loop(wctx, of13) })
	wg.Go(func() { r.keptLoop(wctx, of13) })
	wg.Go(func() { r.leaseLoop(wctx) })
	wg.Go(func() { r.pathLoop(wctx) })
	// The watch outlives the writers: the poisoned check at quiescence
	// reads the replays it saw.
	ectx, stopEvents := context.WithCancel(ctx)
	var ewg sync.WaitGroup
	ewg.Go(func() { r.watchEvents(ectx) })
	defer func() {
		stopEvents()
		ewg.Wait()
	}()

	// Lasting faults of the kinds in overlaps run beside the next steps:
	// a vswitchd crash inside a protocols flip is the fault that matters.
	var lasting sync.WaitGroup
	for i, st := range sched {
		r.setStep(i + 1)
		if !sleepCtx(ctx, st.Pause) {
			break
		}
		if st.Trigger.On != "" {
			r.waitTrigger(ctx, st.Trigger)
		}
		r.log.Info("fault", "step", i+1, "kind", st.Kind, "hold", st.Hold, "trigger", st.Trigger.String())
		if on := r.blockedBy(st.Kind); on != "" {
			r.rep.Faults.add(fmt.Sprintf("%s (skipped: %s on)", st.Kind, on), nil)
			r.rep.Skipped = append(r.rep.Skipped, i)
			continue
		}
		r.touchFault()
		if overlaps[st.Kind] {
			r.setRunning(st.Kind, true)
			lasting.Go(func() {
				r.faultDone(st.Kind, r.inject(ctx, st))
				r.setRunning(st.Kind, false)
			})
			continue
		}
		r.faultDone(st.Kind, r.inject(ctx, st))
	}
	lasting.Wait()
	r.setStep(len(sched) + 1)
	stopWriters()
	wg.Wait()
	r.quiesce(ctx, writers)
	r.rep.Elapsed = time.Since(r.start)
	r.mu.Lock()
	r.rep.BarrierMax = r.barrierMax
	r.mu.Unlock()
	if r.rep.Failed() {
		r.rep.Logs = n.logs()
	}
	return r.rep, nil
}

// overlaps are the lasting faults that run beside the steps after them.
var overlaps = map[FaultKind]bool{ProtocolsFlip: true, FlowLimit: true, StalledReader: true, GuardFreeze: true, FlowstatedOutage: true,
	DiskFull: true, ManagedRecreate: true, UnmanagedRecreate: true, ProxiedOutage: true, ReadonlyGuard: true, StoreBulk: true}

// excludes are the lasting faults a kind does not start beside: a store
// flip must restore its byte and start flowstated itself (an outage would
// start it on the damaged store; a full disk would be a second fault in
// the same start). A live store flip checks within 15 s that the damaged
// flow left the switch: a protocols flip, which keeps both flowstated and
// the harness off br-int for longer than that, would make the check
// unobservable, not flowstated wrong.
var excludes = map[FaultKind][]FaultKind{
	StoreFlip:     {FlowstatedOutage, ProxiedOutage, ReadonlyGuard, DiskFull},
	StoreFlipLive: {FlowstatedOutage, ProxiedOutage, DiskFull, ProtocolsFlip},
	// A read-only guard replaces the guard flowstated spawned while
	// flowstated is down: an outage would start flowstated meanwhile.
	ReadonlyGuard: {FlowstatedOutage, ProxiedOutage, StoreFlip},
	ProxiedOutage: {ReadonlyGuard},
}

// blockedBy names the lasting fault that keeps kind from starting now: the
// same kind still on, or one it excludes; "" if none.
func (r *run) blockedBy(kind FaultKind) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range append([]FaultKind{kind}, excludes[kind]...) {
		if r.running[k] {
			if k == kind {
				return "still"
			}
			return string(k)
		}
	}
	return ""
}

func (r *run) setRunning(kind FaultKind, on bool) {
	r.mu.Lock()
	r.running[kind] = on
	r.mu.Unlock()
}

func (r *run) faultDone(kind FaultKind, err error) {
	r.touchFault()
	r.rep.Faults.add(string(kind), err)
	if err != nil {
		r.log.Warn("fault could not be injected", "kind", kind, "err", err)
	}
}

func (r *run) setStep(i int) {
	r.mu.Lock()
	r.step = i
	r.mu.Unlock()
}

func (r *run) currentEpoch() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.epoch
}

func (r *run) violate(inv, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := Violation{Invariant: inv, Step: r.step, At: time.Since(r.start), Detail: fmt.Sprintf(format, args...)}
	r.log.Error("violation", "invariant", inv, "detail", v.Detail)
	r.rep.Violations = append(r.rep.Violations, v)
}

// bringUp starts flowstated and waits until br-int holds the policy, the
// flag is re-armed and a guard runs.
func (r *run) bringUp(ctx context.Context) error {
	if err := r.startFlowstated(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.syncPolicy(ctx); err != nil {
		return err
	}
	for {
		st, err := r.n.c.Status(ctx)
		if err == nil && len(st.Bridges) == 1 && st.Bridges[0].Converged && st.FlowRestoreWait && r.n.guardPID() > 0 {
			break
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return fmt.Errorf("not converged and armed with a guard: status %+v: %w", st, errors.Join(err, ctx.Err()))
		}
	}
	r.mu.Lock()
	r.vsStart, r.strict = time.Now(), false
	r.disrupted = time.Now()
	r.mu.Unlock()
	return nil
}

func (r *run) startFlowstated(ctx context.Context) error {
	if err := r.n.startFlowstated(); err != nil {
		return err
	}
	r.mu.Lock()
	r.epoch++
	r.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return r.n.waitServing(wctx)
}

func (r *run) syncPolicy(ctx context.Context) error {
	es := make([]client.Entry, len(policy))
	for i, f := range policy {
		es[i] = client.FlowText(f)
	}
	_, err := r.n.c.Sync(ctx, client.Module{Bridge: Managed, Name: "policy"}, true, es...)
	return err
}

func (r *run) writeLoop(ctx context.Context, w *writer) {
	for ctx.Err() == nil {
		r.gate.RLock()
		w.step(ctx, r.rep.Ops)
		r.gate.RUnlock()
		if !sleepCtx(ctx, time.Duration(50+w.r.IntN(250))*time.Millisecond) {
			return
		}
	}
}

// policyLoop re-declares the policy and marks it ready, as a controller
// that resyncs after every flowstated start would; it opens a cold gate.
func (r *run) policyLoop(ctx context.Context) {
	for ctx.Err() == nil {
		r.gate.RLock()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.syncPolicy(cctx)
		cancel()
		r.gate.RUnlock()
		if ctx.Err() == nil {
			r.rep.Ops.add("policy-sync", err)
			r.checkWriteErr("policy-sync", err)
		}
		if !sleepCtx(ctx, time.Second) {
			return
		}
	}
}

// inject runs one fault to its end.
func (r *run) inject(ctx context.Context, st Step) error {
	n := r.n
	switch st.Kind {
	case VswitchdKill, VswitchdTerm:
		r.mu.Lock()
		r.vsDown = true
		r.mu.Unlock()
		var err error
		if st.Kind == VswitchdKill {
			r.noteVswitchdKill()
			err = n.sb.KillVswitchd(ctx)
		} else {
			err = n.sb.StopVswitchd(ctx)
		}
		if err != nil {
			return err
		}
		return r.startVswitchd(ctx)
	case VswitchdFreeze:
		if err := n.sb.FreezeVswitchd(); err != nil {
			return err
		}
		r.mu.Lock()
		r.vsFrozen = true
		r.mu.Unlock()
		sleepCtx(ctx, st.Hold)
		err := n.sb.ThawVswitchd()
		r.mu.Lock()
		r.vsFrozen, r.disrupted = false, time.Now()
		r.mu.Unlock()
		return err
	case FlowstatedKill, FlowstatedTerm, FlowstatedReboot:
		r.excuse()
		r.flowstatedStops()
		sig := syscall.SIGKILL
		if st.Kind == FlowstatedTerm {
			sig = syscall.SIGTERM
		}
		if err := n.signalFlowstated(sig); err != nil {
			return err
		}
		if st.Kind == FlowstatedReboot {
			if err := n.newBoot(); err != nil {
				return err
			}
		}
		sleepCtx(ctx, st.Hold)
		err := r.startFlowstated(ctx)
		r.excuse()
		return err
	case FlowstatedOutage:
		// Dead for longer than the hold promise, counted from a
		// vswitchd restart a few steps later: that restart must be
		// released by the guard (or start unheld), not by flowstated's
		// return.
		r.excuse()
		r.flowstatedStops()
		if err := n.signalFlowstated(syscall.SIGKILL); err != nil {
			return err
		}
		sleepCtx(ctx, lastingBound+st.Hold)
		if n.alive() {
			return nil // another step started it again
		}
		err := r.startFlowstated(ctx)
		r.excuse()
		return err
	case ProxiedOutage:
		return r.proxiedOutage(ctx, st.Hold)
	case ForeignWrites:
		return r.foreignWrites(ctx)
	case ReadonlyGuard:
		return r.readonlyGuard(ctx, st.Hold)
	case FlowstatedFreeze:
		r.excuse()
		r.flowstatedStops()
		if err := n.signalFlowstated(syscall.SIGSTOP); err != nil {
			return err
		}
		sleepCtx(ctx, st.Hold)
		err := n.signalFlowstated(syscall.SIGCONT)
		r.excuse()
		return err
	case GuardKill, GuardFreeze:
		pid := r.waitGuard(ctx)
		if pid == 0 {
			return errors.New("chaos: no guard runs")
		}
		r.noteGuard(pid)
		r.excuse()
		if st.Kind == GuardKill {
			r.mu.Lock()
			r.guardKilledAt = time.Now()
			r.mu.Unlock()
			return syscall.Kill(pid, syscall.SIGKILL)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return err
		}
		r.mu.Lock()
		r.guardFrozenAt = time.Now()
		r.mu.Unlock()
		// Frozen for longer than the hold promise, counted from a
		// vswitchd restart a few steps later: a frozen guard releases
		// nothing, so flowstated must not count on it; a shorter
		// freeze is only a guard that releases late.
		sleepCtx(ctx, lastingBound+st.Hold)
		err := syscall.Kill(pid, syscall.SIGCONT)
		if errors.Is(err, syscall.ESRCH) {
			// Killed while frozen (a guard-kill, a flowstated replacing
			// it): the freeze was injected, there is nothing to thaw.
			r.rep.Faults.add("guard-freeze: guard gone before its thaw", nil)
			err = nil
		}
		r.mu.Lock()
		r.guardFrozenAt, r.blind = time.Time{}, false
		r.mu.Unlock()
		r.excuse()
		return err
	case LeaseUnlink:
		r.excuse()
		return os.Remove(n.lease)
	case ProtocolsFlip:
		r.excuse()
		if _, err := n.sb.Vsctl(ctx, "--no-wait", "set", "bridge", Managed, "protocols=OpenFlow13"); err != nil {
			return err
		}
		// Longer than the hold promise: a vswitchd restart among the
		// next steps must be released without br-int (--max-hold).
		sleepCtx(ctx, holdBound+st.Hold)
		_, err := n.sb.Vsctl(ctx, "--no-wait", "clear", "bridge", Managed, "protocols")
		r.excuse()
		return err
	case StalledReader:
		return r.stalledReader(ctx, st.Hold)
	case BridgeRebuild:
		// The dummy datapath stands in for both types
		// (--enable-dummy=override): vswitchd destroys br-ex and makes
		// it anew with only its default flow, as plain OVS does.
		r.mu.Lock()
		r.rebuilt++
		typ := []string{"netdev", "dummy"}[(r.rebuilt-1)%2]
		released := r.lastFwd[Unmanaged].After(r.vsStart)
		r.rebuiltLive = r.rebuiltLive || released
		r.unarmed = true // plain OVS's default flow is br-ex's from now on too
		r.mu.Unlock()
		_, err := n.sb.Vsctl(ctx, "--no-wait", "set", "bridge", Unmanaged, "datapath_type="+typ)
		return err
	case DiskFull:
		return r.diskFull(ctx, st.Hold)
	case StoreFlip:
		return r.storeFlip(ctx, st)
	case StoreFlipLive:
		return r.storeFlipLive(ctx, st, r.writers)
	case ManagedRecreate:
		return r.recreate(ctx, Managed, st.Hold)
	case UnmanagedRecreate:
		return r.recreate(ctx, Unmanaged, st.Hold)
	case OVSDBRestart:
		r.excuse()
		err := n.sb.RestartOVSDB(ctx)
		r.excuse()
		return err
	case StoreBulk:
		return r.storeBulk(ctx, st.Hold)
	case FlowLimit:
		// The pod module's table takes 5 flows: writes past it are
		// refused, a replay quarantines the rest.
		if _, err := n.sb.Vsctl(ctx, "--no-wait", "--", "--id=@ft", "create", "Flow_Table", "flow_limit=5", "overflow_policy=refuse",
			"--", "set", "bridge", Managed, "flow_tables:10=@ft"); err != nil {
			return err
		}
		sleepCtx(ctx, st.Hold)
		_, err := n.sb.Vsctl(ctx, "--no-wait", "clear", "bridge", Managed, "flow_tables")
		return err
	}
	return fmt.Errorf("chaos: unknown fault %q", st.Kind)
}

// recreate deletes br from OVSDB, as an operator or a CNI that rebuilds its
// bridge does, and creates it again after hold with the same ports. br-int
// missing must hold nothing, and re-created it gets the store's pipeline
// back; br-ex re-created on a released vswitchd is plain OVS's new bridge,
// which flowstated must not write (as after bridge-rebuild).
func (r *run) recreate(ctx context.Context, br string, hold time.Duration) error {
	r.excuse()
	if br == Managed {
		r.mu.Lock()
		r.brGen++
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.brGen++
			r.mu.Unlock()
		}()
	}
	if _, err := r.n.sb.Vsctl(ctx, "--no-wait", "del-br", br); err != nil {
		return err
	}
	sleepCtx(ctx, hold)
	// The step re-creates the bridge: an ovsdb-server restarting at the
	// same moment (ovsdb-restart) refuses the connection, and a bridge
	// left deleted would fail every later check on it as flowstated's.
	// Both calls are idempotent (--may-exist), so they are tried again
	// until they succeed, within 20 s.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var err error
	for {
		err = r.n.sb.AddBridge(cctx, br)
		for i, p := range []string{"p1", "p2"} {
			if err == nil {
				err = r.n.sb.AddPort(cctx, br, br+"-"+p, i+1)
			}
		}
		if err == nil || !sleepCtx(cctx, 200*time.Millisecond) {
			break
		}
	}
	if br == Unmanaged {
		r.mu.Lock()
		// A held vswitchd forwards on no bridge: either bridge
		// forwarding since its start means it was released.
		released := r.lastFwd[Managed].After(r.vsStart) || r.lastFwd[Unmanaged].After(r.vsStart)
		r.rebuiltLive = r.rebuiltLive || released
		r.unarmed = true
		r.mu.Unlock()
	}
	r.excuse()
	return err
}

// vswitchdGen is the running vswitchd's pid and br-int's generation.
func (r *run) vswitchdGen() (pid, gen int) {
	pid = r.n.sb.VswitchdPID()
	r.mu.Lock()
	defer r.mu.Unlock()
	return pid, r.brGen
}

// storeState is the flowstated run and whether the store's disk is full.
func (r *run) storeState() (epoch int, full bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.epoch, r.full || time.Now().Before(r.fullUntil)
}

// excuse marks a fault that may legitimately let vswitchd forward without
// the pipeline (the guard released it, a stuck bridge was released at
// --max-hold, the flag was disarmed): the deny check is lifted for the
// running vswitchd, and the hold clock restarts.
func (r *run) excuse() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.excusedAt = time.Now()
	r.strict = false
	r.disrupted = time.Now()
}

// flowstatedStops notes that flowstated is about to be killed or frozen: if
// the guard was frozen less than guardDetect ago, the hold check waits for
// the guard's thaw.
func (r *run) flowstatedStops() {
	guard := r.n.guardPID() > 0
	r.mu.Lock()
	defer r.mu.Unlock()
	r.guardAtDeath = guard
	if !r.guardFrozenAt.IsZero() && time.Since(r.guardFrozenAt) < guardDetect {
		r.blind = true
	}
}

func (r *run) noteGuard(pid int) {
	r.mu.Lock()
	r.guards[pid] = true
	r.mu.Unlock()
}

// startVswitchd starts vswitchd plainly, as a supervisor would, and notes
// whether this start is held to the deny check.
func (r *run) startVswitchd(ctx context.Context) error {
	armed, _ := r.n.sb.FlowRestoreWait(ctx)
	alive := r.n.alive() && r.n.guardPID() > 0
	err := r.n.sb.StartVswitchd(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vsDown = false
	r.unarmed = r.unarmed || !armed
	r.rebuiltLive = false
	r.vsStart, r.disrupted = time.Now(), time.Now()
	r.strict = armed && alive && time.Since(r.excusedAt) > guardGrace+maxHold
	return err
}

// stalledReader reads a Backup and stops reading for hold, then lets it go.
func (r *run) stalledReader(ctx context.Context, hold time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, hold+10*time.Second)
	defer cancel()
	w := &stallWriter{until: time.Now().Add(hold)}
	_, err := r.n.c.Backup(ctx, w)
	return err
}

type stallWriter struct{ until time.Time }

func (s *stallWriter) Write(p []byte) (int, error) {
	if d := time.Until(s.until); d > 0 {
		time.Sleep(d) // the stall is the fault being injected
	}
	return len(p), nil
}

// superviseLoop restarts a vswitchd that died by itself (counting deaths in
// a row) and a flowstated that exited by itself (a violation).
func (r *run) superviseLoop(ctx context.Context) {
	var upSince time.Time
	for sleepCtx(ctx, 100*time.Millisecond) {
		if exited, state := r.n.exitedBySelf(); exited {
			r.violate(InvExit, "flowstated exited by itself (%s)", state)
			r.excuse()
			if err := r.startFlowstated(ctx); err != nil && ctx.Err() == nil {
				r.violate(InvExit, "flowstated does not start again: %v", err)
			}
		}
		r.mu.Lock()
		expectDown := r.vsDown || r.vsFrozen
		r.mu.Unlock()
		if expectDown {
			continue
		}
		if r.n.sb.VswitchdPID() != 0 {
			if !upSince.IsZero() && time.Since(upSince) > 10*time.Second {
				r.mu.Lock()
				r.crashes = 0
				r.mu.Unlock()
			}
			continue
		}
		r.mu.Lock()
		r.crashes++
		crashes := r.crashes
		r.mu.Unlock()
		r.rep.Checks.add(InvCrashloop, errIf(crashes > 2))
		if crashes == 3 {
			r.violate(InvCrashloop, "ovs-vswitchd died by itself %d times in a row", crashes)
		}
		r.log.Warn("ovs-vswitchd died by itself: starting it again", "in_a_row", crashes)
		if err := r.startVswitchd(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("restarting ovs-vswitchd", "err", err)
		}
		upSince = time.Now()
	}
}

// probeLoop injects SYNs to the allowed and the denied address on both
// bridges, and checks the hold and deny invariants.
func (r *run) probeLoop(ctx context.Context) {
	for sleepCtx(ctx, 250*time.Millisecond) {
		r.probeOnce(ctx)
	}
}

func (r *run) probeOnce(ctx context.Context) {
	if pid := r.n.guardPID(); pid > 0 {
		r.noteGuard(pid)
	}
	r.mu.Lock()
	skip := r.vsDown || r.vsFrozen
	r.mu.Unlock()
	pid := r.n.sb.VswitchdPID()
	if skip || pid == 0 {
		return
	}
	for _, br := range []string{Managed, Unmanaged} {
		fwd, ok := r.forwards(ctx, br, AllowedIP, pid)
		if ok && fwd {
			r.mu.Lock()
			r.lastFwd[br] = time.Now()
			r.mu.Unlock()
		}
		denied, ok2 := r.forwards(ctx, br, DeniedIP, pid)
		r.mu.Lock()
		strict := r.strict
		r.mu.Unlock()
		if ok2 && br == Managed {
			bad := denied && strict
			r.rep.Checks.add(InvDeny, errIf(bad))
			if bad {
				r.violate(InvDeny, "a SYN to %s was forwarded on %s after a vswitchd start that found the flag armed under a live flowstated", DeniedIP, br)
			}
		}
	}
	r.mu.Lock()
	if r.blind {
		r.mu.Unlock()
		return
	}
	since := r.disrupted
	if r.vsStart.After(since) {
		since = r.vsStart
	}
	var stale []string
	for _, br := range []string{Managed, Unmanaged} {
		last := r.lastFwd[br]
		if last.Before(since) {
			last = since
		}
		if time.Since(last) > holdBound {
			stale = append(stale, fmt.Sprintf("%s silent for %v", br, time.Since(last).Round(time.Millisecond)))
		}
	}
	bad := len(stale) > 0 && r.holdWarned.Before(since)
	if bad {
		r.holdWarned = time.Now()
	}
	r.mu.Unlock()
	r.rep.Checks.add(InvHold, errIf(bad))
	if bad {
		r.violate(InvHold, "vswitchd (pid %d) forwards nothing past the promise of %v: %s", pid, holdBound, strings.Join(stale, ", "))
	}
}

// forwards injects one SYN to dst at port 1 of br and reports whether port
// 2 sent it; ok is false when the answer is void (vswitchd changed, a tool
// failed or timed out).
func (r *run) forwards(ctx context.Context, br, dst string, pid int) (fwd, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, tx0, err := r.n.sb.PortStats(ctx, br, br+"-p2")
	if err != nil {
		return false, false
	}
	if err := r.n.sb.InjectSYN(ctx, br, br+"-p1", sandbox.Packet{DstIP: dst}); err != nil {
		return false, false
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for {
		_, tx, err := r.n.sb.PortStats(ctx, br, br+"-p2")
		if err != nil || r.n.sb.VswitchdPID() != pid {
			return false, false
		}
		if tx > tx0 {
			return true, true
		}
		if time.Now().After(deadline) {
			return false, true
		}
		if !sleepCtx(ctx, 30*time.Millisecond) {
			return false, false
		}
	}
}

// quiesce heals every fault, waits for convergence and checks the
// invariants that hold at rest, then stops flowstated and checks that
// nothing it started is left.
func (r *run) quiesce(parent context.Context, writers []*writer) {
	n := r.n
	ctx, cancel := context.WithTimeout(parent, r.cfg.Settle)
	defer cancel()
	for _, col := range []string{"protocols", "flow_tables"} {
		if _, err := n.sb.Vsctl(ctx, "--no-wait", "clear", "bridge", Managed, col); err != nil {
			r.violate(InvConverged, "heal: %v", err)
		}
	}
	if n.sb.VswitchdPID() == 0 {
		if err := r.startVswitchd(ctx); err != nil {
			r.violate(InvConverged, "heal: vswitchd does not start: %v", err)
			return
		}
	}
	if !n.alive() {
		_ = n.signalFlowstated(syscall.SIGCONT)
		if !n.alive() {
			if err := r.startFlowstated(ctx); err != nil {
				r.violate(InvConverged, "heal: flowstated does not start: %v", err)
				return
			}
		}
	}
	for _, m := range []string{"pod", "route"} {
		_ = n.c.MarkReady(ctx, m)
	}
	if err := r.syncPolicy(ctx); err != nil {
		r.violate(InvConverged, "the policy cannot be declared at quiescence: %v", err)
	}
	// Converged, diff empty, br-ex restored: all must hold at one moment.
	var last string
	for {
		why := r.atRest(ctx)
		if why != "" && ctx.Err() != nil && last != "" {
			why = last // the deadline cut the last look short: keep the one before
		}
		if last = why; last == "" {
			break
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			r.violate(InvConverged, "not at rest within %v: %s", r.cfg.Settle, last)
			break
		}
	}
	r.rep.Checks.add(InvConverged, errIf(last != ""))
	r.mu.Lock()
	foreign := slices.Clone(r.foreignIPs)
	r.mu.Unlock()
	r.foreignCheck(parent, foreign)
	r.checkPoisoned(parent)
	r.protected(parent)
	ctx, cancel = context.WithTimeout(parent, 30*time.Second)
	defer cancel()
	for _, w := range writers {
		bad, checked, err := w.check(ctx)
		if err != nil {
			r.violate(InvAcked, "listing module %s: %v", w.module, err)
			continue
		}
		for range checked - len(bad) {
			r.rep.Checks.add(InvAcked, nil)
		}
		for _, b := range bad {
			r.rep.Checks.add(InvAcked, errors.New("violated"))
			r.violate(InvAcked, "%s", b)
		}
	}
	if pid := n.sb.VswitchdPID(); pid != 0 {
		for _, br := range []string{Managed, Unmanaged} {
			if fwd, ok := r.forwards(ctx, br, AllowedIP, pid); ok && !fwd {
				r.violate(InvConverged, "at rest %s does not forward the allowed SYN", br)
			}
			if br == Unmanaged {
				// br-ex may rightly be plain OVS's after an unarmed start.
				if dump, err := n.sb.DumpFlows(ctx, br); err != nil || !holdsPolicy(dump) {
					continue
				}
			}
			if fwd, ok := r.forwards(ctx, br, DeniedIP, pid); ok && fwd {
				r.violate(InvDeny, "at rest %s forwards the SYN to %s", br, DeniedIP)
			}
		}
	}
	r.mu.Lock()
	r.rep.Ops.mu.Lock()
	accepted, refused := r.rep.Ops.ok[string(OpCrashing)], r.rep.Ops.failed[string(OpCrashing)]
	r.rep.Ops.mu.Unlock()
	r.mu.Unlock()
	if accepted+refused > 0 {
		r.rep.Checks.add(InvRefused, errIf(accepted > 0))
		if accepted > 0 {
			r.violate(InvRefused, "%d declarations of a flow that aborts vswitchd (a 2,000-spec learn) were accepted", accepted)
		}
	}
	r.leftovers(parent)
}

// protected checks that a node at rest stays protected: for a guard's grace
// and more, the flag stays armed for the next vswitchd start and a guard
// holds the lease. A flag that flaps, or stays off beside a running guard,
// leaves the next crash unprotected.
func (r *run) protected(parent context.Context) {
	window := guardGrace + 3*time.Second
	ctx, cancel := context.WithTimeout(parent, window+10*time.Second)
	defer cancel()
	// The re-arm follows convergence by a flag check or two.
	deadline := time.Now().Add(5 * time.Second)
	for {
		on, err := r.n.sb.FlowRestoreWait(ctx)
		if err == nil && on && r.n.guardPID() > 0 {
			break
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			r.rep.Checks.add(InvProtected, errors.New("violated"))
			r.violate(InvProtected, "at rest the flag is not re-armed with a guard running within 5 s (flag %v, err %v, guard pid %d)", on, err, r.n.guardPID())
			return
		}
	}
	end := time.Now().Add(window)
	for time.Now().Before(end) {
		on, err := r.n.sb.FlowRestoreWait(ctx)
		guardPID := r.n.guardPID()
		if err != nil || !on || guardPID == 0 {
			r.rep.Checks.add(InvProtected, errors.New("violated"))
			r.violate(InvProtected, "at rest the flag went off or the guard went away (flag %v, err %v, guard pid %d)", on, err, guardPID)
			return
		}
		r.rep.Checks.add(InvProtected, nil)
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return
		}
	}
}

// atRest returns why the node is not at rest yet, "" when it is.
func (r *run) atRest(ctx context.Context) string {
	n := r.n
	st, err := n.c.Status(ctx)
	if err != nil {
		return "status: " + err.Error()
	}
	if len(st.Bridges) != 1 || !st.Bridges[0].Converged {
		return fmt.Sprintf("br-int not converged: %+v", st.Bridges)
	}
	changes, err := n.c.Diff(ctx, Managed)
	if err != nil {
		return "diff: " + err.Error()
	}
	if len(changes) > 0 {
		return fmt.Sprintf("status says converged but the diff holds %d changes, first %+v", len(changes), changes[0])
	}
	dump, err := n.sb.DumpFlows(ctx, Unmanaged)
	if err != nil {
		return "dump br-ex: " + err.Error()
	}
	r.mu.Lock()
	unarmed := r.unarmed
	r.mu.Unlock()
	// A guard that released a held vswitchd let it start as plain OVS.
	unarmed = unarmed || strings.Contains(n.logs(), "flow-restore-wait cleared by the guard")
	r.mu.Lock()
	rebuilt := r.rebuiltLive
	r.mu.Unlock()
	if rebuilt {
		// Rebuilt on a running vswitchd: what vswitchd made is br-ex's
		// state, and the mirror learns it; writing the old flows back
		// would be flowstated changing a bridge it does not manage.
		if !slices.Equal(dump, []string{"priority=0 actions=NORMAL"}) {
			return fmt.Sprintf("br-ex was rebuilt on a running vswitchd, so it must hold only vswitchd's default flow, not %q", dump)
		}
		return ""
	}
	// After a start that found the flag clear, vswitchd gave br-ex its
	// default flow and the mirror learned that: plain OVS's bridge is then
	// as right as the policy. A mix of both is neither.
	if !holdsPolicy(dump) && (!unarmed || !slices.Equal(dump, []string{"priority=0 actions=NORMAL"})) {
		return fmt.Sprintf("br-ex holds neither its policy nor (after an unarmed vswitchd start) plain OVS's default flow: %q", dump)
	}
	return ""
}

func holdsPolicy(dump []string) bool {
	if len(dump) != len(policy) {
		return false
	}
	deny := slices.ContainsFunc(dump, func(l string) bool {
		return strings.Contains(l, "nw_dst="+DeniedIP) && strings.HasSuffix(l, "actions=drop")
	})
	fwd := slices.ContainsFunc(dump, func(l string) bool {
		return strings.Contains(l, "in_port=1") && strings.HasSuffix(l, "actions=output:2")
	})
	return deny && fwd
}

// leftovers stops flowstated gracefully and checks that it disarmed the
// flag and that neither it nor any guard it spawned is still running once
// the guard's grace has passed.
func (r *run) leftovers(ctx context.Context) {
	n := r.n
	if pid := n.guardPID(); pid > 0 {
		r.noteGuard(pid)
	}
	if err := n.signalFlowstated(syscall.SIGTERM); err != nil {
		r.violate(InvLeftover, "%v", err)
	}
	// A guard holding the proxy's socket stays, relaying, while its path
	// exists (flowstated leaves it on a graceful stop): remove it, as an
	// operator retiring the proxy would, once flowstated is gone
	// (signalFlowstated waited for it).
	if err := os.Remove(filepath.Join(n.proxyDir(), Managed+".mgmt")); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.violate(InvLeftover, "removing the proxy socket: %v", err)
	}
	r.mu.Lock()
	pids := slices.Clone(n.started)
	for pid := range r.guards {
		pids = append(pids, pid)
	}
	r.mu.Unlock()
	limit := guardGrace + 5*time.Second
	ctx, cancel := context.WithTimeout(ctx, limit+5*time.Second)
	defer cancel()
	deadline := time.Now().Add(limit)
	for {
		var running []int
		for _, pid := range pids {
			if processRuns(pid) {
				running = append(running, pid)
			}
		}
		if len(running) == 0 {
			r.rep.Checks.add(InvLeftover, nil)
			return
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			r.rep.Checks.add(InvLeftover, errors.New("violated"))
			r.violate(InvLeftover, "still running %v after flowstated stopped: pids %v", limit, running)
			return
		}
	}
}

// waitGuard returns the running guard's pid, waiting up to guardRespawn
// (path.go) for flowstated to spawn one when none runs: a guard step drawn right
// after a guard-kill would otherwise fail to inject, and the orderings it
// starts (the frozen guard of round 2) would never run. 0 when flowstated
// is not running (nobody spawns a guard) or none came.
func (r *run) waitGuard(ctx context.Context) int {
	n := r.n
	deadline := time.Now().Add(guardRespawn)
	for {
		// The lock may still name a guard that just exited (ESRCH at
		// the signal): wait for the one that runs.
		pid := n.guardPID()
		if pid > 0 && !processRuns(pid) {
			pid = 0
		}
		if pid > 0 || !n.alive() || time.Now().After(deadline) {
			return pid
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return 0
		}
	}
}

// processRuns reports a live, non-zombie process.
func processRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

func errIf(b bool) error {
	if b {
		return errors.New("violated")
	}
	return nil
}
