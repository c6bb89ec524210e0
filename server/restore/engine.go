package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/store"
)

// DefaultMaxHold is the default of Config.MaxHold.
const DefaultMaxHold = 30 * time.Second

// Config wires an Engine. Store, RunDir, OVSDB and Bridges are required.
type Config struct {
	Store *store.Store
	// RunDir holds the <bridge>.mgmt sockets of ovs-vswitchd.
	RunDir string
	// OVSDB is the ovsdb-server address, e.g. "unix:/var/run/openvswitch/db.sock".
	OVSDB string
	// Bridges are the bridges this engine manages.
	Bridges []string
	// EchoInterval and EchoTimeout tune OpenFlow liveness (ofconn defaults when 0).
	EchoInterval, EchoTimeout time.Duration
	// RetryInterval is the longest pause between dial attempts and the pause
	// before retrying a failed replay. Default 500 ms.
	RetryInterval time.Duration
	// AckTimeout bounds the wait for vswitchd to acknowledge a flag change.
	// Default 10 s.
	AckTimeout time.Duration
	// MaxReplayTime bounds the rounds of one replay: while the switch
	// refuses entries that could not be predicted, each round quarantines
	// them and resends the rest; past this time the replay fails and is
	// retried later. Default 30 s.
	MaxReplayTime time.Duration
	// Rearm sets flow-restore-wait back to true once vswitchd acknowledged
	// its clearing, so a vswitchd that crashes and is started plainly also
	// comes back gated. vswitchd reads the flag only until it first sees it
	// false, so re-arming never pauses a running switch. Run disarms it on
	// the way out.
	Rearm bool
	// BootID is the host's boot id; ColdStart is true while the gate of this
	// boot has not opened yet (the host rebooted, and no flowstated of this
	// boot got past the gate). GateSince is when the boot was first seen,
	// so a restarted flowstated keeps the readiness deadline.
	BootID    string
	ColdStart bool
	GateSince time.Time
	// RequiredModules gate replays after a cold start (see runGate), for at
	// most ReadinessTimeout (default 5 min) from GateSince.
	RequiredModules  []string
	ReadinessTimeout time.Duration
	// MaxHold bounds how long one bridge that cannot be restored keeps
	// flow-restore-wait set for the others: a managed bridge not connected
	// or whose replay fails, counted from when it stopped being converged
	// or from the gate's opening; an unmanaged bridge whose mirror is not
	// restored (mirror.go). Default DefaultMaxHold.
	MaxHold time.Duration
	// WedgeAfter is how long one replay or write may run before the engine
	// reports itself wedged (Wedged), which stops the guard lease and turns
	// health to NOT_SERVING. Default 2 min.
	WedgeAfter time.Duration
	// GuardPresent reports whether a guard would release the node if this
	// flowstated died (package guard). The flag is armed only while it
	// returns true. Nil: always true (no guard configured).
	GuardPresent func() bool
	// AuditInterval, when positive, replays every bridge at that interval to
	// correct drift (flows changed behind flowstate's back).
	AuditInterval time.Duration
	// WriteTimeout bounds the switch I/O of one group commit of writes
	// (meters and bundle); it runs under the engine's context, never a
	// caller's. Default 1 min.
	WriteTimeout time.Duration
	// Unmanaged says what happens to the bridges of vswitchd not in
	// Bridges: preserve ("" too) mirrors them and restores them after a
	// gated restart, ignore leaves them alone (mirror.go).
	Unmanaged UnmanagedPolicy
	// MirrorInterval is the pause between dumps of an unmanaged bridge.
	// Default DefaultMirrorInterval.
	MirrorInterval time.Duration
	// TakeOver lets this engine manage bridges that OVSDB records as
	// managed by another store, or that hold flows this store never
	// declared (owner.go); their undeclared flows are deleted.
	TakeOver bool
	// Instance describes this flowstated in the bridges' OVSDB
	// external_ids (Instance.String), for messages.
	Instance string
	// Events receives the engine's events (optional).
	Events  *events.Log
	Logger  *slog.Logger
	Metrics *Metrics
}

