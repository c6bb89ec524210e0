package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// stopGRPC lets in-flight calls finish, up to d, then cuts the rest.
func stopGRPC(gs *grpc.Server, d time.Duration) {
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		gs.Stop()
		<-done
	}
}

// listenUnix listens on unix:///path with mode 0660, replacing a stale socket
// file but refusing to steal one another process still serves.
func listenUnix(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix://")
	if !ok || !filepath.IsAbs(path) {
		return nil, fmt.Errorf("server: listen address %q: want unix:///absolute/path", addr)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = c.Close()
		return nil, fmt.Errorf("server: %s is in use by another process", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("server: removing stale socket: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	return lis, nil
}

// newStreamID names this run of flowstated: Watch revisions restart with the
// process, and a client resuming across a restart must be told to resync.
func newStreamID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func readBootID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("server: boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("server: boot id: %s is empty", path)
	}
	return id, nil
}

// callLevel is the level of a finished call's log line: debug when it
// succeeded, so that a CNI's Put a pod or a controller's write a message
// costs no line in the journal; a failure keeps the level its code has by
// default (info for a refusal, warn or error for the rest).
func callLevel(code codes.Code) logging.Level {
	if code == codes.OK {
		return logging.LevelDebug
	}
	return logging.DefaultServerCodeToLevel(code)
}

func interceptorLogger(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		if lvl == logging.LevelInfo && isPoll(fields) {
			// Probes and status polls would drown the log.
			lvl = logging.LevelDebug
		}
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

// isPoll reports whether the call's fields name a health probe or a Status
// call.
func isPoll(fields []any) bool {
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		v, _ := fields[i+1].(string)
		switch {
		case k == "grpc.service" && v == healthpb.Health_ServiceDesc.ServiceName:
			return true
		case k == "grpc.method" && v == "Status":
			return true
		}
	}
	return false
}

func panicToStatus(log *slog.Logger) recovery.RecoveryHandlerFunc {
	return func(p any) error {
		log.Error("panic in handler", "panic", p)
		return status.Errorf(codes.Internal, "internal error")
	}
}
