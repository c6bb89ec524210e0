package guard

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/ofproxy"
)

// TestRelay: a guard holding a proxy socket (Config.Relays) accepts nothing
// while the lease is renewed, relays a connection to vswitchd once it is
// stale, hands the socket to a flowstated that asks (FetchListeners), closes
// what it relays once the lease is renewed again, and, holding the socket,
// does not exit when idle.
func TestRelay(t *testing.T) {
	const br = "br-relay"
	ctx, sb, lease, l, rl := relayEnv(t, br)
	sock, upstream, ln := rl.Listen, rl.Upstream, rl.Listener
	const grace = 400 * time.Millisecond
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	cfg := Config{Lease: lease, OVSDB: sb.DBAddr(), Grace: grace, ExitWhenIdle: true, Logger: logger(t),
		Relays: []Relay{{Bridge: br, Listen: sock, Upstream: upstream, Listener: ln}}}
	done := make(chan error, 1)
	go func() { done <- Run(rctx, cfg) }()
	renew := func() {
		if _, err := l.Renew(""); err != nil {
			t.Fatal(err)
		}
	}
	pollUntil(ctx, t, "guard holds the lock", func() bool { renew(); p, _ := Present(lease); return p })

	// Renewed: the guard leaves the socket to flowstated.
	c := dialProxy(t, sock)
	for end := time.Now().Add(2 * grace); time.Now().Before(end); time.Sleep(grace / 10) {
		renew()
	}
	if m, err := readHello(c, 100*time.Millisecond); err == nil {
		t.Fatalf("the guard relayed while the lease was renewed: got %x", m)
	}
	c.Close()

	// The hand-over: the same socket, by path.
	held, err := FetchListeners(lease)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := held[sock]
	if !ok || len(held) != 1 {
		t.Fatalf("hand-over gave %v, want %s", held, sock)
	}
	accepted := acceptOne(got)
	dialProxy(t, sock).Close()
	if err := <-accepted; err != nil {
		t.Fatalf("accept on the handed-over socket: %v", err)
	}
	got.Close()

	// Stale: vswitchd's HELLO comes through the guard.
	time.Sleep(grace + grace/2)
	var relayed net.Conn
	pollUntil(ctx, t, "vswitchd's HELLO through the guard", func() bool {
		c := dialProxy(t, sock)
		if _, err := readHello(c, 200*time.Millisecond); err != nil {
			c.Close()
			return false
		}
		relayed = c
		return true
	})
	defer relayed.Close()
	// Stale and the flag clear: a guard holding the socket stays.
	time.Sleep(3 * grace)
	select {
	case err := <-done:
		t.Fatalf("the guard exited while it holds the proxy socket: %v", err)
	default:
	}

	// Renewed again: the relayed connection is closed.
	renew()
	_ = relayed.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, err := ofconn.ReadMessage(bufio.NewReader(relayed)); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatal("the guard kept relaying after the lease was renewed")
				}
			}
			break
		}
	}
	stop()
	for end := time.Now().Add(2 * grace); time.Now().Before(end); time.Sleep(grace / 10) {
		renew() // fresh: the stopping guard has nothing to release
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(RelayPath(lease)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the hand-over socket outlived the guard: %v", err)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Errorf("the proxy socket's path went with the guard: %v", err)
	}
}

// relayEnv is a sandbox with bridge br, an open lease beside it, and the
// proxy socket of br bound (closed at the test's end).
func relayEnv(t *testing.T, br string) (context.Context, *sandbox.Sandbox, string, *Lease, Relay) {
	t.Helper()
	ctx, sb := startOVS(t)
	if err := sb.AddBridge(ctx, br); err != nil {
		t.Fatal(err)
	}
	lease := filepath.Join(sb.Dir(), "run", "lease")
	l, err := OpenLease(lease)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	sock := filepath.Join(sb.Dir(), "of", br+".mgmt")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	upstream := filepath.Join(sb.RunDir(), br+".mgmt")
	ln, err := ofproxy.Bind(sock, upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ctx, sb, lease, l, Relay{Bridge: br, Listen: sock, Upstream: upstream, Listener: ln}
}

// acceptOne accepts one connection on ln, closes it and sends Accept's
// error.
func acceptOne(ln net.Listener) <-chan error {
	accepted := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			conn.Close()
		}
		accepted <- err
	}()
	return accepted
}

