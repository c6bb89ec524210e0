package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds each test; the whole package runs in a few seconds.
const testTimeout = 20 * time.Second

// newSandbox starts a sandbox that is closed when the test ends. A missing
// OVS fails the test with InstallHint in the message.
func newSandbox(t *testing.T) (context.Context, *Sandbox) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	s, err := Start(ctx, Options{Logger: log})
	if err != nil {
		t.Fatalf("start sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close sandbox: %v", err)
		}
	})
	return ctx, s
}

// newBridge adds br0 with dummy ports p1 (ofport 1) and p2 (ofport 2).
func newBridge(ctx context.Context, t *testing.T, s *Sandbox) {
	t.Helper()
	if err := s.AddBridge(ctx, "br0"); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"p1", "p2"} {
		if err := s.AddPort(ctx, "br0", p, i+1); err != nil {
			t.Fatal(err)
		}
	}
}

// setForwardFlow replaces br0's flows with in_port=1,actions=output:2 only.
func setForwardFlow(ctx context.Context, t *testing.T, s *Sandbox) {
	t.Helper()
	if _, err := s.Ofctl(ctx, "del-flows", "br0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ofctl(ctx, "add-flow", "br0", "in_port=1,actions=output:2"); err != nil {
		t.Fatal(err)
	}
}

type counters struct{ p1rx, p2tx uint64 }

func readCounters(ctx context.Context, t *testing.T, s *Sandbox) counters {
	t.Helper()
	rx, _, err := s.PortStats(ctx, "br0", "p1")
	if err != nil {
		t.Fatal(err)
	}
	_, tx, err := s.PortStats(ctx, "br0", "p2")
	if err != nil {
		t.Fatal(err)
	}
	return counters{p1rx: rx, p2tx: tx}
}

// injectAndCount injects p on p1 and returns by how much p2's tx counter
// moved. It polls until p1 has counted the packet as received: vswitchd
// forwards in the same main-loop pass that receives, so by then p2's
// counter is final.
func injectAndCount(ctx context.Context, t *testing.T, s *Sandbox, p Packet) uint64 {
	t.Helper()
	before := readCounters(ctx, t, s)
	if err := s.InjectSYN(ctx, "br0", "p1", p); err != nil {
		t.Fatal(err)
	}
	for {
		after := readCounters(ctx, t, s)
		if after.p1rx > before.p1rx {
			return after.p2tx - before.p2tx
		}
		select {
		case <-ctx.Done():
			t.Fatalf("p1 never counted the injected packet: %v", ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

func wantFlows(ctx context.Context, t *testing.T, s *Sandbox, want ...string) {
	t.Helper()
	got, err := s.DumpFlows(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("flows of br0:\n got %q\nwant %q", got, want)
	}
}

const defaultFlow = "priority=0 actions=NORMAL"

func TestMissingBinaries(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	_, err := Start(ctx, Options{BinDir: t.TempDir()})
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), InstallHint) {
		t.Fatalf("Start with no binaries = %v, want an error containing %q", err, InstallHint)
	}
}

func TestStartBridgeDefaultFlow(t *testing.T) {
	ctx, s := newSandbox(t)
	newBridge(ctx, t, s)

	wantFlows(ctx, t, s, defaultFlow)
	if s.RunDir() != s.Dir() || s.DBAddr() != "unix:"+filepath.Join(s.Dir(), "db.sock") {
		t.Errorf("RunDir %q, DBAddr %q for dir %q", s.RunDir(), s.DBAddr(), s.Dir())
	}
	if !slices.Contains(s.Env(), "OVS_RUNDIR="+s.Dir()) {
		t.Errorf("Env lacks OVS_RUNDIR=%s", s.Dir())
	}
	if st, err := os.Stat(s.MgmtPath("br0")); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("management socket %s: %v", s.MgmtPath("br0"), err)
	}
	out, err := s.Vsctl(ctx, "--no-wait", "get", "Bridge", "br0", "datapath_type", "fail_mode")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out); !slices.Equal(got, []string{"dummy", "[]"}) {
		t.Errorf("datapath_type, fail_mode = %q, want dummy, [] (standalone)", got)
	}
	next, cur, err := s.Cfg(ctx)
	if err != nil || next != cur {
		t.Errorf("Cfg = %d, %d, %v; want cur_cfg caught up", next, cur, err)
	}
	if on, err := s.FlowRestoreWait(ctx); err != nil || on {
		t.Errorf("FlowRestoreWait = %v, %v; want false", on, err)
	}
	if err := s.AddPort(ctx, "br0", "p3", 0xff00); err == nil {
		t.Error("AddPort with reserved ofport 0xff00 succeeded")
	}
	if err := s.InjectSYN(ctx, "br1", "p1", Packet{}); err == nil {
		t.Error("InjectSYN on the wrong bridge succeeded")
	}
}

