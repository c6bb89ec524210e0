package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/flag"
	"github.com/flowstate-io/flowstate/server/restore/gate"
	"github.com/flowstate-io/flowstate/server/restore/mirror"
	"github.com/flowstate-io/flowstate/server/restore/owner"
	"github.com/flowstate-io/flowstate/server/restore/poison"
	"github.com/flowstate-io/flowstate/server/restore/replay"
	"github.com/flowstate-io/flowstate/server/restore/vswitchd"
	"github.com/flowstate-io/flowstate/server/restore/write"
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
	// OwnedCookie is the cookie space whose flows the engine manages on
	// every managed bridge; flows outside it are left alone. Zero: all.
	OwnedCookie entry.CookieSpace
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
	// RequiredModules gate replays after a cold start (package gate), for at
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
	// GuardPresent reports whether a proven guard would release the node if
	// this flowstated died (package guard), and if not, why. The flag is
	// armed only while it returns true; call Flag().GuardChanged when the
	// answer changes. Nil: always true (no guard configured).
	GuardPresent func() (ok bool, why string)
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
	Unmanaged mirror.Policy
	// MirrorInterval is how often the mirror of an unmanaged bridge checks for change (and dumps after one).
	// Default mirror.DefaultInterval.
	MirrorInterval time.Duration
	// TakeOver lets this engine manage bridges that OVSDB records as
	// managed by another store, or that hold flows this store never
	// declared (package owner); their undeclared flows are deleted.
	TakeOver bool
	// Instance describes this flowstated in the bridges' OVSDB
	// external_ids (Instance.String), for messages.
	Instance string
	// SurviveAfter is how long vswitchd must stay up after a replay for
	// the replay to count as survived, and CrashWindow how long a death of
	// vswitchd during or shortly after a replay counts towards holding
	// out the suspects (package poison). Defaults poison.DefaultSurviveAfter
	// and poison.DefaultCrashWindow.
	SurviveAfter, CrashWindow time.Duration
	// VswitchdLog is vswitchd's log file and ProcExits enables the proc
	// connector: the evidence that tells a crash of vswitchd from a kill
	// from outside (poison.Evidence). Neither: every death counts.
	VswitchdLog string
	ProcExits   bool
	// Faults injects faults, for tests (faults.go); nil in production.
	Faults *Faults
	// Events receives the engine's events (optional).
	Events  *events.Log
	Logger  *slog.Logger
	Metrics *Metrics
}

