package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
)

// BenchmarkUnaryInterceptors is the cost of each interceptor flowstated's
// API runs on a unary call (server.go), around a handler that does nothing:
// what a small Put pays for them (issue 35). The log goes to a file, as a
// production flowstated's goes to its journal; "log-debug" is the same
// interceptor with the finished-call line below the logger's level.
//
//	go test -run '^$' -bench UnaryInterceptors -benchmem ./server/
func BenchmarkUnaryInterceptors(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "log"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	logAt := func(l slog.Level) *slog.Logger {
		return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: l}))
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/flowstate.v1.FlowStateService/Put"}
	noop := func(context.Context, any) (any, error) { return nil, nil }
	for _, ic := range []struct {
		name string
		i    grpc.UnaryServerInterceptor
	}{
		{"metrics", grpcprom.NewServerMetrics().UnaryServerInterceptor()},
		{"log-info", logging.UnaryServerInterceptor(interceptorLogger(logAt(slog.LevelInfo)), logging.WithLogOnEvents(logging.FinishCall))},
		{"log-debug", logging.UnaryServerInterceptor(interceptorLogger(logAt(slog.LevelWarn)), logging.WithLogOnEvents(logging.FinishCall))},
		{"recovery", recovery.UnaryServerInterceptor(recovery.WithRecoveryHandler(panicToStatus(logAt(slog.LevelInfo))))},
		{"verdicts", unaryVerdicts},
	} {
		b.Run(ic.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ic.i(ctx, nil, info, noop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
