package ofproxy_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// TestGuardRelayUnrecordedLeftAlone: an OpenFlow 1.3 controller on the
// proxy socket beside the module's (OpenFlow 1.5) one installs a flow
// through the guard's relay while flowstated is away. Back, flowstated must
// leave it alone as it does for such a controller through its own proxy,
// not learn it as module ovn's: found by the chaos harness (the
// issue31-kinds schedule, [kept]), where the learned copy was then restored
// over the OpenFlow 1.3 controller's change of the flow and deleted by the
// module's resync. Here: after the first replay module ovn does not hold
// it, and the OpenFlow 1.3 controller's change of it, made through
// flowstated's proxy, stands across a replay.
func TestGuardRelayUnrecordedLeftAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, fs := startRelayed(ctx, t)
	sock := "unix:" + filepath.Join(fs.proxyDir, sandbox.OVNBridge+".mgmt")
	of13 := func(args ...string) {
		t.Helper()
		if _, err := s.Ofctl(ctx, append([]string{"-O", "OpenFlow13"}, args...)...); err != nil {
			t.Fatalf("ovs-ofctl -O OpenFlow13 %q: %v", args, err)
		}
	}
	if _, err := s.Ofctl(ctx, "add-flow", sock, kept); err != nil {
		t.Fatal(err)
	}
	fs.waitConverged(ctx, t)

	fs.kill(t)
	poll(ctx, t, "the guard relaying", func() (bool, error) { return strings.Contains(fs.guardLog(), "relaying"), nil })
	const flow13, flow13T = "table=40,priority=10,in_port=5 actions=drop", "table=40,priority=10,in_port=5 actions=output:2"
	of13("add-flow", sock, flow13)
	if _, err := s.Ofctl(ctx, "add-flow", sock, added); err != nil {
		t.Fatalf("add-flow %q through the guard's relay: %v", added, err)
	}

	fs.start(ctx, t)
	fs.waitFirstReplay(ctx, t)
	texts := storedTexts(ctx, t, fs)
	if !slices.ContainsFunc(texts, func(d string) bool { return sameFlow(d, added) }) {
		t.Errorf("module %s did not learn %q, which its controller installed through the relay: %q", ovnModule, added, texts)
	}
	if slices.ContainsFunc(texts, func(d string) bool { return strings.Contains(d, "table=40") }) {
		t.Errorf("module %s learned the OpenFlow 1.3 controller's flow as its own: %q", ovnModule, texts)
	}
	fs.waitConverged(ctx, t)
	of13("add-flow", sock, flow13T)
	if _, err := fs.c.Reconcile(ctx, sandbox.OVNBridge); err != nil {
		t.Fatal(err)
	}
	flows := dumpFlows(ctx, t, s)
	if !slices.ContainsFunc(flows, func(d string) bool {
		return strings.Contains(d, "table=40") && strings.Contains(d, "in_port=5") && strings.HasSuffix(d, "actions=output:2")
	}) {
		t.Errorf("after a replay br-int does not hold the OpenFlow 1.3 controller's %q: %q", flow13T, flows)
	}
}
