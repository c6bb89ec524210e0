package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// TestWatchAcrossRestarts: watch follows flowstated through a restart,
// printing a resync marker, and ends at --timeout with status 0.
func TestWatchAcrossRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	e.Start(ctx)
	srv := e.Config.Listen
	if _, stderr, code := flowctl(ctx, "", "--server", srv, "wait"); code != 0 {
		t.Fatal(stderr)
	}
	// A module that declares a flow may be marked ready.
	if _, stderr, code := flowctl(ctx, "", "--server", srv, "add-flow", "--module", "pipeline", "table=0,priority=100,ip,actions=drop"); code != 0 {
		t.Fatal(stderr)
	}
	out := &lockedBuffer{}
	done := make(chan int, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		done <- execute(wctx, []string{"--server", srv, "watch", "-o", "json"}, strings.NewReader(""), out, out)
	}()
	ready := func(what string) {
		t.Helper()
		n := strings.Count(out.String(), `"type":"module_ready"`)
		testenv.Poll(ctx, t, "a module_ready event "+what, func() (bool, error) {
			select {
			case code := <-done:
				t.Fatalf("watch ended with %d %s:\n%s", code, what, out.String())
			default:
			}
			if _, stderr, code := flowctl(ctx, "", "--server", srv, "ready", "--module", "pipeline"); code != 0 {
				t.Logf("ready: %s", stderr) // flowstated may still be starting
			}
			return strings.Count(out.String(), `"type":"module_ready"`) > n, nil
		})
	}
	ready("before the restart")
	e.Stop()
	e.Start(ctx)
	ready("after the restart")
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("interrupted watch: exit %d\n%s", code, out.String())
	}
	var types []string
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var ev jsonEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("watch -o json line %q: %v", l, err)
		}
		if _, err := time.Parse(time.RFC3339Nano, ev.Time); err != nil {
			t.Fatalf("line %q: time: %v", l, err)
		}
		types = append(types, ev.Type)
		if ev.Type == "resync" && !strings.Contains(ev.Message, "flowstated restarted") {
			t.Errorf("resync marker: %q", ev.Message)
		}
	}
	joined := strings.Join(types, " ")
	if !regexp.MustCompile(`module_ready .*resync .*module_ready`).MatchString(joined) {
		t.Fatalf("watch across a restart printed %s:\n%s", joined, out.String())
	}

	// --timeout ends it, with status 0, and text lines.
	start := time.Now()
	stdout, stderr, code := flowctl(ctx, "", "--server", srv, "--timeout", "1", "watch", "--heartbeats")
	if code != 0 || time.Since(start) > 10*time.Second || !strings.Contains(stdout, " heartbeat") {
		t.Fatalf("watch --timeout 1: exit %d after %v\n%s%s", code, time.Since(start), stdout, stderr)
	}
	// At its start, flowstated unreachable is a failure, as for any command.
	_, stderr, code = flowctl(ctx, "", "--server", filepath.Join(e.Sandbox.Dir(), "none.sock"), "watch")
	if code != 1 || !strings.Contains(stderr, "cannot reach flowstated") {
		t.Fatalf("watch without flowstated: exit %d\n%s", code, stderr)
	}
}

// TestVerdictNotRetried: flowstated's own UNAVAILABLE (the bridge is not
// connected: vswitchd is down) is answered once, not retried.
func TestVerdictNotRetried(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, testenv.Configure(func(c *server.Config) { c.MetricsListen = "127.0.0.1:0" }))
	e.Start(ctx)
	srv := e.Config.Listen
	if _, stderr, code := flowctl(ctx, "", "--server", srv, "wait"); code != 0 {
		t.Fatal(stderr)
	}
	if err := e.Sandbox.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Poll(ctx, t, "br-int disconnected", func() (bool, error) {
		st, err := e.Client.Status(ctx)
		return err == nil && len(st.Bridges) == 1 && !st.Bridges[0].Connected, err
	})
	start := time.Now()
	_, stderr, code := flowctl(ctx, "", "--server", srv, "dump-flows", "--stats")
	took := time.Since(start)
	if code != 1 || !strings.Contains(stderr, "bridge br-int is not connected") || strings.Contains(stderr, "retries") ||
		strings.Count(stderr, "\n") != 1 {
		t.Fatalf("dump-flows --stats with vswitchd down: exit %d after %v\n%s", code, took, stderr)
	}
	calls := regexp.MustCompile(`grpc_server_handled_total\{grpc_code="Unavailable",grpc_method="FlowStats",[^}]*\} (\d+)`).FindStringSubmatch(e.Metrics(ctx))
	if calls == nil || calls[1] != "1" {
		t.Fatalf("FlowStats answered UNAVAILABLE %v times, want 1 (in %v)", calls, took)
	}
	t.Logf("the verdict in %v, one call", took)
}

