package server

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/flowstate-io/flowstate/server/peercred"
)

// errNoGroupRule is why a TCP peer's groups were not looked up: its
// module has no rule by gid, so only its uid can count.
var errNoGroupRule = errors.New("not looked up: no rule of the module is by gid")

// proxyAdmission returns the check the OpenFlow proxy of spec runs on
// each controller connection before relaying it (ofproxy.Config.Admit):
// what the controller sends is recorded as spec.Module, so its peer must
// be one that may write that module over gRPC (mayWrite). The unix peer
// is known by SO_PEERCRED, the loopback TCP peer by the owner of its
// socket (peercred). Without rules it is nil: whoever reaches the socket
// or the port is admitted, as gRPC admits every peer then. A TCP listener
// whose peers could not be looked up is refused here, at start, not at
// every connection.
func (w Writers) proxyAdmission(log *slog.Logger, spec ProxySpec, procDir string) (func(net.Conn) error, error) {
	if len(w) == 0 {
		return nil, nil
	}
	if spec.TCP != "" {
		host, _, _ := net.SplitHostPort(spec.TCP)
		if ip, err := netip.ParseAddr(host); err == nil {
			if err := peercred.CanLookUp(procDir, ip.Unmap().Is4()); err != nil {
				return nil, fmt.Errorf("server: --openflow-proxy-tcp %s=%s beside --module-writer rules: the proxy could not tell who its TCP peers are, so could not hold them to the rules of module %s: %w", spec.Bridge, spec.TCP, spec.Module, err)
			}
		}
	}
	rules := w[spec.Module]
	who := "only root (no --module-writer rule names it)"
	if len(rules) > 0 {
		names := make([]string, len(rules))
		for i, r := range rules {
			names[i] = r.String()
		}
		who = "root and " + strings.Join(names, ", ")
	}
	if len(rules) == 0 {
		log.Warn("openflow proxy: --module-writer rules are set and none names the proxied module: only root's controllers are admitted", "bridge", spec.Bridge, "module", spec.Module)
	}
	return func(c net.Conn) error {
		if err := w.admit(procDir, c, spec.Module); err != nil {
			return fmt.Errorf("server: openflow proxy: %w; module %s admits %s", err, spec.Module, who)
		}
		return nil
	}, nil
}

// RelayAdmission is proxyAdmission for the guard's relay of the unix
// socket of module's proxy (guard.Relay.Admit): the guard holds the
// controllers to the rules flowstated holds them to.
func (w Writers) RelayAdmission(log *slog.Logger, module string) (func(net.Conn) error, error) {
	return w.proxyAdmission(log, ProxySpec{Module: module}, "/proc")
}

// Args renders w as the --module-writer flags that parse back to it.
func (w Writers) Args() []string {
	var out []string
	for _, m := range slices.Sorted(maps.Keys(w)) {
		for _, p := range w[m] {
			out = append(out, "--module-writer", m+"="+p.String())
		}
	}
	return out
}

// admit checks that the peer of c may write module.
func (w Writers) admit(procDir string, c net.Conn, module string) error {
	switch c := c.(type) {
	case *net.UnixConn:
		cred, err := unixPeer(c)
		if err != nil {
			return fmt.Errorf("unix peer unknown: %w", err)
		}
		return w.mayWrite(cred, module)
	case *net.TCPConn:
		self := c.LocalAddr().(*net.TCPAddr).AddrPort()
		peer := c.RemoteAddr().(*net.TCPAddr).AddrPort()
		creds, err := w.tcpPeer(procDir, self, peer, module)
		if err != nil {
			return fmt.Errorf("tcp peer %s unknown: %w", peer, err)
		}
		for _, cred := range creds {
			if err := w.mayWrite(cred, module); err != nil {
				return fmt.Errorf("tcp peer %s: %w", peer, err)
			}
		}
		return nil
	default:
		return fmt.Errorf("peer of a %T unknown", c)
	}
}

// tcpPeer returns the credentials of a loopback TCP peer: the owner of
// its socket, and when a rule of module is by gid and the uid alone does
// not suffice, the gid and groups of each process holding the socket
// (any of them may be the one writing). A holder that cannot be seen
// (another pid namespace) leaves the groups unknown: only the uid counts.
func (w Writers) tcpPeer(procDir string, self, peer netip.AddrPort, module string) ([]peerCred, error) {
	sock, err := peercred.TCPPeer(procDir, self, peer)
	if err != nil {
		return nil, err
	}
	cred := peerCred{uid: sock.UID, gidErr: errNoGroupRule}
	byGroup := slices.ContainsFunc(w[module], func(p Principal) bool { return p.Group })
	if !byGroup || w.mayWrite(cred, module) == nil {
		return []peerCred{cred}, nil
	}
	pids, err := peercred.Holders(procDir, sock.Inode)
	if err == nil && len(pids) == 0 {
		err = fmt.Errorf("no process of flowstated's pid namespace holds socket %d", sock.Inode)
	}
	if err != nil {
		cred.gidErr = err
		return []peerCred{cred}, nil
	}
	creds := make([]peerCred, 0, len(pids))
	for _, pid := range pids {
		st, err := peercred.ReadStatus(procDir, pid)
		if err != nil {
			// Gone since Holders saw it: it writes nothing more.
			continue
		}
		creds = append(creds, peerCred{uid: sock.UID, gid: st.GID, pid: int32(pid), groups: st.Groups})
	}
	if len(creds) == 0 {
		cred.gidErr = fmt.Errorf("the processes holding socket %d exited", sock.Inode)
		return []peerCred{cred}, nil
	}
	return creds, nil
}
