package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
}

// Store is the desired state on disk. It is safe for concurrent use.
type Store struct {
	db       *bolt.DB
	describe func(entry.Entry) string
	// id, pre and checked are set by Open (identity.go, check.go).
	id      string
	pre     Preflight
	checked time.Duration
	// damage holds the values reads found damaged (sum.go); busy the
	// operations under way (busy.go).
	damage damaged
	busy   inflight
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
	db, err := openBolt(path, opts.Timeout)
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("store: open %s: locked by another process for %v: %w", path, opts.Timeout, errdefs.ErrUnavailable)
		}
		if isCorrupt(err) {
			return nil, &CorruptError{Path: path, Detail: err.Error()}
		}
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := checkTree(db); err != nil {
		_ = db.Close()
		return nil, &CorruptError{Path: path, Detail: "consistency check: " + err.Error()}
	}
	s := &Store{db: db, describe: opts.Describe, pre: pre, checked: time.Since(start),
		stageChunk: defaultStageChunk, spoolRunEntries: defaultSpoolRunEntries}
	if opts.understood == 0 {
		opts.understood = SchemaVersion
	}
	if err := s.prepareMigration(opts.understood); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := s.sealInChunks(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open %s: migrating to schema version 3: %w", path, err)
	}
	if err := s.init(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := s.initIdentity(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open %s: identity: %w", path, err)
	}
	return s, nil
}

func (s *Store) init() error {
	return s.update(func(tx *bolt.Tx) error {
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

// Boot is what the store knows of host boots: whether the cold-start gate
// of the current boot has opened, so a flowstated restarted during the gate
// keeps waiting instead of taking the second start for a warm one.
type Boot struct {
	// ID is the current boot id and Since when a flowstated first started
	// in it (the readiness timeout counts from there).
	ID    string
	Since time.Time
	// GateOpened is the boot id whose gate last opened: replays ran from
	// the store in that boot. "" on a new store.
	GateOpened string
}

// Cold reports whether the gate of the current boot has yet to open.
func (b Boot) Cold() bool { return b.GateOpened != b.ID }

// RecordBoot records id as the current boot id and returns what the store
// knows of it. Since is kept across restarts within one boot.
func (s *Store) RecordBoot(id string, now time.Time) (Boot, error) {
	var b Boot
	err := s.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		prev := string(meta.Get(keyBootID))
		if v := meta.Get(keyGateOpened); v != nil {
			b.GateOpened = string(v)
		} else if prev != "" {
			// Stores written before the gate was recorded opened their
			// gate in every boot they saw.
			b.GateOpened = prev
		}
		since, _ := time.Parse(time.RFC3339Nano, string(meta.Get(keyBootSince)))
		if prev != id || since.IsZero() {
			since = now
		}
		b.ID, b.Since = id, since
		if err := meta.Put(keyBootID, []byte(id)); err != nil {
			return err
		}
		if err := meta.Put(keyGateOpened, []byte(b.GateOpened)); err != nil {
			return err
		}
		return meta.Put(keyBootSince, []byte(since.UTC().Format(time.RFC3339Nano)))
	})
	if err != nil {
		return Boot{}, fmt.Errorf("store: boot id: %w", err)
	}
	return b, nil
}

// SetGateOpened records that the gate of boot id has opened.
func (s *Store) SetGateOpened(id string) error {
	err := s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyGateOpened, []byte(id))
	})
	if err != nil {
		return fmt.Errorf("store: gate of boot %s: %w", id, err)
	}
	return nil
}

// Writer makes writes inside one read-write transaction (Store.Update). A
// write that fails leaves the transaction to be aborted by the caller.
type Writer struct {
	tx       *bolt.Tx
	s        *Store
	describe func(entry.Entry) string
	observe  func(Change)
	removed  func(entry.Entry)
}

// Observe makes Put and Sync call changed with each change as soon as it is
// decided, in the order Result.Changed lists them, and Sync call removed with
// each entry it removes once they are all known; nil stops it. A write that
// then fails has still called them: the caller must treat what it saw as
// undone. This lets a large write go to the switch while it is being stored.
// Delete does not call them.
func (w *Writer) Observe(changed func(Change), removed func(entry.Entry)) {
	w.observe, w.removed = changed, removed
}

