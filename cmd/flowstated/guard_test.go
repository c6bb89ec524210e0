package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/guard"
)

// guardPipeline drops TCP to 10.0.0.99 and forwards the rest from p1 to p2.
// Under the default NORMAL flow a SYN from p1 floods to p2 as well, so "p2
// sent one more packet" means "the switch forwards".
var guardPipeline = []string{
	"table=0,priority=100,tcp,nw_dst=10.0.0.99,actions=drop",
	"table=0,priority=50,in_port=1,actions=output:2",
}

// built is a binary built once per test run.
type built struct {
	once sync.Once
	path string
	err  error
}

var flowstatedBuilt, flowctlBuilt built

// get builds the package pkg (relative to this one) into name once.
func (b *built) get(t *testing.T, name, pkg string) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", name+"-bin")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = &buildError{err: err, out: string(out)}
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// binary builds flowstated once per test run.
func binary(t *testing.T) string { return flowstatedBuilt.get(t, "flowstated", ".") }

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + e.out }

// node is a sandbox with br-int (ports p1, p2) and a flowstated binary run
// against it, started and signalled by the test.
type node struct {
	t       *testing.T
	sb      *sandbox.Sandbox
	dir     string
	sock    string
	lease   string
	args    []string
	bin     string // the flowstated binary; "" for binary(t)
	c       *client.Client
	cmd     *exec.Cmd
	waited  chan error
	logs    *syncBuffer
	stopped []string // logs of earlier runs
}

func newNode(ctx context.Context, t *testing.T, bridges []string, args ...string) *node {
	t.Helper()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, sb: sb, dir: sb.Dir()}
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			for i, l := range append(n.stopped, n.logs.String()) {
				t.Logf("flowstated run %d log:\n%s", i+1, l)
			}
			if b, err := os.ReadFile(n.lease + ".guard.log"); err == nil {
				t.Logf("guard log:\n%s", b)
			}
		}
		_ = sb.Close()
	})
	for _, br := range bridges {
		if err := sb.AddBridge(ctx, br); err != nil {
			t.Fatal(err)
		}
		for i, p := range []string{"p1", "p2"} {
			if err := sb.AddPort(ctx, br, br+"-"+p, i+1); err != nil {
				t.Fatal(err)
			}
		}
	}
	n.setBoot("boot-1")
	n.sock = filepath.Join(n.dir, "run", "fs.sock")
	n.lease = filepath.Join(n.dir, "run", "lease")
	n.args = append([]string{
		"--ovs-rundir", sb.RunDir(), "--ovsdb", sb.DBAddr(),
		"--db", filepath.Join(n.dir, "state", "fs.db"), "--listen", "unix://" + n.sock,
		"--boot-id-file", filepath.Join(n.dir, "boot_id"), "--metrics-listen", "",
		"--guard-lease", n.lease, "--ofp-echo-interval", "500ms", "--ofp-echo-timeout", "1s",
	}, args...)
	n.logs = &syncBuffer{}
	c, err := client.New("unix://" + n.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	n.c = c
	return n
}

func (n *node) setBoot(id string) {
	n.t.Helper()
	if err := os.WriteFile(filepath.Join(n.dir, "boot_id"), []byte(id+"\n"), 0o600); err != nil {
		n.t.Fatal(err)
	}
}

// start runs flowstated and waits until its API answers.
func (n *node) start(ctx context.Context) {
	n.t.Helper()
	n.startNoWait()
	n.poll(ctx, "flowstated serving", func() bool {
		_, err := n.c.Status(ctx)
		return err == nil
	})
}

// signal sends sig to flowstated; SIGKILL and SIGTERM wait for the exit.
func (n *node) signal(ctx context.Context, sig syscall.Signal) {
	n.t.Helper()
	if err := n.cmd.Process.Signal(sig); err != nil {
		n.t.Fatal(err)
	}
	if sig != syscall.SIGKILL && sig != syscall.SIGTERM {
		return
	}
	select {
	case err := <-n.waited:
		_ = err // a killed process exits with an error
	case <-ctx.Done():
		n.t.Fatalf("flowstated did not exit on %v", sig)
	}
}

// failFast is a client whose calls fail once flowstated is gone instead of
// waiting for its return, for writers a test cuts off by killing it.
func (n *node) failFast() *client.Client {
	n.t.Helper()
	c, err := client.New("unix://"+n.sock, client.WithFailFast())
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { c.Close() })
	return c
}

