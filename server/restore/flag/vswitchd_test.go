package flag

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/store"
)

// TestVswitchdHeld walks the decision the mirror writes by (VswitchdHeld):
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
	newFlag := func() *Flag {
		f, err := New(Config{Store: st.Releases(), RunDir: sb.RunDir(), OVSDB: sb.DBAddr(), AckTimeout: 10 * time.Second,
			RetryInterval: 500 * time.Millisecond, MaxHold: 30 * time.Second, Node: noNode{}, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	c, err := ovsconfig.Dial(ctx, sb.DBAddr(), ovsconfig.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	held := func(f *Flag) bool {
		t.Helper()
		h, known := f.VswitchdHeld()
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

	f := newFlag()
	f.ovsdb.Store(c)
	setFlag(false)
	if held(f) {
		t.Fatal("held with the flag off")
	}
	setFlag(true)
	if !held(f) {
		t.Fatal("not held: flag on, and this vswitchd was released by nobody")
	}

	// Seen running with the flag off and acknowledged: released, whatever
	// the flag reads afterwards (a re-arm).
	setFlag(false)
	f.mu.Lock()
	f.noteReleased(c)
	f.mu.Unlock()
	setFlag(true)
	if held(f) {
		t.Fatal("held after it was seen released and the flag re-armed")
	}

	// A later flowstated knows the release from the store.
	id := f.vswitchdIdentity()
	if id == "" {
		t.Fatal("no identity from the sandbox's pidfile")
	}
	f2 := newFlag()
	f2.ovsdb.Store(c)
	if !held(f2) {
		t.Fatal("a new engine without the store's record takes a re-armed vswitchd for released")
	}
	if err := st.Releases().SetVswitchd(id); err != nil {
		t.Fatal(err)
	}
	f3 := newFlag()
	f3.ovsdb.Store(c)
	if held(f3) {
		t.Fatal("held although the store records this vswitchd as released")
	}

	// A restarted vswitchd is another one: held.
	if err := sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !held(f3) {
		t.Fatal("a vswitchd restarted under the flag is not held")
	}

	// Without a pidfile nobody can tell: not held.
	pidfile := filepath.Join(sb.RunDir(), "ovs-vswitchd.pid")
	if err := os.Rename(pidfile, pidfile+".away"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Rename(pidfile+".away", pidfile) }()
	if held(f3) {
		t.Fatal("held without a pidfile")
	}
}

// noNode is a node with no managed bridge, an open gate and settled
// mirrors: TestVswitchdHeld never asks it.
type noNode struct{}

func (noNode) Bridges() []Bridge                     { return nil }
func (noNode) Excuse(string, string) bool            { return false }
func (noNode) GateOpened() time.Time                 { return time.Unix(1, 0) }
func (noNode) MirrorsSettled(*ovsconfig.Client) bool { return true }
func (noNode) Wedged() string                        { return "" }

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
