package restore

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/mirror"
	"github.com/flowstate-io/flowstate/server/restore/vswitchd"
)

// BridgeStatus is the state of one bridge.
type BridgeStatus struct {
	bridge.Snapshot
	// Quarantined lists at most bridge.MaxListedQuarantined quarantined
	// entries (those that crashed vswitchd first, then in key order), read
	// from the store by Engine.Status.
	Quarantined []bridge.Quarantined
	// Mirror is set for an unmanaged bridge the engine mirrors (package
	// mirror).
	Mirror *mirror.State
	// LeftAlone counts the entries on the switch that controllers the
	// OpenFlow proxy relays without recording installed (OpenFlow < 1.5):
	// left alone, never deleted, and not restored after a vswitchd
	// restart (package owner), as of the last dump. LeftAloneAll: there were
	// more than the engine tracks, and every undeclared entry is left
	// alone until vswitchd restarts.
	LeftAlone    int
	LeftAloneAll bool
}

// runBridge owns the OpenFlow connection of one bridge: dial, serve, repeat.
func (e *Engine) runBridge(ctx context.Context, b *bridge.State) {
	log := e.log.With("bridge", b.Name())
	e.vswitchd.KeepConnected(ctx, b.Name(), log, vswitchd.Hooks{
		Set: func(conn *ofconn.Conn, why string) {
			b.SetConn(conn)
			switch {
			case conn == nil:
				b.SetReason(why)
			case !e.gate.IsOpen():
				b.SetReason("waiting for the cold-start gate: " + e.gate.Status().Reason)
			}
		},
		Serve:       func(conn *ofconn.Conn) { e.serveConn(ctx, b, conn, log) },
		Unreachable: b.SetReason,
	})
}

// serveConn replays once the gate is open, then again when kicked or at
// every audit tick, until the connection dies or ctx ends.
func (e *Engine) serveConn(ctx context.Context, b *bridge.State, conn *ofconn.Conn, log *slog.Logger) {
	select {
	case <-e.gate.Opened():
	case <-ctx.Done():
		return
	case <-conn.Done():
		return
	}
	// Store identity: nothing is sent before this store may manage the bridge.
	if !e.owners.Claim(ctx, b.Name(), conn, log) {
		return
	}
	retry := time.NewTimer(0)
	defer retry.Stop()
	var audit <-chan time.Time
	if e.cfg.AuditInterval > 0 {
		t := time.NewTicker(e.cfg.AuditInterval)
		defer t.Stop()
		audit = t.C
	}
	first := true
	// survive fires SurviveAfter after a replay that sent something, if
	// vswitchd is still up (package poison).
	survive := time.NewTimer(time.Hour)
	survive.Stop()
	defer survive.Stop()
	for {
		auditing := false
		select {
		case <-ctx.Done():
			return
		case <-conn.Done():
			if ctx.Err() == nil {
				e.replay.ConnLost(ctx, b, log)
			}
			return
		case <-survive.C:
			b.Lock()
			err := b.Poison().Survived(b.Quarantine().Has, log)
			b.Unlock()
			if err != nil {
				log.Error("recording a replay vswitchd survived failed", "err", err)
			}
			continue
		case <-b.Kicked():
		case <-retry.C:
		case <-audit:
			if !e.replay.Audit(ctx, b, conn, log) {
				continue // the switch holds what the store says
			}
			auditing = true
		}
		r, err := e.replay.Reconcile(ctx, b, conn, log)
		if r.Messages > 0 && err == nil {
			survive.Reset(e.cfg.SurviveAfter)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error("replay failed", "err", err)
			retry.Reset(e.cfg.RetryInterval)
			continue
		}
		if auditing && r.Changes() > 0 {
			e.cfg.Metrics.drift.WithLabelValues(b.Name()).Add(float64(r.Changes()))
			log.Warn("drift corrected", "changes", r.Changes())
			e.publish(events.Event{Type: events.DriftCorrected, Bridge: b.Name(),
				Message: fmt.Sprintf("audit found and corrected %d differences", r.Changes()),
				Attrs:   map[string]string{"changes": strconv.Itoa(r.Changes())}})
		}
		if first {
			first = false
			e.flag.BridgeConverged()
		}
	}
}
