package guard

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// TestHandOverEndsRelaying: a returning flowstated that takes the sockets
// over (FetchListeners) while the guard relays finds every relayed session
// closed by the time it has them, before it learns from the switch what the
// controller installed; until a grace has passed (or the lease is renewed)
// the guard does not relay again, and then it does.
func TestHandOverEndsRelaying(t *testing.T) {
	const grace = 1500 * time.Millisecond
	ctx, lease, rl, _ := relayGuard(t, "br-handback", grace)

	// The lease goes stale: the guard relays.
	relayed := relayedConn(ctx, t, rl.Listen)
	defer relayed.Close()

	held, err := FetchListeners(lease)
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range held {
		defer ln.Close()
	}
	// Closed before the sockets were sent: the end of the stream is there
	// already (the deadline only bounds a failing test).
	_ = relayed.SetReadDeadline(time.Now().Add(grace / 3))
	if _, err := ofconn.ReadMessage(bufio.NewReader(relayed)); !errors.Is(err, io.EOF) {
		t.Fatalf("the relayed session outlived the hand-over: read %v, want EOF", err)
	}
	// Still stale, the flowstated that took them (this process) alive:
	// nothing relayed. A short wait: an absence.
	c := dialProxy(t, rl.Listen)
	if m, err := readHello(c, grace/4); err == nil {
		t.Fatalf("the guard relayed again right after the hand-over: got %x", m)
	}
	c.Close()
	// A grace after the hand-over, the lease never renewed: relayed again.
	relayedConn(ctx, t, rl.Listen).Close()
}

// relayedConn polls until a connection to path gets vswitchd's HELLO
// through the guard.
func relayedConn(ctx context.Context, t *testing.T, path string) net.Conn {
	t.Helper()
	var relayed net.Conn
	pollUntil(ctx, t, "vswitchd's HELLO through the guard", func() bool {
		c := dialProxy(t, path)
		if _, err := readHello(c, 200*time.Millisecond); err != nil {
			c.Close()
			return false
		}
		relayed = c
		return true
	})
	return relayed
}

// TestHandBackFollowsItsProcess: the flowstated that took the sockets is
// starting while its process runs (a pidfd, else its pid), and no longer
// once it exited or the grace passed.
func TestHandBackFollowsItsProcess(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open: %v", err)
	}
	b := &handBack{at: time.Now(), pid: pid, pidfd: fd}
	defer b.close()
	byPid := &handBack{at: time.Now(), pid: pid, pidfd: -1}
	if !b.starting(time.Minute) || !byPid.starting(time.Minute) {
		t.Fatal("a running flowstated is not starting")
	}
	if b.starting(0) {
		t.Fatal("starting past its grace")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // reaped: its pid is gone
	if b.starting(time.Minute) || byPid.starting(time.Minute) {
		t.Fatal("an exited flowstated is still starting")
	}
	if !(&handBack{at: time.Now(), pidfd: -1}).starting(time.Minute) {
		t.Fatal("a peer of unknown pid is not held for its grace")
	}
}