// Engine keeps every managed bridge equal to its desired state.
//
// It owns two goroutines per bridge (one dials, reconciles on every
// connection, waits for the connection to die, repeats; one group-commits
// writes) and one for OVSDB. Run starts them and returns when ctx is
// cancelled and all of them have stopped.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	bridges map[string]*bridge
	order   []string

	// flagMu serialises flag changes and the shutdown of ovsdb, which is set
	// once the OVSDB goroutine has connected; readers (Status) load it
	// without the lock, so they never wait for an acknowledgement.
	flagMu sync.Mutex
	ovsdb  atomic.Pointer[ovsconfig.Client]
	// ovsdbUp is closed once ovsdb is set (owner.go waits for it).
	ovsdbUp chan struct{}
	// converged is signalled when a bridge converges, so the flag goroutine
	// re-checks whether all have.
	converged chan struct{}
	// recheck asks the flag goroutine to re-evaluate a pending release
	// (a mirror settled, a hold ran out) without starting one.
	recheck chan struct{}
	gate    *gate
	// flagBusySince is when the running flag operation started (unix
	// nanoseconds, 0 when idle), for Wedged.
	flagBusySince atomic.Int64
	// Guarded by flagMu: the vswitchd (vswitchdIdentity) last released, a
	// clear whose acknowledgement never came, and whether the missing
	// guard was logged.
	releasedVswitchd string
	unackedClear     bool
	guardMissing     bool
	// lastRelease is when a clear last released a held vswitchd (unix
	// nanoseconds), for Status.
	lastRelease atomic.Int64

	// beforeClear, when set, runs before each clear of the flag: fault
	// injection for tests (flag_test.go).
	beforeClear func()
	// afterDriftFound, when set, runs after an audit marked a bridge
	// unconverged and before the replay that corrects it (tests only).
	afterDriftFound func()
	// faults are set by tests only (groupcommit.go).
	faults  writeFaults
	mirrors *mirrorSet // unmanaged bridges (mirror.go)
}

// New validates cfg and returns an engine that is not running yet.
func New(cfg Config) (*Engine, error) {
	if cfg.Store == nil || cfg.RunDir == "" || cfg.OVSDB == "" || len(cfg.Bridges) == 0 {
		return nil, errors.New("restore: store, rundir, ovsdb and at least one bridge are required")
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 500 * time.Millisecond
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 10 * time.Second
	}
	if cfg.MaxReplayTime <= 0 {
		cfg.MaxReplayTime = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = time.Minute
	}
	if cfg.ReadinessTimeout <= 0 {
		cfg.ReadinessTimeout = 5 * time.Minute
	}
	if cfg.MaxHold <= 0 {
		cfg.MaxHold = DefaultMaxHold
	}
	if cfg.WedgeAfter <= 0 {
		cfg.WedgeAfter = 2 * time.Minute
	}
	if cfg.GuardPresent == nil {
		cfg.GuardPresent = func() bool { return true }
	}
	if cfg.GateSince.IsZero() {
		cfg.GateSince = time.Now()
	}
	unmanaged, err := ParseUnmanagedPolicy(string(cfg.Unmanaged))
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	cfg.Unmanaged = unmanaged
	if cfg.MirrorInterval <= 0 {
		cfg.MirrorInterval = DefaultMirrorInterval
	}
	for _, m := range cfg.RequiredModules {
		if err := entry.ValidateName("module", m); err != nil {
			return nil, fmt.Errorf("restore: required %w", err)
		}
	}
	e := &Engine{
		cfg:       cfg,
		log:       cfg.Logger,
		bridges:   make(map[string]*bridge, len(cfg.Bridges)),
		converged: make(chan struct{}, 1),
		recheck:   make(chan struct{}, 1),
		ovsdbUp:   make(chan struct{}),
		gate:      newGate(),
		mirrors:   newMirrorSet(),
	}
	if cfg.ColdStart && len(cfg.RequiredModules) > 0 {
		// Status must show what the gate waits for from the first call on,
		// not once runGate has looked.
		missing, err := e.missing()
		if err != nil {
			return nil, fmt.Errorf("restore: %w", err)
		}
		e.gate.waitingFor = missing
		e.gate.reason = "cold start: waiting for required modules"
	}
	for _, name := range cfg.Bridges {
		if err := entry.ValidateName("bridge", name); err != nil {
			return nil, fmt.Errorf("restore: %w", err)
		}
		if _, dup := e.bridges[name]; dup {
			return nil, fmt.Errorf("restore: bridge %q given twice", name)
		}
		cfg.Metrics.initBridge(name)
		e.bridges[name] = &bridge{name: name, kick: make(chan struct{}, 1), writes: newWriteQueue(),
			quarantineGauge: cfg.Metrics.quarantinedNow.WithLabelValues(name)}
		e.order = append(e.order, name)
	}
	return e, nil
}

