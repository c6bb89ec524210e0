package clienttest_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
	"k8s.io/klog/v2"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/testenv"
)

func TestMain(m *testing.M) {
	if sock := os.Getenv(dialAsEnv); sock != "" {
		os.Exit(dialKind(sock))
	}
	// libOpenflow reports what it cannot decode through klog: noise here.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))
}

// quiet keeps flowstated's log in the test output to warnings and errors:
// these tests are about the client.
var quiet = testenv.LogLevel(slog.LevelWarn)

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

// declare puts one flow of module on br-int: a module that declares entries
// may be marked ready.
func declare(ctx context.Context, t *testing.T, c *client.Client, module string) {
	t.Helper()
	if _, err := c.Put(ctx, client.Module{Bridge: "br-int", Name: module}, client.FlowText("table=9,priority=9,ip,actions=drop")); err != nil {
		t.Fatal(err)
	}
}
