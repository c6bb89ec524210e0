package store

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
)

// schema2Fixture writes testdata/schema2.db.gz, unpacked, to path. The
// fixture was made by the store of b76d129 (schema 2, the last before the
// checksums of 385e909): on br-int, module lb a select group 7 and meter 3,
// module pod three flows (two use the group and the meter), module policy
// one; a mirror of br-ex with one flow; module pod ready for one boot.
func schema2Fixture(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "schema2.db.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// schemaOf reads the schema version and the first byte of every flow
// record of a store file, read-only, as any bbolt reader would.
func schemaOf(t *testing.T, path string) (schema uint32, recordVersions map[byte]int) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatalf("open %s read-only: %v", path, err)
	}
	defer db.Close()
	recordVersions = map[byte]int{}
	err = db.View(func(tx *bolt.Tx) error {
		schema = binary.BigEndian.Uint32(tx.Bucket(bucketMeta).Get(keySchema))
		return tx.Bucket(bucketBridges).Bucket([]byte("br-int")).Bucket(kindBuckets[entry.KindFlow]).ForEach(func(_, v []byte) error {
			recordVersions[v[0]]++
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return schema, recordVersions
}

// checkFixtureContent checks that s holds what the fixture holds.
func checkFixtureContent(t *testing.T, s *Store) {
	t.Helper()
	es, err := s.Entries().All("br-int")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[entry.Kind]int{}
	for _, e := range es {
		kinds[e.Kind]++
	}
	if kinds[entry.KindFlow] != 4 || kinds[entry.KindGroup] != 1 || kinds[entry.KindMeter] != 1 {
		t.Errorf("br-int holds %v, want 4 flows, 1 group, 1 meter", kinds)
	}
	if m, ok, err := s.Mirrors().Get("br-ex"); err != nil || !ok || len(m) != 1 {
		t.Errorf("mirror of br-ex: %d entries, %v, %v; want 1", len(m), ok, err)
	}
	if r, err := s.Modules().ReadyBoots(); err != nil || r["pod"] == "" {
		t.Errorf("ready boots %v, %v; want module pod", r, err)
	}
}

// TestMigrationBackupAndRollback: a schema-2 store made by the old code is
// backed up beside itself before Open migrates it; the previous open path
// (schema 2 understood) refuses the migrated store naming that backup; the
// backup is the schema-2 store, which the rollback puts back; an upgrade
// retried after the rollback keeps the earlier backup and makes another.
func TestMigrationBackupAndRollback(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "flowstate.db")
	schema2Fixture(t, path)
	if v, recs := schemaOf(t, path); v != 2 || recs[recordVersionV1] != 4 {
		t.Fatalf("fixture: schema %d, records %v; want schema 2 and 4 records of version 1", v, recs)
	}

	s, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	backup := path + ".schema-2.bak"
	if m := s.File().Migrated(); m.From != 2 || m.Backup != backup {
		t.Fatalf("Migrated() = %+v, want from 2 with backup %s", m, backup)
	}
	checkFixtureContent(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v, recs := schemaOf(t, path); v != SchemaVersion || recs[recordVersion] != 4 {
		t.Fatalf("migrated store: schema %d, records %v; want %d and 4 records of version %d", v, recs, SchemaVersion, recordVersion)
	}
	if v, recs := schemaOf(t, backup); v != 2 || recs[recordVersionV1] != 4 {
		t.Fatalf("backup: schema %d, records %v; want the schema-2 store", v, recs)
	}

	// A second Open of the migrated store migrates nothing and backs up
	// nothing.
	s, err = Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if m := s.File().Migrated(); m != (Migration{}) {
		t.Errorf("second Open: Migrated() = %+v, want none", m)
	}
	_ = s.Close()

	// The previous flowstated's open path refuses the migrated store and
	// names the backup, and the store is left as it was.
	before, _ := os.ReadFile(path)
	_, err = Open(path, Options{Timeout: time.Second, understood: 2})
	if err == nil {
		t.Fatal("a schema-2 open path opened the migrated store")
	}
	for _, want := range []string{"schema version 3", "understands up to 2", backup, "docs/operations.md#rollback"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	t.Logf("refusal: %v", err)
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("the refused open changed the store file")
	}

	// Rollback as docs/operations.md says: the backup replaces the store.
	if err := os.Rename(backup, path); err != nil {
		t.Fatal(err)
	}
	if v, recs := schemaOf(t, path); v != 2 || recs[recordVersionV1] != 4 {
		t.Fatalf("rolled back store: schema %d, records %v; want the schema-2 store", v, recs)
	}
	// A retried upgrade whose earlier backup is still there (a copy of
	// the fixture): a new name, the earlier backup untouched.
	schema2Fixture(t, backup)
	kept, _ := os.ReadFile(backup)
	s, err = Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if m := s.File().Migrated(); m.From != 2 || m.Backup != path+".schema-2.1.bak" {
		t.Errorf("retried upgrade: Migrated() = %+v, want backup %s", m, path+".schema-2.1.bak")
	}
	checkFixtureContent(t, s)
	_ = s.Close()
	if now, _ := os.ReadFile(backup); !bytes.Equal(now, kept) {
		t.Error("the retried upgrade overwrote the earlier backup")
	}
	// The refusal names the newest backup.
	if _, err := Open(path, Options{Timeout: time.Second, understood: 2}); err == nil || !strings.Contains(err.Error(), path+".schema-2.1.bak") {
		t.Errorf("refusal with two backups: %v, want the newest named", err)
	}
}

// TestNewerSchemaWithoutBackup: a newer store with no backup beside it is
// refused with what to do instead.
func TestNewerSchemaWithoutBackup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	s, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	_, err = Open(path, Options{Timeout: time.Second, understood: 2})
	if err == nil || !strings.Contains(err.Error(), "no backup of an older schema is beside it") {
		t.Fatalf("Open = %v, want a refusal saying no backup is there", err)
	}
	if m, _ := filepath.Glob(path + ".schema-*"); len(m) != 0 {
		t.Errorf("a refused open left %v", m)
	}
}

// TestMigrationBackupFails: when the backup cannot be written, nothing is
// migrated.
func TestMigrationBackupFails(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only directory: this check needs a non-root user")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "flowstate.db")
	schema2Fixture(t, path)
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	_, err := Open(path, Options{Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "nothing was migrated") {
		t.Fatalf("Open = %v, want the backup's failure", err)
	}
	if v, _ := schemaOf(t, path); v != 2 {
		t.Errorf("store at schema %d after a failed backup, want 2", v)
	}
}
