package ofproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// Config configures a Proxy.
type Config struct {
	// Bridge names the bridge, for logs and counters.
	Bridge string
	// Listen is the path of the proxy's socket, <dir>/<Bridge>.mgmt.
	Listen string
	// ListenTCP, when set, is a loopback host:port the proxy also accepts
	// controllers on, for those that dial a switch over TCP (os-ken's
	// --ofp-switch-address-list), as vswitchd's own ptcp: would. Any local
	// user can connect to it, as to a ptcp: of vswitchd; Admit decides
	// whom it relays.
	ListenTCP string
	// Admit, when set, is asked about every accepted controller
	// connection (unix or TCP) before anything of it is read or vswitchd
	// is dialled: an error, which should say who the peer is and why it
	// may not, closes the connection, logged and counted (Stats.Denied).
	// flowstated's holds the peer to the module's --module-writer rules.
	Admit func(net.Conn) error
	// Upstream is vswitchd's socket for the bridge, <rundir>/<Bridge>.mgmt.
	Upstream string
	// Listener, when set, is the socket at Listen, bound already (Bind)
	// and possibly shared with another process (flowstated and its guard
	// hold the same socket): Listen takes it as it is, and Close leaves
	// the path, which belongs to whoever bound it.
	Listener *net.UnixListener
	// DialTimeout bounds the upstream dial of each accepted connection
	// (default 2s).
	DialTimeout time.Duration
	// Logger receives connection events (optional).
	Logger *slog.Logger
	// Recorder, when set, takes the state changes of every OpenFlow 1.5
	// controller connection in place of the switch (see record.go); nil
	// relays everything.
	Recorder Recorder
	// Keeper, when set, is told what the sessions that are relayed
	// without recording (not OpenFlow 1.5) install, so that its owner
	// leaves those entries alone (unrecorded.go); without a Recorder
	// (the guard's relay) the OpenFlow 1.5 sessions are not followed.
	Keeper Keeper
	// Installed, when set, is called once per recording session, at the
	// controller's first barrier after its first bundle committed: its
	// first install is complete (the module's readiness).
	Installed func()
	// Connected and Disconnected, when set, are called when a controller
	// connection is relayed and when it has ended (with why), for events.
	// They must not block.
	Connected    func()
	Disconnected func(cause string)
}

// Proxy relays controller connections on one socket to vswitchd.
type Proxy struct {
	cfg  Config
	log  *slog.Logger
	ln   *net.UnixListener
	tcp  net.Listener // nil without ListenTCP
	stop context.CancelFunc
	ctx  context.Context

	owned bool // Listen bound ln: Close removes its path

	wg sync.WaitGroup // Serve's accept loop and every session's goroutines

	mu       sync.Mutex
	sessions map[*session]struct{}
	closed   bool

	stats    Stats
	refusing atomic.Bool // upstream unreachable: log the episode once
}

// Stats are a proxy's counters since Listen.
type Stats struct {
	Accepted atomic.Uint64 // controller connections relayed
	Refused  atomic.Uint64 // closed at once: upstream unreachable
	Denied   atomic.Uint64 // closed at once: Admit refused the peer
	Messages [2]atomic.Uint64
	Answered atomic.Uint64 // messages the recording proxy sent the controller itself
	Errors   atomic.Uint64 // of those, OFPT_ERRORs
	Recorded atomic.Uint64 // state messages the Recorder took
	types    [2]typeCounts
	recorded typeCounts

	mu          sync.Mutex
	lastInstall time.Time // the last change the Recorder took
	lastError   string    // the last refusal or unknown outcome
	lastErrorAt time.Time
}

// Installs returns when the Recorder last took a change, and the last
// change it refused or could not tell the outcome of, with its time.
func (s *Stats) Installs() (last time.Time, lastErr string, lastErrAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastInstall, s.lastError, s.lastErrorAt
}

// RecordedByType returns the state messages the Recorder took, by kind
// (FLOW_MOD, GROUP_MOD, METER_MOD, NXT_TLV_TABLE_MOD), a bundle's messages
// counted one by one.
func (s *Stats) RecordedByType() map[string]uint64 { return s.recorded.snapshot() }

