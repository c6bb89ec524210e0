package ovsconfig

import (
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
