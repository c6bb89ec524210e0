package server_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
)

// vswitchdBuild is the status's vswitchd_build once a bridge described
// the switch.
func (e *env) vswitchdBuild(ctx context.Context) *flowstatev1.VswitchdBuild {
	e.t.Helper()
	var b *flowstatev1.VswitchdBuild
	poll(ctx, e.t, "vswitchd version in status", func() (bool, error) {
		st, err := flowstatev1.NewFlowStateServiceClient(e.c.Conn()).Status(ctx, &flowstatev1.StatusRequest{})
		if err != nil {
			return false, err
		}
		b = st.GetVswitchdBuild()
		return b.GetVersion() != "", nil
	})
	return b
}

// noFlowMonitor reports whether the status says the vswitchd has no
// OpenFlow 1.5 flow monitor (Open vSwitch before 3.0).
func noFlowMonitor(b *flowstatev1.VswitchdBuild) bool {
	for _, l := range b.GetLimits() {
		if strings.Contains(l, "flow monitor") {
			return true
		}
	}
	return false
}

// TestStatusNamesVswitchd (issue 33): status names the running vswitchd's
// version as it reports it over OpenFlow (what ovs-vswitchd --version
// prints), OVSDB's ovs_version once ovs-ctl (here ovs-vsctl) wrote it, and
// what the version lacks: before 3.0, the flow monitor.
func TestStatusNamesVswitchd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	b := e.vswitchdBuild(ctx)
	out, err := exec.CommandContext(ctx, "ovs-vswitchd", "--version").Output()
	if err != nil {
		t.Fatalf("ovs-vswitchd --version: %v", err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	if !strings.HasSuffix(first, " "+b.GetVersion()) {
		t.Fatalf("status names vswitchd %q, want the version of %q", b.GetVersion(), first)
	}
	old := strings.HasPrefix(b.GetVersion(), "2.")
	if noFlowMonitor(b) != old {
		t.Fatalf("vswitchd %s: limits %q; want the flow monitor among them: %v", b.GetVersion(), b.GetLimits(), old)
	}
	if b.GetOvsdbVersion() != "" {
		t.Fatalf("ovs_version %q before anything wrote it", b.GetOvsdbVersion())
	}
	if out, err := e.sb.Vsctl(ctx, "--no-wait", "set", "Open_vSwitch", ".", "ovs_version="+b.GetVersion()); err != nil {
		t.Fatal(err, out)
	}
	poll(ctx, t, "ovs_version in status", func() (bool, error) {
		return e.vswitchdBuild(ctx).GetOvsdbVersion() == b.GetVersion(), nil
	})
}
