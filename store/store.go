package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// SchemaVersion is the layout version this code reads and writes.
const SchemaVersion = 3

// recordVersion is the first byte of a record: 2 since schema 3 (records end
// with a checksum, sum.go); 1 before.
const recordVersion = 2

// Options tune Open.
type Options struct {
	// Timeout bounds the wait for the file lock held by another process.
	// Default 5 s.
	Timeout time.Duration
	// Describe, optional, prints an entry for error messages (the server
	// gives ovs-ofctl syntax); without it they name table and priority.
	Describe func(entry.Entry) string
	// understood is the newest schema version Open accepts: SchemaVersion
	// when 0. A test lowers it to play the previous flowstated meeting a
	// store this one migrated (upgrade.go).
	understood uint32
	// syncFreelist opens bbolt as flowstated did before NoFreelistSync
	// (boltOptions): a test sets it to play that flowstated, on a store
	// this one wrote or for this one to read.
	syncFreelist bool
}

// Store is the desired state on disk. It is safe for concurrent use.
//
// Store itself holds the file (Open, Close, Path) and the write
// transaction (Update); the rest is reached through one small store per
// concern, each a value that shares the Store's file: Entries (the desired
// entries), File (what Open checked, damage, operations under way, a
// copy), Identity (the store id, managed and stood-aside bridges),
// Modules, Boots, Releases, Mirrors, Crashes, Kept, Forms, TLVMaps and
// Staging. A consumer declares the few of their methods it needs.
type Store struct {
	db       *trackedDB
	describe func(entry.Entry) string
	// id, pre and checked are set by Open (identity.go, check.go).
	id      string
	pre     Preflight
	checked time.Duration
	// damage holds the values reads found damaged (sum.go).
	damage damaged
	// migrated is what Open migrated (upgrade.go).
	migrated Migration
	// stageChunk and spoolRunEntries size staging transactions and spool
	// runs (defaultStageChunk, defaultSpoolRunEntries); tests of this
	// package make them a few entries long.
	stageChunk, spoolRunEntries int
}

// Open opens or creates the store at path, creating its directory (mode 0750).
func Open(path string, opts Options) (*Store, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	// A damaged file must be refused before bbolt maps it (check.go).
	start := time.Now()
	pre, err := checkFile(path)
	if err != nil {
		return nil, err
	}
	bdb, err := openBolt(path, opts.Timeout, opts.syncFreelist)
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("store: open %s: locked by another process for %v: %w", path, opts.Timeout, errdefs.ErrUnavailable)
		}
		if isCorrupt(err) {
			return nil, &CorruptError{Path: path, Detail: err.Error()}
		}
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := checkTree(bdb); err != nil {
		_ = bdb.Close()
		return nil, &CorruptError{Path: path, Detail: "consistency check: " + err.Error()}
	}
	s := &Store{db: &trackedDB{DB: bdb}, describe: opts.Describe, pre: pre, checked: time.Since(start),
		stageChunk: defaultStageChunk, spoolRunEntries: defaultSpoolRunEntries}
	if opts.understood == 0 {
		opts.understood = SchemaVersion
	}
	if s.migrated, err = prepareMigration(bdb, opts.understood); err != nil {
		_ = bdb.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := sealInChunks(s.db); err != nil {
		_ = bdb.Close()
		return nil, fmt.Errorf("store: open %s: migrating to schema version 3: %w", path, err)
	}
	if err := initSchema(s.db); err != nil {
		_ = bdb.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if s.id, err = loadIdentity(s.db); err != nil {
		_ = bdb.Close()
		return nil, fmt.Errorf("store: open %s: identity: %w", path, err)
	}
	return s, nil
}

// initSchema creates the top-level buckets, drops a staged write left by a
// dead flowstated and brings the schema to SchemaVersion.
func initSchema(db *trackedDB) error {
	return db.update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketBridges); err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketModules); err != nil {
			return err
		}
		// A staged write that never committed (stage.go): the flowstated
		// that staged it died.
		if tx.Bucket(bucketStage) != nil {
			if err := tx.DeleteBucket(bucketStage); err != nil {
				return err
			}
		}
		if v := meta.Get(keySchema); v != nil {
			if len(v) != 4 {
				return fmt.Errorf("corrupt schema version (%d bytes)", len(v))
			}
			got := binary.BigEndian.Uint32(v)
			if got == SchemaVersion {
				return nil
			}
			if err := migrate(tx, got); err != nil {
				return err
			}
		}
		return meta.Put(keySchema, binary.BigEndian.AppendUint32(nil, SchemaVersion))
	})
}

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

// Path is the file the store lives in.
func (s *Store) Path() string { return s.db.Path() }

// Update runs fn in one durable read-write transaction: everything fn wrote
// is committed, or nothing if fn returns an error. Several requests written
// in one Update share one commit and one fsync (group commit).
func (s *Store) Update(fn func(w *Writer) error) error {
	return s.db.update(func(tx *bolt.Tx) error { return fn(&Writer{tx: tx, s: s, describe: s.describe}) })
}

// The stores, one per concern. Each is a value over the Store's file, cheap
// to make: take one where it is used.

// Entries are the desired entries of every bridge (entries.go, scan.go,
// plan.go).
func (s *Store) Entries() Entries { return Entries{s: s} }

// File is what Open found of the file, the damage reads found since, the
// operations under way and a copy of it (check.go, sum.go, busy.go,
// backup.go).
func (s *Store) File() File { return File{s: s} }

// Identity is the store id and the bridges it manages or stands aside
// from (identity.go, aside.go).
func (s *Store) Identity() Identity { return Identity{db: s.db, id: s.id} }

// Modules are the modules' ready marks (modules.go).
func (s *Store) Modules() Modules { return Modules{db: s.db, damage: &s.damage} }

// Boots are the host boots the store saw and their cold-start gates
// (boot.go).
func (s *Store) Boots() Boots { return Boots{db: s.db} }

// Releases are the records of the last release of a held ovs-vswitchd
// (release.go).
func (s *Store) Releases() Releases { return Releases{db: s.db} }

// Mirrors are the copies of unmanaged bridges (mirror.go).
func (s *Store) Mirrors() Mirrors { return Mirrors{db: s.db, damage: &s.damage} }

// Crashes are the crash records of replays (crashes.go).
func (s *Store) Crashes() Crashes { return Crashes{db: s.db} }

// Kept is what unrecorded controllers installed, left alone (kept.go).
func (s *Store) Kept() Kept { return Kept{db: s.db} }

// Placed is the vswitchd each bridge's entries were last replayed on
// (placed.go).
func (s *Store) Placed() Placed { return Placed{db: s.db} }

// Ahead are the switch's copies a resync left apart from the store
// (ahead.go).
func (s *Store) Ahead() Ahead { return Ahead{db: s.db} }

// Forms are the forms the switch gave declared payloads (forms.go).
func (s *Store) Forms() Forms { return Forms{db: s.db} }

// TLVMaps are the TLV tables an OpenFlow proxy recorded (tlv.go).
func (s *Store) TLVMaps() TLVMaps { return TLVMaps{db: s.db, damage: &s.damage} }

// Staging makes writes too large to hold in memory (stage.go, spool.go).
func (s *Store) Staging() Staging { return Staging{s: s} }
