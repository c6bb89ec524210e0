package peercred

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hostOrder rewrites a table written as a little-endian kernel prints it
// for this host, so the fixtures hold on a big-endian one too.
func hostOrder(t testing.TB, table string) string {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return table
	}
	var out []string
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		for i := 1; i <= 2 && len(f) > 2 && f[0] != "sl"; i++ {
			a, p, _ := strings.Cut(f[i], ":")
			var b strings.Builder
			for w := 0; w+8 <= len(a); w += 8 {
				x := a[w : w+8]
				b.WriteString(x[6:8] + x[4:6] + x[2:4] + x[0:2])
			}
			f[i] = b.String() + ":" + p
		}
		out = append(out, strings.Join(f, " "))
	}
	return strings.Join(out, "\n")
}

// tcp4 and tcp6 are tables read on a host with: a listener on ::1:39015
// and a connection to it from ::1:45526; a dual-stack listener on [::]:47401
// and a connection to it from 127.0.0.1:56160 (an AF_INET socket, so in
// tcp, while the accepted end is IPv4-mapped in tcp6); a socket in
// TIME_WAIT (st 06: uid 0, inode 0) from 127.0.0.1:40000 to :47401; and
// one of uid 65534 from 127.0.0.1:40001.
const (
	tcp4 = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1178 1 0000000048951c99 100 0 0 10 0
   1: 0100007F:DB60 0100007F:B929 01 00000000:00000000 00:00000000 00000000     0        0 41554 2 000000009beb0906 20 0 0 10 -1
   2: 0100007F:9C40 0100007F:B929 06 00000000:00000000 03:00000146 00000000     0        0 0 3 00000000286a1227
   3: 0100007F:9C41 0100007F:B929 01 00000000:00000000 00:00000000 00000000 65534        0 41600 2 000000009beb0906 20 0 0 10 -1
   4: 020200C0:B5C2 507100CB:01BB 01 00000000:00000000 02:00000159 00000000     0        0 35106 2 00000000e59f2fdc 20 4 16 148 -1
`
	tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:B929 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41553 1 000000001e599dfe 100 0 0 10 0
   1: 00000000000000000000000001000000:9867 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41549 1 00000000228780e9 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:B929 0000000000000000FFFF00000100007F:DB60 01 00000000:00000000 00:00000000 00000000     0        0 41555 1 0000000066c456c1 20 0 0 10 -1
   3: 00000000000000000000000001000000:9867 00000000000000000000000001000000:B1D6 01 00000000:00000000 00:00000000 00000000     0        0 41551 1 000000007318b0c6 20 0 0 10 -1
   4: 00000000000000000000000001000000:B1D6 00000000000000000000000001000000:9867 01 00000000:00000000 00:00000000 00000000  1000        0 41550 2 0000000082375f40 20 0 0 10 -1
   5: 0000000000000000FFFF00000100007F:9C42 0000000000000000FFFF00000100007F:B929 01 00000000:00000000 00:00000000 00000000   107        0 41601 1 0000000066c456c1 20 0 0 10 -1
`
)

