package ovsconfig

import (
	"os"
	"path/filepath"
	"strings"
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
