package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/guard"
)

// proofGrace is flowstated's --guard-grace in the proof tests.
const proofGrace = 2 * time.Second

// guardProc is a guard the test runs itself (an external guard, or one left
// from an earlier flowstated); it is killed when the test ends.
type guardProc struct {
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{}
}

func (n *node) runGuard(args ...string) *guardProc {
	n.t.Helper()
	g := &guardProc{logs: &syncBuffer{}, exited: make(chan struct{})}
	g.cmd = exec.Command(binary(n.t), append([]string{"guard", "--lease", n.lease}, args...)...)
	g.cmd.Stderr = g.logs
	if err := g.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	go func() { _ = g.cmd.Wait(); close(g.exited) }()
	n.t.Cleanup(func() {
		_ = g.cmd.Process.Signal(syscall.SIGCONT)
		_ = g.cmd.Process.Kill()
		<-g.exited
		if n.t.Failed() {
			n.t.Logf("guard %d log:\n%s", g.cmd.Process.Pid, g.logs.String())
		}
	})
	return g
}

// killAtEnd makes sure a guard flowstated spawned does not outlive the test
// (a frozen one would not exit by itself).
func (n *node) killAtEnd(pid int) {
	n.t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	})
}

func (n *node) status(ctx context.Context) *client.Status {
	n.t.Helper()
	st, err := n.c.Status(ctx)
	if err != nil {
		n.t.Fatal(err)
	}
	return st
}

func (n *node) syncPipeline(ctx context.Context) {
	n.t.Helper()
	es := make([]client.Entry, len(guardPipeline))
	for i, l := range guardPipeline {
		es[i] = client.FlowText(l)
	}
	if _, err := n.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, true, es...); err != nil {
		n.t.Fatal(err)
	}
}

// provenAndArmed waits until the pipeline is converged, the flag re-armed
// and status says a guard is proven; it returns that guard's pid.
func (n *node) provenAndArmed(ctx context.Context) int {
	n.t.Helper()
	var pid int
	n.poll(ctx, "converged, flag armed, guard proven", func() bool {
		st, err := n.c.Status(ctx)
		if err != nil || !st.Bridges[0].Converged || !st.Guard.Proven {
			return false
		}
		pid = st.Guard.PID
		return n.flag(ctx)
	})
	return pid
}

// unprovenAndDisarmed waits until status names field as the failing part of
// the guard's proof and the flag is cleared in OVSDB: what an operator must
// see before the node is left to the guard.
func (n *node) unprovenAndDisarmed(ctx context.Context, field string) *client.Status {
	n.t.Helper()
	var st *client.Status
	n.poll(ctx, "guard unproven ("+field+") and flag disarmed", func() bool {
		var err error
		st, err = n.c.Status(ctx)
		return err == nil && !st.Guard.Proven && st.Guard.UnprovenField == field && !st.FlowRestoreWait && !n.flag(ctx)
	})
	return st
}

// forwardsAfterPlainRestart kills flowstated, restarts vswitchd the way a
// plain supervisor would, and requires forwarding within flowstated's grace
// plus 5 s.
func (n *node) forwardsAfterPlainRestart(ctx context.Context) {
	n.t.Helper()
	n.signal(ctx, syscall.SIGKILL)
	started := n.restartVswitchdPlainly(ctx)
	limit := proofGrace + 5*time.Second
	dctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var port uint16 = 42000
	for {
		port++
		if n.forwards(ctx, "br-int", sandbox.Packet{SrcPort: port}, 200*time.Millisecond) {
			n.t.Logf("forwarding %v after vswitchd started (flowstated's grace %v)", time.Since(started).Round(time.Millisecond), proofGrace)
			return
		}
		if dctx.Err() != nil {
			n.t.Fatalf("vswitchd forwards nothing %v after its restart (flag %v): want within flowstated's grace plus 5 s", limit, n.flag(ctx))
		}
	}
}