// Run runs the engine until ctx is cancelled.
func (e *Engine) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { e.runGate(ctx) })
	wg.Go(func() { e.runOVSDB(ctx) })
	wg.Go(func() { e.runMirrors(ctx) })
	for _, name := range e.order {
		b := e.bridges[name]
		wg.Go(func() { e.runBridge(ctx, b) })
		wg.Go(func() { e.runWrites(ctx, b) })
	}
	wg.Wait()
	e.flagMu.Lock()
	defer e.flagMu.Unlock()
	c := e.ovsdb.Swap(nil)
	if c == nil {
		return
	}
	if e.cfg.Rearm {
		if why := e.holding(); why != "" {
			// Disarming now would release a vswitchd that waits for
			// a gate or a restore with a half-built pipeline: leave it
			// to the next flowstated, or to the guard after its grace.
			e.log.Warn("flow-restore-wait left armed on stop: the node is held; the guard releases it if no flowstated takes over within its grace", "held_by", why)
		} else {
			e.disarm(c)
		}
	}
	c.Close()
}

// holding says what the node waits for ("" for nothing): the cold-start gate,
// or a bridge not restored yet that still holds it.
func (e *Engine) holding() string {
	if !e.gate.isOpen() {
		return "the cold-start gate"
	}
	for _, name := range e.order {
		st := e.bridges[name].snapshot()
		if !st.Converged && st.Excused == "" {
			return "bridge " + name
		}
	}
	return ""
}

// disarm clears the flag when flowstated stops with nothing held: a flag left
// true with nobody to clear it would keep the next vswitchd from forwarding.
func (e *Engine) disarm(c *ovsconfig.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.AckTimeout)
	defer cancel()
	if err := c.SetFlowRestoreWait(ctx, false, false); err != nil {
		e.log.Error("could not disarm flow-restore-wait on stop; a vswitchd restarted now stays gated until it is cleared", "err", err)
		return
	}
	e.log.Info("flow-restore-wait disarmed for shutdown")
}

// runOVSDB dials OVSDB until it succeeds, then clears the flag whenever every
// bridge has converged after a (re)connection. The client reconnects by
// itself afterwards (package ovsconfig).
func (e *Engine) runOVSDB(ctx context.Context) {
	var c *ovsconfig.Client
	for c == nil {
		var err error
		c, err = ovsconfig.Dial(ctx, e.cfg.OVSDB, ovsconfig.Options{Logger: e.log})
		if err != nil {
			e.log.Warn("ovsdb unreachable, retrying", "addr", e.cfg.OVSDB, "err", err)
			if !sleepCtx(ctx, e.cfg.RetryInterval) {
				return
			}
		}
	}
	e.ovsdb.Store(c)
	close(e.ovsdbUp)
	e.log.Info("ovsdb connected", "addr", e.cfg.OVSDB)
	// A bridge may have converged before OVSDB answered.
	e.signalConverged()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	// The periodic check re-arms a flag the guard cleared while this
	// flowstated was frozen, and disarms it when the guard is gone.
	check := time.NewTicker(flagCheckInterval)
	defer check.Stop()
	release := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.converged:
			release = true
		case <-e.recheck:
		case <-retry.C:
		case <-check.C:
		}
		recheck, err := e.syncFlag(ctx, release)
		switch {
		case err != nil:
			e.log.Error("flow-restore-wait not in its intended state, retrying", "err", err)
			retry.Reset(e.cfg.RetryInterval)
		case recheck > 0:
			retry.Reset(recheck) // a bridge's MaxHold runs out then
		default:
			release = false
		}
	}
}

// flagCheckInterval paces the periodic flag check of runOVSDB.
const flagCheckInterval = time.Second

func (e *Engine) signalConverged() {
	select {
	case e.converged <- struct{}{}:
	default:
	}
}

func (e *Engine) signalRecheck() {
	select {
	case e.recheck <- struct{}{}:
	default:
	}
}

