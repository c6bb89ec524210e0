package main

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

// TestGuardLogsCleanStop: after a clean stop (SIGTERM) the guard releases the
// node after its grace and logs it at INFO, which no log-based alert trips on;
// after a SIGKILL it still logs an ERROR.
func TestGuardLogsCleanStop(t *testing.T) {
	for _, tc := range []struct {
		sig       syscall.Signal
		want, not string
	}{
		{syscall.SIGTERM, `level=INFO msg="flowstated stopped in order: releasing the node`, "level=ERROR"},
		{syscall.SIGKILL, `level=ERROR msg="flowstated has not renewed its lease: releasing the node`, "stopped in order"},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			n := newNode(ctx, t, []string{"br-int"}, "--bridge", "br-int", "--guard", "spawn", "--guard-grace", "1s")
			n.start(ctx)
			if _, err := n.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, true, client.FlowText(guardPipeline[0])); err != nil {
				t.Fatal(err)
			}
			n.armedWithGuard(ctx)
			n.signal(ctx, tc.sig)
			var log string
			n.poll(ctx, "the guard releases the node", func() bool {
				b, _ := os.ReadFile(n.lease + ".guard.log")
				log = string(b)
				return strings.Contains(log, "releasing the node")
			})
			if !strings.Contains(log, tc.want) || strings.Contains(log, tc.not) {
				t.Fatalf("after %v the guard log lacks %q or has %q:\n%s", tc.sig, tc.want, tc.not, log)
			}
			n.poll(ctx, "the flag cleared", func() bool { return !n.flag(ctx) })
		})
	}
}
