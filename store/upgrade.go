package store

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Migration is what Open did to a store of an older schema.
type Migration struct {
	// From is the schema version the store had; 0 when Open migrated
	// nothing.
	From uint32
	// Backup is the copy of the store as it was before the migration,
	// beside it (BackupName).
	Backup string
}

// BackupName is the name of the copy Open makes of the store at path before
// migrating it from schema version from: path.schema-<from>.bak, or, when
// that exists (an earlier upgrade was rolled back and retried),
// path.schema-<from>.<n>.bak with the first n free. A backup is never
// overwritten.
func backupName(path string, from uint32, n int) string {
	if n == 0 {
		return fmt.Sprintf("%s.schema-%d.bak", path, from)
	}
	return fmt.Sprintf("%s.schema-%d.%d.bak", path, from, n)
}

// storedSchema is the schema version recorded in the store; 0 for a new
// store that has none yet.
func storedSchema(db *bolt.DB) (uint32, error) {
	var got uint32
	err := db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return nil
		}
		v := meta.Get(keySchema)
		if v == nil {
			return nil
		}
		if len(v) != 4 {
			return fmt.Errorf("corrupt schema version (%d bytes)", len(v))
		}
		got = binary.BigEndian.Uint32(v)
		return nil
	})
	return got, err
}

// prepareMigration runs before anything in Open writes. A store of a newer
// schema is refused, naming the backup its migration left, if one is
// there. A store of an older one is first copied beside itself, so the
// flowstated it came from can be rolled back to: a rollback without a copy
// would lose the desired state (the older code cannot read the new layout).
// It returns the migration to come, with the backup's name (zero when none).
func prepareMigration(db *bolt.DB, understood uint32) (Migration, error) {
	from, err := storedSchema(db)
	if err != nil {
		return Migration{}, err
	}
	switch {
	case from > understood:
		return Migration{}, newerSchemaError(db.Path(), from, understood)
	case from == 0 || from == understood:
		return Migration{}, nil
	}
	name, err := backupBeforeMigration(db, from)
	if err != nil {
		return Migration{}, fmt.Errorf("backup before migrating from schema version %d (nothing was migrated; the store is as it was): %w", from, err)
	}
	return Migration{From: from, Backup: name}, nil
}

// backupBeforeMigration writes a consistent copy of the store (one read
// transaction) into a temporary file beside it, syncs it, and links it to
// the first free backupName: a link never replaces a name that exists.
func backupBeforeMigration(db *bolt.DB, from uint32) (string, error) {
	path := db.Path()
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".backup-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	err = db.View(func(tx *bolt.Tx) error {
		_, err := tx.WriteTo(f)
		return err
	})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", writeErrorAt(tmp, err)
	}
	for n := 0; ; n++ {
		name := backupName(path, from, n)
		err := os.Link(tmp, name)
		if err == nil {
			return name, syncDir(filepath.Dir(path))
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// newerSchemaError refuses a store of schema version got, newer than this
// code's: it was migrated forward by a newer flowstated, whose migration
// left a backup of the older layout beside it. The newest backup this code
// can open is named, with what to do.
func newerSchemaError(path string, got, understood uint32) error {
	what := fmt.Sprintf("schema version %d, this flowstated understands up to %d: the store was migrated by a newer flowstated", got, understood)
	if b := newestBackup(path, understood); b != "" {
		return fmt.Errorf("%s; to roll back, stop flowstated and move its backup from before the migration, %s, to %s (docs/operations.md#rollback), or run the newer flowstated", what, b, path)
	}
	return fmt.Errorf("%s, and no backup of an older schema is beside it (%s.schema-N.bak): run the newer flowstated, or move the store away to start from an empty one (docs/operations.md#rollback)", what, path)
}

// newestBackup is the backup beside path of the highest schema version
// this code opens, the last made of those; "" when there is none.
func newestBackup(path string, understood uint32) string {
	matches, _ := filepath.Glob(path + ".schema-*.bak")
	type backup struct {
		name   string
		schema uint32
		n      int
	}
	var found []backup
	for _, m := range matches {
		rest := strings.TrimSuffix(strings.TrimPrefix(m, path+".schema-"), ".bak")
		ver, nth, _ := strings.Cut(rest, ".")
		v, err := strconv.ParseUint(ver, 10, 32)
		if err != nil || uint32(v) > understood {
			continue
		}
		n := 0
		if nth != "" {
			if n, err = strconv.Atoi(nth); err != nil {
				continue
			}
		}
		found = append(found, backup{m, uint32(v), n})
	}
	if len(found) == 0 {
		return ""
	}
	return slices.MaxFunc(found, func(a, b backup) int {
		return cmp.Or(cmp.Compare(a.schema, b.schema), cmp.Compare(a.n, b.n))
	}).name
}
