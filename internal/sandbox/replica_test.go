package sandbox

import (
	"strings"
	"testing"
	"time"
)

// TestReplica: a replica serves the sandbox's row, follows its changes,
// refuses writes, and one runs at a time; a closed one makes way for the
// next.
func TestReplica(t *testing.T) {
	ctx, s := newSandbox(t)
	r, err := s.StartReplica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	if _, err := s.StartReplica(ctx); err == nil || !strings.Contains(err.Error(), "already") {
		t.Fatalf("a second replica: %v, want refused", err)
	}
	if _, err := s.Vsctl(ctx, "--no-wait", "set", "Open_vSwitch", ".", "external_ids:replica-test=1"); err != nil {
		t.Fatal(err)
	}
	replicaVsctl := func(args ...string) (string, error) {
		return s.run(ctx, s.bin.vsctl, append([]string{"--db=" + r.DBAddr(), "--no-wait"}, args...)...)
	}
	for {
		out, err := replicaVsctl("get", "Open_vSwitch", ".", "external_ids:replica-test")
		if err == nil && strings.TrimSpace(out) == `"1"` {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the replica never saw the change: %q %v", out, err)
		case <-time.After(pollInterval):
		}
	}
	if _, err := replicaVsctl("set", "Open_vSwitch", ".", "external_ids:replica-test=2"); err == nil || !strings.Contains(err.Error(), "not allowed") {
		t.Fatalf("a write to the replica: %v, want OVSDB's refusal", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2, err := s.StartReplica(ctx)
	if err != nil {
		t.Fatalf("a replica after the first closed: %v", err)
	}
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
}
