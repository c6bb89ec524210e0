package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMakeBuildStampsCommit: make build links the commit in, as
// deploy/Dockerfile does, so --version names it where the toolchain records
// no VCS revision (-buildvcs=false, a copied tree).
func TestMakeBuildStampsCommit(t *testing.T) {
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	head, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	cmd := exec.CommandContext(ctx, "make", "-s", "-n", "build")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	want := "-X github.com/flowstate-io/flowstate/internal/version.Commit=" + strings.TrimSpace(string(head))
	if !strings.Contains(string(out), "go build") || !strings.Contains(string(out), want) {
		t.Fatalf("make build runs:\n%s\nwant it to link %s", out, want)
	}
}

// TestInstallDepsDemo: install-deps.sh --demo (make demo) installs Open
// vSwitch only: with OVN, the test controllers, systemd-nspawn and promtool
// all missing it asks apt-get for none of them, which the mode for make
// test does. apt-get is a stub that records its arguments.
func TestInstallDepsDemo(t *testing.T) {
	if _, err := exec.LookPath("ovs-vswitchd"); err != nil {
		if _, err := exec.LookPath("/usr/sbin/ovs-vswitchd"); err != nil {
			t.Fatal("ovs-vswitchd is not installed: the tests need it")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	log := filepath.Join(dir, "apt-get.log")
	stub := "#!/bin/sh\necho \"$*\" >>" + log + "\n"
	if err := os.WriteFile(filepath.Join(dir, "apt-get"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	// Only the tools the script needs besides what it installs, and sudo
	// as the stub runs as anyone.
	for _, tool := range []string{"bash", "env", "id", "sudo", "mktemp", "rm", "ovs-vswitchd"} {
		if p, err := exec.LookPath(tool); err == nil {
			if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func(args ...string) string {
		t.Helper()
		_ = os.Remove(log)
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "bash"), append([]string{"../scripts/install-deps.sh"}, args...)...)
		cmd.Env = []string{"PATH=" + dir}
		out, _ := cmd.CombinedOutput() // without --demo it fails past apt-get: the stub installs nothing
		b, _ := os.ReadFile(log)
		t.Logf("install-deps.sh %v:\n%s", args, out)
		return string(b)
	}
	if got := run("--demo"); got != "" {
		t.Errorf("install-deps.sh --demo with OVS present ran apt-get:\n%s", got)
	}
	if got := run(); !strings.Contains(got, "ovn-host") {
		t.Errorf("install-deps.sh (make test) did not install OVN: apt-get ran with:\n%s", got)
	}
}
