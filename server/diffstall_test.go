package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/server"
)

// TestDiffStalledClient: Diff runs under the bridge's lock, so a client that
// opens a large diff and stops reading must not hold the bridge: writes go
// on, and the diff ends with UNAVAILABLE once its queue has not moved for
// the stall time.
func TestDiffStalledClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) { c.Faults = &server.Faults{DiffStall: 500 * time.Millisecond} })
	e.Start(ctx)
	const n = 30000
	es := make([]client.Entry, n)
	for i := range es {
		es[i] = client.FlowText(fmt.Sprintf("table=3,priority=10,ip,nw_src=10.%d.%d.%d,actions=drop", i>>16, (i>>8)&255, i&255))
	}
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "policy"}, es...); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	// Behind flowstated's back: every declared flow is now a difference.
	if out, err := e.sb.Ofctl(ctx, "del-flows", "br-int", "table=3"); err != nil {
		t.Fatal(err, out)
	}
	stream, err := e.rawAPI(ctx).Diff(ctx, &flowstatev1.DiffRequest{Bridge: "br-int"})
	if err != nil {
		t.Fatal(err)
	}
	// The stalled client reads one message, then nothing for a while.
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, client.FlowText("table=0,priority=1,actions=drop")); err != nil {
		t.Fatalf("a write while a diff client stalls: %v", err)
	}
	if waited := time.Since(start); waited > 20*time.Second {
		t.Fatalf("a write waited %v behind a stalled diff client", waited)
	}
	var last error
	for last == nil {
		_, last = stream.Recv()
	}
	if got := last.Error(); !strings.Contains(got, "Unavailable") || !strings.Contains(got, "has not read the diff") {
		t.Fatalf("the stalled diff ended with %v, want UNAVAILABLE saying the client did not read", last)
	}
}
