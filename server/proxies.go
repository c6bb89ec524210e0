package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/guard"
	"github.com/flowstate-io/flowstate/server/ofproxy"
	"github.com/flowstate-io/flowstate/server/restore"
	"github.com/flowstate-io/flowstate/server/restore/owner"
	"github.com/flowstate-io/flowstate/server/restore/write"
)

// DefaultProxyDir holds the OpenFlow proxies' <bridge>.mgmt sockets.
const DefaultProxyDir = "/run/flowstate/openflow"

// When a proxied module counts as ready for the cold-boot gate.
const (
	// ProxyReadyAuto: at its controller's first barrier after its first
	// bundle commit on a connection (its first full install).
	ProxyReadyAuto = "auto"
	// ProxyReadyManual: when an operator says so (flowctl ready).
	ProxyReadyManual = "manual"
)

// ProxySpec is one --openflow-proxy MODULE=BRIDGE: the controller that
// connects to the proxy's socket for Bridge is recorded as Module.
type ProxySpec struct {
	Module, Bridge string
	// TCP, when set, is a loopback host:port the proxy also listens on
	// (--openflow-proxy-tcp BRIDGE=ADDR), for controllers that dial a
	// switch over TCP.
	TCP string
}

// ParseProxySpec parses MODULE=BRIDGE.
func ParseProxySpec(s string) (ProxySpec, error) {
	module, bridge, ok := strings.Cut(s, "=")
	if !ok {
		return ProxySpec{}, fmt.Errorf("%q: want MODULE=BRIDGE: %w", s, errdefs.ErrInvalidArgument)
	}
	if err := entry.ValidateName("module", module); err != nil {
		return ProxySpec{}, fmt.Errorf("%q: %w: %w", s, err, errdefs.ErrInvalidArgument)
	}
	if err := entry.ValidateName("bridge", bridge); err != nil {
		return ProxySpec{}, fmt.Errorf("%q: %w: %w", s, err, errdefs.ErrInvalidArgument)
	}
	return ProxySpec{Module: module, Bridge: bridge}, nil
}

// ParseProxyTCP parses --openflow-proxy-tcp BRIDGE=ADDR into specs: the
// proxy of BRIDGE, given with --openflow-proxy, listens on ADDR too.
func ParseProxyTCP(specs []ProxySpec, s string) error {
	bridge, addr, ok := strings.Cut(s, "=")
	if !ok || addr == "" {
		return fmt.Errorf("%q: want BRIDGE=HOST:PORT: %w", s, errdefs.ErrInvalidArgument)
	}
	for i := range specs {
		if specs[i].Bridge == bridge {
			if specs[i].TCP != "" {
				return fmt.Errorf("%q: bridge %s has a tcp address already: %w", s, bridge, errdefs.ErrInvalidArgument)
			}
			specs[i].TCP = addr
			return nil
		}
	}
	return fmt.Errorf("%q: no --openflow-proxy MODULE=%s: %w", s, bridge, errdefs.ErrInvalidArgument)
}

