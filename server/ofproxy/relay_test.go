package ofproxy_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// TestGuardRelaysWhileFlowstatedAway: the proxy is the proxied controller's
// only path to its bridge, so the spawned guard holds the proxy's socket
// with flowstated and relays it while flowstated is away. With the flowstated
// binary (--openflow-proxy ovn=br-int, --guard=spawn) and a real
// ovn-controller through the proxy:
//
//  1. flowstated is SIGKILLed and stays away; its guard releases the node.
//  2. vswitchd restarts plainly and a logical port is bound on br-int
//     meanwhile. Within 25 s of vswitchd's start, ovn-controller, reconnected
//     through the guard, has programmed br-int: a SYN to the new port
//     reaches it through OVN's pipeline (br-int is fail_mode=secure: without
//     flows nothing is forwarded).
//  3. flowstated started again takes the socket over from the guard, the
//     controller reconnects through it, and its store holds the controller's
//     current state: the new port's flows, a clean diff.
func TestGuardRelaysWhileFlowstatedAway(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "flowstated")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/flowstate-io/flowstate/cmd/flowstated").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	addIntegrationBridge(ctx, t, s)
	fs := newFlowstatedProc(t, bin, s)

	fs.start(ctx, t)
	o, err := s.StartOVN(ctx)
	if err != nil {
		t.Fatalf("start OVN: %v", err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("close OVN: %v", err)
		}
	})
	if err := o.StartController(ctx, fs.proxyDir); err != nil {
		t.Fatal(err)
	}
	topo, err := o.BuildTopology(ctx, pktTopology)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Sync(ctx); err != nil {
		t.Fatalf("ovn-nbctl --wait=hv sync through flowstated: %v", err)
	}
	fs.waitConverged(ctx, t)
	src := topo.Ports[1] // p0-1: no ACL covers its traffic to port 80
	poll(ctx, t, "forwarding through flowstated's proxy", func() (bool, error) {
		return forwards(ctx, s, src, topo.Ports[2].Name, topo.Ports[2].MAC, topo.Ports[2].IP)
	})

	// 1. Away: SIGKILL, and the guard's release after its grace.
	fs.kill(t)
	poll(ctx, t, "the guard's release (flow-restore-wait cleared)", func() (bool, error) {
		on, err := s.FlowRestoreWait(ctx)
		return err == nil && !on, err
	})

	// 2. A plain vswitchd restart, a new port bound meanwhile.
	if err := s.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	const port, mac, ip, ofport = "pnew", "0a:00:00:00:00:99", "10.0.0.99", 99
	if _, err := o.Nbctl(ctx, "lsp-add", "sw0", port, "--", "lsp-set-addresses", port, mac+" "+ip); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Vsctl(ctx, "--no-wait", "add-port", sandbox.OVNBridge, port, "--", "set", "Interface", port, "type=dummy",
		"ofport_request="+strconv.Itoa(ofport), "external_ids:iface-id="+port); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if err := s.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	bound, cancelBound := context.WithDeadline(ctx, started.Add(25*time.Second))
	defer cancelBound()
	for {
		ok, err := forwards(bound, s, src, port, mac, ip)
		if ok {
			break
		}
		if bound.Err() != nil {
			t.Fatalf("25 s after vswitchd started with flowstated away, a SYN from %s does not reach the new port %s (last error %v); br-int holds %d flows\nguard log:\n%s\novn-controller log:\n%s",
				src.Name, port, err, len(dumpFlows(ctx, t, s)), fs.guardLog(), tail(o.ControllerLog()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("br-int forwards to the new port through ovn-controller's pipeline %v after vswitchd started, flowstated away", time.Since(started).Round(time.Millisecond))
	portFlow := "in_port=" + strconv.Itoa(ofport)
	if !slices.ContainsFunc(dumpFlows(ctx, t, s), func(f string) bool { return strings.Contains(f, portFlow) }) {
		t.Fatalf("br-int forwards to %s but holds no flow with %s", port, portFlow)
	}
	if !strings.Contains(fs.guardLog(), "relaying") {
		t.Errorf("the guard did not log its relaying:\n%s", fs.guardLog())
	}

	// 3. Back: flowstated takes the socket over and learns what the
	// controller installed meanwhile.
	fs.start(ctx, t)
	if !strings.Contains(fs.logs.String(), "taken over from the guard") {
		t.Errorf("flowstated did not take the proxy socket over from the guard")
	}
	poll(ctx, t, "the new port's flows recorded as module ovn's", func() (bool, error) {
		stored, err := fs.c.List(ctx, client.Filter{Bridge: sandbox.OVNBridge, Module: ovnModule})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(stored, func(e client.StoredEntry) bool { return strings.Contains(e.Text, portFlow) }), nil
	})
	fs.waitConverged(ctx, t)
	// The store holds them from flowstated's first replay on
	// (TestGuardRelayLearnedAtReturn); the controller reconnects after its
	// backoff.
	poll(ctx, t, "ovn-controller's reinstall through flowstated's proxy", func() (bool, error) {
		st, err := fs.c.Status(ctx)
		return err == nil && len(st.Proxies) == 1 && st.Proxies[0].Connections >= 1 && !st.Proxies[0].LastInstall.IsZero(), err
	})
	poll(ctx, t, "a clean diff once the controller's reinstall is complete", func() (bool, error) {
		changes, err := fs.c.Diff(ctx, sandbox.OVNBridge)
		return err == nil && len(changes) == 0, err
	})
	if ok, err := forwards(ctx, s, src, port, mac, ip); !ok {
		t.Errorf("br-int no longer forwards to %s after flowstated came back (%v)", port, err)
	}
}

// forwards injects a SYN from src to the port dst (mac, ip) and reports
// whether dst sent a packet more.
func forwards(ctx context.Context, s *sandbox.Sandbox, src sandbox.OVNPort, dst, mac, ip string) (bool, error) {
	_, tx0, err := s.PortStats(ctx, sandbox.OVNBridge, dst)
	if err != nil {
		return false, err
	}
	syn := sandbox.Packet{SrcMAC: src.MAC, DstMAC: mac, SrcIP: src.IP, DstIP: ip, DstPort: 80}
	if err := s.InjectSYN(ctx, sandbox.OVNBridge, src.Name, syn); err != nil {
		return false, err
	}
	_, tx1, err := s.PortStats(ctx, sandbox.OVNBridge, dst)
	return err == nil && tx1 > tx0, err
}

func dumpFlows(ctx context.Context, t *testing.T, s *sandbox.Sandbox) []string {
	t.Helper()
	flows, err := s.DumpFlows(ctx, sandbox.OVNBridge)
	if err != nil {
		t.Fatal(err)
	}
	return flows
}

// flowstatedProc is the flowstated binary run against a sandbox with the
// proxy of br-int and a spawned guard.
type flowstatedProc struct {
	bin, dir, proxyDir, lease, sock string
	s                               *sandbox.Sandbox
	c                               *client.Client
	cmd                             *exec.Cmd
	waited                          chan error
	logs                            *lockedBuffer
}

func newFlowstatedProc(t *testing.T, bin string, s *sandbox.Sandbox) *flowstatedProc {
	t.Helper()
	dir := s.Dir()
	f := &flowstatedProc{bin: bin, dir: dir, s: s, proxyDir: filepath.Join(dir, "of"), lease: filepath.Join(dir, "run", "lease"),
		sock: filepath.Join(dir, "run", "fs.sock"), logs: &lockedBuffer{}}
	if err := os.WriteFile(filepath.Join(dir, "boot_id"), []byte("boot-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := client.New("unix://" + f.sock)
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	t.Cleanup(func() {
		_ = c.Close()
		if f.cmd != nil && f.cmd.ProcessState == nil {
			_ = f.cmd.Process.Kill()
			t.Logf("flowstated killed at the end: %v", <-f.waited)
		}
		if t.Failed() {
			t.Logf("flowstated log:\n%s\nguard log:\n%s", f.logs.String(), f.guardLog())
		}
	})
	return f
}

func (f *flowstatedProc) start(ctx context.Context, t *testing.T) {
	t.Helper()
	cmd := exec.Command(f.bin,
		"--ovs-rundir", f.s.RunDir(), "--ovsdb", f.s.DBAddr(), "--bridge", sandbox.OVNBridge,
		"--db", filepath.Join(f.dir, "state", "fs.db"), "--listen", "unix://"+f.sock,
		"--boot-id-file", filepath.Join(f.dir, "boot_id"), "--metrics-listen", "",
		"--guard-lease", f.lease, "--guard-grace", "2s",
		"--ofp-echo-interval", "500ms", "--ofp-echo-timeout", "1s",
		"--openflow-proxy", ovnModule+"="+sandbox.OVNBridge, "--openflow-proxy-dir", f.proxyDir)
	cmd.Stderr = f.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.cmd, f.waited = cmd, make(chan error, 1)
	go func() { f.waited <- cmd.Wait() }()
	poll(ctx, t, "flowstated serving", func() (bool, error) {
		select {
		case err := <-f.waited:
			f.waited <- err
			t.Fatalf("flowstated exited: %v\n%s", err, f.logs.String())
		default:
		}
		_, err := f.c.Status(ctx)
		return err == nil, nil
	})
}

func (f *flowstatedProc) kill(t *testing.T) {
	t.Helper()
	if err := f.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("flowstated killed: %v", <-f.waited)
}

func (f *flowstatedProc) waitConverged(ctx context.Context, t *testing.T) {
	t.Helper()
	poll(ctx, t, "br-int converged", func() (bool, error) {
		st, err := f.c.Status(ctx)
		if err != nil {
			return false, nil
		}
		return len(st.Bridges) == 1 && st.Bridges[0].Converged, nil
	})
}

func (f *flowstatedProc) guardLog() string {
	b, _ := os.ReadFile(f.lease + ".guard.log")
	return string(b)
}

// lockedBuffer is a bytes.Buffer the child's output and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