func (n *node) kill() {
	if n.cmd == nil || n.cmd.ProcessState != nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGCONT)
	_ = n.cmd.Process.Kill()
	n.t.Logf("flowstated killed: %v", <-n.waited)
}

func (n *node) poll(ctx context.Context, what string, cond func() bool) {
	n.t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			n.t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (n *node) flag(ctx context.Context) bool {
	n.t.Helper()
	on, err := n.sb.FlowRestoreWait(ctx)
	if err != nil {
		n.t.Fatal(err)
	}
	return on
}

func (n *node) tx(ctx context.Context, br, port string) uint64 {
	n.t.Helper()
	_, tx, err := n.sb.PortStats(ctx, br, br+"-"+port)
	if err != nil {
		n.t.Fatal(err)
	}
	return tx
}

// forwards injects a SYN at p1 of br and reports whether p2 sent it within
// wait.
func (n *node) forwards(ctx context.Context, br string, pkt sandbox.Packet, wait time.Duration) bool {
	n.t.Helper()
	tx0 := n.tx(ctx, br, "p2")
	if err := n.sb.InjectSYN(ctx, br, br+"-p1", pkt); err != nil {
		n.t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		if n.tx(ctx, br, "p2") > tx0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (n *node) dump(ctx context.Context, br string) []string {
	n.t.Helper()
	got, err := n.sb.DumpFlows(ctx, br)
	if err != nil {
		n.t.Fatal(err)
	}
	return got
}

// armedWithGuard waits until the pipeline is converged, the flag re-armed and
// a guard holds the lease lock.
func (n *node) armedWithGuard(ctx context.Context) {
	n.t.Helper()
	n.poll(ctx, "converged, flag re-armed, guard running", func() bool {
		st, err := n.c.Status(ctx)
		if err != nil || !st.Bridges[0].Converged {
			return false
		}
		present, err := guard.Present(n.lease)
		return err == nil && present && n.flag(ctx)
	})
}

// restartVswitchdPlainly crashes vswitchd and starts it the way a plain
// supervisor would: no helper, no hook. The flag armed in OVSDB holds it.
func (n *node) restartVswitchdPlainly(ctx context.Context) time.Time {
	n.t.Helper()
	if err := n.sb.KillVswitchd(ctx); err != nil {
		n.t.Fatal(err)
	}
	if err := n.sb.StartVswitchd(ctx); err != nil {
		n.t.Fatal(err)
	}
	return time.Now()
}

// TestGuardReleasesDeadFlowstated: flowstated is killed (SIGKILL) or frozen
// (SIGSTOP) with the flag armed, then vswitchd crashes and is started
// plainly. The guard releases the node within its grace, vswitchd forwards
// (with the default NORMAL flow: plain Open vSwitch), and once flowstated is
// back the pipeline is exact and the flag re-armed.
func TestGuardReleasesDeadFlowstated(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			const grace = 2 * time.Second
			n := newNode(ctx, t, []string{"br-int"}, "--bridge", "br-int", "--guard", "spawn", "--guard-grace", grace.String())
			n.start(ctx)
			es := make([]client.Entry, len(guardPipeline))
			for i, l := range guardPipeline {
				es[i] = client.FlowText(l)
			}
			if _, err := n.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, true, es...); err != nil {
				t.Fatal(err)
			}
			n.armedWithGuard(ctx)
			want := n.dump(ctx, "br-int")

			n.signal(ctx, sig)
			started := n.restartVswitchdPlainly(ctx)
			if n.forwards(ctx, "br-int", sandbox.Packet{}, 100*time.Millisecond) {
				t.Fatal("vswitchd forwarded right after its restart: it should be held until the guard's grace ends")
			}
			n.poll(ctx, "the guard releases the node", func() bool { return !n.flag(ctx) })
			var released time.Duration
			n.poll(ctx, "vswitchd forwards again", func() bool {
				released = time.Since(started)
				return n.forwards(ctx, "br-int", sandbox.Packet{SrcPort: 40100}, 200*time.Millisecond)
			})
			t.Logf("forwarding resumed %v after vswitchd started (grace %v)", released.Round(time.Millisecond), grace)
			if limit := grace + 5*time.Second; released > limit {
				t.Fatalf("forwarding resumed after %v, want within the grace plus a few seconds (%v)", released, limit)
			}
			if got := n.dump(ctx, "br-int"); len(got) != 1 || !strings.Contains(got[0], "actions=NORMAL") {
				t.Fatalf("released without flowstated, br-int holds %q; want plain OVS's NORMAL flow", got)
			}

			if sig == syscall.SIGSTOP {
				n.signal(ctx, syscall.SIGCONT)
			} else {
				n.start(ctx)
			}
			n.armedWithGuard(ctx)
			n.poll(ctx, "the pipeline is exact again", func() bool { return slices.Equal(n.dump(ctx, "br-int"), want) })
			if n.forwards(ctx, "br-int", sandbox.Packet{DstIP: "10.0.0.99"}, 200*time.Millisecond) {
				t.Fatal("the restored pipeline forwarded a SYN to the dropped address")
			}
		})
	}
}

