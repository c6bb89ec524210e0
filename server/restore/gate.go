package restore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/server/events"
)

// gate holds replays back after a cold start until every required module is
// ready for this boot, or until the readiness timeout.
type gate struct {
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

// GateStatus is the state of the gate.
type GateStatus struct {
	Open       bool
	Reason     string
	TimedOut   bool
	WaitingFor []string
	// Deadline is when the readiness timeout opens a closed gate.
	Deadline time.Time
}

func newGate() *gate {
	return &gate{openC: make(chan struct{}), changed: make(chan struct{}, 1)}
}

func (g *gate) opened() <-chan struct{} { return g.openC }

func (g *gate) status() GateStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := GateStatus{Open: g.open, Reason: g.reason, TimedOut: g.timedOut, WaitingFor: slices.Clone(g.waitingFor)}
	if !g.open {
		st.Deadline = g.deadline
	}
	return st
}

func (g *gate) isOpen() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// openedAt is when the gate opened (zero while closed).
func (g *gate) openedAt() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.openedAtT
}

func (g *gate) openWith(reason string, timedOut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open {
		return
	}
	g.open, g.reason, g.timedOut, g.openedAtT = true, reason, timedOut, time.Now()
	close(g.openC)
}

func (g *gate) poke() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// missing returns the required modules not ready for bootID.
func (e *Engine) missing() ([]string, error) {
	ready, err := e.cfg.Store.Modules().ReadyBoots()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range e.cfg.RequiredModules {
		if ready[m] != e.cfg.BootID {
			out = append(out, m)
		}
	}
	return out, nil
}

// runGate decides when the gate opens:
//
//  1. Warm start (the gate of this boot opened before) or no required
//     module: open at once; the store is current, replay without waiting.
//  2. Cold start: wait until every required module has synced and marked
//     itself ready for this boot.
//  3. Or until the readiness timeout, counted from the first start in this
//     boot (a restarted flowstated keeps the deadline): then replay the last
//     known state, and say so loudly (log, event, metric, status).
//  4. Record in the store that this boot's gate opened, so a flowstated
//     restarted later in the boot starts warm. Until then every restart
//     stays cold and keeps waiting.
func (e *Engine) runGate(ctx context.Context) {
	g := e.gate
	if !e.cfg.ColdStart {
		g.openWith("warm start: the store is current", false)
		return
	}
	defer func() {
		if !g.isOpen() {
			return
		}
		st := g.status()
		e.publish(events.Event{Type: events.GateOpened, Message: st.Reason, Attrs: map[string]string{"timed_out": strconv.FormatBool(st.TimedOut)}})
		if err := e.cfg.Store.Boots().SetGateOpened(e.cfg.BootID); err != nil {
			// Only costs a second wait for the modules after a restart.
			e.log.Error("recording that the gate opened", "err", err)
		}
	}()
	if len(e.cfg.RequiredModules) == 0 {
		g.openWith("cold start, no required modules", false)
		return
	}
	deadline := e.cfg.GateSince.Add(e.cfg.ReadinessTimeout)
	g.mu.Lock()
	g.deadline = deadline
	g.mu.Unlock()
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for {
		missing, err := e.missing()
		if err != nil {
			e.log.Error("reading module readiness", "err", err)
		} else {
			g.mu.Lock()
			g.waitingFor = missing
			g.mu.Unlock()
			if len(missing) == 0 {
				g.openWith("cold start: every required module is ready", false)
				e.log.Info("gate open: every required module is ready", "modules", e.cfg.RequiredModules)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-g.changed:
		case <-timeout.C:
			msg := fmt.Sprintf("readiness timeout %v expired before modules %s were ready; replaying the last known state",
				e.cfg.ReadinessTimeout, strings.Join(missing, ", "))
			g.openWith(msg, true)
			e.cfg.Metrics.readinessTimeouts.Inc()
			e.log.Error(msg, "waiting_for", missing)
			e.publish(events.Event{Type: events.ReadinessTimeout, Message: msg,
				Attrs: map[string]string{"waiting_for": strings.Join(missing, ",")}})
			return
		}
	}
}

// MarkReady marks module ready for this boot, which may open the gate.
func (e *Engine) MarkReady(module string) error {
	if err := e.cfg.Store.Modules().SetReady(module, e.cfg.BootID); err != nil {
		return err
	}
	e.log.Info("module ready", "module", module, "boot_id", e.cfg.BootID)
	e.publish(events.Event{Type: events.ModuleReady, Module: module, Message: "module ready for this boot"})
	e.gate.poke()
	return nil
}

// changeID is the identity of the entry a change touches.