var (
	flowstatedOnce sync.Once
	flowstatedBin  string
	flowstatedErr  error
)

// flowstatedBinary builds flowstated once per test binary, for the tests that
// freeze or kill it.
func flowstatedBinary(ctx context.Context, t *testing.T) string {
	t.Helper()
	flowstatedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "flowstated")
		if err != nil {
			flowstatedErr = err
			return
		}
		flowstatedBin = filepath.Join(dir, "flowstated")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", flowstatedBin, "../flowstated").CombinedOutput(); err != nil {
			flowstatedErr = err
			t.Logf("go build:\n%s", out)
		}
	})
	if flowstatedErr != nil {
		t.Fatalf("go build flowstated: %v", flowstatedErr)
	}
	return flowstatedBin
}

// TestFrozenFlowstated: a flowstated stopped with SIGSTOP is reported as
// frozen within the default --timeout, with what to check.
func TestFrozenFlowstated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	bin := flowstatedBinary(ctx, t)
	e := testenv.New(ctx, t)
	sb, sock := e.Sandbox, e.Sock
	fs := exec.Command(bin, "--ovs-rundir", sb.RunDir(), "--ovsdb", sb.DBAddr(), "--bridge", "br-int",
		"--db", e.Config.DBPath, "--listen", e.Config.Listen, "--boot-id-file", e.Config.BootIDFile,
		"--metrics-listen", "", "--guard", "off")
	fs.Stderr = io.Discard
	if err := fs.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = fs.Wait(); close(exited) }()
	defer func() {
		_ = fs.Process.Signal(syscall.SIGCONT)
		_ = fs.Process.Kill()
		<-exited
	}()
	testenv.Poll(ctx, t, "flowstated serving", func() (bool, error) {
		_, _, code := flowctl(ctx, "", "--server", sock, "--timeout", "2s", "status")
		return code == 0, nil
	})
	if err := fs.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, stderr, code := flowctl(ctx, "", "--server", sock, "status") // the default --timeout, 60 s
	took := time.Since(start)
	if code != 1 || took > 60*time.Second ||
		!strings.Contains(stderr, "flowstated at "+sock+" accepts connections but did not answer in time (it sends nothing on a new connection): frozen, overloaded or wedged?") ||
		strings.Contains(stderr, "rpc error") || strings.Contains(stderr, "retries") {
		t.Fatalf("status of a frozen flowstated: exit %d after %v\n%s", code, took, stderr)
	}
	t.Logf("frozen flowstated reported in %v", took)
}

// TestSocketPermission: a user who may not open the socket is told so, with
// what to do, at once; not asked whether flowstated runs.
func TestSocketPermission(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running flowctl as another uid needs root; this test runs in CI, which runs as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	e.Start(ctx)
	// This test binary is flowctl (asFlowctl), copied where nobody can run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "flowctl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "flowctl")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.Sandbox.Dir(), 0o755); err != nil { // the socket itself stays 0660 root:root
		t.Fatal(err)
	}
	const nobody = 65534
	cmd := exec.CommandContext(ctx, bin, "--server", e.Sock, "status")
	cmd.Env = append(os.Environ(), asFlowctl+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 ||
		!strings.Contains(string(out), "permission denied on flowstated's socket "+e.Sock+" (owner root, group root, mode 0660)") ||
		!strings.Contains(string(out), "sudo flowctl") || !strings.Contains(string(out), "member of the socket's group") ||
		strings.Contains(string(out), "is flowstated running") || took > 10*time.Second {
		t.Fatalf("flowctl as nobody: %v after %v\n%s", err, took, out)
	}
	t.Logf("permission denied reported in %v", took)
}