// TestGateSurvivesRestarts: after a reboot, with two required modules of
// which one is ready, flowstated is restarted during the gate, gracefully
// (SIGTERM) and by a crash (SIGKILL). The gate holds through both, the flag
// stays armed and nothing is forwarded until the second module is ready.
func TestGateSurvivesRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n := newNode(ctx, t, []string{"br-int"}, "--bridge", "br-int", "--guard", "spawn", "--guard-grace", "30s",
		"--require-module", "pipeline", "--require-module", "pod", "--readiness-timeout", "5m")
	n.start(ctx)
	pipe := []client.Entry{client.FlowText("table=0,priority=50,in_port=1,actions=output:2")}
	pod := []client.Entry{client.FlowText("table=0,priority=60,tcp,nw_dst=10.0.0.2,actions=resubmit(,1)"),
		client.FlowText("table=1,priority=10,actions=output:2")}
	if _, err := n.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, true, pipe...); err != nil {
		t.Fatal(err)
	}
	if _, err := n.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pod"}, true, pod...); err != nil {
		t.Fatal(err)
	}
	n.armedWithGuard(ctx)

	// Reboot: a new boot id, and vswitchd comes back gated.
	n.signal(ctx, syscall.SIGKILL)
	n.setBoot("boot-2")
	n.restartVswitchdPlainly(ctx)
	if !n.flag(ctx) {
		t.Fatal("flag not armed before the reboot")
	}
	held := func(when string) {
		t.Helper()
		st, err := n.c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Gate.Open || !st.ColdStart {
			t.Fatalf("%s: gate %v, cold start %v; want a closed gate", when, st.Gate, st.ColdStart)
		}
		if !n.flag(ctx) {
			t.Fatalf("%s: flow-restore-wait was cleared during the gate", when)
		}
		if n.forwards(ctx, "br-int", sandbox.Packet{SrcPort: 41000}, 100*time.Millisecond) {
			t.Fatalf("%s: a SYN was forwarded while the gate is closed", when)
		}
	}
	n.start(ctx)
	held("cold start")
	if err := n.c.MarkReady(ctx, "pipeline"); err != nil {
		t.Fatal(err)
	}
	held("pipeline ready")

	n.signal(ctx, syscall.SIGTERM)
	if !n.flag(ctx) {
		t.Fatal("a graceful stop during the gate disarmed the flag under a waiting vswitchd")
	}
	n.start(ctx)
	held("after SIGTERM and restart")
	st, err := n.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w := st.Gate.WaitingFor; !slices.Equal(w, []string{"pod"}) {
		t.Fatalf("after restart the gate waits for %v, want [pod]", w)
	}

	n.signal(ctx, syscall.SIGKILL)
	n.start(ctx)
	held("after SIGKILL and restart")

	if err := n.c.MarkReady(ctx, "pod"); err != nil {
		t.Fatal(err)
	}
	n.poll(ctx, "gate open and node released", func() bool {
		st, err := n.c.Status(ctx)
		return err == nil && st.Gate.Open && st.Bridges[0].Converged
	})
	n.poll(ctx, "the pipeline forwards", func() bool {
		return n.forwards(ctx, "br-int", sandbox.Packet{SrcPort: 41100}, 200*time.Millisecond)
	})
	// The next restart in this boot is warm: the gate opened already.
	n.signal(ctx, syscall.SIGTERM)
	n.start(ctx)
	st, err = n.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Gate.Open || st.ColdStart {
		t.Fatalf("restart after the gate opened: gate %+v cold %v; want warm", st.Gate, st.ColdStart)
	}
}
