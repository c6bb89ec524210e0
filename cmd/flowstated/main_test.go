package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// TestBinarySIGTERM runs the flowstated binary against a sandbox: it serves
// the API and the health service, restores, re-arms the flag, and on SIGTERM
// stops gracefully, disarming the flag and exiting 0.
func TestBinarySIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "flowstated")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if err := sb.AddBridge(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	bootID := filepath.Join(sb.Dir(), "boot_id")
	if err := os.WriteFile(bootID, []byte("boot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sockPath := filepath.Join(sb.Dir(), "run", "fs.sock")
	cmd := exec.CommandContext(ctx, bin,
		"--ovs-rundir", sb.RunDir(), "--ovsdb", sb.DBAddr(), "--bridge", "br-int",
		"--db", filepath.Join(sb.Dir(), "state", "fs.db"), "--listen", "unix://"+sockPath,
		"--boot-id-file", bootID, "--metrics-listen", "127.0.0.1:0", "--log-format", "json",
		"--guard-lease", filepath.Join(sb.Dir(), "run", "lease"))
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			t.Logf("flowstated killed: %v", <-waited)
		}
		if t.Failed() {
			t.Logf("flowstated log:\n%s", logs.String())
		}
	}()

	c, err := client.New("unix://" + sockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	poll := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %v", what, ctx.Err())
			case err := <-waited:
				t.Fatalf("flowstated exited while waiting for %s: %v", what, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	poll("converged and re-armed", func() bool {
		st, err := c.Status(ctx)
		if err != nil || !st.Bridges[0].Converged {
			return false
		}
		on, err := sb.FlowRestoreWait(ctx)
		return err == nil && on
	})
	if fi, err := os.Stat(sockPath); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	conn, err := grpc.NewClient("unix://"+sockPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hr, err)
	}

	// Metrics: the bound address is in the "serving" log line.
	m := regexp.MustCompile(`"msg":"serving".*"metrics":"([^"]+)"`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no metrics address in the log:\n%s", logs.String())
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{`flowstate_replays_total{bridge="br-int",result="ok"}`, "flowstate_flow_restore_wait_rearmed_total", "grpc_server_handled_total"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("flowstated exited with %v after SIGTERM", err)
		}
	case <-ctx.Done():
		t.Fatal("flowstated did not stop on SIGTERM")
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Fatalf("no graceful stop in the log:\n%s", logs.String())
	}
	if on, err := sb.FlowRestoreWait(ctx); err != nil || on {
		t.Fatalf("flag after a graceful stop: %v %v (want disarmed)", on, err)
	}
	if _, err := os.Stat(sockPath); err == nil {
		// A stale socket file is fine (the next start replaces it), but it
		// must not answer.
		if _, err := c.Status(ctx); err == nil {
			t.Fatal("API still answers after stop")
		}
	}
}

// syncBuffer is a bytes.Buffer the child's output goroutine and the test
// can share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestVersion: --version prints the version, the commit and the Go version,
// and starts nothing.
func TestVersion(t *testing.T) {
	cmd := newCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^flowstated \S+ \(commit [^)]+\) go1\.\S+ \S+/\S+\n$`).MatchString(out.String()) {
		t.Fatalf("--version printed %q", out.String())
	}
}