// validateProxies checks the proxy settings against the managed bridges:
// one proxy a bridge (its socket is named for the bridge), on a managed
// bridge (only those are restored), in a directory that is not vswitchd's.
func validateProxies(cfg *Config) error {
	if len(cfg.Proxies) == 0 {
		return nil
	}
	if cfg.ProxyDir == "" {
		cfg.ProxyDir = DefaultProxyDir
	}
	if cfg.ProxyReady == "" {
		cfg.ProxyReady = ProxyReadyAuto
	}
	if cfg.ProxyReady != ProxyReadyAuto && cfg.ProxyReady != ProxyReadyManual {
		return fmt.Errorf("server: --openflow-proxy-ready %q: want auto or manual", cfg.ProxyReady)
	}
	if !filepath.IsAbs(cfg.ProxyDir) {
		return fmt.Errorf("server: --openflow-proxy-dir %q: want an absolute path", cfg.ProxyDir)
	}
	if filepath.Clean(cfg.ProxyDir) == filepath.Clean(cfg.RunDir) {
		return fmt.Errorf("server: --openflow-proxy-dir %s is ovs-vswitchd's run directory: the proxy's sockets would replace the switch's", cfg.ProxyDir)
	}
	seen := map[string]string{}
	for _, p := range cfg.Proxies {
		if !slices.Contains(cfg.Bridges, p.Bridge) {
			return fmt.Errorf("server: --openflow-proxy %s=%s: %s is not a managed bridge (--bridge): only those are restored", p.Module, p.Bridge, p.Bridge)
		}
		if m, ok := seen[p.Bridge]; ok {
			return fmt.Errorf("server: --openflow-proxy: bridge %s is proxied twice (modules %s and %s): one socket a bridge, one module a socket", p.Bridge, m, p.Module)
		}
		seen[p.Bridge] = p.Module
	}
	return nil
}

// proxies are flowstated's OpenFlow proxies: one per proxied bridge, each
// recording its controller as one module through the engine's write
// pipeline (write.Recorder). Run owns them: start once the engine runs
// (so a socket that exists accepts), serve in its wait group, and close
// before the engine stops. list is written by start only, before the API
// and metrics serve.
type proxies struct {
	list []*proxy
	// lns are the listening sockets, one per cfg.Proxies (listen), shared
	// with the guard; bound: the ones this flowstated bound, whose paths
	// it removes when no guard shares them (guard off).
	lns       []*net.UnixListener
	bound     []string
	shared    bool
	log       *slog.Logger
	closeOnce sync.Once
}

// listen makes every proxy's listening socket, before the guard is
// spawned, so that the guard holds the same sockets (keeper.spawn): a guard
// that runs already (spawned by an earlier flowstated, or external) hands
// over the sockets it holds (guard.FetchListeners), and they are shared as
// they are, never unlinked and bound again; the others are bound here.
func (ps *proxies) listen(cfg *Config) error {
	if len(cfg.Proxies) == 0 {
		return nil
	}
	// Controllers running as another user (ovn-controller as openvswitch)
	// must reach the sockets; the sockets carry vswitchd's own mode.
	if err := os.MkdirAll(cfg.ProxyDir, 0o755); err != nil {
		return fmt.Errorf("server: openflow proxy directory: %w", err)
	}
	var held map[string]*net.UnixListener
	present := false
	if cfg.Guard.Mode != GuardOff {
		ps.shared = true
		var err error
		if held, err = guard.FetchListeners(cfg.Guard.Lease); err != nil {
			ps.log.Warn("openflow proxy: the guard did not hand over its sockets: binding them anew", "error", err)
		}
		present, _ = guard.Present(cfg.Guard.Lease)
	}
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for _, spec := range cfg.Proxies {
		path := filepath.Join(cfg.ProxyDir, spec.Bridge+".mgmt")
		if ln, ok := held[path]; ok {
			delete(held, path)
			ps.lns = append(ps.lns, ln)
			ps.log.Info("openflow proxy socket taken over from the guard", "bridge", spec.Bridge, "socket", path)
			continue
		}
		if present {
			// We hold the bridge (owner.LockBridges): a socket a
			// guard holds there without handing it over is one it can
			// no longer serve (frozen): replace it.
			if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
				_ = os.Remove(path)
			}
		}
		ln, err := ofproxy.Bind(path, filepath.Join(cfg.RunDir, spec.Bridge+".mgmt"))
		if err != nil {
			ps.close()
			return fmt.Errorf("server: --openflow-proxy %s=%s: %w", spec.Module, spec.Bridge, err)
		}
		ps.lns, ps.bound = append(ps.lns, ln), append(ps.bound, path)
	}
	return nil
}

