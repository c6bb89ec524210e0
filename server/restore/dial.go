package restore

import (
	"context"
	"log/slog"
	"time"

	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// keepConnected owns the OpenFlow connection of one bridge, managed or
// mirrored: dial, record it with set, serve it until it dies, record nil,
// repeat until ctx ends.
func (e *Engine) keepConnected(ctx context.Context, name string, log *slog.Logger, set func(*ofconn.Conn), serve func(*ofconn.Conn)) {
	path := e.mgmtPath(name)
	lost := time.Now()
	for {
		conn, err := e.redial(ctx, path, lost, log)
		if err != nil {
			return
		}
		log.Info("bridge connected")
		e.publish(events.Event{Type: events.BridgeConnected, Bridge: name, Message: "OpenFlow connection up"})
		e.cfg.Metrics.connected.WithLabelValues(name).Set(1)
		set(conn)
		serve(conn)
		set(nil)
		_ = conn.Close()
		lost = time.Now()
		e.cfg.Metrics.connected.WithLabelValues(name).Set(0)
		if ctx.Err() == nil {
			log.Warn("bridge disconnected", "err", conn.Err())
			e.publish(events.Event{Type: events.BridgeDisconnected, Bridge: name, Message: "OpenFlow connection lost",
				Attrs: errAttrs(conn.Err())})
		}
	}
}

// redial dials the management socket at path until it answers or ctx ends.
// A restarting vswitchd is back within a fraction of a second and every
// millisecond of it is a gated switch: it redials every 20 ms for the first
// seconds after lost, then backs off to RetryInterval. A failure is logged
// once, not at every retry.
func (e *Engine) redial(ctx context.Context, path string, lost time.Time, log *slog.Logger) (*ofconn.Conn, error) {
	const firstRetry, fastFor = 20 * time.Millisecond, 3 * time.Second
	delay := firstRetry
	var lastErr string
	for {
		conn, err := ofconn.Dial(ctx, path, ofconn.Options{
			EchoInterval: e.cfg.EchoInterval, EchoTimeout: e.cfg.EchoTimeout, Logger: log,
		})
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if msg := err.Error(); msg != lastErr {
			log.Warn("bridge unreachable, retrying", "path", path, "err", err)
			lastErr = msg
		}
		if !sleepCtx(ctx, delay) {
			return nil, ctx.Err()
		}
		if time.Since(lost) > fastFor {
			delay = min(delay*2, e.cfg.RetryInterval)
		}
	}
}
