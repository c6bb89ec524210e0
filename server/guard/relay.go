package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowstate-io/flowstate/server/ofproxy"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// Relay is one OpenFlow proxy socket (flowstated's --openflow-proxy) the
// guard holds with flowstated, so that the proxied controller keeps a path
// to its bridge while flowstated is away (see the package documentation).
type Relay struct {
	// Bridge is the proxied bridge, Module the module its controller
	// writes as (flowstated's --openflow-proxy MODULE=BRIDGE).
	Bridge, Module string
	// Listen is the proxy's socket path, Upstream vswitchd's socket.
	Listen, Upstream string
	// Listener is the socket at Listen, shared with flowstated (inherited
	// from the flowstated that spawned the guard); nil: the guard binds
	// Listen itself (an external guard started before flowstated).
	Listener *net.UnixListener
	// Admit, when set, checks each controller before it is relayed, as
	// flowstated's proxy does (ofproxy.Config.Admit): while flowstated is
	// away a relayed controller writes the module's flows on the switch.
	Admit func(net.Conn) error
}

// RelayPath is the guard's hand-over socket beside the lease: a flowstated
// that connects to it receives the relays' listening sockets (SCM_RIGHTS),
// so that it shares them instead of binding their paths again.
func RelayPath(lease string) string { return lease + ".relay" }

// relayer holds the relays' sockets for as long as the guard runs, relays
// while flowstated is away, and hands the sockets to a flowstated that asks.
// Its methods are called from Run's goroutine, except serveHandOver, which
// runs in wg and stops the relaying itself (amu).
type relayer struct {
	relays []Relay
	// keepers[i] notes what relays[i]'s unrecorded sessions install
	// (relaykept.go); it outlives each relaying period.
	keepers []*relayKeeper
	// live[i] is the vswitchd of relays[i]'s bridge when the guard last
	// saw flowstated renew its lease (Relayed.Live).
	live []string
	// mu guards lns and ids, which rebindLocked replaces from Run's
	// goroutine and serveHandOver's.
	mu sync.Mutex
	// lns[i] is relays[i]'s socket (its Listener, or one bound again), and
	// ids[i] the file relays[i].Listen named when it was bound there.
	lns   []*net.UnixListener
	ids   []sockID
	lease string
	log   *slog.Logger
	ctl   *net.UnixListener // the hand-over socket, nil without one
	wg    sync.WaitGroup
	grace time.Duration
	// amu guards active and back, which the hand-over changes too.
	amu    sync.Mutex
	active []*ofproxy.Proxy // relaying now: flowstated is away
	// back is the flowstated that took the sockets over while the lease
	// was still stale (handback.go): the guard does not relay again while
	// it may be starting.
	back *handBack
}

// newRelayer binds the relays that have no listener and serves the
// hand-over socket. A relay that cannot be bound is left out and logged: the
// guard's first duty, the release, does not depend on it.
func newRelayer(lease string, relays []Relay, grace time.Duration, log *slog.Logger) *relayer {
	r := &relayer{lease: lease, grace: grace, log: log}
	for _, rl := range relays {
		if rl.Listener == nil {
			ln, err := ofproxy.Bind(rl.Listen, rl.Upstream)
			if err != nil {
				log.Error("guard: cannot hold the openflow proxy socket: its controller has no path to the bridge while flowstated is away", "bridge", rl.Bridge, "err", err)
				continue
			}
			rl.Listener = ln
		}
		id, _ := pathID(rl.Listen)
		r.relays, r.lns, r.ids = append(r.relays, rl), append(r.lns, rl.Listener), append(r.ids, id)
		r.keepers = append(r.keepers, newRelayKeeper(lease, rl, log))
		r.live = append(r.live, "")
	}
	if len(r.relays) == 0 {
		return r
	}
	path := RelayPath(lease)
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path) // an earlier guard's: this one holds the lock
	}
	ctl, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err == nil {
		ctl.SetUnlinkOnClose(false)
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		if ctl != nil {
			ctl.Close()
		}
		log.Error("guard: no hand-over socket: a restarted flowstated binds the openflow proxy sockets anew", "path", path, "err", err)
		return r
	}
	r.ctl = ctl
	r.wg.Go(r.serveHandOver)
	return r
}