// relays are the guard's view of the proxies' sockets (keeper.spawn).
func (ps *proxies) relays(cfg *Config) []guard.Relay {
	out := make([]guard.Relay, 0, len(ps.lns))
	for i, ln := range ps.lns {
		br := cfg.Proxies[i].Bridge
		out = append(out, guard.Relay{Bridge: br, Module: cfg.Proxies[i].Module, Listen: filepath.Join(cfg.ProxyDir, br+".mgmt"),
			Upstream: filepath.Join(cfg.RunDir, br+".mgmt"), Listener: ln})
	}
	return out
}

// adopt hands the engine the guard's evidence of each proxied bridge it
// relayed while flowstated was away (guard.Relayed), so that the bridge's
// first reconcile learns what the controller installed meanwhile instead of
// overwriting it (restore.Owners.AdoptRelayed); the evidence goes once the
// engine took it into account. Before the engine runs. The module learned
// is the one this flowstated records on the bridge's socket (one proxy a
// bridge); a record naming another module is not learned.
func (ps *proxies) adopt(cfg *Config, owners restore.Owners) {
	if cfg.Guard.Mode == GuardOff {
		return
	}
	lease := cfg.Guard.Lease
	for _, spec := range cfg.Proxies {
		m, ok, err := guard.ReadRelayed(lease, spec.Bridge)
		if err != nil {
			ps.log.Warn("openflow proxy: the guard's record of its relayed sessions is unreadable: replaying the store as usual", "bridge", spec.Bridge, "error", err)
			_ = guard.ClearRelayed(lease, guard.Relayed{Bridge: spec.Bridge})
			continue
		}
		if !ok {
			continue
		}
		if m.Module != "" && m.Module != spec.Module {
			ps.log.Warn("openflow proxy: the guard relayed the bridge for another module: replaying the store as usual", "bridge", spec.Bridge, "module", spec.Module, "relayed_for", m.Module)
			_ = guard.ClearRelayed(lease, m)
			continue
		}
		taken := func() {
			if err := guard.ClearRelayed(lease, m); err != nil {
				ps.log.Warn("openflow proxy: removing the guard's record of its relayed sessions", "bridge", spec.Bridge, "error", err)
			}
		}
		keep := func(k ofproxy.Keeper) {
			ks, ok, err := guard.ReadRelayedKept(lease, spec.Bridge)
			switch {
			case err != nil:
				ps.log.Warn("openflow proxy: the guard's record of what unrecorded controllers installed through its relay is unreadable: the learning may take it for the module's", "bridge", spec.Bridge, "error", err)
			case ok && (m.Vswitchd == "" || ks.Vswitchd == m.Vswitchd):
				ks.Replay(k)
			}
		}
		if err := owners.AdoptRelayed(spec.Bridge, spec.Module, owner.Relayed{Vswitchd: m.Vswitchd, Live: m.Live, Keep: keep, Taken: taken}); err != nil {
			ps.log.Warn("openflow proxy: not learning what the guard relayed", "bridge", spec.Bridge, "module", spec.Module, "error", err)
			continue
		}
		ps.log.Info("openflow proxy: the guard relayed the controller while flowstated was away: the first replay learns what it installed",
			"bridge", spec.Bridge, "module", spec.Module, "last_relayed", m.At, "vswitchd", m.Vswitchd)
	}
}

type proxy struct {
	spec ProxySpec
	p    *ofproxy.Proxy
	rec  write.Recorder
}

