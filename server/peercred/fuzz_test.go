package peercred

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzFind: no table makes find panic, and a socket it returns is owned
// (an inode) and is the first line whose local end is the peer's and
// whose remote end is ours.
func FuzzFind(f *testing.F) {
	f.Add(tcp4, "127.0.0.1:47401", "127.0.0.1:56160")
	f.Add(tcp4, "127.0.0.1:47401", "127.0.0.1:40000")
	f.Add(tcp6, "[::1]:39015", "[::1]:45526")
	f.Add(tcp6, "127.0.0.1:47401", "127.0.0.1:40002")
	f.Add("   0: 0100007F:0001 0100007F:0002 01 0:0 0:0 0 0 0 1\n", "127.0.0.1:2", "127.0.0.1:1")
	f.Fuzz(func(t *testing.T, table, self, peer string) {
		s, err := netip.ParseAddrPort(self)
		if err != nil {
			return
		}
		p, err := netip.ParseAddrPort(peer)
		if err != nil {
			return
		}
		got, err := find(strings.NewReader(table), unmap(s), unmap(p))
		if err != nil {
			return
		}
		if got.Inode == 0 {
			t.Fatalf("found %+v: a socket with no owner", got)
		}
		for line := range strings.Lines(table) {
			if e, err := parseLine(line); err == nil && e.local == unmap(p) && e.remote == unmap(s) {
				if e.uid != got.UID || e.inode != got.Inode {
					t.Fatalf("found %+v, but the matching line says uid %d inode %d", got, e.uid, e.inode)
				}
				return
			}
		}
		t.Fatalf("found %+v, but no line has the peer's end as local and ours as remote", got)
	})
}
