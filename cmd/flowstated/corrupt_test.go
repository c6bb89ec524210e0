package main

import (
	"context"
	encbinary "encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/store"
)

// TestBinaryRefusesCorruptStore: flowstated on a store whose meta pages are
// damaged exits non-zero, before touching OVS, with one message that says
// what is wrong and how to recover.
func TestBinaryRefusesCorruptStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bin := binary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "fs.db")
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	// Damage the txid of both meta pages, so neither checksum matches.
	// Meta 1 is at the page size, which meta 0 holds after the page
	// header, magic and version.
	f, err := os.OpenFile(db, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ps [4]byte
	if _, err := f.ReadAt(ps[:], 16+8); err != nil {
		t.Fatal(err)
	}
	pageSize := int64(encbinary.LittleEndian.Uint32(ps[:]))
	for _, off := range []int64{16 + 48, pageSize + 16 + 48} {
		if _, err := f.WriteAt([]byte{0xFF}, off); err != nil {
			t.Fatal(err)
		}
	}
	_ = f.Close()
	bootID := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootID, []byte("boot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "--db", db, "--boot-id-file", bootID,
		"--ovs-rundir", dir, "--ovsdb", "unix:"+filepath.Join(dir, "no-db.sock"),
		"--listen", "unix://"+filepath.Join(dir, "fs.sock"), "--metrics-listen", "", "--guard", "off")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("flowstated on a corrupt store: %v\n%s", err, out)
	}
	msg := string(out)
	for _, w := range []string{"is corrupt", "both meta pages are invalid", "flowstated will not start on it", "docs/operations.md", "restore the latest backup"} {
		if !strings.Contains(msg, w) {
			t.Errorf("output does not say %q:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "panic") || strings.Count(strings.TrimSpace(msg), "\n") > 0 {
		t.Errorf("want one line, no panic:\n%s", msg)
	}
}
