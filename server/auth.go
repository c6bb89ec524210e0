package server

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/peercred"
)

// Writers says which peers may write which module, by the uid or a gid the
// kernel reports for the unix socket peer: the uid and primary gid from
// SO_PEERCRED, and the supplementary groups from /proc/<pid>/status, read
// when the peer connects (peerGroups). Root may write
// every module. Without any rule every peer that can open the socket may
// write every module (the socket's mode, 0660, is then the only guard).
type Writers map[string][]Principal

// Principal is a uid or a gid.
type Principal struct {
	Group bool
	ID    uint32
}

func (p Principal) String() string {
	if p.Group {
		return "gid:" + strconv.FormatUint(uint64(p.ID), 10)
	}
	return "uid:" + strconv.FormatUint(uint64(p.ID), 10)
}

// ParseWriter parses one rule, MODULE=uid:N or MODULE=gid:N, into w.
func (w Writers) ParseWriter(rule string) error {
	module, who, ok := strings.Cut(rule, "=")
	if !ok {
		return fmt.Errorf("writer rule %q: want MODULE=uid:N or MODULE=gid:N", rule)
	}
	if err := entry.ValidateName("module", module); err != nil {
		return fmt.Errorf("writer rule %q: %w", rule, err)
	}
	kind, num, ok := strings.Cut(who, ":")
	id, err := strconv.ParseUint(num, 10, 32)
	if !ok || (kind != "uid" && kind != "gid") || err != nil {
		return fmt.Errorf("writer rule %q: want MODULE=uid:N or MODULE=gid:N", rule)
	}
	w[module] = append(w[module], Principal{Group: kind == "gid", ID: uint32(id)})
	return nil
}

// authorizeRoot checks that the peer of ctx is root, for calls that change
// the whole node (the flag); without rules every peer may.
func (w Writers) authorizeRoot(ctx context.Context, what string) error {
	if len(w) == 0 {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return fmt.Errorf("no peer credentials: %w", errdefs.ErrPermissionDenied)
	}
	if cred, ok := p.AuthInfo.(peerCred); !ok || cred.uid != 0 {
		return fmt.Errorf("only root may %s when --module-writer rules are set: %w", what, errdefs.ErrPermissionDenied)
	}
	return nil
}

// authorize checks that the peer of ctx may write module.
func (w Writers) authorize(ctx context.Context, module string) error {
	cred, root, err := w.caller(ctx)
	if err != nil || root {
		return err
	}
	return w.mayWrite(cred, module)
}

// mayWrite checks that cred may write module: always without rules, and
// for root; else when a rule of the module names its uid or a gid of it.
// The OpenFlow proxy admits its controllers by it too (proxyauth.go).
func (w Writers) mayWrite(cred peerCred, module string) error {
	if len(w) == 0 || cred.uid == 0 || slices.ContainsFunc(w[module], cred.is) {
		return nil
	}
	return fmt.Errorf("%s may not write module %q (see --module-writer): %w", cred, module, errdefs.ErrPermissionDenied)
}

// authorizeAny checks that the peer of ctx may write some module: calls that
// change the switch without naming a module (Reconcile) are open to those
// peers, and to root.
func (w Writers) authorizeAny(ctx context.Context) error {
	return w.authorizeWriter(ctx, "change the switch")
}

// authorizeWriter checks that the peer of ctx is root or may write some
// module, for reads that are privileged: a Backup hands out every module's
// entries and costs the store a copy of itself. Without rules every peer may.
func (w Writers) authorizeWriter(ctx context.Context, what string) error {
	cred, root, err := w.caller(ctx)
	if err != nil || root {
		return err
	}
	for _, who := range w {
		if slices.ContainsFunc(who, cred.is) {
			return nil
		}
	}
	return fmt.Errorf("%s may write no module, so may not %s (see --module-writer): %w", cred, what, errdefs.ErrPermissionDenied)
}