// syncFlag brings flow-restore-wait to its intended state once nothing holds
// the node any more:
//
//  1. Every managed bridge is converged, or excused: missing from OVSDB, or
//     unconverged for longer than MaxHold (named in status, a metric, an
//     event and an error log). Otherwise return the time until the next
//     MaxHold expires.
//  2. With release (a bridge converged after a new connection) and the flag
//     set, clear it in one transaction that bumps next_cfg, and wait until
//     cur_cfg reaches it: vswitchd forwards through the restored pipeline
//     from here on. The clear is counted only if it released a vswitchd
//     that had not been released yet.
//  3. Arm it again (Rearm, and a guard is present) only once vswitchd has
//     acknowledged every change so far, the clear included: a re-arm that
//     overtook an unread clear would hold vswitchd for ever.
//  4. Without a guard the flag is cleared instead, whoever set it: nobody
//     would release the node if flowstated died.
//
// release is false for the periodic check, which never clears a flag that
// is armed with a guard present: an operator (ovs-restart) may have armed it
// for a planned restart.
func (e *Engine) syncFlag(ctx context.Context, release bool) (recheck time.Duration, err error) {
	c := e.ovsdb.Load()
	if c == nil {
		return 0, nil
	}
	if wait := e.settle(c); wait > 0 {
		return wait, nil
	}
	e.flagMu.Lock()
	defer e.flagMu.Unlock()
	e.flagBusySince.Store(time.Now().UnixNano())
	defer e.flagBusySince.Store(0)
	on, err := c.FlowRestoreWait()
	if err != nil {
		return 0, fmt.Errorf("reading flow-restore-wait: %w", err)
	}
	guarded := e.cfg.GuardPresent()
	arm := e.cfg.Rearm && guarded
	actx, cancel := context.WithTimeout(ctx, e.cfg.AckTimeout)
	defer cancel()
	if on && (release || !guarded) {
		if release && !e.mirrorsSettled(c) {
			// Unmanaged bridges come back first (mirror.go); its hold
			// timer bounds the wait.
			return e.cfg.RetryInterval, nil
		}
		cleared, err := e.clearLocked(actx, c, arm)
		if err != nil {
			return 0, err
		}
		on = !cleared
	}
	if !on {
		e.noteReleased()
	}
	if e.cfg.Rearm && guarded == e.guardMissing {
		e.guardMissing = !guarded
		if !guarded {
			e.log.Error("flow-restore-wait is not armed: no guard is running that would release the node if flowstated died (see --guard)")
		} else {
			e.log.Info("a guard is running again: flow-restore-wait may be armed")
		}
	}
	if on || !arm {
		return 0, nil
	}
	if e.unackedClear || e.anyConnected() {
		// A running vswitchd must have read the clear before the flag
		// comes back (one that is down reads the flag at its start).
		if err := c.WaitConfigured(actx); err != nil {
			return 0, fmt.Errorf("re-arming flow-restore-wait: %w", err)
		}
		e.unackedClear = false
	}
	if err := c.SetFlowRestoreWait(actx, true, false); err != nil {
		return 0, fmt.Errorf("re-arming flow-restore-wait: %w", err)
	}
	e.cfg.Metrics.flagRearmed.Inc()
	e.log.Info("flow-restore-wait re-armed for the next vswitchd start")
	e.publish(events.Event{Type: events.FlagRearmed, Message: "flow-restore-wait re-armed for the next vswitchd start"})
	return 0, nil
}

