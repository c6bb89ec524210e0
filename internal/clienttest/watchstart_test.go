package clienttest_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// TestWatchRestartBeforeFirstEvent: a Watch from now that loses flowstated
// before any event (heartbeats 10 s apart) waits for it within its
// reconnect window, like one that had events, and then asks for a resync;
// one whose flowstated stays away returns UNAVAILABLE after the window.
func TestWatchRestartBeforeFirstEvent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, quiet, testenv.Configure(func(c *server.Config) {
		c.EventHeartbeat = 10 * time.Second
		c.MetricsListen = "127.0.0.1:0"
	}))
	e.Start(ctx)
	e.WaitConverged(ctx) // start-up events are over
	c := e.Dial(e.Sock)
	started := regexp.MustCompile(`grpc_server_started_total\{[^}]*grpc_method="Watch"[^}]*\} (\d+)`)
	w := watch(ctx, t, c, client.Cursor{})
	testenv.Poll(ctx, t, "flowstated serving the watch", func() (bool, error) {
		m := started.FindStringSubmatch(e.Metrics(ctx))
		return m != nil && m[1] != "0", nil
	})
	e.Stop()
	select {
	case err := <-w.errc:
		t.Fatalf("Watch ended while flowstated restarted: %v", err)
	case <-time.After(time.Second): // a systemd restart's outage
	}
	e.Start(ctx)
	if err := w.end(ctx, t); !errors.Is(err, client.ErrResync) {
		t.Fatalf("Watch across a restart at its start: %v, want ErrResync", err)
	}
	// Resync: a Watch from now gets the new stream's position at once.
	w = watch(ctx, t, c, client.Cursor{})
	hb := w.next(ctx, t, isType(client.EventHeartbeat))
	if hb.StreamID == "" {
		t.Fatalf("first event %+v has no stream id", hb)
	}

	// Away for longer than the window: UNAVAILABLE, and a resync is due.
	hasty := e.Dial(e.Sock, client.WithWatchReconnect(300*time.Millisecond))
	hw := watch(ctx, t, hasty, client.Cursor{})
	hw.next(ctx, t, isType(client.EventHeartbeat))
	e.Stop()
	if err := hw.end(ctx, t); !errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, client.ErrResync) {
		t.Fatalf("Watch with flowstated away: %v, want UNAVAILABLE with a resumable position", err)
	}
}
