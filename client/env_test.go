package client_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
	"k8s.io/klog/v2"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server"
)

func TestMain(m *testing.M) {
	// libOpenflow reports what it cannot decode through klog: noise here.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))
}

// env is a sandbox with one managed bridge, br-int, and a flowstated for it
// that tests start and stop.
type env struct {
	t   *testing.T
	sb  *sandbox.Sandbox
	cfg server.Config
	d   *server.Daemon
	// sock is the daemon's socket path (no scheme).
	sock string
}

func newEnv(ctx context.Context, t *testing.T, opts ...func(*server.Config)) *env {
	t.Helper()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	if err := sb.AddBridge(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	dir := sb.Dir()
	bootID := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootID, []byte("test-boot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, sb: sb, sock: filepath.Join(dir, "fs.sock")}
	e.cfg = server.Config{
		Listen: "unix://" + e.sock, DBPath: filepath.Join(dir, "flowstate.db"), BootIDFile: bootID,
		RunDir: sb.RunDir(), OVSDB: sb.DBAddr(), Bridges: []string{"br-int"},
		EchoInterval: time.Second, EchoTimeout: 2 * time.Second,
		EventHeartbeat: 200 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, o := range opts {
		o(&e.cfg)
	}
	return e
}

func (e *env) start(ctx context.Context) {
	e.t.Helper()
	d, err := server.Start(ctx, e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.d = d
	e.t.Cleanup(e.stop)
}

func (e *env) stop() {
	if e.d == nil {
		return
	}
	if err := e.d.Stop(); err != nil {
		e.t.Errorf("flowstated stopped with: %v", err)
	}
	e.d = nil
}

// client connects to target, a socket path; the test closes it.
func (e *env) client(target string, opts ...client.Option) *client.Client {
	e.t.Helper()
	c, err := client.New(target, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// fastFail makes a frozen server cost the least time gRPC allows: it pings
// no more often than every 10 s, so a silent server is noticed 11 s after its
// last frame, and a connection attempt it never answers fails after 1 s.
var fastFail = client.WithDialOptions(
	grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: time.Second, PermitWithoutStream: true}),
	grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: time.Second}),
)

// watcher runs one Watch in the background and hands its events over.
type watcher struct {
	ch   chan client.Event
	errc chan error
}

func watch(ctx context.Context, t *testing.T, c *client.Client, from client.Cursor) *watcher {
	w := &watcher{ch: make(chan client.Event, 1024), errc: make(chan error, 1)}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.errc <- c.Watch(ctx, from, func(ev client.Event) error {
			select {
			case w.ch <- ev:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// next returns the next event that matches, failing the test if Watch ends.
func (w *watcher) next(ctx context.Context, t *testing.T, match func(client.Event) bool) client.Event {
	t.Helper()
	for {
		select {
		case ev := <-w.ch:
			if match(ev) {
				return ev
			}
		case err := <-w.errc:
			t.Fatalf("watch ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("waiting for an event: %v", ctx.Err())
		}
	}
}

// end returns the error Watch ended with.
func (w *watcher) end(ctx context.Context, t *testing.T) error {
	t.Helper()
	select {
	case err := <-w.errc:
		return err
	case <-ctx.Done():
		t.Fatalf("watch did not end: %v", ctx.Err())
		return nil
	}
}

func isType(typ client.EventType) func(client.Event) bool {
	return func(ev client.Event) bool { return ev.Type == typ }
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
