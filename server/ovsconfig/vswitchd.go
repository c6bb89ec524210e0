package ovsconfig

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// VswitchdIdentity names the ovs-vswitchd running with run directory
// runDir by its pidfile: its pid and the pidfile's time (its start), ""
// when unknown. The restore engine and the guard name vswitchd alike, so a
// guard's evidence of what it relayed compares with the engine's vswitchd.
func VswitchdIdentity(runDir string) string {
	path := filepath.Join(runDir, "ovs-vswitchd.pid")
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b)) + "@" + fi.ModTime().UTC().Format(time.RFC3339Nano)
}

// BridgeIdentity names bridge's switch in the ovs-vswitchd running with
// run directory runDir: the vswitchd (VswitchdIdentity), then the bridge's
// management socket <runDir>/<bridge>.mgmt by inode and time; "" when
// either is unknown (no vswitchd, or no such bridge now). vswitchd binds
// that socket when it creates the bridge's flow tables (its ofproto) and
// removes it when it destroys them, so a bridge deleted and created again
// under the same vswitchd (ovs-vsctl del-br, add-br), or rebuilt for
// another datapath_type, has another identity: it is another switch, and
// it starts empty. vswitchd also binds the socket anew when the bridge's
// protocols change, flows kept: another name for the same tables, which
// costs only evidence (a learning of a relayed controller that takes no
// deletions, server/restore/owner/placed.go), never flows.
func BridgeIdentity(runDir, bridge string) string {
	vs := VswitchdIdentity(runDir)
	if vs == "" {
		return ""
	}
	fi, err := os.Stat(filepath.Join(runDir, bridge+".mgmt"))
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s %s.mgmt#%d@%s", vs, bridge, st.Ino, fi.ModTime().UTC().Format(time.RFC3339Nano))
}

// PidfileLocked reports whether the process that wrote the OVS pidfile at
// path still runs: OVS holds a write lock on it for its life, which also
// shows across pid namespaces (flowstated in a container without hostPID).
// A failed check counts as running.
func PidfileLocked(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil {
		return true
	}
	return lk.Type != syscall.F_UNLCK
}
