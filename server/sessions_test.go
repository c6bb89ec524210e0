package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// helperEnv makes the test binary a client process: it connects to
// $FLOWSTATE_TEST_SOCK, puts a flow of each module of $FLOWSTATE_TEST_MODULES
// (printing "MODULE ok" or "MODULE denied: ERR"), prints "connected", and
// keeps its connection until stdin closes.
const helperEnv = "FLOWSTATE_TEST_HELPER"

func runHelperClient() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(os.Getenv("FLOWSTATE_TEST_SOCK"))
	if err != nil {
		fmt.Println("client:", err)
		return 1
	}
	defer c.Close()
	for i, m := range strings.Split(os.Getenv("FLOWSTATE_TEST_MODULES"), ",") {
		flow := client.FlowText(fmt.Sprintf("table=9,priority=%d,ip,actions=drop", 100+i))
		if _, err := c.Put(ctx, client.Module{Bridge: "br-int", Name: m}, flow); err != nil {
			fmt.Printf("%s denied: %v\n", m, err)
		} else {
			fmt.Printf("%s ok\n", m)
		}
	}
	fmt.Println("connected")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// helper is a running helper client process.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines []string // what it printed up to "connected"
}

// startHelper runs the test binary as a client; cred, when set, runs it as
// that user. It returns once the helper is connected and has written.
func startHelper(ctx context.Context, t *testing.T, sock string, cred *syscall.Credential, modules ...string) *helper {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		// go test builds into a directory only its owner may enter.
		bin = copyExecutable(t, bin)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), helperEnv+"=1", "FLOWSTATE_TEST_SOCK="+sock, "FLOWSTATE_TEST_MODULES="+strings.Join(modules, ","))
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	cmd.Stderr = testenv.Writer(t)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // also ends a stopped process
		_ = cmd.Wait()
	})
	got := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "connected" {
				got <- nil
				// Drain: the helper must never block writing.
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
			h.lines = append(h.lines, sc.Text())
		}
		got <- fmt.Errorf("helper exited before connecting: %v", h.lines)
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatalf("helper client: %v", ctx.Err())
	}
	return h
}

func copyExecutable(t *testing.T, src string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "helper")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "helper")
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

func sessionOf(st *client.Status, pid int) (client.Session, bool) {
	i := slices.IndexFunc(st.Sessions, func(s client.Session) bool { return int(s.PID) == pid })
	if i < 0 {
		return client.Session{}, false
	}
	return st.Sessions[i], true
}

// TestSessions: Status lists each connected client but the caller with its
// uid, pid and the modules it wrote, and a client that freezes (SIGSTOP) is dropped by the
// server's keepalive: here within 1+1 s, with the defaults within 15 s.
func TestSessions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) { c.KeepaliveTime, c.KeepaliveTimeout = time.Second, time.Second })
	e.Start(ctx)
	e.WaitConverged(ctx)

	h := startHelper(ctx, t, e.sock, nil, "frozen")
	pid := h.cmd.Process.Pid
	st, err := e.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := sessionOf(st, pid)
	if !ok {
		t.Fatalf("no session of pid %d in %+v", pid, st.Sessions)
	}
	if s.UID != uint32(os.Getuid()) || !slices.Equal(s.Modules, []string{"frozen"}) || s.Calls < 1 ||
		s.Since.IsZero() || s.LastActivity.Before(s.Since) || time.Since(s.Since) > time.Minute {
		t.Fatalf("session of the helper: %+v", s)
	}
	// The caller's own connection is not listed (flowctl status would
	// always show itself).
	if self, ok := sessionOf(st, os.Getpid()); ok {
		t.Fatalf("Status lists the caller's own session: %+v", self)
	}

	// Frozen: the kernel keeps its socket open, only the keepalive notices.
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	poll(ctx, t, "the frozen client's session to go", func() (bool, error) {
		st, err := e.c.Status(ctx)
		if err != nil {
			return false, err
		}
		_, ok := sessionOf(st, pid)
		return !ok, nil
	})
	if d := time.Since(frozen); d > 10*time.Second {
		t.Fatalf("frozen client dropped after %v, want about 2 s", d)
	}
	t.Logf("frozen client dropped after %v", time.Since(frozen).Round(10*time.Millisecond))
}

// TestWriterSupplementaryGroup: a --module-writer gid rule admits a peer
// that has the gid only as a supplementary group (SO_PEERCRED reports the
// primary gid; flowstated reads the rest from /proc/<pid>/status).
func TestWriterSupplementaryGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a client as another user needs root; this test runs in CI, which runs as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const nobody, group = 65534, 4242
	writers := server.Writers{}
	if err := writers.ParseWriter(fmt.Sprintf("grp=gid:%d", group)); err != nil {
		t.Fatal(err)
	}
	e := newEnv(ctx, t, func(c *server.Config) { c.Writers = writers })
	e.Start(ctx)
	if err := os.Chmod(e.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(strings.TrimPrefix(e.sock, "unix://"), 0o666); err != nil {
		t.Fatal(err)
	}
	member := startHelper(ctx, t, e.sock, &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{group}}, "grp", "other")
	if len(member.lines) != 2 || member.lines[0] != "grp ok" || !strings.HasPrefix(member.lines[1], "other denied") ||
		!strings.Contains(member.lines[1], fmt.Sprintf("groups [%d]", group)) {
		t.Fatalf("nobody with supplementary group %d: %q", group, member.lines)
	}
	outsider := startHelper(ctx, t, e.sock, &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}, "grp")
	if len(outsider.lines) != 1 || !strings.HasPrefix(outsider.lines[0], "grp denied") || !strings.Contains(outsider.lines[0], "permission denied") {
		t.Fatalf("nobody without the group: %q", outsider.lines)
	}
}