// applied records the outcome of one Apply of msgs.
func (s *Stats) applied(msgs []ofconn.Message, err error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.lastError, s.lastErrorAt = err.Error(), now
		return
	}
	s.Recorded.Add(uint64(len(msgs)))
	for _, m := range msgs {
		s.recorded.add(keyOf(m))
	}
	s.lastInstall = now
}

// ByType returns the messages relayed in direction dir (ToSwitch or
// ToController), by kind (FLOW_MOD, BARRIER_REQUEST, NXT_PACKET_IN2, ...).
func (s *Stats) ByType(dir int) map[string]uint64 { return s.types[dir].snapshot() }

// Directions of Stats.Messages.
const (
	ToSwitch     = 0
	ToController = 1
)

const bufSize = 64 << 10

// Listen creates the proxy's socket (Bind), or takes Config.Listener. A
// stale socket at the path (nobody accepts on it) is replaced; a live one
// is an error, so that two proxies never share a path. The socket takes the
// mode and owner of the upstream socket when that exists, else mode 0660.
func Listen(cfg Config) (*Proxy, error) {
	if cfg.Listen == "" || cfg.Upstream == "" {
		return nil, errors.New("ofproxy: listen and upstream paths are required")
	}
	if cfg.Listen == cfg.Upstream {
		return nil, fmt.Errorf("ofproxy: %s is both the proxy's socket and vswitchd's", cfg.Listen)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, owned := cfg.Listener, false
	if ln == nil {
		var err error
		if ln, err = Bind(cfg.Listen, cfg.Upstream); err != nil {
			return nil, err
		}
		owned = true
	}
	var tcp net.Listener
	if cfg.ListenTCP != "" {
		var err error
		if tcp, err = listenLoopback(cfg.ListenTCP); err != nil {
			if owned {
				ln.Close()
				os.Remove(cfg.Listen)
			}
			return nil, err
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Proxy{
		cfg:      cfg,
		log:      log.With("bridge", cfg.Bridge, "socket", cfg.Listen),
		ln:       ln,
		owned:    owned,
		tcp:      tcp,
		ctx:      ctx,
		stop:     stop,
		sessions: make(map[*session]struct{}),
	}, nil
}

// Bind creates a proxy socket at path for the switch socket upstream: a
// stale socket there is replaced, a live one is an error, and the new one
// takes upstream's mode and owner. Closing the listener leaves the path.
func Bind(path, upstream string) (*net.UnixListener, error) {
	if err := removeStale(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("ofproxy: listen on %s: %w", path, err)
	}
	// Close must not remove a path another process took over meanwhile;
	// its owner removes it, once.
	ln.SetUnlinkOnClose(false)
	if err := copyOwnership(path, upstream); err != nil {
		ln.Close()
		os.Remove(path)
		return nil, err
	}
	return ln, nil
}

// listenLoopback listens on addr, which must name a loopback address: only
// a local peer can be told apart (Admit), so it must not be reachable from
// the network.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("ofproxy: tcp listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("ofproxy: tcp listen address %q: want a loopback IP address (127.0.0.1, ::1): only local peers can be told apart", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ofproxy: listen on %s: %w", addr, err)
	}
	return ln, nil
}

// TCPAddr is the bound address of the TCP listener ("" without one).
func (p *Proxy) TCPAddr() string {
	if p.tcp == nil {
		return ""
	}
	return p.tcp.Addr().String()
}

// removeStale removes a socket at path that nobody accepts on.
func removeStale(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ofproxy: %w", err)
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("ofproxy: %s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("ofproxy: %s is in use by another process", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("ofproxy: remove stale socket: %w", err)
	}
	return nil
}

// copyOwnership gives path the mode and owner of the upstream socket, so
// the proxy admits exactly the users vswitchd admits.
func copyOwnership(path, upstream string) error {
	mode, uid, gid := os.FileMode(0o660), -1, -1
	if st, err := os.Stat(upstream); err == nil {
		mode = st.Mode().Perm()
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(sys.Uid), int(sys.Gid)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("ofproxy: %w", err)
	}
	if uid >= 0 && (uid != os.Getuid() || gid != os.Getgid()) {
		if err := os.Lchown(path, uid, gid); err != nil {
			return fmt.Errorf("ofproxy: give %s the owner of %s: %w", path, upstream, err)
		}
	}
	return nil
}

// Addr is the proxy's socket path.
func (p *Proxy) Addr() string { return p.cfg.Listen }

// Stats returns the proxy's counters.
func (p *Proxy) Stats() *Stats { return &p.stats }

// Sessions is the number of controller connections being relayed.
func (p *Proxy) Sessions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sessions)
}

