package restore

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/write"
)

// TestAuditDrift: a flow deleted behind flowstate's back (ovs-ofctl, as
// another controller would) is found by the audit: the bridge stops claiming
// converged before the correction, the drift is counted, and the replay that
// follows puts the flow back.
func TestAuditDrift(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	faults := &Faults{}
	e := startEngine(ctx, t, faults)
	b := e.bridges[testBridge]
	if applied, err := e.Writes().Put(ctx, testBridge, "m", write.Declared{Entries: append(flow(t, 1), flow(t, 2)...)}); err != nil || !applied {
		t.Fatalf("put: applied=%v err=%v", applied, err)
	}
	conn, err := b.Connected()
	if err != nil {
		t.Fatal(err)
	}
	if e.replay.Audit(ctx, b, conn, e.log) {
		t.Fatal("audit of an untouched bridge asks for a replay")
	}

	out, err := exec.CommandContext(ctx, "ovs-ofctl", "-O", "OpenFlow15", "--strict", "del-flows",
		"unix:"+e.vswitchd.MgmtPath(testBridge), "table=1,priority=101,ip,nw_dst=10.0.0.1").CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-ofctl: %v: %s", err, out)
	}
	var during bridge.Snapshot
	faults.AfterDriftFound = func() { during = b.Snapshot() }
	if !e.replay.Audit(ctx, b, conn, e.log) {
		t.Fatal("audit missed a flow deleted by hand")
	}
	if during.Converged || !strings.Contains(during.Reason, "drift: the switch differs from the store (1 missing, 0 changed, 0 not declared)") ||
		during.DriftFound != 1 || during.LastDrift.IsZero() {
		t.Fatalf("status after the drift was found: converged %v, reason %q, drift %d at %v", during.Converged, during.Reason, during.DriftFound, during.LastDrift)
	}
	if n := counter(t, e, "flowstate_drift_found_total"); n != 1 {
		t.Fatalf("flowstate_drift_found_total = %v, want 1", n)
	}
	if _, err := e.replay.Reconcile(ctx, b, conn, e.log); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := e.replay.Diff(ctx, b, conn, func(plan.Change) error { n++; return nil }); err != nil || n != 0 || !b.IsConverged() {
		t.Fatalf("after the correction: %d differences (%v), converged %v", n, err, b.IsConverged())
	}
}

// counter reads a counter of the engine's registry (summed over labels).
func counter(t *testing.T, e *testEngine, name string) float64 {
	t.Helper()
	mfs, err := e.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
