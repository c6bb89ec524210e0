package restore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/store"
)

// TestVswitchdHeld walks the decision the mirror writes by (vswitchdHeld):
// the flag alone never makes a vswitchd held; the vswitchd its pidfile names
// must be one nobody released, and without a pidfile nothing is held.
func TestVswitchdHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatalf("start OVS sandbox (%s): %v", sandbox.InstallHint, err)
	}
	defer sb.Close()
	if err := sb.AddBridge(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(sb.Dir(), "fs.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	newEngine := func() *Engine {
		e, err := New(Config{Store: st, RunDir: sb.RunDir(), OVSDB: sb.DBAddr(), Bridges: []string{"br-int"},
			BootID: "b", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	c, err := ovsconfig.Dial(ctx, sb.DBAddr(), ovsconfig.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	held := func(e *Engine) bool {
		t.Helper()
		e.flagMu.Lock()
		defer e.flagMu.Unlock()
		h, known := e.vswitchdHeld()
		if !known {
			t.Fatal("vswitchdHeld: OVSDB cannot tell")
		}
		return h
	}
	setFlag := func(on bool) {
		t.Helper()
		if err := c.SetFlowRestoreWait(ctx, on, true); err != nil {
			t.Fatal(err)
		}
	}

	e := newEngine()
	e.ovsdb.Store(c)
	setFlag(false)
	if held(e) {
		t.Fatal("held with the flag off")
	}
	setFlag(true)
	if !held(e) {
		t.Fatal("not held: flag on, and this vswitchd was released by nobody")
	}

	// Seen running with the flag off and acknowledged: released, whatever
	// the flag reads afterwards (a re-arm).
	setFlag(false)
	e.flagMu.Lock()
	e.noteReleased(c)
	e.flagMu.Unlock()
	setFlag(true)
	if held(e) {
		t.Fatal("held after it was seen released and the flag re-armed")
	}

	// A later flowstated knows the release from the store.
	id := e.vswitchdIdentity()
	if id == "" {
		t.Fatal("no identity from the sandbox's pidfile")
	}
	e2 := newEngine()
	e2.ovsdb.Store(c)
	if !held(e2) {
		t.Fatal("a new engine without the store's record takes a re-armed vswitchd for released")
	}
	if err := st.Releases().SetVswitchd(id); err != nil {
		t.Fatal(err)
	}
	e3 := newEngine()
	e3.ovsdb.Store(c)
	if held(e3) {
		t.Fatal("held although the store records this vswitchd as released")
	}

	// A restarted vswitchd is another one: held.
	if err := sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !held(e3) {
		t.Fatal("a vswitchd restarted under the flag is not held")
	}

	// Without a pidfile nobody can tell: not held.
	pidfile := filepath.Join(sb.RunDir(), "ovs-vswitchd.pid")
	if err := os.Rename(pidfile, pidfile+".away"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Rename(pidfile+".away", pidfile) }()
	if held(e3) {
		t.Fatal("held without a pidfile")
	}
}
