package main

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
)

// TestFrozenTimeout: against a frozen flowstated (SIGSTOP), the whole
// command, dial and diagnosis included, ends within --timeout plus a small
// slack, still saying flowstated is frozen.
func TestFrozenTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
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
	// The slack covers starting the flowctl process (this test binary,
	// under -race) and the probe's floor, not a second wait.
	const slack = 500 * time.Millisecond
	for _, timeout := range []time.Duration{1 * time.Second, 2 * time.Second, 3 * time.Second} {
		for _, cmd := range [][]string{{"status"}, {"dump-flows"}} {
			start := time.Now()
			_, stderr, code := flowctl(ctx, "", append([]string{"--server", sock, "--timeout", timeout.String()}, cmd...)...)
			took := time.Since(start)
			if code != 1 || took > timeout+slack || !strings.Contains(stderr, "accepts connections but did not answer in time") {
				t.Errorf("%s --timeout %v against a frozen flowstated: exit %d after %v, want within %v\n%s",
					cmd[0], timeout, code, took, timeout+slack, stderr)
			} else {
				t.Logf("%s --timeout %v: %v", cmd[0], timeout, took.Round(time.Millisecond))
			}
		}
	}
}