// Result is what one write changed.
type Result struct {
	// Changed are the entries whose content changes (new, or different from
	// what was stored).
	Changed []Change
	// Removed are the entries the write removed, with their payloads.
	Removed []entry.Entry
}

// Update runs fn in one durable read-write transaction: everything fn wrote
// is committed, or nothing if fn returns an error. Several requests written
// in one Update share one commit and one fsync (group commit).
func (s *Store) Update(fn func(w *Writer) error) error {
	return s.update(func(tx *bolt.Tx) error { return fn(&Writer{tx: tx, s: s, describe: s.describe}) })
}

// Put stores es as entries of module on bridge, replacing entries of the same
// identity that module owns. An identity owned by another module fails the
// write with ErrFailedPrecondition naming the owner; two entries with one
// identity fail it with ErrInvalidArgument; a flow that uses a group or meter
// not declared on the bridge fails it with ErrFailedPrecondition.
func (w *Writer) Put(bridge, module string, es []entry.Entry) (Result, error) {
	// Sized for a request that changes everything (a first declare): growing
	// the list of a 200,000-entry request copied and faulted in twice its
	// size, 5% of a declare's CPU. One that changes nothing holds the room
	// until the request ends.
	r := Result{Changed: make([]Change, 0, len(es))}
	order := newKeyOrder(es)
	if err := order.duplicate(); err != nil {
		return r, fmt.Errorf("store: put %s/%s: %w", bridge, module, err)
	}
	br, err := bridgeBucket(w.tx, bridge, true)
	if err != nil {
		return r, fmt.Errorf("store: put %s/%s: %w", bridge, module, err)
	}
	if err := w.putInOrder(br, module, es, order, &r); err != nil {
		return r, fmt.Errorf("store: put %s/%s: %w", bridge, module, err)
	}
	if err := checkRefs(br, es); err != nil {
		return r, fmt.Errorf("store: put %s/%s: %w", bridge, module, err)
	}
	return r, nil
}

// putInOrder writes es for module on br in key order (order), listing in r
// what changed and handing it to the observer. In key order: bbolt keeps a
// node's keys sorted and splits nodes only at commit, so inserting a large
// request in any other order moves the rest of the node at every key (100 s
// for 200,000 unsorted flows).
func (w *Writer) putInOrder(br *bolt.Bucket, module string, es []entry.Entry, order keyOrder, r *Result) error {
	var kbs kindCursors
	// The arena's first chunk as large as the request's records, not
	// always recordChunk: a Put of 1,000 flows needs a quarter of it.
	for _, e := range es {
		kbs.want += 2 + len(module) + len(e.Payload) + sumSize
	}
	for _, at := range order.idx {
		i, e := int(at), es[at]
		prev, existed, same, err := putOwned(br, &kbs, module, i, e)
		if err != nil {
			return err
		}
		if same {
			continue
		}
		r.Changed = append(r.Changed, Change{Entry: e, Index: i, Existed: existed, Old: prev})
		if w.observe != nil {
			w.observe(r.Changed[len(r.Changed)-1])
		}
	}
	return kbs.refs.apply(br)
}

// Sync makes es the complete set of module's entries on bridge: entries of
// module absent from es are removed, the others stored as in Put. Removing a
// group or meter that flows still use fails with an *InUseError.
func (w *Writer) Sync(bridge, module string, es []entry.Entry) (Result, error) {
	r, err := w.sync(bridge, module, es)
	if err != nil {
		return r, fmt.Errorf("store: sync %s/%s: %w", bridge, module, err)
	}
	return r, nil
}

