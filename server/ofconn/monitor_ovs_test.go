package ofconn

import (
	"errors"
	"testing"
)

// TestMonitorFlows: a flow monitor on one connection hears of flows another
// client adds, modifies and deletes (ovs-ofctl), and of this connection's own
// bundles; an idle bridge reports nothing; a second monitor is refused.
func TestMonitorFlows(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})
	changed, err := c.MonitorFlows(ctx)
	if !hasFlowMonitor(ctx, t, c) {
		// OVS 2.15: refused in OpenFlow 1.0 (foreign.go); the connection lives.
		if _, ok := errors.AsType[*ForeignError](err); !ok || c.Err() != nil {
			t.Fatalf("monitor on OVS without one: %v (connection: %v), want a *ForeignError on a live connection", err, c.Err())
		}
		return
	}
	if err != nil {
		t.Fatalf("monitor: %v", err)
	}
	if _, err := c.MonitorFlows(ctx); !errors.Is(err, errMonitoring) {
		t.Fatalf("second monitor: %v, want errMonitoring", err)
	}
	// Nothing changed: a barrier's reply comes, no report.
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
		t.Fatal("a report on an idle bridge")
	default:
	}
	wait := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("no report of %s: %v", what, ctx.Err())
		}
	}
	for _, step := range []struct{ what, cmd, arg string }{
		{"an added flow", "add-flow", "priority=10,ip,actions=drop"},
		{"a modified flow", "mod-flows", "priority=10,ip,actions=output:2"},
		{"a deleted flow", "del-flows", "ip"},
	} {
		if out, err := s.Ofctl(ctx, step.cmd, "br0", step.arg); err != nil {
			t.Fatal(err, out)
		}
		wait(step.what)
	}
	if err := c.Bundle(ctx, ipFlows(t, 0, 100, 0, 3)); err != nil {
		t.Fatal(err)
	}
	wait("this connection's own bundle")
	// The reports did not disturb the connection.
	flows, err := c.DumpFlowsRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 4 {
		t.Fatalf("dump after the reports: %d flows, want 3 and the default one", len(flows))
	}
}
