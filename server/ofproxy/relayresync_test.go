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

// TestGuardRelayLearnedAfterResync: flowstated killed during a proxied
// controller's resync, its held changes stored and acknowledged but not yet
// on the switch (a change of a flow the module held before the clear, and a
// flow the clear deleted that the controller did not declare again). The
// guard relays meanwhile, and the controller adds one more flow through it.
// Back, flowstated learns the relayed flow, not the switch's copies the
// resync held back: the store and the switch keep the acknowledged change
// and the deletion. Before the fix the learning took those copies for the
// controller's own doing and stored them (chaos seed 1185008048, [acked]).
func TestGuardRelayLearnedAfterResync(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, fs := startRelayed(ctx, t)
	sock := "unix:" + filepath.Join(fs.proxyDir, sandbox.OVNBridge+".mgmt")
	ofctl := func(args ...string) {
		t.Helper()
		if _, err := s.Ofctl(ctx, args...); err != nil {
			t.Fatalf("ovs-ofctl %q: %v", args, err)
		}
	}
	for _, f := range []string{kept, changed, deleted} {
		ofctl("add-flow", sock, f)
	}
	poll(ctx, t, "module ovn's three flows recorded", func() (bool, error) {
		return len(storedTexts(ctx, t, fs)) == 3, nil
	})
	fs.waitConverged(ctx, t)

	// The controller starts over: a clear, then its install without the
	// deleted flow and with the changed one. Each is acknowledged (ovs-ofctl
	// waits for its barrier); flowstated is killed before it is quiet.
	ofctl("del-flows", sock)
	ofctl("add-flow", sock, kept)
	ofctl("add-flow", sock, changedT)
	fs.kill(t)
	onSwitch := dumpFlows(ctx, t, s)
	if !slices.ContainsFunc(onSwitch, func(d string) bool { return sameFlow(d, changed) }) ||
		!slices.ContainsFunc(onSwitch, func(d string) bool { return sameFlow(d, deleted) }) {
		t.Fatalf("the resync did not hold its changes back (the scenario needs them held): %q", onSwitch)
	}
	poll(ctx, t, "the guard relaying", func() (bool, error) { return strings.Contains(fs.guardLog(), "relaying"), nil })
	ofctl("add-flow", sock, added)

	fs.start(ctx, t)
	fs.waitFirstReplay(ctx, t)
	texts := storedTexts(ctx, t, fs)
	for _, f := range []string{kept, changedT, added} {
		if !slices.ContainsFunc(texts, func(d string) bool { return sameFlow(d, f) }) {
			t.Errorf("after flowstated's first replay module %s does not hold %q: %q", ovnModule, f, texts)
		}
	}
	if len(texts) != 3 {
		t.Errorf("module %s holds %d flows, want 3 (the cleared one gone, the change kept): %q", ovnModule, len(texts), texts)
	}
	fs.waitConverged(ctx, t)
	flows := dumpFlows(ctx, t, s)
	for _, f := range []string{kept, changedT, added} {
		if !slices.ContainsFunc(flows, func(d string) bool { return sameFlow(d, f) }) {
			t.Errorf("br-int lacks %q after flowstated came back: %q", f, flows)
		}
	}
	for _, f := range []string{changed, deleted} {
		if slices.ContainsFunc(flows, func(d string) bool { return sameFlow(d, f) }) {
			t.Errorf("br-int holds %q again, which the controller replaced or left out of its install: %q", f, flows)
		}
	}
}
