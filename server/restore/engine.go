package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/store"
)

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
	// BootID is the host's boot id; ColdStart is true when it differs from
	// the one the store last saw (the host rebooted).
	BootID    string
	ColdStart bool
	// RequiredModules gate replays after a cold start (see runGate), for at
	// most ReadinessTimeout (default 5 min).
	RequiredModules  []string
	ReadinessTimeout time.Duration
	// AuditInterval, when positive, replays every bridge at that interval to
	// correct drift (flows changed behind flowstate's back).
	AuditInterval time.Duration
	// Events receives the engine's events (optional).
	Events  *events.Log
	Logger  *slog.Logger
	Metrics *Metrics
}

// Engine keeps every managed bridge equal to its desired state.
//
// It owns one goroutine per bridge (dial, reconcile on every connection, wait
// for the connection to die, repeat) and one for OVSDB. Run starts them and
// returns when ctx is cancelled and all of them have stopped.
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
	// converged is signalled when a bridge converges, so the flag goroutine
	// re-checks whether all have.
	converged chan struct{}
	gate      *gate
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
	if cfg.ReadinessTimeout <= 0 {
		cfg.ReadinessTimeout = 5 * time.Minute
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
		gate:      newGate(),
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
		e.bridges[name] = &bridge{name: name, kick: make(chan struct{}, 1),
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
	for _, name := range e.order {
		b := e.bridges[name]
		wg.Go(func() { e.runBridge(ctx, b) })
	}
	wg.Wait()
	e.flagMu.Lock()
	defer e.flagMu.Unlock()
	c := e.ovsdb.Swap(nil)
	if c == nil {
		return
	}
	if e.cfg.Rearm {
		e.disarm(c)
	}
	c.Close()
}

// disarm clears the flag when flowstated stops: a flag left true with
// nobody to clear it would keep the next vswitchd from forwarding.
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
	e.log.Info("ovsdb connected", "addr", e.cfg.OVSDB)
	// A bridge may have converged before OVSDB answered.
	e.signalConverged()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.converged:
		case <-retry.C:
		}
		if err := e.releaseIfConverged(ctx); err != nil {
			e.log.Error("clearing flow-restore-wait, retrying", "err", err)
			retry.Reset(e.cfg.RetryInterval)
		}
	}
}

func (e *Engine) signalConverged() {
	select {
	case e.converged <- struct{}{}:
	default:
	}
}

// releaseIfConverged clears flow-restore-wait once every bridge holds exactly
// its desired state.
//
//  1. Every managed bridge is connected and its last replay succeeded.
//  2. One OVSDB transaction removes the flag and bumps next_cfg.
//  3. Wait until cur_cfg reaches next_cfg: vswitchd has read the change and
//     forwards through the restored pipeline from here on.
//
// It runs only after the first replay of a connection: a flag armed later (by
// the ovs-restart helper, before it restarts vswitchd) must stay armed.
func (e *Engine) releaseIfConverged(ctx context.Context) error {
	for _, name := range e.order {
		if !e.bridges[name].isConverged() {
			return nil
		}
	}
	e.flagMu.Lock()
	defer e.flagMu.Unlock()
	c := e.ovsdb.Load()
	if c == nil {
		return nil
	}
	on, err := c.FlowRestoreWait()
	if err != nil {
		return fmt.Errorf("reading flow-restore-wait: %w", err)
	}
	actx, cancel := context.WithTimeout(ctx, e.cfg.AckTimeout)
	defer cancel()
	if !on {
		// vswitchd started without the flag: nothing to release, but arm
		// it for the next start.
		return e.rearmLocked(actx, c)
	}
	start := time.Now()
	if err := c.SetFlowRestoreWait(actx, false, true); err != nil {
		return err
	}
	e.cfg.Metrics.flagCleared.Inc()
	e.log.Info("flow-restore-wait cleared", "ack", time.Since(start))
	e.publish(events.Event{Type: events.FlagCleared, Message: "flow-restore-wait cleared and acknowledged by vswitchd",
		Attrs: map[string]string{"ack": time.Since(start).String()}})
	return e.rearmLocked(actx, c)
}

func (e *Engine) rearmLocked(ctx context.Context, c *ovsconfig.Client) error {
	if !e.cfg.Rearm {
		return nil
	}
	if err := c.SetFlowRestoreWait(ctx, true, false); err != nil {
		return fmt.Errorf("re-arming flow-restore-wait: %w", err)
	}
	e.cfg.Metrics.flagRearmed.Inc()
	e.log.Info("flow-restore-wait re-armed for the next vswitchd start")
	e.publish(events.Event{Type: events.FlagRearmed, Message: "flow-restore-wait re-armed for the next vswitchd start"})
	return nil
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
