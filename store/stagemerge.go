package store

import (
	"bytes"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// The merge of a staged write (step 1 of stage.go): the spool's flows with
// the bridge's, then the refs index that Commit swaps in with them, each
// appended in key order to the stage bucket in transactions of stageChunk
// entries.

// stageState carries the merge from one staging transaction to the next.
type stageState struct {
	w  StagedWrite
	st *Staged
	it *spoolIter
	// resume is the first flow of the bridge's bucket not yet merged; nil
	// before the first transaction, done once the bucket is merged.
	resume  []byte
	oldDone bool
	// prev is the identity and index of the last spooled entry merged, to
	// find duplicates (adjacent in key order).
	prev      []byte
	prevIndex int
	arena     kindCursors
}

// stageRefs writes the bridge's refs index as the write leaves it to the
// staged bucket (stage/<bridge>/refs), as the flows: a merge, in key order,
// of the bridge's refs bucket with the write's moves, appended in
// transactions of stageChunk entries. Commit swaps it in with the flows;
// one transaction of a million refs held 400 MB of bbolt's nodes and pages.
func (sg Staging) stageRefs(st *Staged) error {
	del, add := &st.refs.del, &st.refs.add
	del.sort()
	add.sort()
	var resume []byte
	oldDone, di, ai := false, 0, 0
	for done := false; !done; {
		err := sg.s.db.update(func(tx *bolt.Tx) error {
			dst, err := tx.Bucket(bucketStage).Bucket([]byte(st.bridge)).CreateBucketIfNotExists(bucketRefs)
			if err != nil {
				return err
			}
			dst.FillPercent = 1.0
			var oc *bolt.Cursor
			var ok, ov []byte
			if br := tx.Bucket(bucketBridges).Bucket([]byte(st.bridge)); br != nil && !oldDone {
				if rb := br.Bucket(bucketRefs); rb != nil {
					oc = rb.Cursor()
					if resume == nil {
						ok, ov = oc.First()
					} else {
						ok, ov = oc.Seek(resume)
					}
				}
			}
			for n := 0; n < sg.s.stageChunk; n++ {
				var ak []byte
				if ai < add.len() {
					ak = add.key(ai)
				}
				if ok == nil && ak == nil {
					done = true
					return nil
				}
				c := 1 // which comes first: -1 the bridge's, 1 the write's
				if ok != nil && ak != nil {
					c = bytes.Compare(ok, ak)
				} else if ok != nil {
					c = -1
				}
				if c < 0 {
					for di < del.len() && bytes.Compare(del.key(di), ok) < 0 {
						di++
					}
					if di >= del.len() || !bytes.Equal(del.key(di), ok) {
						if err := dst.Put(ok, ov); err != nil {
							return err
						}
					}
					ok, ov = oc.Next()
					continue
				}
				if err := dst.Put(ak, add.value(ai)); err != nil {
					return err
				}
				ai++
				if c == 0 {
					ok, ov = oc.Next()
				}
			}
			if ok == nil {
				oldDone = true
			} else {
				resume = bytes.Clone(ok)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	st.refsStaged = true
	return nil
}

// checkRemoved refuses the write when a group or meter it removes is still
// used by a flow it keeps (its own unchanged, or another module's): the refs
// index as Commit will leave it.
func (st *Staged) checkRemoved(tx *bolt.Tx) error {
	sb := tx.Bucket(bucketStage).Bucket([]byte(st.bridge)) // the flows as they will be
	rb := sb.Bucket(bucketRefs)
	if !st.refsStaged {
		if br := tx.Bucket(bucketBridges).Bucket([]byte(st.bridge)); br != nil {
			rb = br.Bucket(bucketRefs)
		}
	}
	if rb == nil {
		return nil
	}
	c := rb.Cursor()
	for _, r := range st.plan.Removed {
		prefix := refPrefix(r.Kind, r.ID)
		if k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) {
			return usersError(sb, c, prefix, r, st.s.describe)
		}
	}
	return nil
}

// chunk merges up to stageChunk flows into the staged bucket in tx; done
// once both sides are merged.
func (ss *stageState) chunk(tx *bolt.Tx) (done bool, err error) {
	w := ss.w
	dst := tx.Bucket(bucketStage).Bucket([]byte(w.Bridge)).Bucket(flowBucket)
	// Appended in key order: full pages, as a file written sequentially.
	dst.FillPercent = 1.0
	var br, old *bolt.Bucket
	if br = tx.Bucket(bucketBridges).Bucket([]byte(w.Bridge)); br != nil {
		old = br.Bucket(flowBucket)
	}
	var ok, ov []byte
	var oc *bolt.Cursor
	if old != nil && !ss.oldDone {
		oc = old.Cursor()
		if ss.resume == nil {
			ok, ov = oc.First()
		} else {
			ok, ov = oc.Seek(ss.resume)
		}
	}
	ss.arena.arena = nil // the last transaction's records are written
	for n := 0; n < ss.st.s.stageChunk; n++ {
		e := ss.it.peek()
		if ss.it.err != nil {
			return false, ss.it.err
		}
		if ok == nil && e == nil {
			ss.oldDone = true
			return true, nil
		}
		c := 1 // which side comes first: -1 the bridge's, 1 the request's
		if ok != nil && e != nil {
			c = bytes.Compare(ok, e.id)
		} else if ok != nil {
			c = -1
		}
		switch {
		case c < 0:
			// A flow the request does not declare: kept, or removed by a
			// Sync of its owner.
			// A damaged record (sum.go) is kept as it is: still damaged,
			// still left out of every read.
			owner, payload, err := openRecord(ok, ov)
			if err == nil && w.Sync && string(owner) == w.Module {
				ss.remove(ok, payload)
			} else if err := dst.Put(ok, ov); err != nil {
				return false, err
			}
			ok, ov = oc.Next()
		default:
			var prev []byte
			existed := c == 0
			if c == 0 {
				owner, payload, err := openRecord(ok, ov)
				switch {
				case err != nil:
					existed = false // damaged (sum.go): replaced
				case string(owner) != w.Module:
					return false, ownedError(e.index, entry.KindFlow, string(owner))
				default:
					prev = payload
				}
			}
			if err := ss.declare(br, dst, e, existed, prev, ov); err != nil {
				return false, err
			}
			if c == 0 {
				ok, ov = oc.Next()
			}
		}
	}
	if ok == nil {
		ss.oldDone = true
	} else {
		ss.resume = bytes.Clone(ok)
	}
	return false, nil
}

// declare merges spooled entry e; existed says the bridge holds its
// identity, with payload prev in record rec (aliasing the file).
func (ss *stageState) declare(br, dst *bolt.Bucket, e *spooled, existed bool, prev, rec []byte) error {
	w := ss.w
	if ss.prev != nil && bytes.Equal(ss.prev, e.id) {
		return sameIdentityError(e.index, e.kind, ss.prevIndex)
	}
	ss.prev, ss.prevIndex = append(ss.prev[:0], e.id...), e.index
	if w.Declared != nil {
		w.Declared(e.kind, e.id)
	}
	if err := checkFlowRefs(br, ss.st.plan, e.payload); err != nil {
		return &errdefs.EntryError{Index: e.index, Err: err}
	}
	if existed && bytes.Equal(prev, e.payload) {
		err := dst.Put(e.id, rec)
		ss.it.next() // e's slices are gone from here on
		return err
	}
	r := ss.arena.record(e.id, w.Module, e.payload)
	if err := dst.Put(e.id, r); err != nil {
		return &errdefs.EntryError{Index: e.index, Err: err}
	}
	if existed {
		ss.st.Changed++
	} else {
		ss.st.Added++
	}
	ss.st.refs.move(w.Module, e.id, prev, e.payload)
	if w.Changed != nil {
		// The payload is the record's, in the arena; the identity a copy:
		// e's slices go with the next read.
		w.Changed(Change{Entry: entry.Entry{Kind: entry.KindFlow, Module: w.Module, ID: bytes.Clone(e.id),
			Payload: r[2+len(w.Module) : len(r)-sumSize], Opaque: e.opaque}, Index: e.index, Existed: existed})
	}
	ss.it.next()
	return nil
}

// remove records that a Sync removes flow id (payload aliasing the file).
func (ss *stageState) remove(id, payload []byte) {
	ss.st.Removed++
	ss.st.refs.move(ss.w.Module, id, payload, nil)
	if ss.w.Removed != nil {
		ss.w.Removed(entry.Entry{Kind: entry.KindFlow, Module: ss.w.Module, ID: bytes.Clone(id), Payload: bytes.Clone(payload)})
	}
}
