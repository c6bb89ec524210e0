package guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// DefaultGrace is how long a lease may stay unrenewed before the guard
// releases the node.
const DefaultGrace = 10 * time.Second

// Config configures Run.
type Config struct {
	// Lease is the lease file flowstated renews. Required.
	Lease string
	// OVSDB is the ovsdb-server address. Required.
	OVSDB string
	// Grace is how long the lease may go unrenewed. Default DefaultGrace.
	Grace time.Duration
	// ExitWhenIdle makes the guard exit once the lease is stale and the flag
	// is clear (a guard flowstated spawned; flowstated spawns another when
	// it comes back), and exit at once if another guard holds the lock.
	// Without it the guard waits as a standby for the lock and runs until
	// ctx ends (a systemd unit or a DaemonSet container).
	ExitWhenIdle bool
	// Relays are flowstated's OpenFlow proxy sockets the guard holds and,
	// while flowstated is away, relays straight to vswitchd (relay.go).
	// A guard with relays does not exit when idle while one of their
	// paths exists: it is the controller's only path to its bridge.
	Relays []Relay
	Logger *slog.Logger
}

// Run guards the node until ctx ends or, with ExitWhenIdle, until there is
// nothing left to guard. See the package documentation for the protocol.
//
// When ctx ends while the lease is still fresh, Run keeps watching for up to
// Grace, so that a guard stopped together with flowstated (a deleted pod)
// still releases a flag the stopping flowstated leaves armed.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Lease == "" || cfg.OVSDB == "" {
		return errors.New("guard: lease and ovsdb are required")
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger.With("component", "guard", "lease", cfg.Lease)
	lock, err := acquire(ctx, cfg, log)
	if err != nil || lock == nil {
		return err
	}
	defer lock.Close()
	_ = lock.Truncate(0)
	_, _ = lock.WriteAt(fmt.Appendf(nil, "%d\n", os.Getpid()), 0)

	// A guard that leaves takes its proof with it, while it still holds
	// the lock (this runs after the heartbeat stopped, before the unlock).
	defer func() { _ = os.Remove(HeartbeatPath(cfg.Lease)) }()
	g := &guard{cfg: cfg, log: log}
	defer g.close()
	rel := newRelayer(cfg.Lease, cfg.Relays, cfg.Grace, log)
	defer rel.close()
	// The heartbeat is the guard's proof to flowstated (Heartbeat); its
	// goroutine owns the OVSDB connection and ends before Run returns.
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	var beats sync.WaitGroup
	beats.Go(func() { g.beat(beatCtx) })
	defer func() {
		stopBeat()
		beats.Wait()
	}()
	interval := min(max(cfg.Grace/10, 20*time.Millisecond), time.Second)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	log.Info("guard active", "grace", cfg.Grace, "pid", os.Getpid())

	var stopBy time.Time // set once ctx ended: watch at most Grace more
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			if stopBy.IsZero() {
				stopBy = time.Now().Add(cfg.Grace)
				log.Info("guard stopping: releasing the node if flowstated does not renew its lease", "within", cfg.Grace)
			}
			select {
			case <-tick.C:
			case <-time.After(interval):
			}
		}
		stale, gone, other := g.observe()
		if g.renewed {
			rel.noteLive()
		}
		rel.follow(stale && !other)
		if other && cfg.ExitWhenIdle {
			// A flowstated of another database renews this lease: the
			// one that spawned this guard is gone (its node released
			// below), and the new one spawns its own guard once this one
			// lets go of the lock.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Grace)
			clear, err := g.release(rctx)
			cancel()
			if err != nil && time.Now().Before(g.otherSince.Add(cfg.Grace)) {
				g.warn("guard: cannot release flow-restore-wait yet, retrying", err)
				continue
			}
			log.Info("guard exiting: the lease belongs to a flowstated of another OVSDB", "released", clear)
			return err
		}
		stopping := !stopBy.IsZero()
		if !stale && !(stopping && time.Now().After(stopBy)) {
			continue
		}
		// Past here the node must not stay held: flowstated is silent (or
		// the guard is going away and nobody would bound the flag).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Grace)
		clear, err := g.release(rctx)
		cancel()
		if err != nil {
			g.warn("guard: cannot release flow-restore-wait yet, retrying", err)
		}
		switch {
		case stopping:
			if err != nil && time.Now().Before(stopBy.Add(cfg.Grace)) {
				continue // one more grace to reach ovsdb-server
			}
			return err
		case cfg.ExitWhenIdle && rel.holding():
			// A controller may reach the relay: stay while flowstated
			// is away.
		case gone && cfg.ExitWhenIdle:
			// The runtime directory was cleaned up (a sandbox, a
			// reboot's tmpfs): no flowstated renews a lease here any
			// more, and nothing is left to watch.
			log.Info("guard exiting: the lease file is gone", "released", clear)
			return nil
		case clear && cfg.ExitWhenIdle:
			log.Info("guard exiting: flowstated is gone and the node is released")
			return nil
		}
	}
}

