package sandbox

import (
	"strings"
	"testing"
)

// TestRestartOVSDB: the database survives an ovsdb-server restart, and
// vswitchd reconnects: a change made afterwards without --no-wait (which
// waits for vswitchd to apply it) completes.
func TestRestartOVSDB(t *testing.T) {
	ctx, s := newSandbox(t)
	newBridge(ctx, t, s)
	pid := s.VswitchdPID()
	if err := s.RestartOVSDB(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := s.Vsctl(ctx, "list-br")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "br0" {
		t.Fatalf("after the restart the database lists bridges %q, want br0", out)
	}
	if _, err := s.Vsctl(ctx, "set", "bridge", "br0", "other_config:chaos=1"); err != nil {
		t.Fatalf("vswitchd did not apply a change after ovsdb-server restarted: %v", err)
	}
	if got := s.VswitchdPID(); got != pid || got == 0 {
		t.Fatalf("vswitchd pid %d -> %d across an ovsdb-server restart", pid, got)
	}
}