// Engine keeps every managed bridge equal to its desired state.
//
// Run starts, and returns once ctx is cancelled and all of them have
// stopped: per managed bridge, one goroutine that dials, reconciles on every
// connection, waits for the connection to die and repeats (runBridge), and
// the owner of its writes (write.Writes.Run), which may run a pipe's storer
// and a streamed bundle's producer while a write is under way; one for OVSDB and
// the flag (flag.Flag.Run), one for the cold-start gate (gate.Gate.Run), and one for
// the mirrors of the unmanaged bridges (mirror.Set.Run), which runs one per
// mirrored bridge.
type Engine struct {
	// forms are what the switch made of entries canon keeps in part as
	// sent (package forms).
	forms   *canon.Forms
	cfg     Config
	log     *slog.Logger
	bridges map[string]*bridge.State
	order   []string

	// flag owns flow-restore-wait and the OVSDB client (package flag).
	flag *flag.Flag
	// evidence tells a crash of vswitchd from a kill (poison.Evidence);
	// it hears the proc connector while Config.ProcExits.
	evidence *poison.Evidence
	// vswitchd is the running ovs-vswitchd and the bridges' connections.
	vswitchd *vswitchd.Daemon
	gate     *gate.Gate

	mirrors *mirror.Set // unmanaged bridges (package mirror)
	// replay runs the replays, audits and diffs (package replay).
	replay *replay.Replayer
	// writes runs the writes (package write).
	writes *write.Writes
	// owners decides what of each bridge the engine may change (package
	// owner).
	owners *owner.Owners
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
	if cfg.SurviveAfter <= 0 {
		cfg.SurviveAfter = poison.DefaultSurviveAfter
	}
	if cfg.CrashWindow <= 0 {
		cfg.CrashWindow = poison.DefaultCrashWindow
	}
	if cfg.GuardPresent == nil {
		cfg.GuardPresent = func() (bool, string) { return true, "" }
	}
	if cfg.GateSince.IsZero() {
		cfg.GateSince = time.Now()
	}
	unmanaged, err := mirror.ParsePolicy(string(cfg.Unmanaged))
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if err := owner.CheckStoreOwned(cfg.Store, cfg.Bridges, cfg.OwnedCookie); err != nil {
		return nil, err
	}
	cfg.Unmanaged = unmanaged
	if cfg.MirrorInterval <= 0 {
		cfg.MirrorInterval = mirror.DefaultInterval
	}
	for _, m := range cfg.RequiredModules {
		if err := entry.ValidateName("module", m); err != nil {
			return nil, fmt.Errorf("restore: required %w", err)
		}
	}
	pruned, err := cfg.Store.Forms().Prune()
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if pruned > 0 {
		cfg.Logger.Info("forgot the switch's forms of entries no longer declared", "forms", pruned)
	}
	known, err := cfg.Store.Forms().All()
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	e := &Engine{
		forms:    canon.NewForms(known),
		cfg:      cfg,
		log:      cfg.Logger,
		bridges:  make(map[string]*bridge.State, len(cfg.Bridges)),
		evidence: poison.NewEvidence(cfg.VswitchdLog),
	}
	e.flag, err = flag.New(flag.Config{
		OVSDB: cfg.OVSDB, RunDir: cfg.RunDir, AckTimeout: cfg.AckTimeout, RetryInterval: cfg.RetryInterval,
		MaxHold: cfg.MaxHold, Rearm: cfg.Rearm, GuardPresent: cfg.GuardPresent, Store: cfg.Store.Releases(),
		Node: flagNode{e}, BeforeClear: cfg.Faults.beforeClear, Publish: e.publish, Logger: cfg.Logger,
		Metrics: cfg.Metrics.flag,
	})
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	e.vswitchd = vswitchd.New(vswitchd.Config{RunDir: cfg.RunDir, EchoInterval: cfg.EchoInterval, EchoTimeout: cfg.EchoTimeout,
		RetryInterval: cfg.RetryInterval, OVSDB: e.flag, Publish: e.publish, Connected: cfg.Metrics.connected, Logger: cfg.Logger})
	crashes := poisonConfig(cfg, e.evidence, e.vswitchd)
	if e.gate, err = newGate(cfg); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	for _, name := range cfg.Bridges {
		if err := entry.ValidateName("bridge", name); err != nil {
			return nil, fmt.Errorf("restore: %w", err)
		}
		if _, dup := e.bridges[name]; dup {
			return nil, fmt.Errorf("restore: bridge %q given twice", name)
		}
		cfg.Metrics.initBridge(name)
		e.bridges[name] = bridge.New(name, cfg.Metrics.quarantinedNow.WithLabelValues(name), crashes)
		e.order = append(e.order, name)
	}
	e.mirrors = e.newMirrors()
	states := make([]*bridge.State, len(e.order))
	for i, name := range e.order {
		states[i] = e.bridges[name]
	}
	var wf write.Faults
	if cfg.Faults != nil {
		wf = writeFaults{cfg.Faults}
	}
	e.writes = write.New(write.Config{Store: cfg.Store, Bridges: states, Forms: e.forms, OwnedCookie: cfg.OwnedCookie,
		WriteTimeout: cfg.WriteTimeout, Gate: e.gate, Rooms: writeRooms{e}, Faults: wf, Logger: cfg.Logger,
		Metrics: write.Metrics{WriteRequests: cfg.Metrics.writeRequests, WriteBatches: cfg.Metrics.writeBatches,
			StagedWrites: cfg.Metrics.stagedWrites}})
	e.replay = replay.New(replay.Config{Store: cfg.Store, Forms: e.forms, OwnedCookie: cfg.OwnedCookie,
		MaxReplayTime: cfg.MaxReplayTime, Flag: e.flag, Rooms: replayRooms{e}, Publish: e.publish,
		Metrics: replay.Metrics{Quarantined: cfg.Metrics.quarantined, DriftFound: cfg.Metrics.driftFound,
			ObserveReplay: cfg.Metrics.observeReplay},
		AfterDriftFound: cfg.Faults.afterDriftFound, Logger: cfg.Logger})
	e.owners, err = owner.New(owner.Config{Store: cfg.Store, Bridges: states, Forms: e.forms, OwnedCookie: cfg.OwnedCookie,
		TakeOver: cfg.TakeOver, Instance: cfg.Instance, RetryInterval: cfg.RetryInterval, Flag: e.flag, Vswitchd: e.vswitchd,
		StandingAside: cfg.Metrics.standingAside, Publish: e.publish, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	return e, nil
}

// Run runs the engine until ctx is cancelled.
func (e *Engine) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { e.gate.Run(ctx) })
	wg.Go(func() { e.flag.Run(ctx) })
	wg.Go(func() { e.mirrors.Run(ctx) })
	wg.Go(func() { e.writes.Run(ctx) })
	wg.Go(func() { e.owners.Run(ctx) })
	if e.cfg.ProcExits {
		wg.Go(func() { e.evidence.Run(ctx, e.log) })
	}
	for _, name := range e.order {
		b := e.bridges[name]
		wg.Go(func() { e.runBridge(ctx, b) })
	}
	wg.Wait()
	e.flag.Close()
}

// Wedged reports an operation on the switch, the flag or the store that has
// run for longer than WedgeAfter ("" when none has): a wedged engine stops renewing
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
	if since := e.flag.BusySince(); !since.IsZero() {
		if w := check("flow-restore-wait update", since.UnixNano()); w != "" {
			return w
		}
	}
	// A store operation that does not return stops every write and
	// replay behind it (store.File.Busy).
	if e.cfg.Store != nil {
		if what, since := e.cfg.Store.File().Busy(); what != "" {
			if w := check("store "+what, since.UnixNano()); w != "" {
				return w
			}
		}
	}
	for _, name := range e.order {
		if since := e.bridges[name].BusySince(); !since.IsZero() {
			if w := check("bridge "+name, since.UnixNano()); w != "" {
				return w
			}
		}
	}
	return ""
}

func (e *Engine) bridge(name string) (*bridge.State, error) {
	b, ok := e.bridges[name]
	if !ok {
		return nil, bridge.NotManaged(name)
	}
	return b, nil
}

// Bridges returns the names of the managed bridges, in flag order.
func (e *Engine) Bridges() []string { return append([]string(nil), e.order...) }

// publish sends an event to the log, if any.
func (e *Engine) publish(ev events.Event) {
	if e.cfg.Events != nil {
		e.cfg.Events.Publish(ev)
	}
}
