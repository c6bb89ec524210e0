package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
)

// TestPollsLogAtDebug: health probes and Status polls finish at debug, every
// other call at info.
func TestPollsLogAtDebug(t *testing.T) {
	var buf bytes.Buffer
	l := interceptorLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for _, c := range []struct{ service, method, want string }{
		{"grpc.health.v1.Health", "Check", "level=DEBUG"},
		{"flowstate.v1.FlowStateService", "Status", "level=DEBUG"},
		{"flowstate.v1.FlowStateService", "Put", "level=INFO"},
	} {
		buf.Reset()
		l.Log(context.Background(), logging.LevelInfo, "finished call", "grpc.service", c.service, "grpc.method", c.method)
		if !strings.Contains(buf.String(), c.want) {
			t.Errorf("%s/%s logged %q, want %s", c.service, c.method, buf.String(), c.want)
		}
	}
}
