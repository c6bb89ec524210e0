package server_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/server"
)

// TestDriftDeletedByHand: a flow of the pipeline deleted by hand with
// ovs-ofctl is found by the audit, shows in the metrics, and comes back.
func TestDriftDeletedByHand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) {
		c.MetricsListen = "127.0.0.1:0"
		c.AuditInterval = 200 * time.Millisecond
	})
	e.Start(ctx)
	e.WaitConverged(ctx)
	want := e.putPipeline(ctx)
	if out, err := e.sb.Ofctl(ctx, "--strict", "del-flows", "br-int", "table=1,priority=90,ip"); err != nil {
		t.Fatal(err, out)
	}
	poll(ctx, t, "the audit found and corrected the drift", func() (bool, error) {
		m := e.Metrics(ctx)
		return strings.Contains(m, `flowstate_drift_found_total{bridge="br-int"} 1`) &&
			strings.Contains(m, `flowstate_drift_corrections_total{bridge="br-int"} 1`), nil
	})
	e.WaitConverged(ctx)
	if got := e.dump(ctx, "br-int"); !slices.Equal(got, want) {
		t.Fatalf("after the correction br-int holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