// caller returns the peer's credentials; root is true when every write is
// allowed (no rules, or uid 0).
func (w Writers) caller(ctx context.Context) (cred peerCred, root bool, err error) {
	if len(w) == 0 {
		return peerCred{}, true, nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return peerCred{}, false, fmt.Errorf("no peer credentials: %w", errdefs.ErrPermissionDenied)
	}
	cred, ok = p.AuthInfo.(peerCred)
	if !ok {
		return peerCred{}, false, fmt.Errorf("peer credentials unknown on this listener: %w", errdefs.ErrPermissionDenied)
	}
	return cred, cred.uid == 0, nil
}

// is reports whether the peer is pr: its uid, or its primary or a
// supplementary gid.
func (c peerCred) is(pr Principal) bool {
	if !pr.Group {
		return pr.ID == c.uid
	}
	if c.gidErr != nil {
		return false
	}
	return pr.ID == c.gid || slices.Contains(c.groups, pr.ID)
}

// String names the peer in permission errors, with what is known of its
// groups.
func (c peerCred) String() string {
	if c.gidErr != nil {
		return fmt.Sprintf("uid %d (groups unknown: %v)", c.uid, c.gidErr)
	}
	s := fmt.Sprintf("uid %d (gid %d", c.uid, c.gid)
	if len(c.groups) > 0 {
		s += fmt.Sprintf(", groups %v", c.groups)
	}
	if c.groupsErr != nil {
		s += fmt.Sprintf("; supplementary groups unknown: %v", c.groupsErr)
	}
	return s + ")"
}

// peerCred is the AuthInfo of a unix socket peer.
type peerCred struct {
	credentials.CommonAuthInfo
	uid, gid uint32
	pid      int32
	// groups are the supplementary groups of pid when it connected;
	// groupsErr says why they are unknown (then only gid counts).
	groups    []uint32
	groupsErr error
	// gidErr says why neither gid nor groups are known (a TCP peer
	// whose process flowstated cannot see); then only uid counts.
	gidErr error
}

// peerGroups reads the supplementary groups of pid from /proc/<pid>/status.
// It runs at the handshake, while the peer is connecting and so alive: read
// later, the pid could have exited or been reused by another process. If it
// is gone already, or flowstated sees another pid namespace than the peer
// (SO_PEERCRED reports pid 0 then), the groups are unknown and only the
// primary gid counts.
func peerGroups(procDir string, pid int32) ([]uint32, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("peer pid %d is not visible from flowstated's pid namespace", pid)
	}
	st, err := peercred.ReadStatus(procDir, int(pid))
	if err != nil {
		return nil, err
	}
	return st.Groups, nil
}

func (peerCred) AuthType() string { return "unix-peercred" }

// peerCreds are transport credentials for the unix listener: no encryption,
// and the peer's uid and gid read with SO_PEERCRED at the handshake.
type peerCreds struct {
	credentials.TransportCredentials
	limit *connLimit // nil: no cap
}

func newPeerCreds(limit *connLimit) credentials.TransportCredentials {
	return peerCreds{insecure.NewCredentials(), limit}
}

func (c peerCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return conn, nil, fmt.Errorf("server: peer credentials need a unix socket, got %T", conn)
	}
	pc, err := unixPeer(uc)
	if err != nil {
		return nil, nil, err
	}
	if c.limit == nil {
		return conn, pc, nil
	}
	// Refused here, the connection is closed by gRPC before it costs
	// anything more.
	if err := c.limit.acquire(pc.uid); err != nil {
		return nil, nil, err
	}
	return &limitedConn{Conn: conn, release: func() { c.limit.release(pc.uid) }}, pc, nil
}

// unixPeer reads the credentials of uc's peer: SO_PEERCRED, and its
// supplementary groups (peerGroups).
func unixPeer(uc *net.UnixConn) (peerCred, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return peerCred{}, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peerCred{}, err
	}
	if credErr != nil {
		return peerCred{}, fmt.Errorf("server: SO_PEERCRED: %w", credErr)
	}
	pc := peerCred{
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity},
		uid:            cred.Uid, gid: cred.Gid, pid: cred.Pid,
	}
	pc.groups, pc.groupsErr = peerGroups("/proc", cred.Pid)
	return pc, nil
}

func (c peerCreds) Clone() credentials.TransportCredentials {
	return peerCreds{c.TransportCredentials.Clone(), c.limit}
}