func TestInjectSYNForwarded(t *testing.T) {
	ctx, s := newSandbox(t)
	newBridge(ctx, t, s)
	setForwardFlow(ctx, t, s)
	for _, tc := range []struct {
		name string
		p    Packet
	}{
		{"defaults", Packet{}},
		{"ipv4", Packet{SrcIP: "192.168.1.1", DstIP: "192.168.1.2", SrcPort: 1234, DstPort: 443}},
		{"ipv6", Packet{SrcIP: "fd00::10", DstIP: "fd00::20"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := injectAndCount(ctx, t, s, tc.p); n != 1 {
				t.Fatalf("p2 sent %d packets, want 1", n)
			}
		})
	}
	_, p1tx, err := s.PortStats(ctx, "br0", "p1")
	if err != nil || p1tx != 0 {
		t.Errorf("p1 tx = %d, %v; want 0 (in_port=1 outputs to 2 only)", p1tx, err)
	}
}

// TestRestartFlowRestoreWait is the restart flowstate is built for:
// vswitchd restarted with the flag holds only the default flow, forwards
// nothing, keeps flows pushed meanwhile, and forwards through them once the
// flag is cleared with a next_cfg bump.
func TestRestartFlowRestoreWait(t *testing.T) {
	ctx, s := newSandbox(t)
	newBridge(ctx, t, s)
	setForwardFlow(ctx, t, s)
	oldPID := s.VswitchdPID()

	if err := s.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	if pid := s.VswitchdPID(); pid == 0 || pid == oldPID {
		t.Fatalf("pid after restart = %d (before %d)", pid, oldPID)
	}
	if on, err := s.FlowRestoreWait(ctx); err != nil || !on {
		t.Fatalf("FlowRestoreWait = %v, %v; want true", on, err)
	}
	wantFlows(ctx, t, s, defaultFlow)
	// NORMAL would flood the SYN to p2 if anything were switched.
	if n := injectAndCount(ctx, t, s, Packet{SrcPort: 1001}); n != 0 {
		t.Fatalf("during flow-restore-wait p2 sent %d packets, want 0", n)
	}

	setForwardFlow(ctx, t, s)
	if n := injectAndCount(ctx, t, s, Packet{SrcPort: 1002}); n != 0 {
		t.Fatalf("restored flows forwarded %d packets before the flag was cleared", n)
	}
	// Without --no-wait ovs-vsctl bumps next_cfg and returns once cur_cfg
	// caught up: vswitchd has read the cleared flag.
	if _, err := s.Vsctl(ctx, "remove", "Open_vSwitch", ".", "other_config", "flow-restore-wait"); err != nil {
		t.Fatal(err)
	}
	if n := injectAndCount(ctx, t, s, Packet{SrcPort: 1003}); n != 1 {
		t.Fatalf("after clearing the flag p2 sent %d packets, want 1", n)
	}
	wantFlows(ctx, t, s, "in_port=1 actions=output:2")
}

