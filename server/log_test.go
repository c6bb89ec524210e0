package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc/codes"
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

// TestCallsLogAtDebugUnlessFailed: a call that succeeded finishes at debug;
// one that failed keeps its code's level, so an operator still sees it.
func TestCallsLogAtDebugUnlessFailed(t *testing.T) {
	for _, c := range []struct {
		code codes.Code
		want logging.Level
	}{
		{codes.OK, logging.LevelDebug},
		{codes.InvalidArgument, logging.LevelInfo},
		{codes.FailedPrecondition, logging.LevelWarn},
		{codes.Unavailable, logging.LevelWarn},
		{codes.ResourceExhausted, logging.LevelWarn},
		{codes.Internal, logging.LevelError},
		{codes.Unknown, logging.LevelError},
	} {
		if got := callLevel(c.code); got != c.want {
			t.Errorf("%v: level %v, want %v", c.code, got, c.want)
		}
	}
}