func (w *Writer) sync(bridge, module string, es []entry.Entry) (Result, error) {
	r := Result{Changed: make([]Change, 0, len(es))} // as in Put
	keep := newKeyOrder(es)
	if err := keep.duplicate(); err != nil {
		return r, err
	}
	br, err := bridgeBucket(w.tx, bridge, true)
	if err != nil {
		return r, err
	}
	if err := w.putInOrder(br, module, es, keep, &r); err != nil {
		return r, err
	}
	for _, kind := range entry.Kinds {
		kb := br.Bucket(kindBuckets[kind])
		if kb == nil {
			continue
		}
		var stale [][]byte
		err := kb.ForEach(func(k, v []byte) error {
			owner, payload, err := decodeRecord(k, v)
			if err != nil {
				// Damaged (sum.go): left as it is, out of every read,
				// until a write of its identity replaces it.
				return nil
			}
			if owner == module && !keep.contains(kind, k) {
				stale = append(stale, bytes.Clone(k))
				r.Removed = append(r.Removed, entry.Entry{Kind: kind, Module: owner, ID: bytes.Clone(k), Payload: payload})
			}
			return nil
		})
		if err != nil {
			return r, err
		}
		// Deleting while iterating with ForEach is not allowed.
		for _, k := range stale {
			if err := kb.Delete(k); err != nil {
				return r, err
			}
		}
	}
	var refs refMoves
	for _, e := range r.Removed {
		if e.Kind == entry.KindFlow {
			refs.move(module, e.ID, e.Payload, nil)
		}
	}
	if err := refs.apply(br); err != nil {
		return r, err
	}
	if err := checkRefs(br, es); err != nil {
		return r, err
	}
	if err := checkUsers(br, r.Removed, nil, w.describe); err != nil {
		return r, err
	}
	if w.removed != nil {
		for _, e := range r.Removed {
			w.removed(e)
		}
	}
	return r, nil
}

// Delete removes the entries of module on bridge named by keys (Kind and
// ID). An identity that is not stored fails with ErrNotFound, one owned by
// another module with ErrFailedPrecondition, a group or meter that flows
// still use (after the request's own removals) with an *InUseError.
func (w *Writer) Delete(bridge, module string, keys []entry.Entry) (Result, error) {
	r, err := w.delete(bridge, module, keys)
	if err != nil {
		return r, fmt.Errorf("store: delete %s/%s: %w", bridge, module, err)
	}
	return r, nil
}

func (w *Writer) delete(bridge, module string, keys []entry.Entry) (Result, error) {
	var r Result
	br, err := bridgeBucket(w.tx, bridge, false)
	if err != nil {
		return r, err
	}
	var index []int // request index of r.Removed[j]
	var refs refMoves
	for _, at := range newKeyOrder(keys).idx { // in key order, as Put
		i, k := int(at), keys[at]
		var old []byte
		kb, _ := kindBucket(br, k.Kind, false)
		if kb != nil {
			old = kb.Get(k.ID)
		}
		if old == nil {
			return r, &errdefs.EntryError{Index: i, Err: fmt.Errorf("%s not declared: %w", k.Kind, errdefs.ErrNotFound)}
		}
		owner, payload, err := decodeRecord(k.ID, old)
		if err != nil {
			return r, &errdefs.EntryError{Index: i, Err: err}
		}
		if owner != module {
			return r, ownedError(i, k.Kind, owner)
		}
		r.Removed = append(r.Removed, entry.Entry{Kind: k.Kind, Module: owner, ID: bytes.Clone(k.ID), Payload: payload})
		index = append(index, i)
		if err := kb.Delete(k.ID); err != nil {
			return r, &errdefs.EntryError{Index: i, Err: err}
		}
		if k.Kind == entry.KindFlow {
			refs.move(module, k.ID, payload, nil)
		}
	}
	if err := refs.apply(br); err != nil {
		return r, err
	}
	return r, checkUsers(br, r.Removed, func(j int) int { return index[j] }, w.describe)
}

// SetReady records that module is ready for boot bootID.
func (s *Store) SetReady(module, bootID string) error {
	err := s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketModules).Put([]byte(module), []byte(bootID))
	})
	if err != nil {
		return fmt.Errorf("store: module %s: %w", module, err)
	}
	return nil
}

// ReadyBoots returns, per module that ever marked itself ready, the boot id
// it last did so for.
func (s *Store) ReadyBoots() (map[string]string, error) {
	out := map[string]string{}
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketModules).ForEach(func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: modules: %w", err)
	}
	return out, nil
}

// Filter selects entries for List. Zero fields match everything.
type Filter struct {
	Bridge string
	Module string
	Kind   entry.Kind
	// Table, when not nil, keeps only flows of that table.
	Table *uint8
}

