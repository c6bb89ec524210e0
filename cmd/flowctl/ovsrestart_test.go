package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/internal/testenv"
)

// TestOvsRestart runs deploy/ovs-restart, with this test binary as its
// flowctl, against a sandbox and a flowstated binary that is up, too slow
// (frozen with SIGSTOP once vswitchd restarts), interrupted, and down. Each
// run must leave the node restored, or released with a banner.
func TestOvsRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	script, err := filepath.Abs("../../deploy/ovs-restart")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "flowstated")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../flowstated").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The sandbox and paths of testenv; flowstated itself runs as the
	// binary, since ovs-restart freezes and kills it.
	e := testenv.New(ctx, t)
	sb, sock := e.Sandbox, e.Sock
	fs := exec.Command(bin, "--ovs-rundir", sb.RunDir(), "--ovsdb", sb.DBAddr(), "--bridge", "br-int",
		"--db", e.Config.DBPath, "--listen", e.Config.Listen, "--boot-id-file", e.Config.BootIDFile,
		"--metrics-listen", "", "--guard", "off", "--ofp-echo-interval", "500ms", "--ofp-echo-timeout", "1s")
	logs := &lockedBuffer{}
	fs.Stderr = logs
	if err := fs.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = fs.Wait(); close(exited) }()
	defer func() {
		_ = fs.Process.Signal(syscall.SIGCONT)
		_ = fs.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("flowstated log:\n%s", logs.String())
		}
	}()

	pipeline := "table=0,priority=100,ip,actions=drop\ntable=0,priority=50,actions=normal\n"
	if _, stderr, code := flowctl(ctx, pipeline, "--server", sock, "add-flows", "--module", "pipeline", "-"); code != 0 {
		t.Fatalf("add-flows: %s", stderr)
	}
	converged := func() {
		t.Helper()
		if _, stderr, code := flowctl(ctx, "", "--server", sock, "--timeout", "30s", "wait", "--converged"); code != 0 {
			t.Fatalf("flowstated did not converge: %s", stderr)
		}
	}
	converged()

	rs := startRestarter(ctx, t, sb)
	ovsRestart := func(ctx context.Context, timeout string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "bash", script, "--server", sock, "--ovsdb", sb.DBAddr(), "--flowctl", self,
			"--restart-cmd", rs.command, "--timeout", timeout)
		cmd.Env = append(os.Environ(), asFlowctl+"=1")
		return cmd
	}
	exitStatus := func(err error) int {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	// released: the flag is cleared and the running vswitchd has read it.
	released := func() {
		t.Helper()
		if on, err := sb.FlowRestoreWait(ctx); err != nil || on {
			t.Fatalf("flow-restore-wait %v (%v) after the fallback, want cleared", on, err)
		}
		if next, cur, err := sb.Cfg(ctx); err != nil || next != cur {
			t.Fatalf("vswitchd has not read the clear: next_cfg %d cur_cfg %d (%v)", next, cur, err)
		}
	}

	freeze := func() error { return fs.Process.Signal(syscall.SIGSTOP) }

	t.Run("up", func(t *testing.T) {
		start := time.Now()
		out, err := ovsRestart(ctx, "30").CombinedOutput()
		if code := exitStatus(err); code != 0 || !strings.Contains(string(out), "done: ovs-vswitchd restarted") || rs.count.Load() != 1 {
			t.Fatalf("exit %d, %d restarts:\n%s", code, rs.count.Load(), out)
		}
		flows, err := sb.DumpFlows(ctx, "br-int")
		if err != nil || len(flows) != 2 {
			t.Fatalf("flows after the restart: %q %v", flows, err)
		}
		c, err := client.New("unix://" + sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		st, err := c.Status(ctx)
		if err != nil || !st.LastRelease.After(start) {
			t.Fatalf("flowstated released vswitchd at %v, want after %v (%v)", st.LastRelease, start, err)
		}
	})

	t.Run("too slow", func(t *testing.T) {
		rs.before.Store(&freeze)
		defer func() {
			rs.before.Store(nil)
			if err := fs.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			converged()
		}()
		out, err := ovsRestart(ctx, "2s").CombinedOutput()
		if code := exitStatus(err); code != 1 ||
			!strings.Contains(string(out), "ERROR: flowstated did not restore every bridge and release ovs-vswitchd within 2s") ||
			!strings.Contains(string(out), "flow-restore-wait cleared in ovsdb-server directly") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		released()
	})

	t.Run("interrupted", func(t *testing.T) {
		restarts := rs.count.Load()
		rs.before.Store(&freeze)
		defer func() {
			rs.before.Store(nil)
			if err := fs.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			converged()
		}()
		out := &lockedBuffer{}
		cmd := ovsRestart(ctx, "60")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Interrupt the wait that follows the restart.
		deadline := time.Now().Add(20 * time.Second)
		for rs.count.Load() == restarts || !strings.Contains(out.String(), "waiting:") {
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("no restart and wait within 20s:\n%s", out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if code := exitStatus(cmd.Wait()); code != 130 || !strings.Contains(out.String(), "ERROR: interrupted by SIGINT") {
			t.Fatalf("exit %d:\n%s", code, out.String())
		}
		released()
	})

	t.Run("down", func(t *testing.T) {
		restarts, pid := rs.count.Load(), sb.VswitchdPID()
		if err := fs.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-exited
		// Killed, flowstated left the flag armed (re-armed after the
		// last restore): no restart, and the flag cleared.
		if on, err := sb.FlowRestoreWait(ctx); err != nil || !on {
			t.Fatalf("flow-restore-wait %v (%v) after flowstated was killed, want armed", on, err)
		}
		out, err := ovsRestart(ctx, "30").CombinedOutput()
		if code := exitStatus(err); code != 1 || !strings.Contains(string(out), "ovs-vswitchd was NOT restarted") ||
			!strings.Contains(string(out), "NOT ARMED: cannot reach flowstated") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if rs.count.Load() != restarts || sb.VswitchdPID() != pid {
			t.Fatalf("vswitchd was restarted with flowstated down")
		}
		released()
	})
}

// restarter restarts the sandbox's vswitchd when ovs-restart's restart
// command asks, through two FIFOs: the command writes a line to req and
// exits with the status read from resp.
type restarter struct {
	command string
	count   atomic.Int32
	// before runs ahead of each restart when set.
	before atomic.Pointer[func() error]
}

func startRestarter(ctx context.Context, t *testing.T, sb *sandbox.Sandbox) *restarter {
	t.Helper()
	req, resp := filepath.Join(sb.Dir(), "restart.req"), filepath.Join(sb.Dir(), "restart.resp")
	for _, p := range []string{req, resp} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// O_RDWR: opening does not wait for the other end, and each FIFO
	// stays open between restarts.
	rf, err := os.OpenFile(req, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	wf, err := os.OpenFile(resp, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &restarter{command: fmt.Sprintf(`echo restart >'%s' && read -r rc <'%s' && exit "$rc"`, req, resp)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(rf)
		for sc.Scan() {
			rc := 0
			if fn := r.before.Load(); fn != nil {
				if err := (*fn)(); err != nil {
					t.Errorf("before restart: %v", err)
					rc = 1
				}
			}
			if err := sb.StopVswitchd(ctx); err != nil {
				t.Errorf("stop vswitchd: %v", err)
				rc = 1
			} else if err := sb.StartVswitchd(ctx); err != nil {
				t.Errorf("start vswitchd: %v", err)
				rc = 1
			}
			r.count.Add(1)
			if _, err := fmt.Fprintln(wf, rc); err != nil {
				t.Errorf("answer the restart command: %v", err)
			}
		}
	}()
	t.Cleanup(func() {
		_ = rf.Close() // ends the scanner
		wg.Wait()
		_ = wf.Close()
	})
	return r
}
