package ovsconfig

import (
	"context"
	"path/filepath"
	"strings"
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

// TestBridgeIdentity: a bridge's identity stays while flows and ports
// change, is "" while the bridge is missing, and differs once it is
// created again under the same vswitchd (a new, empty switch).
func TestBridgeIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	const br = "br-int"
	addBr := func() {
		t.Helper()
		if _, err := sb.Vsctl(ctx, "add-br", br, "--", "set", "Bridge", br, "datapath_type=dummy"); err != nil {
			t.Fatal(err)
		}
	}
	addBr()
	vs := VswitchdIdentity(sb.RunDir())
	id := BridgeIdentity(sb.RunDir(), br)
	if id == "" || !strings.HasPrefix(id, vs+" ") {
		t.Fatalf("running bridge: identity %q, vswitchd %q", id, vs)
	}
	if _, err := sb.Ofctl(ctx, "add-flow", br, "priority=5,actions=drop"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Vsctl(ctx, "add-port", br, "p1", "--", "set", "Interface", "p1", "type=dummy"); err != nil {
		t.Fatal(err)
	}
	if got := BridgeIdentity(sb.RunDir(), br); got != id {
		t.Fatalf("after a flow and a port: identity %q, was %q", got, id)
	}
	if _, err := sb.Vsctl(ctx, "del-br", br); err != nil {
		t.Fatal(err)
	}
	if got := BridgeIdentity(sb.RunDir(), br); got != "" {
		t.Fatalf("deleted bridge: identity %q", got)
	}
	addBr()
	if got := BridgeIdentity(sb.RunDir(), br); got == "" || got == id || VswitchdIdentity(sb.RunDir()) != vs {
		t.Fatalf("bridge created again under vswitchd %q: identity %q, was %q", vs, got, id)
	}
}
