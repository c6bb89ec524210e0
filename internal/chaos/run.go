package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

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

func errIf(b bool) error {
	if b {
		return errors.New("violated")
	}
	return nil
}