// probeRetries and probeRetry: how often, and how far apart, a guard that
// exits when another is active tries the lock before it believes it.
const (
	probeRetries = 10
	probeRetry   = 5 * time.Millisecond
)

// acquire takes the guard lock. Without ExitWhenIdle it waits for it as a
// standby; it returns nil and no error when the guard should exit.
func acquire(ctx context.Context, cfg Config, log *slog.Logger) (*os.File, error) {
	path := LockPath(cfg.Lease)
	logged := false
	for tries := 0; ; tries++ {
		f, ok, err := lockFile(path)
		if err != nil {
			return nil, err
		}
		if ok {
			return f, nil
		}
		// Present probes by taking the lock for an instant: a lock held
		// through probeRetries tries is a guard's.
		if cfg.ExitWhenIdle && tries < probeRetries {
			select {
			case <-ctx.Done():
				return nil, nil
			case <-time.After(probeRetry):
			}
			continue
		}
		if cfg.ExitWhenIdle {
			log.Info("another guard is active", "pid", ownerPID(path))
			return nil, nil
		}
		if !logged {
			log.Info("standing by: another guard is active", "pid", ownerPID(path))
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(time.Second):
		}
	}
}

type guard struct {
	cfg Config
	log *slog.Logger

	last       []byte
	seen       bool      // last holds a reading
	lastChange time.Time // monotonic: when the content last changed
	stale      bool      // logged as stale
	renewed    bool      // the last observe saw flowstated renew the lease
	lastWarn   string
	missing    bool      // logged: the lease file is gone
	otherReads int       // consecutive readings naming another OVSDB
	otherSince time.Time // first of them

	leaseMissing atomic.Bool // for the heartbeat

	mu       sync.Mutex
	ovsdb    *ovsconfig.Client // owned by beat; nil until it connects
	identity string            // the _uuid it last read
}

// observe reads the lease; stale is true once its content has not changed for
// Grace, gone when the file no longer exists. A removed file counts as a
// change (to empty content): it goes stale after Grace like any other, so a
// runtime directory removed by a restarting unit releases nothing early, and
// a flowstated that runs re-creates it within a renewal (Lease.Renew). other
// is true once two readings in a row name another OVSDB than the guard's:
// this guard cannot release the node whose flowstated renews the lease.
func (g *guard) observe() (stale, gone, other bool) {
	g.renewed = false
	b, err := os.ReadFile(g.cfg.Lease)
	gone = errors.Is(err, fs.ErrNotExist)
	if err != nil && !gone {
		g.warn("guard: reading the lease", err)
	}
	g.leaseMissing.Store(gone)
	if gone != g.missing {
		g.missing = gone
		if gone {
			g.log.Warn("the lease file is gone: a running flowstated re-creates it at its next renewal; released after the grace if none does",
				"grace", g.cfg.Grace)
		} else {
			g.log.Info("the lease file is back")
		}
	}
	if id, own := leaseOVSDB(b), g.ownIdentity(); id != "" && own != "" && id != own {
		if g.otherReads == 0 {
			g.otherSince = time.Now()
		}
		if g.otherReads++; g.otherReads == 2 {
			g.log.Error("the lease is renewed by a flowstated of another OVSDB: this guard cannot release its node (check --ovsdb of both)",
				"lease_ovsdb", id, "guard_ovsdb", own, "addr", g.cfg.OVSDB)
		}
	} else {
		g.otherReads = 0
	}
	other = g.otherReads >= 2
	if other {
		// Nobody renews a lease for this guard's database.
		return true, gone, true
	}
	now := time.Now()
	if !g.seen || !bytes.Equal(b, g.last) {
		// The stopped mark is not a renewal: the grace still runs from
		// the last one.
		if stopped := leaseStopped(b); !g.seen || !stopped {
			if g.seen && g.stale {
				g.log.Info("flowstated renews its lease again")
			}
			g.lastChange, g.stale = now, false
			g.renewed = g.seen
		}
		g.last, g.seen = b, true
	}
	silent := now.Sub(g.lastChange)
	if silent < g.cfg.Grace {
		return false, false, false
	}
	if !g.stale {
		g.stale = true
		if leaseStopped(g.last) {
			g.log.Info("flowstated stopped in order: releasing the node so ovs-vswitchd forwards as plain Open vSwitch would",
				"silent_for", silent.Round(time.Millisecond), "grace", g.cfg.Grace)
		} else {
			g.log.Error("flowstated has not renewed its lease: releasing the node so ovs-vswitchd forwards as plain Open vSwitch would",
				"silent_for", silent.Round(time.Millisecond), "grace", g.cfg.Grace)
		}
	}
	return true, gone, false
}

