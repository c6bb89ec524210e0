package clienttest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
)

// dialAsEnv makes the test binary dial the socket it names and print the
// kind of the error: how TestSocketPermissionKind runs a client as nobody.
const dialAsEnv = "CLIENTTEST_DIAL_SOCKET"

// dialKind calls Status on the socket and prints "permission-denied",
// "unavailable" or the error.
func dialKind(sock string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.New("unix://" + sock)
	if err != nil {
		fmt.Println("new:", err)
		return 1
	}
	defer c.Close()
	_, err = c.Status(ctx)
	switch {
	case errors.Is(err, errdefs.ErrPermissionDenied) && !errors.Is(err, errdefs.ErrUnavailable):
		fmt.Println("permission-denied:", err)
	case errors.Is(err, errdefs.ErrUnavailable):
		fmt.Println("unavailable:", err)
	default:
		fmt.Println("other:", err)
	}
	return 0
}

// TestSocketPermissionKind: a socket the kernel does not let the client
// open (EACCES) is errdefs.ErrPermissionDenied, at once, not UNAVAILABLE
// after the retries: no wait grants a permission.
func TestSocketPermissionKind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "perm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "fs.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(sock, 0o600); err != nil { // root's only
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), dialAsEnv+"="+sock)
	if os.Geteuid() == 0 {
		// Root opens any socket: the client runs as nobody, from a copy
		// of this binary nobody may run.
		bin := filepath.Join(dir, "clienttest")
		b, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd = exec.CommandContext(ctx, bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), dialAsEnv+"="+sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	} else if err := os.Chmod(sock, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "permission-denied:") {
		t.Fatalf("Status on a socket closed to the caller, after %v: %v\n%s", time.Since(start), err, out)
	}
	t.Logf("%s", out)
}