// start makes a proxy of every socket listen made. On an error every
// socket is closed (and removed when no guard shares it).
func (ps *proxies) start(cfg *Config, writes restore.Writes, owners restore.Owners, evlog *events.Log) error {
	if len(cfg.Proxies) == 0 {
		return nil
	}
	log := ps.log
	for i, spec := range cfg.Proxies {
		admit, err := cfg.Writers.proxyAdmission(log, spec, "/proc")
		if err != nil {
			ps.close()
			return err
		}
		rec, err := writes.Recorder(spec.Bridge, spec.Module)
		if err != nil {
			ps.close()
			return err
		}
		kept, err := owners.Kept(spec.Bridge)
		if err != nil {
			rec.Close()
			ps.close()
			return err
		}
		pcfg := ofproxy.Config{
			Bridge:    spec.Bridge,
			ListenTCP: spec.TCP,
			Listen:    filepath.Join(cfg.ProxyDir, spec.Bridge+".mgmt"),
			Upstream:  filepath.Join(cfg.RunDir, spec.Bridge+".mgmt"),
			Listener:  ps.lns[i],
			Logger:    log.With("module", spec.Module),
			Recorder:  rec,
			Keeper:    kept,
			Admit:     admit,
			Connected: func() {
				rec.Connected()
				evlog.Publish(events.Event{Type: events.ProxyConnected, Bridge: spec.Bridge, Module: spec.Module,
					Message: "a controller connected to the OpenFlow proxy"})
			},
			Disconnected: func(cause string) {
				evlog.Publish(events.Event{Type: events.ProxyDisconnected, Bridge: spec.Bridge, Module: spec.Module,
					Message: "a controller's OpenFlow proxy connection ended: " + cause})
			},
		}
		if cfg.ProxyReady == ProxyReadyAuto {
			pcfg.Installed = func() {
				if err := rec.Ready(); err != nil {
					log.Warn("openflow proxy: could not mark the module ready", "bridge", spec.Bridge, "module", spec.Module, "error", err)
				}
			}
		}
		p, err := ofproxy.Listen(pcfg)
		if err != nil {
			rec.Close()
			ps.close()
			return fmt.Errorf("server: --openflow-proxy %s=%s: %w", spec.Module, spec.Bridge, err)
		}
		ps.list = append(ps.list, &proxy{spec: spec, p: p, rec: rec})
		log.Info("openflow proxy listening", "bridge", spec.Bridge, "module", spec.Module, "socket", p.Addr(), "tcp", p.TCPAddr(), "upstream", pcfg.Upstream, "ready", cfg.ProxyReady)
	}
	return nil
}

// serve runs every proxy's accept loop in wg until ctx ends or close.
// A proxy whose socket fails is logged and stays down: the controller
// then finds no socket, as with a vswitchd that is not running.
func (ps *proxies) serve(ctx context.Context, wg *sync.WaitGroup) {
	for _, p := range ps.list {
		wg.Go(func() {
			if err := p.p.Serve(ctx); err != nil && !errors.Is(err, context.Canceled) {
				ps.log.Error("openflow proxy stopped", "bridge", p.spec.Bridge, "module", p.spec.Module, "error", err)
			}
		})
	}
}

// close closes every proxy, once: their sessions end. Their sockets stay
// while a guard may share them (it relays them once flowstated is away);
// without a guard the ones this flowstated bound go (a second removal could
// take a socket another process made meanwhile).
func (ps *proxies) close() {
	ps.closeOnce.Do(func() {
		for _, p := range ps.list {
			if err := p.p.Close(); err != nil {
				ps.log.Warn("openflow proxy: close", "bridge", p.spec.Bridge, "error", err)
			}
			p.rec.Close()
		}
		for _, ln := range ps.lns {
			ln.Close()
		}
		if ps.shared {
			return
		}
		for _, path := range ps.bound {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				ps.log.Warn("openflow proxy: remove socket", "socket", path, "error", err)
			}
		}
	})
}

// status is the Status API's view of the proxies.
func (ps *proxies) status() []*flowstatev1.ProxyStatus {
	out := make([]*flowstatev1.ProxyStatus, 0, len(ps.list))
	for _, p := range ps.list {
		st := p.p.Stats()
		last, lastErr, lastErrAt := st.Installs()
		pb := &flowstatev1.ProxyStatus{
			Bridge: p.spec.Bridge, Module: p.spec.Module, Socket: p.p.Addr(), TcpListen: p.p.TCPAddr(),
			Connections:      uint32(p.p.Sessions()),
			RecordedMessages: st.Recorded.Load(),
			LastError:        lastErr,
		}
		if !last.IsZero() {
			pb.LastInstall = timestamppb.New(last)
		}
		if !lastErrAt.IsZero() {
			pb.LastErrorTime = timestamppb.New(lastErrAt)
		}
		out = append(out, pb)
	}
	return out
}

