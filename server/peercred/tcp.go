package peercred

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Socket is the peer's end of a connection as /proc/net/tcp lists it.
type Socket struct {
	UID   uint32 // the socket's owner
	Inode uint64 // never 0: a socket a process holds
}

// ErrNotFound is returned when no socket of this host is the peer's end.
var ErrNotFound = errors.New("peercred: no local socket is the peer's end of the connection")

// TCPPeer returns the socket at the other end of the loopback TCP
// connection between self (our address) and peer (the peer's), both of
// the accepted connection, looked up under procDir (/proc). IPv4 peers
// may be listed in tcp (AF_INET sockets) or, IPv4-mapped, in tcp6
// (dual-stack AF_INET6 sockets); IPv6 peers only in tcp6.
func TCPPeer(procDir string, self, peer netip.AddrPort) (Socket, error) {
	self, peer = unmap(self), unmap(peer)
	if !peer.Addr().IsLoopback() {
		return Socket{}, fmt.Errorf("peercred: peer %s is not on loopback: only a local peer has a socket to look up", peer)
	}
	files := []string{"tcp6"}
	if peer.Addr().Is4() {
		files = []string{"tcp", "tcp6"}
	}
	for i, name := range files {
		f, err := os.Open(filepath.Join(procDir, "net", name))
		if errors.Is(err, os.ErrNotExist) && i > 0 {
			continue // no IPv6 on this host: no dual-stack sockets either
		}
		if err != nil {
			return Socket{}, fmt.Errorf("peercred: %w", err)
		}
		s, err := find(f, self, peer)
		f.Close()
		if !errors.Is(err, ErrNotFound) {
			if err != nil {
				return Socket{}, fmt.Errorf("peercred: %s: %w", f.Name(), err)
			}
			return s, nil
		}
	}
	return Socket{}, fmt.Errorf("%w (peer %s, us %s)", ErrNotFound, peer, self)
}

// CanLookUp checks that the tables TCPPeer reads for peers of family
// (IPv4 when v4, else IPv6) can be read under procDir, so that a
// listener that needs them can be refused at start rather than every
// connection later.
func CanLookUp(procDir string, v4 bool) error {
	name := "tcp6"
	if v4 {
		name = "tcp"
	}
	f, err := os.Open(filepath.Join(procDir, "net", name))
	if err != nil {
		return fmt.Errorf("peercred: cannot read the kernel's TCP socket table: %w", err)
	}
	return f.Close()
}

// find scans a /proc/net/tcp or tcp6 table for the socket whose local end
// is peer and whose remote end is self. A line it cannot read is an
// error: it might have been the one.
func find(r io.Reader, self, peer netip.AddrPort) (Socket, error) {
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.TrimSpace(line) == "" || n == 1 && strings.HasPrefix(strings.TrimSpace(line), "sl") {
			continue
		}
		e, err := parseLine(line)
		if err != nil {
			return Socket{}, fmt.Errorf("line %d: %w", n, err)
		}
		if e.local != peer || e.remote != self {
			continue
		}
		if e.inode == 0 {
			// TIME_WAIT or orphaned: the table says uid 0, which is
			// nobody's. No process holds it, so none can be writing.
			return Socket{}, fmt.Errorf("line %d: the peer's socket %s has no owner (closed: time-wait or orphaned)", n, peer)
		}
		return Socket{UID: e.uid, Inode: e.inode}, nil
	}
	if err := sc.Err(); err != nil {
		return Socket{}, err
	}
	return Socket{}, ErrNotFound
}

// entry is one socket line of the table.
type entry struct {
	local, remote netip.AddrPort
	uid           uint32
	inode         uint64
}

// parseLine reads "sl: local remote st tx:rx tr:when retrnsmt uid timeout
// inode ...", addresses in the kernel's hex form.
func parseLine(line string) (entry, error) {
	f := strings.Fields(line)
	if len(f) < 10 || !strings.HasSuffix(f[0], ":") {
		return entry{}, fmt.Errorf("want sl: local remote st queues timer retransmits uid timeout inode, got %q", line)
	}
	var e entry
	var err error
	if e.local, err = parseAddrPort(f[1]); err != nil {
		return entry{}, fmt.Errorf("local address: %w", err)
	}
	if e.remote, err = parseAddrPort(f[2]); err != nil {
		return entry{}, fmt.Errorf("remote address: %w", err)
	}
	uid, err := strconv.ParseUint(f[7], 10, 32)
	if err != nil {
		return entry{}, fmt.Errorf("uid: %w", err)
	}
	if e.inode, err = strconv.ParseUint(f[9], 10, 64); err != nil {
		return entry{}, fmt.Errorf("inode: %w", err)
	}
	e.uid = uint32(uid)
	return e, nil
}

// parseAddrPort reads ADDR:PORT as the kernel prints it: ADDR the bytes of
// the address as 32-bit words in host byte order, %08X each (one for
// IPv4, four for IPv6), PORT %04X. An IPv4-mapped IPv6 address is
// returned as IPv4, as unmap does for Go's addresses.
func parseAddrPort(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok || len(p) != 4 || len(a) != 8 && len(a) != 32 {
		return netip.AddrPort{}, fmt.Errorf("%q: want 8 or 32 hex digits, a colon and 4", s)
	}
	raw, err := hex.DecodeString(a)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: %w", s, err)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: port: %w", s, err)
	}
	// Each word was printed from the address's bytes read as a host-order
	// integer: put the integer back in host order to get the bytes.
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
