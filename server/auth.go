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
)

// Writers says which peers may write which module, by the uid or primary gid
// the kernel reports for the unix socket peer (SO_PEERCRED). Root may write
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
	if slices.ContainsFunc(w[module], cred.is) {
		return nil
	}
	return fmt.Errorf("uid %d (gid %d) may not write module %q (see --module-writer): %w", cred.uid, cred.gid, module, errdefs.ErrPermissionDenied)
}

// authorizeAny checks that the peer of ctx may write some module: calls that
// change the switch without naming a module (Reconcile) are open to those
// peers, and to root.
func (w Writers) authorizeAny(ctx context.Context) error {
	cred, root, err := w.caller(ctx)
	if err != nil || root {
		return err
	}
	for _, who := range w {
		if slices.ContainsFunc(who, cred.is) {
			return nil
		}
	}
	return fmt.Errorf("uid %d (gid %d) may write no module, so may not change the switch (see --module-writer): %w", cred.uid, cred.gid, errdefs.ErrPermissionDenied)
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

// is reports whether the peer is pr.
func (c peerCred) is(pr Principal) bool {
	return (!pr.Group && pr.ID == c.uid) || (pr.Group && pr.ID == c.gid)
}

// peerCred is the AuthInfo of a unix socket peer.
type peerCred struct {
	credentials.CommonAuthInfo
	uid, gid uint32
	pid      int32
}

func (peerCred) AuthType() string { return "unix-peercred" }

// peerCreds are transport credentials for the unix listener: no encryption,
// and the peer's uid and gid read with SO_PEERCRED at the handshake.
type peerCreds struct {
	credentials.TransportCredentials
}

func newPeerCreds() credentials.TransportCredentials {
	return peerCreds{insecure.NewCredentials()}
}

func (c peerCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return conn, nil, fmt.Errorf("server: peer credentials need a unix socket, got %T", conn)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, nil, err
	}
	if credErr != nil {
		return nil, nil, fmt.Errorf("server: SO_PEERCRED: %w", credErr)
	}
	return conn, peerCred{
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity},
		uid:            cred.Uid, gid: cred.Gid, pid: cred.Pid,
	}, nil
}

func (c peerCreds) Clone() credentials.TransportCredentials {
	return peerCreds{c.TransportCredentials.Clone()}
}
