package restore

import (
	"context"
	"log/slog"
	"time"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// redial dials the management socket at path until it answers or ctx ends.
// A restarting vswitchd is back within a fraction of a second and every
// millisecond of it is a gated switch: it redials every 20 ms for the first
// seconds after lost, then backs off to RetryInterval. A failure is logged
// once, not at every retry. Managed and mirrored bridges dial alike.
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