// follow relays while flowstated is away and stops once it is back: its
// sessions are closed, so that the controller reconnects through flowstated,
// which records its reinstall (the clear and install of a reconnect).
func (r *relayer) follow(away bool) {
	r.amu.Lock()
	defer r.amu.Unlock()
	if !away || !r.back.starting(r.grace) {
		r.back.close()
		r.back = nil
	}
	switch {
	case away && r.back != nil:
		// A flowstated took the sockets over and is starting: it learns
		// what the relayed sessions installed, which must not change
		// under it.
	case away && r.active == nil && len(r.relays) > 0:
		for i := range r.relays {
			r.mu.Lock()
			r.rebindLocked(i)
			ln, err := dupListener(r.lns[i])
			r.mu.Unlock()
			rl := r.relays[i]
			live := r.live[i]
			if err == nil {
				var p *ofproxy.Proxy
				p, err = ofproxy.Listen(ofproxy.Config{Bridge: rl.Bridge, Listen: rl.Listen, Upstream: rl.Upstream,
					Listener: ln, Admit: rl.Admit, Keeper: r.keepers[i], Logger: r.log.With("bridge", rl.Bridge), Connected: func() { r.markRelayed(rl, live) }})
				if err == nil {
					r.active = append(r.active, p)
					r.wg.Go(func() {
						if err := p.Serve(context.Background()); err != nil {
							r.log.Error("guard: relay stopped", "bridge", rl.Bridge, "err", err)
						}
					})
					continue
				}
				ln.Close()
			}
			r.log.Error("guard: cannot relay the openflow proxy socket", "bridge", rl.Bridge, "err", err)
		}
		r.log.Warn("guard: flowstated is away: relaying its openflow proxy sockets straight to ovs-vswitchd, unrecorded", "relays", len(r.active))
	case !away && r.active != nil:
		r.stopLocked()
		r.log.Info("guard: flowstated is back: relayed controllers disconnected, to reconnect through flowstated")
	}
}

// noteLive notes the vswitchd each relay's bridge runs now: flowstated has
// just renewed its lease, so its entries are on that vswitchd, or about to
// be.
func (r *relayer) noteLive() {
	for i, rl := range r.relays {
		r.live[i] = ovsconfig.VswitchdIdentity(filepath.Dir(rl.Upstream))
	}
}

// stopLocked ends the relaying, if any: its sessions close, what their
// unrecorded sessions installed is written; the sockets stay. r.amu is held.
func (r *relayer) stopLocked() {
	for _, p := range r.active {
		_ = p.Close() // a Config.Listener: the path stays
	}
	r.active = nil
	for _, k := range r.keepers {
		k.flush()
	}
}

// holding reports whether the guard holds a socket whose path still names
// one: a controller may reach it.
func (r *relayer) holding() bool {
	for _, rl := range r.relays {
		if st, err := os.Lstat(rl.Listen); err == nil && st.Mode()&os.ModeSocket != 0 {
			return true
		}
	}
	return false
}

// close stops relaying and handing over and closes the guard's sockets; the
// relays' paths stay for flowstated, which shares them.
func (r *relayer) close() {
	r.amu.Lock()
	r.stopLocked()
	r.back.close()
	r.back = nil
	r.amu.Unlock()
	if r.ctl != nil {
		r.ctl.Close()
		_ = os.Remove(RelayPath(r.lease))
	}
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ln := range r.lns {
		ln.Close()
	}
}

// sockID is the file a socket path names.
type sockID struct{ dev, ino uint64 }

// pathID is the socket file path names, if any.
func pathID(path string) (sockID, bool) {
	st, err := os.Lstat(path)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		return sockID{}, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return sockID{}, false
	}
	return sockID{dev: uint64(sys.Dev), ino: sys.Ino}, true //nolint:unconvert // Dev is not uint64 everywhere
}

// rebindLocked binds relay i's path again when it no longer names the
// guard's socket: a flowstated that found the guard frozen bound the path
// anew (server/proxies.go) and has gone since. The guard's socket, named by
// no path, would relay nobody and, handed over, leave the next flowstated's
// proxy unreachable too. A path another process listens on is left to it
// (ofproxy.Bind refuses it), and a removed path stays removed. r.mu is
// held.
func (r *relayer) rebindLocked(i int) {
	rl := r.relays[i]
	if id, ok := pathID(rl.Listen); !ok || id == r.ids[i] {
		return // the guard's, or removed: the proxy retired (holding)
	}
	ln, err := ofproxy.Bind(rl.Listen, rl.Upstream)
	if err != nil {
		r.log.Warn("guard: the openflow proxy socket's path names another socket, in use: keeping the one the guard holds", "bridge", rl.Bridge, "socket", rl.Listen, "err", err)
		return
	}
	r.lns[i].Close()
	r.lns[i] = ln
	r.ids[i], _ = pathID(rl.Listen)
	r.log.Info("guard: the openflow proxy socket had been bound anew by a flowstated now gone: bound it again", "bridge", rl.Bridge, "socket", rl.Listen)
}