// Serve accepts controller connections until ctx ends or Close is called,
// then closes every session and waits for them. It returns nil after a
// shutdown, or the accept error that stopped it.
func (p *Proxy) Serve(ctx context.Context) error {
	p.wg.Add(1)
	defer p.wg.Done()
	stop := context.AfterFunc(ctx, func() { p.shutdown() })
	defer stop()
	tcpDone := make(chan error, 1)
	if p.tcp != nil {
		go func() { tcpDone <- p.acceptOn(p.tcp, p.cfg.ListenTCP) }()
	} else {
		tcpDone <- nil
	}
	err := p.acceptOn(p.ln, p.cfg.Listen)
	// Either loop's end shut the proxy down, which closed both listeners.
	return errors.Join(err, <-tcpDone)
}

// acceptOn accepts controller connections on ln until the proxy is shut
// down (nil) or ln fails (which shuts the proxy down).
func (p *Proxy) acceptOn(ln net.Listener, name string) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if p.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			p.shutdown()
			return fmt.Errorf("ofproxy: accept on %s: %w", name, err)
		}
		p.accept(c)
	}
}

// accept dials vswitchd for c, or closes c at once when Admit refuses its
// peer or vswitchd's socket does not accept.
func (p *Proxy) accept(c net.Conn) {
	if f := p.cfg.Admit; f != nil {
		if err := f(c); err != nil {
			p.stats.Denied.Add(1)
			p.log.Warn("ofproxy: refused a controller connection", "listener", c.LocalAddr().String(), "peer", c.RemoteAddr().String(), "error", err)
			c.Close()
			return
		}
	}
	d := net.Dialer{Timeout: p.cfg.DialTimeout}
	up, err := d.DialContext(p.ctx, "unix", p.cfg.Upstream)
	if err != nil {
		p.stats.Refused.Add(1)
		if !p.refusing.Swap(true) {
			p.log.Warn("ofproxy: vswitchd's socket does not accept: refusing controller connections until it does", "upstream", p.cfg.Upstream, "error", err)
		}
		c.Close()
		return
	}
	if p.refusing.Swap(false) {
		p.log.Info("ofproxy: vswitchd's socket accepts again", "upstream", p.cfg.Upstream)
	}
	s := &session{p: p, down: c, up: up.(*net.UnixConn), downW: bufio.NewWriterSize(c, bufSize), switchHello: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.sessions[s] = struct{}{}
	p.mu.Unlock()
	p.stats.Accepted.Add(1)
	p.log.Info("ofproxy: controller connected")
	if f := p.cfg.Connected; f != nil {
		f()
	}
	p.wg.Add(2)
	s.pumps.Store(2) // before either starts: the last out removes the session
	go s.pump(ToSwitch)
	go s.pump(ToController)
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// shutdown stops accepting and closes every session; it does not wait.
func (p *Proxy) shutdown() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	sessions := make([]*session, 0, len(p.sessions))
	for s := range p.sessions {
		sessions = append(sessions, s)
	}
	p.mu.Unlock()
	p.stop()
	p.ln.Close()
	if p.tcp != nil {
		p.tcp.Close()
	}
	for _, s := range sessions {
		s.close()
	}
}

// Close stops the proxy, waits for every goroutine and removes its socket
// (not a Config.Listener's).
func (p *Proxy) Close() error {
	p.shutdown()
	p.wg.Wait()
	if !p.owned {
		return nil
	}
	if err := os.Remove(p.cfg.Listen); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("ofproxy: remove %s: %w", p.cfg.Listen, err)
	}
	return nil
}
