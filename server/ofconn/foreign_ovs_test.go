package ofconn

import (
	"context"
	"errors"
	"os/exec"
	"slices"
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
	// The connection takes a monitor it can decode after the refused one;
	// before 3.0, OVS can decode none and refuses it the same way.
	changed, err := c.MonitorFlows(ctx)
	if !hasFlowMonitor(ctx, t, c) {
		if !errors.As(err, &fe) || c.Err() != nil {
			t.Fatalf("monitor on OVS without one: %v (connection: %v), want a *ForeignError on a live connection", err, c.Err())
		}
		return
	}
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

// TestDescribe: OFPMP_DESC names the vswitchd that runs: its Software is the
// version ovs-vswitchd --version prints, and the switch's HELLO offered
// OpenFlow 1.5.
func TestDescribe(t *testing.T) {
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{})
	d, err := c.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, "ovs-vswitchd", "--version").Output()
	if err != nil {
		t.Fatalf("ovs-vswitchd --version: %v", err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	if d.Software == "" || !strings.HasSuffix(first, " "+d.Software) {
		t.Fatalf("described software %q, want the version of %q", d.Software, first)
	}
	if names := VersionNames(c.PeerVersions()); !slices.Contains(names, "1.5") {
		t.Fatalf("the switch offered OpenFlow %v, want 1.5 among them", names)
	}
	t.Logf("switch: %+v, OpenFlow %v", d, VersionNames(c.PeerVersions()))
}

// hasFlowMonitor reports whether the switch of c is an OVS that takes
// MonitorFlows' request (3.0 and later).
func hasFlowMonitor(ctx context.Context, t *testing.T, c *Conn) bool {
	t.Helper()
	d, err := c.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return d.HasFlowMonitor()
}

func TestParseOVSVersion(t *testing.T) {
	for _, tc := range []struct {
		in           string
		major, minor int
		ok           bool
	}{
		{"2.15.0", 2, 15, true}, {"3.5.1-1ubuntu1", 3, 5, true}, {" 3.1.0\n", 3, 1, true}, {"2.17", 2, 17, true},
		{"", 0, 0, false}, {"None", 0, 0, false}, {"3.x", 0, 0, false}, {"v3.1", 0, 0, false},
	} {
		major, minor, ok := ParseOVSVersion(tc.in)
		if major != tc.major || minor != tc.minor || ok != tc.ok {
			t.Errorf("ParseOVSVersion(%q) = %d, %d, %v; want %d, %d, %v", tc.in, major, minor, ok, tc.major, tc.minor, tc.ok)
		}
	}
	for v, want := range map[string]bool{"2.15.0": false, "2.17.9": false, "3.0.0": true, "3.1.0": true, "": true} {
		if got := (SwitchDesc{Software: v}).HasFlowMonitor(); got != want {
			t.Errorf("HasFlowMonitor(%q) = %v, want %v", v, got, want)
		}
	}
}