// serveHandOver answers each connection to the hand-over socket with the
// relays' listening sockets, until close.
func (r *relayer) serveHandOver() {
	for {
		c, err := r.ctl.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				r.log.Warn("guard: hand-over socket failed", "err", err)
			}
			return
		}
		if err := r.handOver(c); err != nil {
			r.log.Warn("guard: hand-over refused", "err", err)
		}
		c.Close()
	}
}

// handOver sends c the relays' socket paths, one a line, and their file
// descriptors: only to a peer of the guard's own uid or root. The relaying
// has ended before the peer has them (takenBack).
func (r *relayer) handOver(c *net.UnixConn) error {
	cred, err := peerCred(c)
	if err != nil {
		return err
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("guard: hand-over: peer uid %d is neither root nor the guard's", cred.Uid)
	}
	var (
		paths []string
		fds   []int
	)
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	r.mu.Lock()
	for i := range r.relays {
		r.rebindLocked(i)
		fd, err := dupFD(r.lns[i])
		if err != nil {
			r.mu.Unlock()
			return err
		}
		fds, paths = append(fds, fd), append(paths, r.relays[i].Listen)
	}
	r.mu.Unlock()
	r.takenBack(cred)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _, err = c.WriteMsgUnix([]byte(strings.Join(paths, "\n")+"\n"), unix.UnixRights(fds...), nil)
	return err
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}

// maxRelays bounds the sockets one hand-over carries.
const maxRelays = 64

// FetchListeners asks the guard of lease for the listening sockets it holds
// for flowstated's proxies, by path. No guard serving a hand-over socket is
// no error: the map is empty.
func FetchListeners(lease string) (map[string]*net.UnixListener, error) {
	c, err := net.DialTimeout("unix", RelayPath(lease), time.Second)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil
		}
		return nil, fmt.Errorf("guard: hand-over: %w", err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	buf, oob := make([]byte, 64<<10), make([]byte, unix.CmsgSpace(maxRelays*4))
	n, oobn, _, _, err := c.(*net.UnixConn).ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("guard: hand-over: %w", err)
	}
	var fds []int
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	for _, m := range msgs {
		got, perr := unix.ParseUnixRights(&m)
		err = errors.Join(err, perr)
		fds = append(fds, got...)
	}
	paths := strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n")
	if err == nil && len(paths) != len(fds) {
		err = fmt.Errorf("guard: hand-over: %d paths for %d sockets", len(paths), len(fds))
	}
	out := make(map[string]*net.UnixListener, len(fds))
	for i, fd := range fds {
		if err != nil {
			_ = unix.Close(fd)
			continue
		}
		var ln *net.UnixListener
		if ln, err = ListenerFromFD(fd, paths[i]); err == nil {
			out[paths[i]] = ln
		}
	}
	if err != nil {
		for _, ln := range out {
			ln.Close()
		}
		return nil, err
	}
	return out, nil
}

// ListenerFromFD makes a listener of fd, a listening unix socket received or
// inherited, and closes fd. fd must be non-blocking, as Go's sockets are:
// os.File.Fd on a socket Go made non-blocking would make it blocking for
// every process sharing it (flowstated's accept loop among them).
func ListenerFromFD(fd int, name string) (*net.UnixListener, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("guard: socket %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("guard: socket %s: %w", name, err)
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("guard: socket %s: not a unix socket listener", name)
	}
	ul.SetUnlinkOnClose(false)
	return ul, nil
}

// ListenerFile is a duplicate of ln's socket for exec.Cmd.ExtraFiles. Unlike
// ln.File, it leaves the socket non-blocking when exec reads its Fd.
func ListenerFile(ln *net.UnixListener) (*os.File, error) {
	fd, err := dupFD(ln)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), ln.Addr().String()), nil
}

// dupListener is a second listener on ln's socket, closed independently.
func dupListener(ln *net.UnixListener) (*net.UnixListener, error) {
	fd, err := dupFD(ln)
	if err != nil {
		return nil, err
	}
	return ListenerFromFD(fd, ln.Addr().String())
}

// dupFD duplicates ln's descriptor (close-on-exec), without os.File.Fd.
func dupFD(ln *net.UnixListener) (int, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("guard: dup socket: %w", err)
	}
	nfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, fmt.Errorf("guard: dup socket: %w", err)
	}
	if derr != nil {
		return -1, fmt.Errorf("guard: dup socket: %w", derr)
	}
	return nfd, nil
}
