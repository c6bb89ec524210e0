package restore

import (
	"context"
	"log/slog"

	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/mirror"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/vswitchd"
)

// newMirrors wires the mirrors of the unmanaged bridges (package mirror) to
// the engine: its flag, its OVSDB client and its connection keeping.
func (e *Engine) newMirrors() *mirror.Set {
	return mirror.New(mirror.Config{
		Policy: e.cfg.Unmanaged, Interval: e.cfg.MirrorInterval, MaxHold: e.cfg.MaxHold,
		Store: e.cfg.Store.Mirrors(), Logger: e.log,
		Managed: func(name string) bool {
			_, ok := e.bridges[name]
			return ok
		},
		OVSDB:   e.flag.OVSDB,
		Pin:     e.flag.Pin,
		Recheck: e.flag.Recheck,
		KeepConnected: func(ctx context.Context, name string, log *slog.Logger, set, serve func(*ofconn.Conn)) {
			e.vswitchd.KeepConnected(ctx, name, log, vswitchd.Hooks{
				Set:   func(c *ofconn.Conn, _ string) { set(c) },
				Serve: serve,
			})
		},
		CanMonitor:    e.vswitchd.CanMonitor,
		Publish:       e.publish,
		ObserveReplay: func(bridge string, r plan.Replay) { e.cfg.Metrics.observeReplay(bridge, r) },
	})
}

// Mirrors returns the state of every mirrored (unmanaged) bridge, by name.
func (e *Engine) Mirrors() []BridgeStatus {
	ms := e.mirrors.Status()
	out := make([]BridgeStatus, len(ms))
	for i, m := range ms {
		out[i] = BridgeStatus{Snapshot: bridge.Snapshot{Name: m.Name, Connected: m.Connected, Converged: m.Converged, Last: m.Last}, Mirror: &m.State}
	}
	return out
}