func dialProxy(t *testing.T, path string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readHello reads the first message on c, which a switch (relayed) sends at
// once.
func readHello(c net.Conn, wait time.Duration) ([]byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	m, err := ofconn.ReadMessage(bufio.NewReader(c))
	if err != nil {
		return nil, err
	}
	if m[1] != 0 { // OFPT_HELLO
		return nil, errors.New("not a HELLO")
	}
	return m, nil
}

// TestRelayAdmits: the guard holds a relayed controller to Relay.Admit, as
// flowstated's proxy does: one it refuses has its connection closed before
// anything reaches vswitchd.
func TestRelayAdmits(t *testing.T) {
	ctx, sb, lease, l, rl := relayEnv(t, "br-admit")
	if _, err := l.Renew(""); err != nil {
		t.Fatal(err)
	}
	sock := rl.Listen
	refused := make(chan struct{}, 16)
	admit := func(net.Conn) error {
		refused <- struct{}{}
		return errors.New("uid 65534 may not write module ovn")
	}
	const grace = 300 * time.Millisecond
	rctx, stop := context.WithCancel(ctx)
	cfg := Config{Lease: lease, OVSDB: sb.DBAddr(), Grace: grace, ExitWhenIdle: true, Logger: logger(t),
		Relays: []Relay{{Bridge: rl.Bridge, Module: "ovn", Listen: sock, Upstream: rl.Upstream, Listener: rl.Listener, Admit: admit}}}
	done := make(chan error, 1)
	go func() { done <- Run(rctx, cfg) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// The lease goes stale: the guard relays, but admits nobody.
	pollUntil(ctx, t, "the guard judging a relayed controller", func() bool {
		c := dialProxy(t, sock)
		defer c.Close()
		if m, err := readHello(c, 200*time.Millisecond); err == nil {
			t.Fatalf("a refused controller got vswitchd's HELLO %x through the guard", m)
		}
		select {
		case <-refused:
			return true
		default:
			return false
		}
	})
}

// TestRelayRebindsReplacedSocket: a flowstated that finds the guard frozen
// binds the proxy socket's path anew (server/proxies.go) and may die before
// the guard thaws; the guard's socket is then named by no path. Seen by the
// chaos harness (seed 3334930208: guard-freeze, flowstated-reboot, then
// flowstated-outage), the guard relayed on it and handed it to the next
// flowstated: every dial of the path was refused, through the relay and
// through flowstated alike. The guard binds the stale path again, before it
// relays and before it hands the socket over.
func TestRelayRebindsReplacedSocket(t *testing.T) {
	const grace = 400 * time.Millisecond
	ctx, lease, rl, renew := relayGuard(t, "br-rebind", grace)
	// A flowstated that got no hand-over binds the path anew, then dies.
	replace := func() {
		t.Helper()
		if err := os.Remove(rl.Listen); err != nil {
			t.Fatal(err)
		}
		ln, err := ofproxy.Bind(rl.Listen, rl.Upstream)
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
	}
	replace()

	// Stale: the relay is reachable by the path.
	var relayed net.Conn
	pollUntil(ctx, t, "vswitchd's HELLO through the guard after the path was bound anew", func() bool {
		c, err := net.DialTimeout("unix", rl.Listen, time.Second)
		if err != nil {
			return false
		}
		if _, err := readHello(c, 200*time.Millisecond); err != nil {
			c.Close()
			return false
		}
		relayed = c
		return true
	})
	relayed.Close()

	// Renewed, the path bound anew again: the socket handed over is the
	// one the path names.
	for end := time.Now().Add(2 * grace); time.Now().Before(end); time.Sleep(grace / 10) {
		renew()
	}
	replace()
	held, err := FetchListeners(lease)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := held[rl.Listen]
	if !ok {
		t.Fatalf("hand-over gave %v, want %s", held, rl.Listen)
	}
	defer got.Close()
	accepted := acceptOne(got)
	c, err := net.DialTimeout("unix", rl.Listen, time.Second)
	if err != nil {
		t.Fatalf("the handed-over socket is not reachable by its path: %v", err)
	}
	c.Close()
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatalf("accept on the handed-over socket: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a dial of the path did not reach the handed-over socket")
	}
}

// relayGuard runs a guard that exits when idle, with grace, holding the
// proxy socket of bridge br (relayEnv), until the test ends; it returns once
// the guard holds the lock, and renew renews the lease. At the end the
// guard is stopped with the lease fresh, and must return no error.
func relayGuard(t *testing.T, br string, grace time.Duration) (context.Context, string, Relay, func()) {
	t.Helper()
	ctx, sb, lease, l, rl := relayEnv(t, br)
	rctx, stop := context.WithCancel(ctx)
	cfg := Config{Lease: lease, OVSDB: sb.DBAddr(), Grace: grace, ExitWhenIdle: true, Logger: logger(t),
		Relays: []Relay{{Bridge: br, Listen: rl.Listen, Upstream: rl.Upstream, Listener: rl.Listener}}}
	done := make(chan error, 1)
	go func() { done <- Run(rctx, cfg) }()
	t.Cleanup(func() {
		stop()
		for end := time.Now().Add(2 * grace); time.Now().Before(end); time.Sleep(grace / 10) {
			_, _ = l.Renew("")
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	renew := func() {
		if _, err := l.Renew(""); err != nil {
			t.Fatal(err)
		}
	}
	pollUntil(ctx, t, "guard holds the lock", func() bool { renew(); p, _ := Present(lease); return p })
	// The relayer takes what the path names after the lock: a test that
	// binds the path anew before then would be taken for the guard's own
	// socket. Its hand-over socket is made after that.
	pollUntil(ctx, t, "guard's hand-over socket", func() bool {
		renew()
		st, err := os.Lstat(RelayPath(lease))
		return err == nil && st.Mode()&os.ModeSocket != 0
	})
	return ctx, lease, rl, renew
}
