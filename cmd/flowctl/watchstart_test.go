package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// watchStarted matches the count of Watch calls flowstated began.
var watchStarted = regexp.MustCompile(`grpc_server_started_total\{[^}]*grpc_method="Watch"[^}]*\} (\d+)`)

// TestWatchRestartAtStart: a restart of flowstated right after watch began,
// before any event (heartbeats 10 s apart), is ridden out like a later one:
// a resync marker, then the new flowstated's events; not "cannot reach".
func TestWatchRestartAtStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, testenv.Configure(func(c *server.Config) {
		c.EventHeartbeat = 10 * time.Second
		c.MetricsListen = "127.0.0.1:0"
	}))
	e.Start(ctx)
	srv := e.Config.Listen
	if _, stderr, code := flowctl(ctx, "", "--server", srv, "wait"); code != 0 {
		t.Fatal(stderr)
	}
	// A module that declares a flow may be marked ready.
	if _, stderr, code := flowctl(ctx, "", "--server", srv, "add-flow", "--module", "pipeline", "table=0,priority=100,ip,actions=drop"); code != 0 {
		t.Fatal(stderr)
	}
	out := &lockedBuffer{}
	done := make(chan int, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		done <- execute(wctx, []string{"--server", srv, "watch", "-o", "json"}, strings.NewReader(""), out, out)
	}()
	testenv.Poll(ctx, t, "flowstated serving the watch", func() (bool, error) {
		m := watchStarted.FindStringSubmatch(e.Metrics(ctx))
		return m != nil && m[1] != "0", nil
	})
	e.Stop()
	// Down for a second, as a systemd restart is: watch must keep trying.
	select {
	case code := <-done:
		t.Fatalf("watch ended with %d while flowstated restarted:\n%s", code, out.String())
	case <-time.After(time.Second):
	}
	e.Start(ctx)
	testenv.Poll(ctx, t, "a module_ready event after the restart", func() (bool, error) {
		select {
		case code := <-done:
			t.Fatalf("watch ended with %d after the restart:\n%s", code, out.String())
		default:
		}
		if _, stderr, code := flowctl(ctx, "", "--server", srv, "ready", "--module", "pipeline"); code != 0 {
			t.Logf("ready: %s", stderr)
		}
		return strings.Contains(out.String(), `"type":"module_ready"`), nil
	})
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("interrupted watch: exit %d\n%s", code, out.String())
	}
	if !regexp.MustCompile(`(?s)"type":"resync".*"type":"module_ready"`).MatchString(out.String()) {
		t.Fatalf("want a resync marker, then the new flowstated's events:\n%s", out.String())
	}
}
