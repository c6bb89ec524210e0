package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
)

// An undo of a planned Put takes back, in a later transaction, what
// PutPlanned wrote, so that a write may commit before the switch decides it
// and be taken back when the switch refuses it (server/restore/write's
// overlapped pipe). It leaves the bridge's buckets byte for byte as they
// were before PutPlanned (TestUndoPlannedRestoresTheStore):
//
//  1. every changed entry gets back the record PlanPut read (its old
//     content, owned by the same module, or the damaged bytes it replaced),
//     or is deleted when it was new;
//  2. the refs index moves back from the new contents to the old;
//  3. the buckets the write created (the bridge's, its flow or refs bucket)
//     are deleted once empty.
//
// It is right only if nothing wrote the plans' entries since PutPlanned (the
// bridge's one writer guarantees it, as for PutPlan).

// planUndo is what a PutPlan keeps for UndoPlanned: the buckets missing when
// it was made, and the damaged records its changes replace, by change index.
type planUndo struct {
	noBridge, noFlows, noRefs bool
	raw                       map[int]damagedRecord
}

// damagedRecord is a damaged record a change replaces: its bytes, and the
// refs index entries of the new content that were there already (left by
// the record before it was damaged), with their values.
type damagedRecord struct {
	raw  []byte
	refs map[string][]byte
}

// fresh records which of the plan's buckets br (nil: the bridge's, absent)
// lacks.
func (u *planUndo) fresh(br *bolt.Bucket) {
	u.noBridge = br == nil
	u.noFlows = br == nil || br.Bucket(kindBuckets[entry.KindFlow]) == nil
	u.noRefs = br == nil || br.Bucket(bucketRefs) == nil
}

// damaged keeps a copy of raw, the damaged record in br that change i, to
// e, replaces, and the refs index entries of e's content br holds.
func (u *planUndo) damaged(br *bolt.Bucket, i int, e entry.Entry, raw []byte) {
	if u.raw == nil {
		u.raw = map[int]damagedRecord{}
	}
	d := damagedRecord{raw: bytes.Clone(raw), refs: map[string][]byte{}}
	if rb := br.Bucket(bucketRefs); rb != nil {
		for _, r := range flowRefs(e.Payload) {
			k := refKey(r, e.ID)
			if v := rb.Get(k); v != nil {
				d.refs[string(k)] = bytes.Clone(v)
			}
		}
	}
	u.raw[i] = d
}

// refKey is the refs index key of flow id using r (refList.add's layout).
func refKey(r entry.Ref, id []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{byte(r.Kind)}, r.ID), id...)
}

// UndoPlanned takes back what PutPlanned(plans...) wrote (see An undo of a
// planned Put). The plans are those given to PutPlanned, for one bridge.
func (w *Writer) UndoPlanned(plans ...PutPlan) error {
	if len(plans) == 0 {
		return nil
	}
	bridge := plans[0].bridge
	root := w.tx.Bucket(bucketBridges)
	br := root.Bucket([]byte(bridge))
	if br == nil {
		return nil // nothing was written
	}
	var refs refMoves
	var u planUndo
	for _, p := range plans {
		if p.bridge != bridge {
			return fmt.Errorf("store: undo plans of bridges %s and %s in one call", bridge, p.bridge)
		}
		u.noBridge, u.noFlows, u.noRefs = u.noBridge || p.undo.noBridge, u.noFlows || p.undo.noFlows, u.noRefs || p.undo.noRefs
		for i, c := range p.Changed {
			d, damaged := p.undo.raw[i]
			if err := undoChange(br, &refs, p.module, c, damaged, d); err != nil {
				return fmt.Errorf("store: undo a put of %s/%s: %w", bridge, p.module, err)
			}
		}
	}
	if err := refs.apply(br); err != nil {
		return fmt.Errorf("store: undo a put of %s: %w", bridge, err)
	}
	for _, b := range []struct {
		fresh bool
		name  []byte
	}{{u.noFlows, kindBuckets[entry.KindFlow]}, {u.noRefs, bucketRefs}} {
		if err := deleteIfEmpty(br, b.name, b.fresh); err != nil {
			return fmt.Errorf("store: undo a put of %s: %w", bridge, err)
		}
	}
	return deleteIfEmpty(root, []byte(bridge), u.noBridge)
}

// undoChange puts back the record c replaced in br (d's bytes when it was
// damaged), or deletes c's entry when it was new, and records the move of
// its refs back.
func undoChange(br *bolt.Bucket, refs *refMoves, module string, c Change, damaged bool, d damagedRecord) error {
	kb := br.Bucket(kindBuckets[c.Entry.Kind])
	if kb == nil {
		return fmt.Errorf("no %s bucket to undo %x in", c.Entry.Kind, c.Entry.ID)
	}
	switch {
	case damaged:
		// Its refs entries go back as they were: those of the new
		// content that were there stay, with their values.
		for _, r := range flowRefs(c.Entry.Payload) {
			if v, ok := d.refs[string(refKey(r, c.Entry.ID))]; ok {
				refs.add.add(r, c.Entry.ID, string(v))
			} else {
				refs.del.add(r, c.Entry.ID, "")
			}
		}
		return kb.Put(c.Entry.ID, d.raw)
	case c.Existed:
		refs.move(module, c.Entry.ID, c.Entry.Payload, c.Old)
		return kb.Put(c.Entry.ID, encodeRecord(c.Entry.ID, module, c.Old))
	default:
		refs.move(module, c.Entry.ID, c.Entry.Payload, nil)
		return kb.Delete(c.Entry.ID)
	}
}

// deleteIfEmpty deletes parent's bucket name when fresh (the write created
// it) and empty.
func deleteIfEmpty(parent *bolt.Bucket, name []byte, fresh bool) error {
	if !fresh {
		return nil
	}
	b := parent.Bucket(name)
	if b == nil {
		return nil
	}
	if k, _ := b.Cursor().First(); k != nil {
		return nil
	}
	return parent.DeleteBucket(name)
}