var (
	descProxyConns = prometheus.NewDesc("flowstate_proxy_connections",
		"Controller connections the OpenFlow proxy relays now.", []string{"bridge", "module"}, nil)
	descProxyAccepted = prometheus.NewDesc("flowstate_proxy_connections_accepted_total",
		"Controller connections the OpenFlow proxy accepted and relayed.", []string{"bridge", "module"}, nil)
	descProxyRefused = prometheus.NewDesc("flowstate_proxy_connections_refused_total",
		"Controller connections the OpenFlow proxy closed at once because vswitchd's socket did not accept.", []string{"bridge", "module"}, nil)
	descProxyDenied = prometheus.NewDesc("flowstate_proxy_connections_denied_total",
		"Controller connections the OpenFlow proxy closed at once because their peer may not write the module (--module-writer); the log names the peer.", []string{"bridge", "module"}, nil)
	descProxyMessages = prometheus.NewDesc("flowstate_proxy_messages_total",
		"OpenFlow messages the proxy read from the controller (to_switch) and from the switch (to_controller), by type; the controller's state messages among them are recorded (flowstate_proxy_recorded_total), refused or passed through.", []string{"bridge", "module", "direction", "type"}, nil)
	descProxyRecorded = prometheus.NewDesc("flowstate_proxy_recorded_total",
		"State messages of the controller the proxy recorded as the module's declarations (a bundle's messages one by one), by type.", []string{"bridge", "module", "type"}, nil)
	descProxyAnswered = prometheus.NewDesc("flowstate_proxy_answered_total",
		"Messages the recording proxy sent the controller itself (bundle replies, errors), and of those the OFPT_ERRORs.", []string{"bridge", "module", "kind"}, nil)
)

// proxyCollector exports the proxies' counters, read at scrape time.
type proxyCollector struct{ ps *proxies }

func (c proxyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descProxyConns, descProxyAccepted, descProxyRefused, descProxyDenied, descProxyMessages, descProxyRecorded, descProxyAnswered} {
		ch <- d
	}
}

func (c proxyCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.ps.list {
		br, mod := p.spec.Bridge, p.spec.Module
		st := p.p.Stats()
		ch <- prometheus.MustNewConstMetric(descProxyConns, prometheus.GaugeValue, float64(p.p.Sessions()), br, mod)
		ch <- prometheus.MustNewConstMetric(descProxyAccepted, prometheus.CounterValue, float64(st.Accepted.Load()), br, mod)
		ch <- prometheus.MustNewConstMetric(descProxyRefused, prometheus.CounterValue, float64(st.Refused.Load()), br, mod)
		ch <- prometheus.MustNewConstMetric(descProxyDenied, prometheus.CounterValue, float64(st.Denied.Load()), br, mod)
		for dir, name := range []string{ofproxy.ToSwitch: "to_switch", ofproxy.ToController: "to_controller"} {
			for typ, n := range st.ByType(dir) {
				ch <- prometheus.MustNewConstMetric(descProxyMessages, prometheus.CounterValue, float64(n), br, mod, name, typ)
			}
		}
		for typ, n := range st.RecordedByType() {
			ch <- prometheus.MustNewConstMetric(descProxyRecorded, prometheus.CounterValue, float64(n), br, mod, typ)
		}
		ch <- prometheus.MustNewConstMetric(descProxyAnswered, prometheus.CounterValue, float64(st.Answered.Load()), br, mod, "all")
		ch <- prometheus.MustNewConstMetric(descProxyAnswered, prometheus.CounterValue, float64(st.Errors.Load()), br, mod, "error")
	}
}
