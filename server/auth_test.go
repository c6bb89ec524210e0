package server_test

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
	"github.com/flowstate-io/flowstate/server"
)

// flowctlAsPeer builds flowctl where any uid can run it, opens e's socket to
// every uid, and returns a runner of flowctl as uid (needs root) and the
// directory, writable by any uid, it was built in.
func flowctlAsPeer(ctx context.Context, t *testing.T, e *env) (func(uid uint32, stdin string, args ...string) (string, error), string) {
	t.Helper()
	binDir, err := os.MkdirTemp("", "flowctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(binDir) })
	bin := filepath.Join(binDir, "flowctl")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/flowctl").CombinedOutput(); err != nil {
		t.Fatalf("go build flowctl: %v\n%s", err, out)
	}
	if err := os.Chmod(binDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(strings.TrimPrefix(e.sock, "unix://"), 0o666); err != nil {
		t.Fatal(err)
	}
	return func(uid uint32, stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"--server", e.sock, "--timeout", "20s"}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}, binDir
}

// TestModuleWriters: with --module-writer rules, a peer other than root may
// write only the modules granted to its uid, as the kernel reports it
// (SO_PEERCRED); reads stay open. The peer is flowctl run as nobody.
func TestModuleWriters(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a client as another uid needs root; this test runs in CI, which runs as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const nobody = 65534
	writers := server.Writers{}
	if err := writers.ParseWriter("pod=uid:65534"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"pod", "pod=65534", "pod=user:1", "-x=uid:1", "pod=uid:-1"} {
		if err := (server.Writers{}).ParseWriter(bad); err == nil {
			t.Errorf("rule %q accepted", bad)
		}
	}
	e := newEnv(ctx, t, func(c *server.Config) { c.Writers = writers })
	e.Start(ctx)
	e.WaitConverged(ctx)

	flowctlAs, _ := flowctlAsPeer(ctx, t, e)
	flowctl := func(stdin string, args ...string) (string, error) { return flowctlAs(nobody, stdin, args...) }
	if out, err := flowctl("table=0,priority=5,ip,actions=drop\n", "add-flows", "--module", "pod", "-"); err != nil {
		t.Fatalf("nobody writing its own module: %v\n%s", err, out)
	}
	out, err := flowctl("table=0,priority=6,ip,actions=drop\n", "add-flows", "--module", "pipeline", "-")
	if err == nil || !strings.Contains(out, "PermissionDenied") && !strings.Contains(out, "permission denied") || !strings.Contains(out, `module "pipeline"`) {
		t.Fatalf("nobody writing another module: %v\n%s", err, out)
	}
	if out, err := flowctl("", "ready", "--module", "pipeline"); err == nil {
		t.Fatalf("nobody marking another module ready succeeded:\n%s", out)
	}
	if out, err := flowctl("", "dump-flows"); err != nil || !strings.Contains(out, "priority=5") || strings.Contains(out, "priority=6") {
		t.Fatalf("nobody reading: %v\n%s", err, out)
	}
	// Reconcile rewrites the bridge: open to peers that may write some
	// module, not to the others (uid 65533 has no rule), which still read.
	if out, err := flowctl("", "reconcile"); err != nil {
		t.Fatalf("a writer reconciling: %v\n%s", err, out)
	}
	out, err = flowctlAs(nobody-1, "", "reconcile")
	if err == nil || !strings.Contains(out, "may write no module") || strings.Count(out, "permission denied") != 1 {
		t.Fatalf("a peer that may write nothing reconciling: %v\n%s", err, out)
	}
	if out, err := flowctlAs(nobody-1, "", "dump-flows"); err != nil || !strings.Contains(out, "priority=5") {
		t.Fatalf("a peer that may write nothing reading: %v\n%s", err, out)
	}
	// Root (this test's own client) writes any module.
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
}
