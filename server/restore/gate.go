package restore

import "github.com/flowstate-io/flowstate/server/restore/gate"

// newGate wires the cold-start gate (package gate) to the engine's config.
func newGate(cfg Config) (*gate.Gate, error) {
	return gate.New(gate.Config{Modules: cfg.Store.Modules(), Boots: cfg.Store.Boots(), BootID: cfg.BootID, ColdStart: cfg.ColdStart, Since: cfg.GateSince,
		RequiredModules: cfg.RequiredModules, ReadinessTimeout: cfg.ReadinessTimeout,
		Timeouts: cfg.Metrics.readinessTimeouts, Events: cfg.Events, Logger: cfg.Logger})
}

// MarkReady marks module ready for this boot, which may open the gate.
func (e *Engine) MarkReady(module string) error { return e.gate.MarkReady(module) }