// clearLocked clears the flag and waits for vswitchd's acknowledgement.
// With keepIfReleased it leaves the flag alone (cleared false) when the
// running vswitchd was released before: vswitchd reads the flag only until
// it first sees it false, so it is not held, and a clear followed by a
// re-arm would only open a window in which a vswitchd restart comes back
// ungated.
func (e *Engine) clearLocked(ctx context.Context, c *ovsconfig.Client, keepIfReleased bool) (cleared bool, err error) {
	start := time.Now()
	held := e.vswitchdIdentity()
	if e.releasedVswitchd == "" {
		// The first clear of this process: the last release may have
		// been a previous flowstated's.
		e.releasedVswitchd, _ = e.cfg.Store.ReleasedVswitchd()
	}
	known := held != "" && held == e.releasedVswitchd
	if known && keepIfReleased {
		e.log.Debug("flow-restore-wait left armed: this vswitchd was released before", "vswitchd", held)
		return false, nil
	}
	if e.beforeClear != nil {
		e.beforeClear()
	}
	if err := c.SetFlowRestoreWait(ctx, false, true); err != nil {
		e.unackedClear = true
		return false, err
	}
	e.unackedClear = false
	ack := time.Since(start)
	if known {
		e.log.Info("flow-restore-wait cleared: no guard runs", "ack", ack)
		return true, nil
	}
	e.releasedVswitchd = held
	if err := e.cfg.Store.SetReleasedVswitchd(held); err != nil {
		e.log.Warn("recording the released vswitchd; a restarted flowstated may count this release again", "err", err)
	}
	e.lastRelease.Store(time.Now().UnixNano())
	e.cfg.Metrics.flagCleared.Inc()
	e.log.Info("flow-restore-wait cleared", "ack", ack)
	e.publish(events.Event{Type: events.FlagCleared, Message: "flow-restore-wait cleared and acknowledged by vswitchd",
		Attrs: map[string]string{"ack": ack.String()}})
	return true, nil
}

// LastRelease is when a clear last released a held vswitchd (zero if never
// since start).
func (e *Engine) LastRelease() time.Time {
	if n := e.lastRelease.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Arm sets flow-restore-wait for a planned restart of vswitchd, only if this
// flowstated can restore and release the switch afterwards.
func (e *Engine) Arm(ctx context.Context) (wasSet bool, err error) {
	if w := e.Wedged(); w != "" {
		return false, fmt.Errorf("not arming flow-restore-wait: the engine is wedged (%s): %w", w, errdefs.ErrFailedPrecondition)
	}
	if !e.cfg.GuardPresent() {
		return false, fmt.Errorf("not arming flow-restore-wait: no guard runs that would release the node if flowstated died: %w", errdefs.ErrFailedPrecondition)
	}
	c := e.ovsdb.Load()
	if c == nil || !c.Connected() {
		return false, fmt.Errorf("not arming flow-restore-wait: OVSDB is not connected: %w", errdefs.ErrUnavailable)
	}
	e.flagMu.Lock()
	defer e.flagMu.Unlock()
	on, err := c.FlowRestoreWait()
	if err != nil || on {
		return on, err
	}
	if err := c.SetFlowRestoreWait(ctx, true, false); err != nil {
		return false, err
	}
	e.log.Info("flow-restore-wait armed on request")
	return false, nil
}

// Release clears flow-restore-wait and waits until vswitchd has read it.
func (e *Engine) Release(ctx context.Context) (wasSet bool, ack time.Duration, err error) {
	c := e.ovsdb.Load()
	if c == nil || !c.Connected() {
		return false, 0, fmt.Errorf("OVSDB is not connected: %w", errdefs.ErrUnavailable)
	}
	e.flagMu.Lock()
	defer e.flagMu.Unlock()
	if wasSet, err = c.FlowRestoreWait(); err != nil {
		return false, 0, err
	}
	start := time.Now()
	if err := c.SetFlowRestoreWait(ctx, false, true); err != nil {
		e.unackedClear = true
		return wasSet, 0, err
	}
	e.unackedClear = false
	e.log.Warn("flow-restore-wait cleared on request", "was_set", wasSet, "ack", time.Since(start))
	return wasSet, time.Since(start), nil
}

// settle reports how long the node must stay held for the managed bridges:
// 0 when each is converged or excused (see syncFlag), else the time until
// the first of them reaches MaxHold.
func (e *Engine) settle(c *ovsconfig.Client) time.Duration {
	present := map[string]bool{}
	brs, err := c.Bridges()
	for _, br := range brs {
		present[br.Name] = true
	}
	gateOpened := e.gate.openedAt()
	if gateOpened.IsZero() {
		// The cold-start gate holds the node, bounded by its own timeout.
		return e.cfg.RetryInterval
	}
	var wait time.Duration
	for _, name := range e.order {
		b := e.bridges[name]
		st := b.snapshot()
		var why string
		switch {
		case st.Converged:
		case err == nil && !present[name]:
			why = "bridge " + name + " does not exist in OVSDB"
		case b.owner.refused.Load() != nil && !b.owner.claimed.Load():
			// Not this store's to restore (owner.go): waiting for it
			// would hold the node for nothing.
			why = "flowstated stands aside from bridge " + name + ": " + *b.owner.refused.Load()
		default:
			since := st.Since
			if since.Before(gateOpened) {
				since = gateOpened
			}
			left := e.cfg.MaxHold - time.Since(since)
			if left > 0 {
				if wait == 0 || left < wait {
					wait = left
				}
				continue
			}
			why = fmt.Sprintf("bridge %s could not be restored within --max-hold %v (%s)", name, e.cfg.MaxHold, st.Reason)
		}
		e.excuse(b, why)
	}
	return wait
}

// excuse records why b does not hold the node ("" when it is converged), and
// reports each new excuse loudly: log, event, metric.
func (e *Engine) excuse(b *bridge, why string) {
	prev := b.excused.Load()
	if why == "" {
		if prev != nil {
			b.excused.Store(nil)
			e.cfg.Metrics.notRestored.WithLabelValues(b.name).Set(0)
		}
		return
	}
	if prev != nil && *prev == why {
		return
	}
	b.excused.Store(&why)
	e.cfg.Metrics.notRestored.WithLabelValues(b.name).Set(1)
	e.log.Error("releasing the node without this bridge", "bridge", b.name, "reason", why)
	e.publish(events.Event{Type: events.BridgeNotRestored, Bridge: b.name,
		Message: "flow-restore-wait released without this bridge: " + why})
}

func (e *Engine) anyConnected() bool {
	for _, name := range e.order {
		if e.bridges[name].snapshot().Connected {
			return true
		}
	}
	return false
}

// vswitchdIdentity names the running ovs-vswitchd by its pidfile (pid and
// start time), "" when unknown.
func (e *Engine) vswitchdIdentity() string {
	path := filepath.Join(e.cfg.RunDir, "ovs-vswitchd.pid")
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b)) + "@" + fi.ModTime().UTC().Format(time.RFC3339Nano)
}