// TestFind: the peer's socket is the line whose local end is the peer and
// whose remote end is us, both address and port, IPv4-mapped or not; a
// match with no owner (TIME_WAIT), a half match, or a line that cannot be
// read refuses.
func TestFind(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, tc := range []struct {
		name, table string
		self, peer  netip.AddrPort
		want        Socket
		wantErr     string // "" for a match; ErrNotFound's text for none
	}{
		{"ipv4", tcp4, ap("127.0.0.1:47401"), ap("127.0.0.1:56160"), Socket{0, 41554}, ""},
		{"ipv4 uid", tcp4, ap("127.0.0.1:47401"), ap("127.0.0.1:40001"), Socket{65534, 41600}, ""},
		{"ipv6", tcp6, ap("[::1]:39015"), ap("[::1]:45526"), Socket{1000, 41550}, ""},
		{"ipv4-mapped peer in tcp6", tcp6, ap("127.0.0.1:47401"), ap("127.0.0.1:40002"), Socket{107, 41601}, ""},
		{"our own end is not the peer", tcp6, ap("127.0.0.1:47401"), ap("127.0.0.1:56160"), Socket{}, ErrNotFound.Error()},
		{"time-wait has no owner", tcp4, ap("127.0.0.1:47401"), ap("127.0.0.1:40000"), Socket{}, "has no owner"},
		{"peer port differs", tcp4, ap("127.0.0.1:47401"), ap("127.0.0.1:56161"), Socket{}, ErrNotFound.Error()},
		{"our port differs", tcp4, ap("127.0.0.1:47402"), ap("127.0.0.1:56160"), Socket{}, ErrNotFound.Error()},
		{"our address differs", tcp4, ap("127.0.0.2:47401"), ap("127.0.0.1:56160"), Socket{}, ErrNotFound.Error()},
		{"ipv6 is not ipv4", tcp6, ap("[::ffff:127.0.0.1]:39015"), ap("127.0.0.1:45526"), Socket{}, ErrNotFound.Error()},
		{"empty table", "", ap("127.0.0.1:1"), ap("127.0.0.1:2"), Socket{}, ErrNotFound.Error()},
		{"short line", tcp4 + "   5: 0100007F:0001 0100007F:0002 01\n", ap("127.0.0.1:2"), ap("127.0.0.1:1"), Socket{}, "line 7: want sl:"},
		{"bad address", "   0: 0100007G:0001 0100007F:0002 01 0:0 0:0 0 0 0 1\n", ap("127.0.0.1:2"), ap("127.0.0.1:1"), Socket{}, "local address"},
		{"bad port", "   0: 0100007F:01 0100007F:0002 01 0:0 0:0 0 0 0 1\n", ap("127.0.0.1:2"), ap("127.0.0.1:1"), Socket{}, "want 8 or 32 hex digits"},
		{"bad uid", "   0: 0100007F:0001 0100007F:0002 01 0:0 0:0 0 -1 0 1\n", ap("127.0.0.1:2"), ap("127.0.0.1:1"), Socket{}, "uid"},
		{"bad inode", "   0: 0100007F:0001 0100007F:0002 01 0:0 0:0 0 5 0 x\n", ap("127.0.0.1:2"), ap("127.0.0.1:1"), Socket{}, "inode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := find(strings.NewReader(hostOrder(t, tc.table)), unmap(tc.self), unmap(tc.peer))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("find: %v, want %+v", err, tc.want)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("find: %+v, %v; want an error with %q", got, err, tc.wantErr)
			case got != tc.want:
				t.Fatalf("find: %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestTCPPeerFiles: TCPPeer looks in tcp then tcp6 for an IPv4 peer, only
// in tcp6 for an IPv6 one, takes a host with no tcp6, and fails closed
// when the tables are missing or the peer is not on loopback.
func TestTCPPeerFiles(t *testing.T) {
	ap := netip.MustParseAddrPort
	proc := t.TempDir()
	write := func(name, table string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(proc, "net"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, "net", name), []byte(hostOrder(t, table)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := TCPPeer(proc, ap("127.0.0.1:47401"), ap("127.0.0.1:56160")); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("no tables: %v, want an error that is not ErrNotFound", err)
	}
	if err := CanLookUp(proc, true); err == nil {
		t.Fatal("CanLookUp with no tcp table: no error")
	}
	write("tcp", tcp4)
	if s, err := TCPPeer(proc, ap("127.0.0.1:47401"), ap("127.0.0.1:56160")); err != nil || s != (Socket{0, 41554}) {
		t.Fatalf("ipv4 without tcp6: %+v, %v", s, err)
	}
	if _, err := TCPPeer(proc, ap("127.0.0.1:47401"), ap("127.0.0.1:40002")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ipv4 peer only in a missing tcp6: %v, want ErrNotFound", err)
	}
	if _, err := TCPPeer(proc, ap("[::1]:39015"), ap("[::1]:45526")); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("ipv6 without tcp6: %v, want an error that is not ErrNotFound", err)
	}
	write("tcp6", tcp6)
	if s, err := TCPPeer(proc, ap("[::ffff:127.0.0.1]:47401"), ap("[::ffff:127.0.0.1]:40002")); err != nil || s != (Socket{107, 41601}) {
		t.Fatalf("ipv4-mapped: %+v, %v", s, err)
	}
	if s, err := TCPPeer(proc, ap("[::1]:39015"), ap("[::1]:45526")); err != nil || s != (Socket{1000, 41550}) {
		t.Fatalf("ipv6: %+v, %v", s, err)
	}
	if _, err := TCPPeer(proc, ap("192.0.2.2:47401"), ap("203.0.113.80:443")); err == nil || !strings.Contains(err.Error(), "not on loopback") {
		t.Fatalf("a remote peer: %v", err)
	}
}

// TestTCPPeerLive: against the kernel's own tables, a connection this
// process made is found with this process's uid and inode, on IPv4 and,
// where the host has it, IPv6; and Holders names this process.
func TestTCPPeerLive(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "[::1]:0" {
				t.Logf("no IPv6 loopback here: %v", err)
				continue
			}
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		a, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		self := a.LocalAddr().(*net.TCPAddr).AddrPort()
		peer := a.RemoteAddr().(*net.TCPAddr).AddrPort()
		s, err := TCPPeer("/proc", self, peer)
		if err != nil || s.UID != uint32(os.Geteuid()) || s.Inode == 0 {
			t.Fatalf("%s: %+v, %v; want uid %d", addr, s, err, os.Geteuid())
		}
		pids, err := Holders("/proc", s.Inode)
		if err != nil || !slices.Contains(pids, os.Getpid()) {
			t.Fatalf("%s: holders %v, %v; want %d among them", addr, pids, err, os.Getpid())
		}
		// Our end of the connection is not taken for the peer's.
		if s2, err := TCPPeer("/proc", peer, self); err != nil || s2.Inode == s.Inode {
			t.Fatalf("%s: reversed: %+v, %v", addr, s2, err)
		}
		c.Close()
		a.Close()
		ln.Close()
	}
}

// TestReadStatus: the effective gid and the supplementary groups; a
// status missing either, or a pid that is gone, is an error.
func TestReadStatus(t *testing.T) {
	proc := t.TempDir()
	put := func(pid, status string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("42", "Name:\tx\nUid:\t1\t2\t3\t4\nGid:\t5\t6\t7\t8\nGroups:\t4242 100 \n")
	put("43", "Name:\tx\nGroups:\t4242\n")
	put("44", "Gid:\t5\t6\t7\t8\n")
	put("45", "Gid:\t5\nGroups:\n")
	put("46", "Gid:\t5\t6\t7\t8\nGroups:\n")
	if st, err := ReadStatus(proc, 42); err != nil || st.GID != 6 || !slices.Equal(st.Groups, []uint32{4242, 100}) {
		t.Fatalf("pid 42: %+v, %v", st, err)
	}
	if st, err := ReadStatus(proc, 46); err != nil || st.GID != 6 || len(st.Groups) != 0 {
		t.Fatalf("pid 46: %+v, %v", st, err)
	}
	for _, pid := range []int{43, 44, 45, 47} {
		if st, err := ReadStatus(proc, pid); err == nil {
			t.Fatalf("pid %d: %+v; want an error", pid, st)
		}
	}
}
