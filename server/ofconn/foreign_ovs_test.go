package ofconn

import (
	"errors"
	"strings"
	"testing"
)

// TestMonitorRefusedInAnotherVersion (issue 33): OVS answers a flow monitor
// request it cannot decode with an OpenFlow 1.0 error that names no request.
// OVS 2.15 does so for every OpenFlow 1.5 flow monitor request; 3.1 does the
// same for one with a flag it does not take, which this test sends. The
// connection stays up and usable: the refusal is a *ForeignError, not a
// dropped connection that the redial would lose again at once.
func TestMonitorRefusedInAnotherVersion(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})
	_, err := c.monitorFlows(ctx, fmfAdd|1<<15)
	var fe *ForeignError
	if !errors.As(err, &fe) {
		t.Fatalf("monitor with a bad flag: %v, want a *ForeignError", err)
	}
	if fe.Version != 1 || !strings.Contains(err.Error(), "OpenFlow 1.0 ERROR") {
		t.Fatalf("refusal %q (version %d), want the OpenFlow 1.0 error OVS sends", err, fe.Version)
	}
	select {
	case <-c.Done():
		t.Fatalf("the refusal closed the connection: %v", c.Err())
	default:
	}
	flows, err := c.DumpFlowsRaw(ctx)
	if err != nil || len(flows) != 1 {
		t.Fatalf("dump after the refusal: %d flows, %v; want the default flow", len(flows), err)
	}
	// The connection takes a monitor it can decode after the refused one.
	changed, err := c.MonitorFlows(ctx)
	if err != nil {
		t.Fatalf("monitor after the refusal: %v", err)
	}
	if out, err := s.Ofctl(ctx, "add-flow", "br0", "priority=10,ip,actions=drop"); err != nil {
		t.Fatal(err, out)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatalf("no report of an added flow: %v", ctx.Err())
	}
}