// TestGuardProof is issue 21's "a guard that proves it can release": a guard
// that holds the lock but could not release this node, within flowstated's
// grace, makes flowstated disarm the flag and say why; then flowstated is
// killed and vswitchd restarted plainly, and the node forwards within
// flowstated's grace plus 5 s. A guard left from another OVSDB's flowstated
// steps aside, so flowstated's own guard protects the node.
func TestGuardProof(t *testing.T) {
	grace := []string{"--guard-grace", proofGrace.String()}
	t.Run("frozen", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		n := newNode(ctx, t, []string{"br-int"}, append([]string{"--bridge", "br-int", "--guard", "spawn"}, grace...)...)
		n.start(ctx)
		n.syncPipeline(ctx)
		pid := n.provenAndArmed(ctx)
		n.killAtEnd(pid)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		frozen := time.Now()
		st := n.unprovenAndDisarmed(ctx, guard.FieldHeartbeat)
		t.Logf("disarmed %v after the guard froze: %s", time.Since(frozen).Round(time.Millisecond), st.Guard.Reason)
		if !st.Guard.Running {
			t.Fatal("status says no guard holds the lock; the frozen one does")
		}
		n.forwardsAfterPlainRestart(ctx)
	})
	t.Run("wrong-ovsdb", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		n := newNode(ctx, t, []string{"br-int"}, append([]string{"--bridge", "br-int", "--guard", "external", "--guard-start-timeout", "500ms"}, grace...)...)
		g := n.runGuard("--ovsdb", "unix:"+filepath.Join(n.dir, "no-such-db.sock"), "--grace", proofGrace.String())
		n.start(ctx)
		n.syncPipeline(ctx)
		st := n.unprovenAndDisarmed(ctx, guard.FieldHeartbeat)
		if !st.Guard.Running || st.Guard.PID != 0 {
			t.Fatalf("guard running %v, pid %d: want the lock held and no heartbeat", st.Guard.Running, st.Guard.PID)
		}
		if holder := guard.Holder(n.lease); holder != g.cmd.Process.Pid {
			t.Fatalf("lock held by %d, want the misdirected guard %d", holder, g.cmd.Process.Pid)
		}
		n.forwardsAfterPlainRestart(ctx)
	})
	t.Run("other-ovsdb", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		other := otherSandbox(ctx, t)
		n := newNode(ctx, t, []string{"br-int"}, append([]string{"--bridge", "br-int", "--guard", "external", "--guard-start-timeout", "500ms"}, grace...)...)
		n.runGuard("--ovsdb", other.DBAddr(), "--grace", proofGrace.String())
		n.start(ctx)
		n.syncPipeline(ctx)
		st := n.unprovenAndDisarmed(ctx, guard.FieldOVSDB)
		if st.Guard.GuardOVSDB == "" || st.Guard.GuardOVSDB == st.Guard.OVSDB {
			t.Fatalf("status: guard's OVSDB %q, flowstated's %q: want two different identities", st.Guard.GuardOVSDB, st.Guard.OVSDB)
		}
		n.forwardsAfterPlainRestart(ctx)
	})
	t.Run("read-only-copy", func(t *testing.T) {
		// Issue 31: a replica of this node's database (ovsdb-server
		// --sync-from) has its _uuid and answers every read, but the
		// guard could never clear the flag there.
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		n := newNode(ctx, t, []string{"br-int"}, append([]string{"--bridge", "br-int", "--guard", "external", "--guard-start-timeout", "500ms"}, grace...)...)
		replica, err := n.sb.StartReplica(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = replica.Close() })
		n.runGuard("--ovsdb", replica.DBAddr(), "--grace", proofGrace.String())
		n.start(ctx)
		n.syncPipeline(ctx)
		st := n.unprovenAndDisarmed(ctx, guard.FieldWritable)
		if st.Guard.GuardOVSDB != st.Guard.OVSDB || !strings.Contains(st.Guard.Reason, replica.DBAddr()) {
			t.Fatalf("status: guard's OVSDB %q, flowstated's %q, reason %q: want one identity and the replica named", st.Guard.GuardOVSDB, st.Guard.OVSDB, st.Guard.Reason)
		}
		t.Logf("status: %s", st.Guard.Reason)
		// The guard container's readiness probe says the same.
		out, err := exec.CommandContext(ctx, binary(t), "guard", "probe", "--lease", n.lease, "--grace", proofGrace.String()).CombinedOutput()
		if err == nil || !strings.Contains(string(out), guard.FieldWritable) || !strings.Contains(string(out), replica.DBAddr()) {
			t.Fatalf("guard probe of the guard on the read-only copy: %v: %s; want a failure naming %s and the replica", err, out, guard.FieldWritable)
		}
		n.forwardsAfterPlainRestart(ctx)
	})
	t.Run("other-ovsdb-left-running", func(t *testing.T) {
		// A guard an earlier flowstated of another sandbox spawned, left
		// on the same lease path.
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		other := otherSandbox(ctx, t)
		n := newNode(ctx, t, []string{"br-int"}, append([]string{"--bridge", "br-int", "--guard", "spawn"}, grace...)...)
		left := n.runGuard("--ovsdb", other.DBAddr(), "--grace", proofGrace.String(), "--exit-when-idle")
		n.poll(ctx, "the left guard's heartbeat", func() bool {
			hb, err := guard.ReadHeartbeat(guard.HeartbeatPath(n.lease))
			return err == nil && hb.PID == left.cmd.Process.Pid
		})
		n.start(ctx)
		n.syncPipeline(ctx)
		select {
		case <-left.exited:
		case <-ctx.Done():
			t.Fatal("the guard of the other OVSDB did not step aside")
		}
		pid := n.provenAndArmed(ctx)
		n.killAtEnd(pid)
		st := n.status(ctx)
		if pid == left.cmd.Process.Pid || st.Guard.GuardOVSDB != st.Guard.OVSDB {
			t.Fatalf("proven guard pid %d (left one %d), OVSDB %q, flowstated's %q", pid, left.cmd.Process.Pid, st.Guard.GuardOVSDB, st.Guard.OVSDB)
		}
		n.forwardsAfterPlainRestart(ctx)
	})
	t.Run("killed-before-flowstated", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		n := newNode(ctx, t, []string{"br-int"}, append([]string{"--bridge", "br-int", "--guard", "spawn"}, grace...)...)
		n.start(ctx)
		n.syncPipeline(ctx)
		pid := n.provenAndArmed(ctx)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// flowstated dies 0.3 s after its guard (the OOM case).
		// By then it has disarmed, or a new guard of its own is proven.
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		st := n.status(ctx)
		if st.Guard.Proven && st.Guard.PID == pid {
			t.Fatalf("status still trusts the killed guard %d", pid)
		}
		if st.Guard.Proven {
			n.killAtEnd(st.Guard.PID)
		}
		t.Logf("0.3 s after the guard died: proven %v (pid %d), flag %v", st.Guard.Proven, st.Guard.PID, n.flag(ctx))
		n.forwardsAfterPlainRestart(ctx)
	})
	t.Run("longer-grace", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		n := newNode(ctx, t, []string{"br-int"}, append([]string{"--bridge", "br-int", "--guard", "external", "--guard-start-timeout", "500ms"}, grace...)...)
		n.runGuard("--ovsdb", n.sb.DBAddr(), "--grace", "45s")
		n.start(ctx)
		n.syncPipeline(ctx)
		st := n.unprovenAndDisarmed(ctx, guard.FieldGrace)
		if st.Guard.GuardGrace != 45*time.Second || !strings.Contains(st.Guard.Reason, "45s") {
			t.Fatalf("status: guard grace %v, reason %q; want 45s named", st.Guard.GuardGrace, st.Guard.Reason)
		}
		n.forwardsAfterPlainRestart(ctx)
	})
}