// conn is the OVSDB connection beat keeps, nil while it has none.
func (g *guard) conn() *ovsconfig.Client {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ovsdb
}

// ownIdentity is the _uuid of the Open_vSwitch row the guard last reached.
func (g *guard) ownIdentity() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.identity
}

// release makes sure flow-restore-wait is clear; clear reports that it is.
func (g *guard) release(ctx context.Context) (clear bool, err error) {
	c := g.conn()
	if c == nil {
		return false, fmt.Errorf("guard: not connected to ovsdb-server at %s", g.cfg.OVSDB)
	}
	on, err := c.FlowRestoreWait()
	if err != nil {
		return false, err
	}
	if !on {
		return true, nil
	}
	// Not waiting for cur_cfg: a vswitchd that is down reads the flag at
	// its start, one that is up within milliseconds.
	if err := c.SetFlowRestoreWait(ctx, false, false); err != nil {
		return false, err
	}
	g.log.Warn("flow-restore-wait cleared by the guard: ovs-vswitchd forwards without waiting for flowstated")
	return true, nil
}

// warn logs an error once until a different one occurs.
func (g *guard) warn(msg string, err error) {
	if s := err.Error(); s != g.lastWarn {
		g.lastWarn = s
		g.log.Warn(msg, "err", err)
	}
}

// beat keeps the guard's OVSDB connection and, after every round trip it
// answers, writes the heartbeat (Heartbeat) until ctx ends. The round trip
// is the write proof (ovsconfig.Client.ProveWritable); a refused write is
// published with OVSDB's refusal, so flowstated names it (FieldWritable). A
// guard that cannot reach its OVSDB writes none: flowstated then stops
// trusting it.
func (g *guard) beat(ctx context.Context) {
	path := HeartbeatPath(g.cfg.Lease)
	interval := HeartbeatInterval(g.cfg.Grace)
	// One attempt (a dial or a round trip) may take a few beats, never so
	// long that a reachable server goes unused.
	attempt := max(4*interval, time.Second)
	hb := Heartbeat{PID: os.Getpid(), Grace: g.cfg.Grace, Addr: g.cfg.OVSDB}
	var lastErr string
	fail := func(msg string, err error) {
		if s := err.Error(); s != lastErr {
			lastErr = s
			g.log.Warn(msg, "addr", g.cfg.OVSDB, "err", err)
		}
	}
	const noRoundTrip = "guard: no round trip to ovsdb-server: heartbeat stopped, flowstated will not arm flow-restore-wait on this guard"
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		c := g.conn()
		if c == nil {
			dctx, cancel := context.WithTimeout(ctx, attempt)
			d, err := ovsconfig.Dial(dctx, g.cfg.OVSDB, ovsconfig.Options{Logger: g.log, RequestTimeout: attempt})
			cancel()
			if err != nil {
				fail(noRoundTrip, err)
			} else {
				g.log.Info("guard: connected to ovsdb-server", "addr", g.cfg.OVSDB)
				g.mu.Lock()
				g.ovsdb, c = d, d
				g.mu.Unlock()
			}
		}
		if c != nil {
			rctx, cancel := context.WithTimeout(ctx, attempt)
			id, err := c.ProveWritable(rctx)
			refused := errors.Is(err, ovsconfig.ErrWriteRefused)
			hb.Writable, hb.WriteRefused = err == nil, ""
			if refused {
				// The server answered: read what it is a copy of.
				hb.WriteRefused = err.Error()
				id, err = c.Identity(rctx)
			}
			cancel()
			if err == nil {
				g.mu.Lock()
				g.identity = id
				g.mu.Unlock()
				hb.OVSDB, hb.RoundTrip, hb.LeaseMissing = id, time.Now(), g.leaseMissing.Load()
				hb.Seq++
				err = writeHeartbeat(path, hb)
			}
			switch {
			case err != nil:
				fail(noRoundTrip, err)
			case refused:
				fail("guard: ovsdb-server refuses writes (a read-only copy?): this guard could not release the node, flowstated will not arm flow-restore-wait on it",
					errors.New(hb.WriteRefused))
			case lastErr != "":
				lastErr = ""
				g.log.Info("guard: ovsdb-server reached and takes writes: heartbeat resumed", "ovsdb", id)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (g *guard) close() {
	if c := g.conn(); c != nil {
		c.Close()
	}
}
