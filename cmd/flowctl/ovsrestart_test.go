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
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	script, err := filepath.Abs("../../deploy/ovs-restart")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := flowstatedBinary(ctx, t)
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
	ovsRestart := func(ctx context.Context, timeout string, extra ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "bash", append([]string{script, "--server", sock, "--ovsdb", sb.DBAddr(), "--flowctl", self,
			"--ovs-rundir", sb.RunDir(), "--restart-cmd", rs.command, "--timeout", timeout}, extra...)...)
		cmd.Env = append(os.Environ(), asFlowctl+"=1")
		// A group of its own, as a terminal gives a job: ^C is a SIGINT
		// to the group.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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
		// Interrupted during the release that follows the timeout (SIGINT
		// to the group, as a terminal's ^C): the release is finished.
		buf := &lockedBuffer{}
		cmd := ovsRestart(ctx, "2s")
		cmd.Stdout, cmd.Stderr = buf, buf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(buf.String(), "checking once more whether flowstated has restored every bridge") {
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("no release within 30s:\n%s", buf.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		code, out := exitStatus(cmd.Wait()), buf.String()
		if code != 1 ||
			!strings.Contains(out, "SIGINT: releasing first, so that the node is not left held") ||
			!strings.Contains(out, "ERROR: flowstated did not restore every bridge and release ovs-vswitchd within 2s") ||
			!strings.Contains(out, "flow-restore-wait cleared in ovsdb-server directly") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		released()
	})

	// Interrupted during the wait, then twice more during the release that
	// follows (SIGTERM to the script, SIGINT to its group as a terminal's
	// ^C): the release is finished, not cut short.
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
		for !strings.Contains(out.String(), "checking once more whether flowstated has restored every bridge") {
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("no release after the interrupt:\n%s", out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		code := exitStatus(cmd.Wait())
		t.Logf("ovs-restart said:\n%s", out.String())
		for _, want := range []string{
			"ERROR: interrupted by SIGINT while waiting for flowstated to restore (the restart command had ended, exit 0)",
			"ERROR: ovs-vswitchd is running (pid ",
			"ERROR: flow-restore-wait is cleared, and ovs-vswitchd has read it",
		} {
			if code != 130 || !strings.Contains(out.String(), want) {
				t.Fatalf("exit %d, no %q:\n%s", code, want, out.String())
			}
		}
		released()
	})

	// Interrupted at each step of the stop-then-start restart command: the
	// command runs to its end, vswitchd runs afterwards, and the node is
	// restored (flowstated up) or released (flowstated frozen), with a
	// banner that says so. A second interrupt stops the command; vswitchd
	// is then started with --start-cmd, or, without one, the banner says
	// it is down.
	interrupt := func(t *testing.T, extra []string, sigs map[string]syscall.Signal, group, frozen bool) (string, int) {
		t.Helper()
		cmd := ovsRestart(ctx, "30", extra...)
		out := &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		// logged polls until the script has taken the n-th interrupt, so
		// that it lands within the step.
		n := 0
		var pid atomic.Int32
		logged := func(step string) {
			n++
			want := []string{"letting the restart command finish", "again: stopping the restart command"}[min(n, 2)-1]
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(out.String(), want) {
				if time.Now().After(deadline) {
					t.Errorf("no %q within 10s of the interrupt at %s:\n%s", want, step, out.String())
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		at := func(step string) {
			sig, ok := sigs[step]
			if !ok {
				return
			}
			delete(sigs, step)
			if frozen {
				if err := freeze(); err != nil {
					t.Error(err)
				}
			}
			// Started before the command's first step; the pid comes
			// through an atomic, the FIFO being no synchronisation Go sees.
			p := int(pid.Load())
			if group {
				p = -p
			}
			if err := syscall.Kill(p, sig); err != nil {
				t.Error(err)
				return
			}
			logged(step)
		}
		rs.at.Store(&at)
		defer rs.at.Store(nil)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid.Store(int32(cmd.Process.Pid))
		code := exitStatus(cmd.Wait())
		return out.String(), code
	}
	restoredOrReleased := func(t *testing.T, out string, begin time.Time, frozen bool) {
		t.Helper()
		t.Logf("ovs-restart said:\n%s", out)
		if sb.VswitchdPID() == 0 {
			t.Fatalf("vswitchd is down:\n%s", out)
		}
		if strings.Contains(out, "flowstated has restored every bridge and released ovs-vswitchd after all") {
			c, err := client.New("unix://" + sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			st, err := c.Status(ctx)
			if err != nil || st.LastRelease.Before(begin) || len(st.Pending()) > 0 {
				t.Fatalf("restored after all, says ovs-restart; status: released %v (want after %v), pending %v, %v\n%s",
					st.LastRelease, begin, st.Pending(), err, out)
			}
			if frozen {
				t.Fatalf("restored by a frozen flowstated:\n%s", out)
			}
			return
		}
		// The banner says vswitchd runs and was released; with flowstated
		// frozen nobody re-arms the flag, so it is cleared and read now.
		if !strings.Contains(out, "ERROR: ovs-vswitchd is running (pid ") ||
			!strings.Contains(out, "ERROR: flow-restore-wait is cleared, and ovs-vswitchd has read it") ||
			!strings.Contains(out, "ERROR: ovs-vswitchd forwards with the flows it has") || strings.Contains(out, "FAILED") {
			t.Fatalf("banner:\n%s", out)
		}
		if frozen {
			released()
		}
	}
	thaw := func(t *testing.T) {
		t.Helper()
		if err := fs.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		converged()
	}
	for _, tc := range []struct {
		sig           syscall.Signal
		step          string
		group, frozen bool
	}{
		{syscall.SIGTERM, "stop", false, false},
		{syscall.SIGTERM, "gap", false, false},
		{syscall.SIGTERM, "start", false, false},
		{syscall.SIGINT, "stop", false, false},
		{syscall.SIGINT, "gap", false, true},
		{syscall.SIGINT, "start", true, false}, // ^C: the whole group
	} {
		name := fmt.Sprintf("%v at %s", tc.sig, tc.step)
		if tc.group {
			name += " to the group"
		}
		if tc.frozen {
			name += ", flowstated frozen"
		}
		t.Run(name, func(t *testing.T) {
			defer thaw(t)
			restarts, begin := rs.count.Load(), time.Now()
			out, code := interrupt(t, nil, map[string]syscall.Signal{tc.step: tc.sig}, tc.group, tc.frozen)
			want := fmt.Sprintf("SIG%s while the restart command ran; it was let finish (exit 0)", map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGINT: "INT"}[tc.sig])
			if code != 130 || rs.count.Load() != restarts+1 || !strings.Contains(out, want) {
				t.Fatalf("exit %d, %d restarts:\n%s", code, rs.count.Load()-restarts, out)
			}
			restoredOrReleased(t, out, begin, tc.frozen)
		})
	}
	t.Run("twice: stopped between stop and start, started again", func(t *testing.T) {
		restarts, begin := rs.count.Load(), time.Now()
		out, code := interrupt(t, []string{"--start-cmd", rs.start},
			map[string]syscall.Signal{"stop": syscall.SIGTERM, "gap": syscall.SIGINT}, false, false)
		if code != 130 || rs.count.Load() != restarts+1 ||
			!strings.Contains(out, "interrupted by SIGTERM, then SIGINT: the restart command was stopped before it finished") ||
			!strings.Contains(out, "ovs-vswitchd is not running: starting it: "+rs.start) ||
			!strings.Contains(out, "ovs-vswitchd was down: ran --start-cmd (exit 0)") {
			t.Fatalf("exit %d, %d starts:\n%s", code, rs.count.Load()-restarts, out)
		}
		restoredOrReleased(t, out, begin, false)
	})
	t.Run("twice, no start command: down, and the banner says so", func(t *testing.T) {
		defer func() {
			if err := sb.StartVswitchd(ctx); err != nil {
				t.Fatal(err)
			}
			thaw(t)
		}()
		out, code := interrupt(t, nil, map[string]syscall.Signal{"stop": syscall.SIGINT, "gap": syscall.SIGTERM}, false, true)
		t.Logf("ovs-restart said:\n%s", out)
		if code != 130 || sb.VswitchdPID() != 0 {
			t.Fatalf("exit %d, vswitchd pid %d:\n%s", code, sb.VswitchdPID(), out)
		}
		for _, want := range []string{
			"ERROR: interrupted by SIGINT, then SIGTERM: the restart command was stopped before it finished",
			"ERROR: ovs-vswitchd was down, and there is no --start-cmd to start it with",
			"ovs-vswitchd is not running (no pidfile " + filepath.Join(sb.RunDir(), "ovs-vswitchd.pid") + "): flow-restore-wait cleared in ovsdb-server",
			"ERROR: ovs-vswitchd is NOT RUNNING (no pidfile",
			"ERROR: flow-restore-wait is cleared: the next start of ovs-vswitchd is not held",
			"ERROR: START ovs-vswitchd",
		} {
			if !strings.Contains(out, want) {
				t.Fatalf("no %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "FAILED") {
			t.Fatalf("the banner says something failed:\n%s", out)
		}
		if on, err := sb.FlowRestoreWait(ctx); err != nil || on {
			t.Fatalf("flow-restore-wait %v (%v), want cleared", on, err)
		}
	})

	t.Run("restart command fails after the stop", func(t *testing.T) {
		restarts := rs.count.Load()
		cmd := exec.CommandContext(ctx, "bash", script, "--server", sock, "--ovsdb", sb.DBAddr(), "--flowctl", self,
			"--ovs-rundir", sb.RunDir(), "--restart-cmd", rs.stop+" && exit 1", "--start-cmd", rs.start, "--timeout", "30")
		cmd.Env = append(os.Environ(), asFlowctl+"=1")
		out, err := cmd.CombinedOutput()
		if code := exitStatus(err); code != 1 || rs.count.Load() != restarts+1 || sb.VswitchdPID() == 0 {
			t.Fatalf("exit %d, %d starts, vswitchd pid %d:\n%s", code, rs.count.Load()-restarts, sb.VswitchdPID(), out)
		}
		for _, want := range []string{
			"the restart command failed (exit 1)",
			"ovs-vswitchd is not running: starting it: " + rs.start,
			"ovs-vswitchd was down: ran --start-cmd (exit 0)",
			"restored, but the restart command had failed (exit 1): check ovs-vswitchd",
		} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("no %q:\n%s", want, out)
			}
		}
	})

	// The restart command only stops vswitchd (a broken unit, a start that
	// fails): flowstated cannot restore a switch that is not there. The
	// banner names that cause and the true state of the flag, within about
	// the --timeout, whether the wait times out or is interrupted.
	t.Run("vswitchd does not come back", func(t *testing.T) {
		for _, interrupt := range []bool{false, true} {
			timeout := "5"
			if interrupt {
				timeout = "30" // interrupted well before
			}
			cmd := exec.CommandContext(ctx, "bash", script, "--server", sock, "--ovsdb", sb.DBAddr(), "--flowctl", self,
				"--ovs-rundir", sb.RunDir(), "--restart-cmd", rs.stop, "--timeout", timeout)
			cmd.Env = append(os.Environ(), asFlowctl+"=1")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			buf := &lockedBuffer{}
			cmd.Stdout, cmd.Stderr = buf, buf
			begin := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if interrupt {
				deadline := time.Now().Add(20 * time.Second)
				for !strings.Contains(buf.String(), "waiting:") {
					if time.Now().After(deadline) {
						_ = cmd.Process.Kill()
						_ = cmd.Wait()
						t.Fatalf("no wait within 20s:\n%s", buf.String())
					}
					time.Sleep(20 * time.Millisecond)
				}
				if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
					t.Fatal(err)
				}
			}
			code, took, out := exitStatus(cmd.Wait()), time.Since(begin), buf.String()
			t.Logf("ovs-restart (interrupted %v) took %v, said:\n%s", interrupt, took.Round(10*time.Millisecond), out)
			want := []string{
				"ERROR: ovs-vswitchd is NOT RUNNING",
				"ERROR: flow-restore-wait is cleared: the next start of ovs-vswitchd is not held",
				"ERROR: START ovs-vswitchd",
				"ERROR: ovs-vswitchd is not running, so flowstated cannot restore it: the restart command ended (exit 0) but vswitchd did not come back",
			}
			if interrupt {
				want = append(want, "ERROR: interrupted by SIGINT while waiting for flowstated to restore")
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Fatalf("exit %d, no %q:\n%s", code, w, out)
				}
			}
			for _, bad := range []string{"FAILED", "did not answer in time", "frozen, overloaded or wedged"} {
				if strings.Contains(out, bad) {
					t.Fatalf("the banner says %q:\n%s", bad, out)
				}
			}
			if wantCode := map[bool]int{false: 1, true: 130}[interrupt]; code != wantCode {
				t.Fatalf("exit %d, want %d", code, wantCode)
			}
			// --timeout 5: the wait, then a release that does not wait
			// for a vswitchd that is not running (unloaded about 5.3 s).
			// The bound only has to tell that from the 24.7 s of issue 24
			// (a second look and a release waiting for it); 20 s leaves
			// room for a loaded machine.
			if took > 20*time.Second {
				t.Fatalf("--timeout 5 took %v", took)
			}
			if on, err := sb.FlowRestoreWait(ctx); err != nil || on {
				t.Fatalf("flow-restore-wait %v (%v), want cleared", on, err)
			}
			if err := sb.StartVswitchd(ctx); err != nil {
				t.Fatal(err)
			}
			converged()
			// Re-armed after the restore, as the next subtest expects.
			testenv.Poll(ctx, t, "the flag re-armed", func() (bool, error) { return sb.FlowRestoreWait(ctx) })
		}
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

// restarter stops and starts the sandbox's vswitchd when ovs-restart's
// restart command asks, one step at a time, as a stop-then-start command
// (ovs-ctl stop && ovs-ctl start) does. The command runs a script whose each
// step (stop, gap, start) writes "STEP FIFO" to req, where FIFO is a new
// FIFO the step holds open and reads its exit status from, so an answer never
// reaches a later step, even when the command was killed.
type restarter struct {
	command string // stop, gap, start
	start   string // start only: for --start-cmd
	stop    string // stop only
	count   atomic.Int32
	// before runs ahead of each stop when set; at runs ahead of each step.
	before atomic.Pointer[func() error]
	at     atomic.Pointer[func(step string)]
}

const stepScript = `step() {
	local f rc
	f=$(mktemp -u "$DIR/step.XXXXXX") && mkfifo "$f" && exec 3<>"$f" || return 1
	echo "$1 $f" >"$DIR/restart.req"
	read -r rc <&3
	exec 3<&-
	return "$rc"
}
for s in "$@"; do step "$s" || exit; done
`

func startRestarter(ctx context.Context, t *testing.T, sb *sandbox.Sandbox) *restarter {
	t.Helper()
	req, script := filepath.Join(sb.Dir(), "restart.req"), filepath.Join(sb.Dir(), "restart.sh")
	if err := syscall.Mkfifo(req, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte("DIR='"+sb.Dir()+"'\n"+stepScript), 0o600); err != nil {
		t.Fatal(err)
	}
	// O_RDWR: opening does not wait for the other end, and the FIFO stays
	// open between restarts.
	rf, err := os.OpenFile(req, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &restarter{
		command: fmt.Sprintf("bash '%s' stop gap start", script),
		start:   fmt.Sprintf("bash '%s' start", script),
		stop:    fmt.Sprintf("bash '%s' stop", script),
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(rf)
		for sc.Scan() {
			step, fifo, _ := strings.Cut(sc.Text(), " ")
			if fn := r.at.Load(); fn != nil {
				(*fn)(step)
			}
			rc := 0
			switch step {
			case "stop":
				if fn := r.before.Load(); fn != nil {
					if err := (*fn)(); err != nil {
						t.Errorf("before restart: %v", err)
						rc = 1
					}
				}
				if err := sb.StopVswitchd(ctx); err != nil {
					t.Errorf("stop vswitchd: %v", err)
					rc = 1
				}
			case "start":
				if err := sb.StartVswitchd(ctx); err != nil {
					t.Errorf("start vswitchd: %v", err)
					rc = 1
				}
				r.count.Add(1)
			}
			// The step holds its FIFO open, so the answer waits there; a
			// killed step never reads it, and the FIFO goes with it.
			if f, err := os.OpenFile(fifo, os.O_RDWR, 0); err != nil {
				t.Errorf("answer step %s: %v", step, err)
			} else {
				_, _ = fmt.Fprintln(f, rc)
				_ = f.Close()
				_ = os.Remove(fifo)
			}
		}
	}()
	t.Cleanup(func() {
		_ = rf.Close() // ends the scanner
		wg.Wait()
	})
	return r
}

// TestVswitchdState: flowctl vswitchd-state tells a running vswitchd (held
// by the flag or not) from one killed (its pidfile left behind) or stopped,
// and says when it cannot tell; release does not wait for a vswitchd that
// is not running.
func TestVswitchdState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	sb := e.Sandbox
	args := []string{"vswitchd-state", "--ovsdb", sb.DBAddr(), "--ovs-rundir", sb.RunDir()}
	state := func(t *testing.T, code int, want ...string) {
		t.Helper()
		var out, stderr string
		var got int
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, stderr, got = flowctl(ctx, "", args...)
			if got == code || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if got != code {
			t.Fatalf("exit %d, want %d:\n%s%s", got, code, out, stderr)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("no %q:\n%s%s", w, out, stderr)
			}
		}
	}
	pidfile := filepath.Join(sb.RunDir(), "ovs-vswitchd.pid")

	if err := sb.SetFlowRestoreWait(ctx, false); err != nil {
		t.Fatal(err)
	}
	state(t, 0, fmt.Sprintf("ovs-vswitchd is running (pid %d; its control socket ovs-vswitchd.ctl answers)", sb.VswitchdPID()),
		"flow-restore-wait is cleared, and ovs-vswitchd has read it")
	if err := sb.SetFlowRestoreWait(ctx, true); err != nil {
		t.Fatal(err)
	}
	state(t, stateHeld, "ovs-vswitchd is running", "flow-restore-wait is set: a vswitchd started with it holds forwarding")

	pid := sb.VswitchdPID()
	if err := sb.KillVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	state(t, stateDown, fmt.Sprintf("ovs-vswitchd is NOT RUNNING (pidfile %s names pid %d, which is gone", pidfile, pid),
		"flow-restore-wait is set: the next start of ovs-vswitchd holds forwarding")

	// release clears the flag at once: nobody would read it.
	begin := time.Now()
	out, stderr, code := flowctl(ctx, "", "--server", filepath.Join(sb.Dir(), "none.sock"), "release",
		"--ovsdb", sb.DBAddr(), "--ovs-rundir", sb.RunDir())
	if code != 0 || !strings.Contains(out, "ovs-vswitchd is not running (pidfile") ||
		!strings.Contains(out, "flow-restore-wait cleared in ovsdb-server; its next start is not held") || time.Since(begin) > 5*time.Second {
		t.Fatalf("release with vswitchd killed: exit %d after %v:\n%s%s", code, time.Since(begin), out, stderr)
	}
	state(t, stateDown, "flow-restore-wait is cleared: the next start of ovs-vswitchd is not held")

	if err := sb.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	state(t, stateDown, "ovs-vswitchd is NOT RUNNING (no pidfile "+pidfile+")")

	args[len(args)-1] = filepath.Join(sb.Dir(), "nowhere")
	state(t, stateUnknown, "ovs-vswitchd: cannot tell: no run directory")
}