// otherSandbox starts a second OVS: another database at another path.
func otherSandbox(ctx context.Context, t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

// flowctlBinary builds flowctl once per test run.
func flowctlBinary(t *testing.T) string { return flowctlBuilt.get(t, "flowctl", "../flowctl") }

// TestRestartThenPrestart is `systemctl restart flowstated && ovs-restart`
// with no sleep in between: flowstated is started, and at once (without
// waiting for it to answer) prestart arms the flag, with a spawned guard
// and with an external guard started together with flowstated. vswitchd
// then restarts and the pipeline is back and forwarding, and flowstated
// logged no error along the way.
func TestRestartThenPrestart(t *testing.T) {
	for _, mode := range []string{"spawn", "external"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			n := newNode(ctx, t, []string{"br-int"}, "--bridge", "br-int", "--guard", mode, "--guard-grace", proofGrace.String())
			external := func() {
				if mode == "external" {
					n.runGuard("--ovsdb", n.sb.DBAddr(), "--grace", proofGrace.String())
				}
			}
			external()
			n.start(ctx)
			n.syncPipeline(ctx)
			n.provenAndArmed(ctx)
			n.signal(ctx, syscall.SIGTERM)
			// A guard outlives flowstated (spawned, or its own unit):
			// stop it too, so that the restart starts from nothing, as
			// at a node's boot or a pod's restart.
			_ = syscall.Kill(guard.Holder(n.lease), syscall.SIGKILL)
			n.poll(ctx, "the old guard gone", func() bool { p, _ := guard.Present(n.lease); return !p })

			// The restart: flowstated (and the external guard) started,
			// prestart at once.
			flowctl := flowctlBinary(t)
			external()
			started := time.Now()
			n.startNoWait()
			out, err := exec.CommandContext(ctx, flowctl, "--server", "unix://"+n.sock,
				"prestart", "--strict", "--ovsdb", n.sb.DBAddr()).CombinedOutput()
			if err != nil {
				t.Fatalf("prestart right after flowstated's start: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "armed") || !n.flag(ctx) {
				t.Fatalf("prestart: %s; flag %v, want armed", out, n.flag(ctx))
			}
			t.Logf("prestart armed the flag %v after flowstated's start", time.Since(started).Round(time.Millisecond))
			n.restartVswitchdPlainly(ctx)
			n.provenAndArmed(ctx)
			n.poll(ctx, "the pipeline forwards", func() bool {
				return n.forwards(ctx, "br-int", sandbox.Packet{SrcPort: 43000}, 200*time.Millisecond)
			})
			if n.forwards(ctx, "br-int", sandbox.Packet{DstIP: "10.0.0.99"}, 200*time.Millisecond) {
				t.Fatal("the restored pipeline forwarded a SYN to the dropped address")
			}
			if logs := n.logs.String(); strings.Contains(logs, "level=ERROR") {
				t.Fatalf("flowstated logged an error at a normal start:\n%s", logs)
			}
		})
	}
}

