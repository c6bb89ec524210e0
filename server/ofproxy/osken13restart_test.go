package ofproxy_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/testenv"
)

// TestOSKen13LeftAloneAcrossRestart: the OpenFlow 1.3 os-ken app of
// TestOSKen13LeftAlone installs its meter, group and two flows through the
// proxy of the flowstated binary, then stops. flowstated is SIGKILLed and
// started again: its start-up replay and the audits after it leave the
// app's four entries on the switch (the set was stored and loaded before
// the replay), status names them left alone, and a NORMAL flow added by
// hand meanwhile, which nobody declared, is deleted as before. flowstated
// is killed again and vswitchd restarted while it is down: the stored set
// belonged to the previous vswitchd and is dropped, so the same identities
// added again by hand, and a NORMAL flow, are deleted like any undeclared
// entry, and nothing is left alone.
func TestOSKen13LeftAloneAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	osken, err := exec.LookPath("osken-manager")
	if err != nil {
		t.Fatal("osken-manager not found: apt-get update && apt-get install -y python3-os-ken")
	}
	bin := filepath.Join(t.TempDir(), "flowstated")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/flowstated").CombinedOutput(); err != nil {
		t.Fatalf("go build flowstated: %v\n%s", err, out)
	}
	const bridge, module = "br0", "osken13"
	e := testenv.New(ctx, t, testenv.Bridges(bridge))
	s := e.Sandbox
	if _, err := s.Vsctl(ctx, "set", "Bridge", bridge, "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	addr := freeTCP(t)
	c := e.Config
	args := []string{
		"--ovs-rundir", c.RunDir, "--ovsdb", c.OVSDB, "--bridge", bridge,
		"--db", c.DBPath, "--listen", c.Listen, "--boot-id-file", c.BootIDFile,
		"--metrics-listen", "", "--guard", "off", "--rearm-flow-restore-wait=false",
		"--ofp-echo-interval", "1s", "--ofp-echo-timeout", "2s", "--audit-interval", "200ms",
		"--openflow-proxy", module + "=" + bridge, "--openflow-proxy-dir", c.ProxyDir,
		"--openflow-proxy-tcp", bridge + "=" + addr,
	}
	converged := func(fs *binProc, what string) {
		t.Helper()
		poll(ctx, t, what, func() (bool, error) {
			fs.alive(t)
			st, err := e.Client.Status(ctx)
			return err == nil && st.Gate.Open && len(st.Bridges) == 1 && st.Bridges[0].Converged, nil
		})
	}
	fs := startBin(t, bin, args)
	converged(fs, "the flowstated binary converged")
	declared := "table=0,priority=50,in_port=2,tcp,actions=drop"
	if _, err := e.Client.Put(ctx, client.Module{Bridge: bridge, Name: "pipeline"}, client.FlowText(declared)); err != nil {
		t.Fatal(err)
	}

	app, err := filepath.Abs(filepath.Join("testdata", "osken_of13.py"))
	if err != nil {
		t.Fatal(err)
	}
	logf := filepath.Join(t.TempDir(), "osken.log")
	cmd := exec.Command(osken, "--ofp-switch-address-list", addr, "--ofp-switch-connect-interval", "1",
		"--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", "0", "--log-file", logf, app)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopApp := sync.OnceFunc(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	t.Cleanup(stopApp)
	flows := func() []string {
		fl, err := s.DumpFlows(ctx, bridge)
		if err != nil {
			t.Fatal(err)
		}
		return fl
	}
	count := func(what string, dump func(context.Context, string) ([]string, error)) int {
		got, err := dump(ctx, bridge)
		if err != nil {
			t.Fatal(err)
		}
		if what == "" {
			return len(got)
		}
		n := 0
		for _, f := range got {
			if strings.Contains(f, what) {
				n++
			}
		}
		return n
	}
	appEntries := func() (nFlows, nGroups, nMeters int) {
		return count("cookie=0x130", s.DumpFlows), count("", s.DumpGroups), count("", s.DumpMeters)
	}
	leftAlone := func(want int, what string) {
		t.Helper()
		poll(ctx, t, what, func() (bool, error) {
			st, err := e.Client.Status(ctx)
			return err == nil && len(st.Bridges) == 1 && st.Bridges[0].LeftAlone == want && !st.Bridges[0].LeftAloneAll, nil
		})
	}
	hasNormal := func(fl []string) bool {
		return slices.ContainsFunc(fl, func(f string) bool { return strings.Contains(f, "NORMAL") })
	}
	hasDeclared := func(fl []string) bool {
		return slices.ContainsFunc(fl, func(f string) bool { return strings.Contains(f, "priority=50,tcp,in_port=2") })
	}
	poll(ctx, t, "the OpenFlow 1.3 app's entries on br0", func() (bool, error) {
		f, g, m := appEntries()
		return f == 2 && g == 1 && m == 1, nil
	})
	leftAlone(4, "an audit counting the app's four entries as left alone")

	// The app stops (it would reinstall on reconnect), and a stranger's
	// flow appears that nobody declared.
	stopApp()
	if _, err := s.Ofctl(ctx, "add-flow", bridge, "priority=0,actions=NORMAL"); err != nil {
		t.Fatal(err)
	}
	fs.kill(ctx, t)
	fs = startBin(t, bin, args)
	converged(fs, "the restarted flowstated binary converged")
	audited := time.Now().Add(time.Second)
	poll(ctx, t, "a second of audits", func() (bool, error) { return time.Now().After(audited), nil })
	fl := flows()
	if f, g, m := appEntries(); f != 2 || g != 1 || m != 1 || hasNormal(fl) || !hasDeclared(fl) {
		t.Fatalf("br0 after flowstated was killed and restarted: %d flows, %d groups, %d meters of the app's 2, 1, 1; want them, the declared flow, and no NORMAL:\n%s",
			f, g, m, strings.Join(fl, "\n"))
	}
	leftAlone(4, "status naming the app's four entries left alone after the restart")

	// flowstated killed again, and vswitchd restarted (held) while it is
	// down: the stored set belongs to the previous vswitchd.
	fs.kill(ctx, t)
	if err := s.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	fs = startBin(t, bin, args)
	poll(ctx, t, "the restarted vswitchd restored and released", func() (bool, error) {
		fs.alive(t)
		on, err := s.FlowRestoreWait(ctx)
		return err == nil && !on && hasDeclared(flows()), nil
	})
	for _, f := range []string{"cookie=0x1300,priority=100,in_port=1,actions=drop", "priority=0,actions=NORMAL",
		"cookie=0x1301,priority=200,ip,in_port=2,nw_dst=10.13.0.1,actions=output:1"} {
		if _, err := s.Ofctl(ctx, "add-flow", bridge, f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Ofctl(ctx, "-O", "OpenFlow15", "add-group", bridge, "group_id=13,type=all,bucket=output:2"); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the audits deleting the same identities under the new vswitchd", func() (bool, error) {
		fl := flows()
		f, g, _ := appEntries()
		return f == 0 && g == 0 && !hasNormal(fl) && hasDeclared(fl), nil
	})
	leftAlone(0, "nothing left alone after the vswitchd restart")
	fs.alive(t)
}

// freeTCP returns a loopback TCP address no one listens on now.
func freeTCP(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// binProc is the flowstated binary running as a child.
type binProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	out  *syncBuf
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startBin starts bin with args, killed at cleanup; its output goes to the
// test log when the test fails.
func startBin(t *testing.T, bin string, args []string) *binProc {
	t.Helper()
	p := &binProc{cmd: exec.Command(bin, args...), done: make(chan struct{}), out: &syncBuf{}}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("flowstated (pid %d) output:\n%s", p.cmd.Process.Pid, p.out.String())
		}
	})
	return p
}

// kill sends SIGKILL and waits for the exit.
func (p *binProc) kill(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		var ee *exec.ExitError
		if !errors.As(p.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("flowstated exited with %v, want killed by SIGKILL", p.err)
		}
	case <-ctx.Done():
		t.Fatal("flowstated did not exit on SIGKILL")
	}
}

// alive fails the test if the child has exited.
func (p *binProc) alive(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("flowstated exited: %v\n%s", p.err, p.out.String())
	default:
	}
}