// List calls fn for every entry that matches f, ordered by bridge, kind and
// identity. The entry's slices are copies. It reads in transactions of
// scanChunk records, as ScanFlows does, so a large store is never held by
// one read transaction (which would keep every page writes free from
// reuse): a caller that needs the entries not to change between chunks
// must keep the bridge's writers out. An entry whose checksum does not
// match is left out and recorded (Damaged).
func (s *Store) List(f Filter, fn func(bridge string, e entry.Entry) error) error {
	var bridges []string
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBridges).ForEachBucket(func(name []byte) error {
			if f.Bridge == "" || string(name) == f.Bridge {
				bridges = append(bridges, string(name))
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("store: list: %w", err)
	}
	for _, bridge := range bridges {
		for _, kind := range entry.Kinds {
			if (f.Kind != 0 && f.Kind != kind) || (f.Table != nil && kind != entry.KindFlow) {
				continue
			}
			if err := s.listKind(bridge, kind, f, fn); err != nil {
				return fmt.Errorf("store: list: %w", err)
			}
		}
	}
	return nil
}

// listKind is List of one bridge's entries of one kind.
func (s *Store) listKind(bridge string, kind entry.Kind, f Filter, fn func(bridge string, e entry.Entry) error) error {
	var next []byte
	if f.Table != nil {
		next = []byte{*f.Table}
	}
	for {
		var last []byte
		err := s.view(func(tx *bolt.Tx) error {
			br := tx.Bucket(bucketBridges).Bucket([]byte(bridge))
			if br == nil {
				return nil
			}
			kb := br.Bucket(kindBuckets[kind])
			if kb == nil {
				return nil
			}
			c := kb.Cursor()
			k, v := c.First()
			if next != nil {
				k, v = c.Seek(next)
			}
			for n := 0; k != nil; k, v = c.Next() {
				if f.Table != nil && entry.FlowTable(k) != *f.Table {
					return nil
				}
				if n == scanChunk {
					last = bytes.Clone(k)
					return nil
				}
				n++
				e, ok := s.readEntry(bridge, kind, k, v)
				if !ok || (f.Module != "" && e.Module != f.Module) {
					continue
				}
				if err := fn(bridge, e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || last == nil {
			return err
		}
		next = last
	}
}

// Entries returns every desired entry of bridge.
func (s *Store) Entries(bridge string) ([]entry.Entry, error) {
	var es []entry.Entry
	err := s.List(Filter{Bridge: bridge}, func(_ string, e entry.Entry) error {
		es = append(es, e)
		return nil
	})
	return es, err
}

// Count is the number of entries of one module on one bridge, by kind.
type Count struct {
	Bridge, Module        string
	Flows, Groups, Meters int
}

// Counts returns the entry counts of every (bridge, module), ordered by bridge
// then module. It reads only the owner of each record, not its payload.
func (s *Store) Counts() ([]Count, error) {
	var out []Count
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		out, err = s.countsTx(tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: counts: %w", err)
	}
	sortCounts(out)
	return out, nil
}

// countsTx counts the entries of every (bridge, module) in tx, unordered.
func (s *Store) countsTx(tx *bolt.Tx) ([]Count, error) {
	var out []Count
	root := tx.Bucket(bucketBridges)
	err := root.ForEachBucket(func(name []byte) error {
		idx := map[string]*[3]int{}
		br := root.Bucket(name)
		for ki, kind := range entry.Kinds {
			kb := br.Bucket(kindBuckets[kind])
			if kb == nil {
				continue
			}
			err := kb.ForEach(func(k, v []byte) error {
				owner, err := recordOwner(k, v)
				if err != nil {
					s.damage.note(string(bucketBridges), string(name), kind, k, v, err)
					return nil
				}
				c := idx[string(owner)]
				if c == nil {
					c = new([3]int)
					idx[string(owner)] = c
				}
				c[ki]++
				return nil
			})
			if err != nil {
				return err
			}
		}
		for m, c := range idx {
			out = append(out, Count{Bridge: string(name), Module: m, Flows: c[0], Groups: c[1], Meters: c[2]})
		}
		return nil
	})
	return out, err
}

func checkDuplicates(es []entry.Entry) error { return newKeyOrder(es).duplicate() }

// Change is an entry of a write whose content changes.
type Change struct {
	Entry entry.Entry
	// Index is the entry's position in the request.
	Index int
	// Existed is true when an older content was replaced; Old is that
	// content (the switch holds it while the write is under way).
	Existed bool
	Old     []byte
}

// putOwned writes e (entry i of a request) for module, refusing an identity
// another module owns. existed reports an older content; same that it was
// identical (nothing written).
func putOwned(br *bolt.Bucket, kbs *kindCursors, module string, i int, e entry.Entry) (prev []byte, existed, same bool, err error) {
	kb, cur, err := kbs.get(br, e.Kind)
	if err != nil {
		return nil, false, false, err
	}
	prev, existed, same, err = decideOwned(cur, module, i, e)
	if err != nil || same {
		return prev, existed, same, err
	}
	return prev, existed, false, writeOwned(kb, kbs, module, i, e, prev)
}

// decideOwned finds what writing e (entry i of a request) for module would do
// through cur, a cursor on e's kind bucket (nil: the bucket does not exist):
// the content it replaces (prev, existed), nothing (same), or a refusal of an
// identity another module owns. prev points into the transaction's pages.
func decideOwned(cur *bolt.Cursor, module string, i int, e entry.Entry) (prev []byte, existed, same bool, err error) {
	if cur == nil {
		return nil, false, false, nil
	}
	k, old := cur.Seek(e.ID)
	if old == nil || !bytes.Equal(k, e.ID) {
		return nil, false, false, nil
	}
	owner, payload, err := openRecord(k, old)
	if err != nil {
		// Damaged (sum.go): what it held is unknown, and the write
		// replaces it.
		return nil, false, false, nil
	}
	if string(owner) != module {
		return nil, false, false, ownedError(i, e.Kind, string(owner))
	}
	return payload, true, bytes.Equal(payload, e.Payload), nil
}

// writeOwned stores e for module in kb, its kind's bucket, and records in
// kbs the move of its refs index entries from prev (the content it
// replaces, if any) to e's.
func writeOwned(kb *bolt.Bucket, kbs *kindCursors, module string, i int, e entry.Entry, prev []byte) error {
	if err := kb.Put(e.ID, kbs.record(e.ID, module, e.Payload)); err != nil {
		return &errdefs.EntryError{Index: i, Err: err}
	}
	if e.Kind == entry.KindFlow {
		kbs.refs.move(module, e.ID, prev, e.Payload)
	}
	return nil
}

// kindCursors holds, for a request's entries (in key order, so by kind), the
// bucket of the current kind and a cursor on it: one bucket lookup per kind
// and no cursor per entry. Seek repositions the cursor after each Put.
type kindCursors struct {
	kind entry.Kind
	kb   *bolt.Bucket
	cur  *bolt.Cursor
	// arena holds the request's records, a chunk at a time: one
	// allocation per chunk rather than per entry. bbolt keeps them until
	// the transaction ends, as it would single records.
	arena []byte
	// want is what the records still to come need, when known: the next
	// chunk is no larger.
	want int
	// refs are the request's refs index changes, applied once its
	// entries are written.
	refs refMoves
}

// recordChunk is the size of an arena chunk.
const recordChunk = 1 << 20

// record is encodeRecord into the arena.
func (k *kindCursors) record(key []byte, module string, payload []byte) []byte {
	n := 2 + len(module) + len(payload) + sumSize
	if cap(k.arena)-len(k.arena) < n {
		if n > recordChunk/4 {
			return encodeRecord(key, module, payload)
		}
		size := recordChunk
		if k.want > 0 {
			size = min(size, max(k.want, n))
		}
		k.arena = make([]byte, 0, size)
	}
	k.want = max(0, k.want-n)
	at := len(k.arena)
	k.arena = appendRecord(k.arena, key, module, payload)
	return k.arena[at:len(k.arena):len(k.arena)]
}

func (k *kindCursors) get(br *bolt.Bucket, kind entry.Kind) (*bolt.Bucket, *bolt.Cursor, error) {
	if k.kb == nil || k.kind != kind {
		kb, err := kindBucket(br, kind, true)
		if err != nil {
			return nil, nil, err
		}
		k.kind, k.kb, k.cur = kind, kb, kb.Cursor()
	}
	return k.kb, k.cur, nil
}

// checkRefs fails when a flow of es uses a group or meter the bridge does not
// declare (after the request's own writes).
func checkRefs(br *bolt.Bucket, es []entry.Entry) error {
	for i, e := range es {
		if e.Kind != entry.KindFlow {
			continue
		}
		if err := checkFlowRefs(br, nil, e.Payload); err != nil {
			return &errdefs.EntryError{Index: i, Err: err}
		}
	}
	return nil
}

// ownedError refuses entry i of a request: its identity belongs to owner.
func ownedError(i int, kind entry.Kind, owner string) error {
	return &errdefs.EntryError{Index: i, Err: fmt.Errorf("%s is owned by module %q: %w", kind, owner, errdefs.ErrFailedPrecondition)}
}

// sameIdentityError refuses entry i of a request: entry earlier has its
// identity.
func sameIdentityError(i int, kind entry.Kind, earlier int) error {
	return &errdefs.EntryError{Index: i, Err: fmt.Errorf("same %s identity as entry %d: %w", kind, earlier, errdefs.ErrInvalidArgument)}
}

func bridgeBucket(tx *bolt.Tx, bridge string, create bool) (*bolt.Bucket, error) {
	root := tx.Bucket(bucketBridges)
	if create {
		return root.CreateBucketIfNotExists([]byte(bridge))
	}
	if b := root.Bucket([]byte(bridge)); b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("bridge %q holds no entries: %w", bridge, errdefs.ErrNotFound)
}

func kindBucket(br *bolt.Bucket, kind entry.Kind, create bool) (*bolt.Bucket, error) {
	name, ok := kindBuckets[kind]
	if !ok {
		return nil, fmt.Errorf("invalid entry kind %d: %w", kind, errdefs.ErrInvalidArgument)
	}
	if create {
		return br.CreateBucketIfNotExists(name)
	}
	return br.Bucket(name), nil
}

func encodeRecord(key []byte, module string, payload []byte) []byte {
	return appendRecord(make([]byte, 0, 2+len(module)+len(payload)+sumSize), key, module, payload)
}

// appendRecord appends the record of module's payload stored at key, its
// checksum last (sum.go).
func appendRecord(b, key []byte, module string, payload []byte) []byte {
	at := len(b)
	b = append(b, recordVersion, byte(len(module)))
	b = append(b, module...)
	b = append(b, payload...)
	return appendSum(b, key, at)
}

// decodeRecord returns copies: bbolt's slices are valid only inside the
// transaction. The record must be stored at key k (its checksum covers it).
func decodeRecord(k, v []byte) (module string, payload []byte, err error) {
	owner, p, err := openRecord(k, v)
	if err != nil {
		return "", nil, err
	}
	return string(owner), bytes.Clone(p), nil
}

// recordOwner returns the module of the record v stored at k, aliasing v.
func recordOwner(k, v []byte) ([]byte, error) {
	owner, _, err := openRecord(k, v)
	return owner, err
}

// openRecord checks the checksum of the record v stored at key k and returns
// its module and payload, aliasing v. Every error is a damageError.
func openRecord(k, v []byte) (owner, payload []byte, err error) {
	if _, err := unseal(k, v); err != nil {
		return nil, nil, err
	}
	return splitRecord(v)
}

// splitRecord returns the module and payload of record v without checking
// its checksum.
func splitRecord(v []byte) (owner, payload []byte, err error) {
	if len(v) < 2+sumSize || v[0] != recordVersion {
		return nil, nil, damageError("corrupt record: bad version")
	}
	n := int(v[1])
	if len(v) < 2+n+sumSize {
		return nil, nil, damageError("corrupt record: truncated module name")
	}
	return v[2 : 2+n], v[2+n : len(v)-sumSize], nil
}

func sortCounts(cs []Count) {
	slices.SortFunc(cs, func(a, b Count) int {
		return cmp.Or(cmp.Compare(a.Bridge, b.Bridge), cmp.Compare(a.Module, b.Module))
	})
}