// startNoWait runs flowstated without waiting for its API.
func (n *node) startNoWait() {
	n.t.Helper()
	if n.cmd != nil {
		n.stopped = append(n.stopped, n.logs.String())
		n.logs = &syncBuffer{}
	}
	bin := n.bin
	if bin == "" {
		bin = binary(n.t)
	}
	n.cmd = exec.Command(bin, n.args...)
	n.cmd.Stderr = n.logs
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.waited = make(chan error, 1)
	go func(cmd *exec.Cmd, w chan error) { w <- cmd.Wait() }(n.cmd, n.waited)
}

// TestLeaseUnlinked is issue 21's "the lease is a path that is kept": the
// lease file is unlinked while flowstated runs. flowstated re-creates it
// within one renew interval, the guard keeps watching it, and over two
// graces the flag does not flap: it stays armed, behind the same guard.
func TestLeaseUnlinked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	n := newNode(ctx, t, []string{"br-int"}, "--bridge", "br-int", "--guard", "spawn", "--guard-grace", proofGrace.String())
	n.start(ctx)
	n.syncPipeline(ctx)
	pid := n.provenAndArmed(ctx)
	next0, _, err := n.sb.Cfg(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(n.lease); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	renew := min(max(proofGrace/5, 10*time.Millisecond), time.Second) // the keeper's renewInterval
	n.poll(ctx, "the lease re-created", func() bool { _, err := os.Stat(n.lease); return err == nil })
	back := time.Since(removed)
	t.Logf("lease re-created %v after it was unlinked (renew interval %v)", back.Round(time.Millisecond), renew)
	if back > renew+200*time.Millisecond {
		t.Fatalf("lease re-created after %v, want within one renew interval (%v)", back, renew)
	}
	// Watch for two graces: a guard that lost the lease would release the
	// node after one.
	for end := time.Now().Add(2 * proofGrace); time.Now().Before(end); {
		st := n.status(ctx)
		if !n.flag(ctx) || !st.Guard.Proven || st.Guard.PID != pid {
			t.Fatalf("after the lease was unlinked: flag %v, guard proven %v pid %d (was %d): the flag flapped", n.flag(ctx), st.Guard.Proven, st.Guard.PID, pid)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if next, _, err := n.sb.Cfg(ctx); err != nil || next != next0 {
		t.Fatalf("next_cfg %d -> %d (%v): the flag was cleared and re-armed in between", next0, next, err)
	}
	n.killAtEnd(pid)
}