// TestRunningVswitchdIgnoresFlag pins down what the package documentation
// states: a vswitchd that runs with the flag false ignores a later
// flow-restore-wait=true, even after acknowledging it through cur_cfg, and
// honours it only at its next start.
func TestRunningVswitchdIgnoresFlag(t *testing.T) {
	ctx, s := newSandbox(t)
	newBridge(ctx, t, s)
	setForwardFlow(ctx, t, s)
	if n := injectAndCount(ctx, t, s, Packet{SrcPort: 2001}); n != 1 {
		t.Fatalf("p2 sent %d packets, want 1", n)
	}
	nextBefore, _, err := s.Cfg(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Vsctl(ctx, "set", "Open_vSwitch", ".", "other_config:flow-restore-wait=true"); err != nil {
		t.Fatal(err)
	}
	next, cur, err := s.Cfg(ctx)
	if err != nil || next != nextBefore+1 || cur != next {
		t.Fatalf("Cfg = %d, %d, %v; want next_cfg bumped to %d and acknowledged", next, cur, err, nextBefore+1)
	}
	// Drop the datapath flow cache so the next packet takes the upcall path
	// that flow-restore-wait would block.
	if _, err := s.Appctl(ctx, "dpctl/del-flows"); err != nil {
		t.Fatal(err)
	}
	if n := injectAndCount(ctx, t, s, Packet{SrcPort: 2002}); n != 1 {
		t.Fatalf("running vswitchd honoured the flag: p2 sent %d packets, want 1", n)
	}

	// The same database, read at start: now the flag holds traffic.
	if err := s.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if n := injectAndCount(ctx, t, s, Packet{SrcPort: 2003}); n != 0 {
		t.Fatalf("restarted vswitchd ignored the flag: p2 sent %d packets, want 0", n)
	}
}

func TestKillAndStart(t *testing.T) {
	ctx, s := newSandbox(t)
	newBridge(ctx, t, s)
	if err := s.KillVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if pid := s.VswitchdPID(); pid != 0 {
		t.Fatalf("VswitchdPID after kill = %d, want 0", pid)
	}
	// Like a real crash: the socket file stays, nobody answers.
	if _, err := os.Stat(s.MgmtPath("br0")); err != nil {
		t.Fatalf("stale management socket: %v", err)
	}
	if c, err := net.Dial("unix", s.MgmtPath("br0")); err == nil {
		c.Close()
		t.Fatal("management socket accepted after SIGKILL")
	}
	if err := s.KillVswitchd(ctx); err == nil {
		t.Fatal("second KillVswitchd succeeded")
	}

	if err := s.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	wantFlows(ctx, t, s, defaultFlow)
	if n := injectAndCount(ctx, t, s, Packet{}); n != 1 {
		t.Fatalf("NORMAL after restart: p2 sent %d packets, want 1 (flooded)", n)
	}
	if err := s.StartVswitchd(ctx); err == nil {
		t.Fatal("StartVswitchd while running succeeded")
	}
}

func TestFreezeThaw(t *testing.T) {
	ctx, s := newSandbox(t)
	newBridge(ctx, t, s)

	if err := s.FreezeVswitchd(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := s.DumpFlows(short, "br0")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DumpFlows on a frozen vswitchd = %v, want a deadline error", err)
	}
	if err := s.ThawVswitchd(); err != nil {
		t.Fatal(err)
	}
	wantFlows(ctx, t, s, defaultFlow)

	// A graceful stop of a frozen vswitchd thaws it first.
	if err := s.FreezeVswitchd(); err != nil {
		t.Fatal(err)
	}
	if err := s.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.MgmtPath("br0")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("management socket after graceful stop: %v, want it removed", err)
	}
	if err := s.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	wantFlows(ctx, t, s, defaultFlow)
}

func TestCloseStopsEverything(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	s, err := Start(ctx, Options{})
	if err != nil {
		t.Fatalf("start sandbox: %v", err)
	}
	if err := s.AddBridge(ctx, "br0"); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	pids := []int{s.ovsdb.pid(), s.vswitchd.pid()}
	s.mu.Unlock()
	if err := s.FreezeVswitchd(); err != nil { // Close must cope with a frozen vswitchd
		t.Fatal(err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir after Close: %v, want it removed", err)
	}
	for _, pid := range pids {
		// The sandbox reaped its children, so the pids are gone entirely.
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d after Close: %v, want ESRCH", pid, err)
		}
	}
	if err := s.StartVswitchd(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("StartVswitchd after Close = %v, want ErrClosed", err)
	}
}

func TestDumpGroupsMeters(t *testing.T) {
	ctx, s := newSandbox(t)
	newBridge(ctx, t, s)
	if _, err := s.Ofctl(ctx, "add-group", "br0", "group_id=1,type=all,bucket=output:1,bucket=output:2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ofctl(ctx, "add-meter", "br0", "meter=1,kbps,bands=type=drop,rate=100"); err != nil {
		t.Fatal(err)
	}
	groups, err := s.DumpGroups(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"group_id=1,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:1,actions=output:2"}; !slices.Equal(groups, want) {
		t.Errorf("groups = %q, want %q", groups, want)
	}
	meters, err := s.DumpMeters(ctx, "br0")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"meter=1 kbps bands= type=drop rate=100"}; !slices.Equal(meters, want) {
		t.Errorf("meters = %q, want %q", meters, want)
	}
}
