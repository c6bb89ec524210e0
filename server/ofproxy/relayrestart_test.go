package ofproxy_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// TestGuardRelayNoRemovalsFromNewVswitchd: vswitchd restarts plainly while
// flowstated is away, before its controller writes through the guard's
// relay. The new vswitchd never held the store's entries (flowstated
// recorded the one it replayed br-int on), so what it lacks is no deletion
// of the controller's: flowstated back learns what was installed through
// the relay and keeps the rest (found by the chaos harness, frozen-guard,
// [acked]: the first replay removed acknowledged flows from the store
// because the restart had erased them). The guard's marker is left without
// the vswitchd it saw flowstated renew under (Live), as a guard frozen
// meanwhile, or started after flowstated's last renewal, leaves it: only
// flowstated's own record of where it replayed tells the restart apart.
func TestGuardRelayNoRemovalsFromNewVswitchd(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, fs := startRelayed(ctx, t)
	sock := recordedThenAway(ctx, t, s, fs)
	if err := s.RestartVswitchd(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ofctl(ctx, "add-flow", sock, added); err != nil {
		t.Fatalf("add-flow %q through the guard's relay: %v", added, err)
	}
	forgetLive(t, fs.lease+".relayed."+sandbox.OVNBridge)

	startNoRemovals(ctx, t, s, fs)
}

// startNoRemovals starts flowstated again and checks that it learned no
// deletions on a switch that never held the store's entries: module ovn
// keeps every flow, the one added through the relay too, says why, and
// puts them all on br-int.
func startNoRemovals(ctx context.Context, t *testing.T, s *sandbox.Sandbox, fs *flowstatedProc) {
	t.Helper()
	fs.start(ctx, t)
	fs.waitFirstReplay(ctx, t)
	texts := storedTexts(ctx, t, fs)
	for _, f := range []string{kept, changed, deleted, added} {
		if !slices.ContainsFunc(texts, func(d string) bool { return sameFlow(d, f) }) {
			t.Errorf("after flowstated's first replay module %s does not hold %q: %q", ovnModule, f, texts)
		}
	}
	if !strings.Contains(fs.logs.String(), "the store's entries were not on this vswitchd") {
		t.Errorf("flowstated did not say why it learned no deletions")
	}
	fs.waitConverged(ctx, t)
	flows := dumpFlows(ctx, t, s)
	for _, f := range []string{kept, changed, deleted, added} {
		if !slices.ContainsFunc(flows, func(d string) bool { return sameFlow(d, f) }) {
			t.Errorf("br-int lacks %q after flowstated's replay: %q", f, flows)
		}
	}
}

// forgetLive removes from the guard's marker at path the vswitchd it saw
// flowstated renew under.
func forgetLive(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the guard's record of its relayed session: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("the guard's record of its relayed session: %v", err)
	}
	delete(m, "live")
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestGuardRelayNoRemovalsFromRecreatedBridge: br-int is deleted and
// created again under the same vswitchd while flowstated is away (ovs-vsctl
// del-br, add-br), and the controller writes one flow to the new bridge
// through the guard's relay. The new br-int never held the store's entries,
// though the vswitchd is the one flowstated last replayed it on: what it
// lacks is no deletion of the controller's. Back, flowstated learns the
// flow added through the relay and keeps the rest (found by the chaos
// harness, seed 3056975958, [acked] "acknowledged flow ... is not stored":
// the first replay removed module proxied's acknowledged flows because the
// record of where it had replayed named only the vswitchd).
func TestGuardRelayNoRemovalsFromRecreatedBridge(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, fs := startRelayed(ctx, t)
	sock := recordedThenAway(ctx, t, s, fs)
	if _, err := s.Vsctl(ctx, "del-br", sandbox.OVNBridge); err != nil {
		t.Fatal(err)
	}
	addIntegrationBridge(ctx, t, s)
	poll(ctx, t, "add-flow through the guard's relay to the new br-int", func() (bool, error) {
		_, err := s.Ofctl(ctx, "add-flow", sock, added)
		return err == nil, nil
	})
	if flows := dumpFlows(ctx, t, s); len(flows) != 1 || !sameFlow(flows[0], added) {
		t.Fatalf("the new br-int holds %q, want only %q", flows, added)
	}

	startNoRemovals(ctx, t, s, fs)
}
