package ovsconfig

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// TestPidfileLocked: vswitchd's pidfile counts as running while the process
// lives (OVS keeps it locked), and not once it is killed, although a crash
// leaves the file behind with the same identity.
func TestPidfileLocked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	pidfile := filepath.Join(sb.RunDir(), "ovs-vswitchd.pid")
	id := VswitchdIdentity(sb.RunDir())
	if id == "" || !PidfileLocked(pidfile) {
		t.Fatalf("running vswitchd: identity %q, locked %v", id, PidfileLocked(pidfile))
	}
	if err := sb.KillVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if got := VswitchdIdentity(sb.RunDir()); got != id || PidfileLocked(pidfile) {
		t.Fatalf("killed vswitchd: identity %q (was %q), locked %v", got, id, PidfileLocked(pidfile))
	}
	if PidfileLocked(filepath.Join(sb.RunDir(), "no-such.pid")) {
		t.Fatal("a missing pidfile counts as running")
	}
}
