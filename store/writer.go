package store

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

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
	prev, existed, same, _, err = decideOwned(cur, module, i, e)
	if err != nil || same {
		return prev, existed, same, err
	}
	return prev, existed, false, writeOwned(kb, kbs, module, i, e, prev)
}

// decideOwned finds what writing e (entry i of a request) for module would do
// through cur, a cursor on e's kind bucket (nil: the bucket does not exist):
// the content it replaces (prev, existed), nothing (same), or a refusal of an
// identity another module owns. A damaged record (sum.go) is replaced as if
// absent; damaged is its bytes, for an undo (UndoPlanned). prev and damaged
// point into the transaction's pages.
func decideOwned(cur *bolt.Cursor, module string, i int, e entry.Entry) (prev []byte, existed, same bool, damaged []byte, err error) {
	if cur == nil {
		return nil, false, false, nil, nil
	}
	k, old := cur.Seek(e.ID)
	if old == nil || !bytes.Equal(k, e.ID) {
		return nil, false, false, nil, nil
	}
	owner, payload, err := openRecord(k, old)
	if err != nil {
		// Damaged (sum.go): what it held is unknown, and the write
		// replaces it.
		return nil, false, false, old, nil
	}
	if string(owner) != module {
		return nil, false, false, nil, ownedError(i, e.Kind, string(owner))
	}
	return payload, true, bytes.Equal(payload, e.Payload), nil, nil
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