// Wedged reports an operation on the switch or the flag that has run for
// longer than WedgeAfter ("" when none has): a wedged engine stops renewing
// the guard's lease and reports NOT_SERVING.
func (e *Engine) Wedged() string {
	now := time.Now()
	check := func(what string, since int64) string {
		if since == 0 {
			return ""
		}
		if d := now.Sub(time.Unix(0, since)); d > e.cfg.WedgeAfter {
			return fmt.Sprintf("%s busy for %v", what, d.Round(time.Second))
		}
		return ""
	}
	if w := check("flow-restore-wait update", e.flagBusySince.Load()); w != "" {
		return w
	}
	for _, name := range e.order {
		if w := check("bridge "+name, e.bridges[name].busySince.Load()); w != "" {
			return w
		}
	}
	return ""
}

// VswitchdAcknowledged reports whether vswitchd has read the latest change
// to OVSDB (cur_cfg reached next_cfg).
func (e *Engine) VswitchdAcknowledged() bool {
	c := e.ovsdb.Load()
	if c == nil || !c.Connected() {
		return false
	}
	next, cur, err := c.Config()
	return err == nil && cur >= next
}

// FlowRestoreWait returns the flag as stored in OVSDB; ok is false while OVSDB
// is not connected.
func (e *Engine) FlowRestoreWait() (on, ok bool) {
	c := e.ovsdb.Load()
	if c == nil || !c.Connected() {
		return false, false
	}
	on, err := c.FlowRestoreWait()
	return on, err == nil
}

func (e *Engine) bridge(name string) (*bridge, error) {
	b, ok := e.bridges[name]
	if !ok {
		return nil, fmt.Errorf("bridge %q is not managed by this flowstated (see --bridge): %w", name, errdefs.ErrFailedPrecondition)
	}
	return b, nil
}

// Bridges returns the names of the managed bridges, in flag order.
func (e *Engine) Bridges() []string { return append([]string(nil), e.order...) }

func (e *Engine) mgmtPath(bridge string) string { return filepath.Join(e.cfg.RunDir, bridge+".mgmt") }

// publish sends an event to the log, if any.
func (e *Engine) publish(ev events.Event) {
	if e.cfg.Events != nil {
		e.cfg.Events.Publish(ev)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
