package main

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
)

// TestClientWaitsForRestart is a flowstated restart under systemd
// (RestartSec=2s) as a controller meets it: calls made while flowstated is
// down wait for it, and succeed once it is back 2.5 s later; a call whose
// context ends while it is down returns the context's error, wrapping the
// last UNAVAILABLE cause.
func TestClientWaitsForRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n := newNode(ctx, t, []string{"br-int"})
	n.start(ctx)
	n.signal(ctx, syscall.SIGTERM)

	// Down: a call with a short context ends with its error and the cause.
	short, cancelShort := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err := n.c.Status(short)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("status while down: %v, want the deadline wrapping UNAVAILABLE", err)
	}
	t.Logf("status while down: %v", err)

	// Down, then back: a read and a write started now both succeed.
	type result struct {
		what string
		err  error
		took time.Duration
	}
	done := make(chan result, 2)
	began := time.Now()
	call, cancelCall := context.WithTimeout(ctx, 30*time.Second)
	defer cancelCall()
	go func() {
		_, err := n.c.Status(call)
		done <- result{"status", err, time.Since(began)}
	}()
	go func() {
		_, err := n.c.Sync(call, client.Module{Bridge: "br-int", Name: "pipeline"}, true,
			client.FlowText("table=0,priority=10,actions=drop"))
		done <- result{"sync", err, time.Since(began)}
	}()
	restart := time.NewTimer(2500 * time.Millisecond)
	defer restart.Stop()
	select {
	case r := <-done:
		t.Fatalf("%s returned while flowstated was down: %v", r.what, r.err)
	case <-restart.C:
	}
	n.startNoWait()
	for range 2 {
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatalf("%s across the restart: %v", r.what, r.err)
			}
			t.Logf("%s succeeded %v after it began (flowstated restarted after 2.5 s)", r.what, r.took.Round(time.Millisecond))
		case <-ctx.Done():
			t.Fatal("calls did not return")
		}
	}
	es, err := n.c.List(ctx, client.Filter{Module: "pipeline"})
	if err != nil || len(es) != 1 {
		t.Fatalf("after the restart, pipeline holds %d entries (%v), want the one synced", len(es), err)
	}
}
