package server

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeProc is a /proc with one loopback TCP connection, the peer
// 127.0.0.1:40001 (uid 65534, socket inode 777) to us at 127.0.0.1:6653,
// and the given processes (pid: Gid: line) holding that socket.
func fakeProc(t *testing.T, holders map[string]string) string {
	t.Helper()
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The kernel prints an address as its bytes read as a host-order word.
	lo := fmt.Sprintf("%08X", binary.NativeEndian.Uint32([]byte{127, 0, 0, 1}))
	table := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: " + lo + ":9C41 " + lo + ":19FD 01 00000000:00000000 00:00000000 00000000 65534        0 777 2 0 20 0 0 10 -1\n"
	if err := os.WriteFile(filepath.Join(proc, "net", "tcp"), []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	for pid, gid := range holders {
		if err := os.MkdirAll(filepath.Join(proc, pid, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("socket:[777]", filepath.Join(proc, pid, "fd", "3")); err != nil {
			t.Fatal(err)
		}
		status := "Uid:\t65534\t65534\t65534\t65534\nGid:\t" + gid + "\nGroups:\t100\n"
		if err := os.WriteFile(filepath.Join(proc, pid, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proc
}

// TestProxyTCPPeerRules: a TCP peer is held to the module's rules by the
// owner of its socket, and by a gid rule through the gid and groups of
// every process holding that socket; when none can be seen, a gid rule
// cannot admit it, and the refusal says why.
func TestProxyTCPPeerRules(t *testing.T) {
	self, peer := netip.MustParseAddrPort("127.0.0.1:6653"), netip.MustParseAddrPort("127.0.0.1:40001")
	rules := func(rs ...string) Writers {
		w := Writers{}
		for _, r := range rs {
			if err := w.ParseWriter(r); err != nil {
				t.Fatal(err)
			}
		}
		return w
	}
	check := func(w Writers, proc string) error {
		t.Helper()
		creds, err := w.tcpPeer(proc, self, peer, "ovn")
		if err != nil {
			return err
		}
		for _, c := range creds {
			if err := w.mayWrite(c, "ovn"); err != nil {
				return err
			}
		}
		return nil
	}
	one := fakeProc(t, map[string]string{"42": "65534\t65532\t65534\t65534"})
	for _, tc := range []struct {
		name    string
		w       Writers
		proc    string
		wantErr string // "" admitted
	}{
		{"its uid", rules("ovn=uid:65534"), one, ""},
		{"another uid", rules("ovn=uid:0", "pod=uid:65534"), one, `uid 65534 (groups unknown: not looked up: no rule of the module is by gid) may not write module "ovn"`},
		{"its effective gid", rules("ovn=gid:65532"), one, ""},
		{"its real gid is not it", rules("ovn=gid:65534"), one, `uid 65534 (gid 65532, groups [100]) may not write`},
		{"a supplementary group", rules("ovn=gid:100"), one, ""},
		{"gid 0 is not an unknown gid", rules("ovn=gid:0"), fakeProc(t, nil), "groups unknown: no process of flowstated's pid namespace holds socket 777"},
		{"every holder must be in the group", rules("ovn=gid:65532"), fakeProc(t, map[string]string{"42": "0\t65532\t0\t0", "43": "0\t65533\t0\t0"}), "gid 65533"},
		{"no peer in the table", rules("ovn=uid:65534"), t.TempDir(), "peercred:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := check(tc.w, tc.proc)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("%v; want %q", err, tc.wantErr)
			}
		})
	}
}

// TestProxyAdmissionStart: without rules the proxy admits as before (no
// check); beside rules, a TCP listener whose peers cannot be looked up is
// refused at start, naming the flag and why.
func TestProxyAdmissionStart(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	spec := ProxySpec{Module: "ovn", Bridge: "br-int", TCP: "127.0.0.1:6653"}
	if admit, err := (Writers{}).proxyAdmission(log, spec, t.TempDir()); admit != nil || err != nil {
		t.Fatalf("no rules: %v, %v; want no check", admit != nil, err)
	}
	w := Writers{}
	if err := w.ParseWriter("ovn=uid:0"); err != nil {
		t.Fatal(err)
	}
	_, err := w.proxyAdmission(log, spec, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "--openflow-proxy-tcp br-int=127.0.0.1:6653 beside --module-writer rules") {
		t.Fatalf("no /proc/net/tcp: %v", err)
	}
	proc := fakeProc(t, nil)
	if admit, err := w.proxyAdmission(log, spec, proc); admit == nil || err != nil {
		t.Fatalf("with /proc/net/tcp: %v, %v", admit != nil, err)
	}
	spec.TCP = "[::1]:6653"
	if _, err := w.proxyAdmission(log, spec, proc); err == nil || !strings.Contains(err.Error(), "tcp6") {
		t.Fatalf("ipv6 without /proc/net/tcp6: %v", err)
	}
}
