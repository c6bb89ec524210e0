package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/server/events"
)

// Modules is what the gate reads and records of the modules' readiness.
type Modules interface {
	// ReadyBoots returns, per module, the boot it last marked itself
	// ready for.
	ReadyBoots() (map[string]string, error)
	SetReady(module, bootID string) error
}

// Boots records the boots whose gate opened.
type Boots interface {
	// SetGateOpened records that the gate of boot id opened (step 4).
	SetGateOpened(id string) error
}

// Config wires a Gate. Modules and Boots are required.
type Config struct {
	Modules Modules
	Boots   Boots
	// BootID is the host's boot id; ColdStart is true while the gate of
	// this boot has not opened yet. Since is when the boot was first seen,
	// where the readiness timeout starts (step 3).
	BootID    string
	ColdStart bool
	Since     time.Time
	// RequiredModules are the modules a cold start waits for, at most
	// ReadinessTimeout from Since.
	RequiredModules  []string
	ReadinessTimeout time.Duration
	// Timeouts counts the gates the readiness timeout opened (optional).
	Timeouts prometheus.Counter
	// Events receives the gate's events (optional).
	Events *events.Log
	Logger *slog.Logger
}

// Gate holds replays back after a cold start until every required module is
// ready for this boot, or until the readiness timeout.
type Gate struct {
	cfg Config
	log *slog.Logger

	mu         sync.Mutex
	open       bool
	openC      chan struct{} // closed when open
	reason     string
	timedOut   bool
	openedAtT  time.Time
	deadline   time.Time // of the readiness timeout, while closed
	waitingFor []string
	changed    chan struct{} // a module became ready: re-evaluate
}

// Status is the state of the gate.
type Status struct {
	Open       bool
	Reason     string
	TimedOut   bool
	WaitingFor []string
	// Deadline is when the readiness timeout opens a closed gate.
	Deadline time.Time
}

// New returns a closed gate; Run opens it. A cold start with required
// modules reads what it waits for now, so Status shows it from the first
// call on.
func New(cfg Config) (*Gate, error) {
	if cfg.Modules == nil || cfg.Boots == nil {
		return nil, errors.New("gate: the modules' and boots' stores are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gate{cfg: cfg, log: cfg.Logger, openC: make(chan struct{}), changed: make(chan struct{}, 1)}
	if cfg.ColdStart && len(cfg.RequiredModules) > 0 {
		missing, err := g.missing()
		if err != nil {
			return nil, fmt.Errorf("gate: %w", err)
		}
		g.waitingFor = missing
		g.reason = "cold start: waiting for required modules"
	}
	return g, nil
}

// Opened is closed once the gate is open.
func (g *Gate) Opened() <-chan struct{} { return g.openC }

// Status returns the state of the gate.
func (g *Gate) Status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := Status{Open: g.open, Reason: g.reason, TimedOut: g.timedOut, WaitingFor: slices.Clone(g.waitingFor)}
	if !g.open {
		st.Deadline = g.deadline
	}
	return st
}

// IsOpen reports whether the gate is open.
func (g *Gate) IsOpen() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// OpenedAt is when the gate opened (zero while closed).
func (g *Gate) OpenedAt() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.openedAtT
}

func (g *Gate) openWith(reason string, timedOut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open {
		return
	}
	g.open, g.reason, g.timedOut, g.openedAtT = true, reason, timedOut, time.Now()
	close(g.openC)
}

func (g *Gate) poke() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

func (g *Gate) publish(ev events.Event) {
	if g.cfg.Events != nil {
		g.cfg.Events.Publish(ev)
	}
}

// missing returns the required modules not ready for this boot.
func (g *Gate) missing() ([]string, error) {
	ready, err := g.cfg.Modules.ReadyBoots()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range g.cfg.RequiredModules {
		if ready[m] != g.cfg.BootID {
			out = append(out, m)
		}
	}
	return out, nil
}

// Run decides when the gate opens (steps 1 to 4 of the package doc); it
// returns once the gate is open or ctx ends.
func (g *Gate) Run(ctx context.Context) {
	if !g.cfg.ColdStart {
		g.openWith("warm start: the store is current", false)
		return
	}
	defer func() {
		if !g.IsOpen() {
			return
		}
		st := g.Status()
		g.publish(events.Event{Type: events.GateOpened, Message: st.Reason, Attrs: map[string]string{"timed_out": strconv.FormatBool(st.TimedOut)}})
		if err := g.cfg.Boots.SetGateOpened(g.cfg.BootID); err != nil {
			// Only costs a second wait for the modules after a restart.
			g.log.Error("recording that the gate opened", "err", err)
		}
	}()
	if len(g.cfg.RequiredModules) == 0 {
		g.openWith("cold start, no required modules", false)
		return
	}
	deadline := g.cfg.Since.Add(g.cfg.ReadinessTimeout)
	g.mu.Lock()
	g.deadline = deadline
	g.mu.Unlock()
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for {
		missing, err := g.missing()
		if err != nil {
			g.log.Error("reading module readiness", "err", err)
		} else {
			g.mu.Lock()
			g.waitingFor = missing
			g.mu.Unlock()
			if len(missing) == 0 {
				g.openWith("cold start: every required module is ready", false)
				g.log.Info("gate open: every required module is ready", "modules", g.cfg.RequiredModules)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-g.changed:
		case <-timeout.C:
			msg := fmt.Sprintf("readiness timeout %v expired before modules %s were ready; replaying the last known state",
				g.cfg.ReadinessTimeout, strings.Join(missing, ", "))
			g.openWith(msg, true)
			if g.cfg.Timeouts != nil {
				g.cfg.Timeouts.Inc()
			}
			g.log.Error(msg, "waiting_for", missing)
			g.publish(events.Event{Type: events.ReadinessTimeout, Message: msg,
				Attrs: map[string]string{"waiting_for": strings.Join(missing, ",")}})
			return
		}
	}
}

// MarkReady marks module ready for this boot, which may open the gate.
func (g *Gate) MarkReady(module string) error {
	if err := g.cfg.Modules.SetReady(module, g.cfg.BootID); err != nil {
		return err
	}
	g.log.Info("module ready", "module", module, "boot_id", g.cfg.BootID)
	g.publish(events.Event{Type: events.ModuleReady, Module: module, Message: "module ready for this boot"})
	g.poke()
	return nil
}
