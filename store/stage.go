package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// A staged write makes a large request (a Spool) the module's entries without
// holding it, or bbolt's dirty pages of it, in memory: one transaction of a
// million entries holds about 1.2 KB an entry until it commits.
//
//  1. Stage merges, in key order, the bridge's flow bucket with the spool,
//     and writes the result, the bridge's flow bucket as it will be, to a
//     bucket of its own (stage/<bridge>/flow) in transactions of
//     stageChunk entries each. Appending in key order dirties only the
//     right edge of the new tree: each transaction costs what it appends.
//     Each change is reported as it is decided (StagedWrite.Changed,
//     Removed), so it can go to the switch while the rest is staged.
//  2. Commit swaps the staged bucket in for the bridge's flow bucket in one
//     small transaction (bbolt moves a bucket by its header) and updates
//     the refs index. Until then readers, a replay and a restarted
//     flowstated see the bridge as it was: the write is all or nothing.
//  3. Discard, or Open after a crash, drops the staged bucket.
//
// Groups and meters are few (the spool holds them in memory) and decided
// first, before any flow (Staging.Plan): the flows are checked against what the
// bridge will hold (a flow may use a group the request adds, not one a Sync
// removes), and the caller sends the groups and meters it adds to the switch
// ahead of the flows that use them. Once every flow is merged, a group or
// meter that a Sync removes is refused if a flow the write keeps still uses
// it; Commit then writes the groups and meters with the swap.
//
// The bridge must not change between Plan, Stage and Commit: the
// caller (the bridge's write owner) holds every other write of the bridge
// back.

var flowBucket = kindBuckets[entry.KindFlow]

// defaultStageChunk is how many entries of the new flow bucket one staging
// transaction writes (Store.stageChunk): about 25 MB of dirty pages.
const defaultStageChunk = 48 << 10

// Staging makes staged writes and the spools they read. Store.Staging makes
// one.
type Staging struct{ s *Store }

// StagedWrite is a Put or Sync of a spooled request.
type StagedWrite struct {
	Bridge, Module string
	// Sync removes the module's flows that the spool does not declare.
	Sync  bool
	Spool *Spool
	// Plan is what the write does to groups and meters (Staging.Plan); nil,
	// Stage plans it.
	Plan *StagePlan
	// Changed, if set, is called with each flow whose content changes, in
	// key order; its Entry's slices stay valid after the call. Removed, if
	// set, with each flow a Sync removes (copies). Old is not set. The
	// groups and meters are in the Plan.
	Changed func(Change)
	Removed func(entry.Entry)
	// Declared, if set, is called with the identity of every entry of the
	// spool (valid during the call only).
	Declared func(kind entry.Kind, id []byte)
}

// StagePlan is what a staged write does to the bridge's groups and meters.
type StagePlan struct {
	// Changed are the groups and meters the write adds or changes, in key
	// order (groups first); Old is set for a change.
	Changed []Change
	// Removed are those a Sync removes, in key order, with their payloads.
	Removed []entry.Entry
	// declared holds the refPrefix of every group and meter of the
	// request, removed of those a Sync removes: what the flows are
	// checked against before the bridge's buckets.
	declared, removed map[string]struct{}
}

// checkFlowRefs fails when the flow payload uses a group or meter that the
// bridge (br, nil for one that holds nothing yet) does not declare, or with
// plan p (nil for none) will not declare once the write is stored.
func checkFlowRefs(br *bolt.Bucket, p *StagePlan, payload []byte) error {
	for _, r := range flowRefs(payload) {
		if p != nil {
			var buf [5]byte // a refPrefix, without allocating one per flow
			k := binary.BigEndian.AppendUint32(append(buf[:0], byte(r.Kind)), r.ID)
			if _, ok := p.declared[string(k)]; ok {
				continue
			}
			if _, gone := p.removed[string(k)]; gone {
				return undeclaredRef(r)
			}
		}
		var kb *bolt.Bucket
		if br != nil {
			kb = br.Bucket(kindBuckets[r.Kind])
		}
		if kb == nil || kb.Get(r.Key()) == nil {
			return undeclaredRef(r)
		}
	}
	return nil
}

func undeclaredRef(r entry.Ref) error { return &UndeclaredRefError{Ref: r} }

// UndeclaredRefError is a flow that uses a group or meter no module
// declared on its bridge: the switch would refuse it.
type UndeclaredRefError struct{ Ref entry.Ref }

func (e *UndeclaredRefError) Error() string {
	return fmt.Sprintf("flow uses %s, which no module declared on this bridge", e.Ref)
}

func (e *UndeclaredRefError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// Plan decides what w does to the bridge's groups and meters: which it
// adds, changes and (Sync) removes. It refuses a group or meter another
// module owns, or two with one identity, naming the entry.
func (sg Staging) Plan(w StagedWrite) (*StagePlan, error) {
	var p *StagePlan
	err := sg.s.db.view(func(tx *bolt.Tx) error {
		var err error
		p, err = planNonFlows(tx, w)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: staged %s %s/%s: %w", opName(w.Sync), w.Bridge, w.Module, err)
	}
	return p, nil
}

func planNonFlows(tx *bolt.Tx, w StagedWrite) (*StagePlan, error) {
	nf := w.Spool.sortedNonFlows()
	p := &StagePlan{declared: make(map[string]struct{}, len(nf))}
	br := tx.Bucket(bucketBridges).Bucket([]byte(w.Bridge))
	for i := range nf {
		e := &nf[i]
		if i > 0 && nf[i-1].kind == e.kind && bytes.Equal(nf[i-1].id, e.id) {
			return nil, sameIdentityError(e.index, e.kind, nf[i-1].index)
		}
		p.declared[string(refPrefix(e.kind, e.id))] = struct{}{}
		c := Change{Entry: entry.Entry{Kind: e.kind, Module: w.Module, ID: e.id, Payload: e.payload, Opaque: e.opaque}, Index: e.index}
		if br != nil {
			if kb := br.Bucket(kindBuckets[e.kind]); kb != nil {
				if v := kb.Get(e.id); v != nil {
					owner, payload, err := openRecord(e.id, v)
					if err != nil {
						// Damaged (sum.go): the write replaces it.
						p.Changed = append(p.Changed, c)
						continue
					}
					if string(owner) != w.Module {
						return nil, ownedError(e.index, e.kind, string(owner))
					}
					if bytes.Equal(payload, e.payload) {
						continue
					}
					c.Existed, c.Old = true, bytes.Clone(payload)
				}
			}
		}
		p.Changed = append(p.Changed, c)
	}
	if !w.Sync || br == nil {
		return p, nil
	}
	for _, kind := range []entry.Kind{entry.KindGroup, entry.KindMeter} {
		kb := br.Bucket(kindBuckets[kind])
		if kb == nil {
			continue
		}
		c := kb.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			owner, payload, err := openRecord(k, v)
			if err != nil {
				continue // damaged (sum.go): left as it is
			}
			prefix := string(refPrefix(kind, k))
			if _, kept := p.declared[prefix]; kept || string(owner) != w.Module {
				continue
			}
			if p.removed == nil {
				p.removed = map[string]struct{}{}
			}
			p.removed[prefix] = struct{}{}
			p.Removed = append(p.Removed, entry.Entry{Kind: kind, Module: w.Module, ID: bytes.Clone(k), Payload: bytes.Clone(payload)})
		}
	}
	return p, nil
}

// Bound is the most flow changes w can report (Changed and Removed):
// one per flow of the spool, and for a Sync one per flow the bridge holds.
func (sg Staging) Bound(w StagedWrite) (int, error) {
	n := w.Spool.Count(entry.KindFlow)
	if !w.Sync {
		return n, nil
	}
	err := sg.s.db.view(func(tx *bolt.Tx) error {
		if br := tx.Bucket(bucketBridges).Bucket([]byte(w.Bridge)); br != nil {
			if fb := br.Bucket(flowBucket); fb != nil {
				n += fb.Stats().KeyN
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: %w", err)
	}
	return n, nil
}

// Staged is a staged write waiting for Commit or Discard.
type Staged struct {
	s      *Store
	bridge string
	// Added, Changed and Removed count the entries the write adds,
	// changes and (Sync) removes.
	Added, Changed, Removed int
	plan                    *StagePlan
	// refs are the refs index updates of the flows merged so far (flows
	// that use groups or meters only), staged (stageRefs) once every flow
	// is: refsStaged.
	refs       refMoves
	refsStaged bool
	module     string
	done       bool
}

// Stage stages w (see above). An error leaves nothing staged; the spool
// may then be read again.
func (sg Staging) Stage(w StagedWrite) (*Staged, error) {
	st, err := sg.stage(w)
	if err != nil {
		if derr := sg.dropStage(w.Bridge); derr != nil {
			err = fmt.Errorf("%w (and dropping what was staged failed: %w)", err, derr)
		}
		return nil, fmt.Errorf("store: staged %s %s/%s: %w", opName(w.Sync), w.Bridge, w.Module, err)
	}
	return st, nil
}

func opName(sync bool) string {
	if sync {
		return "sync"
	}
	return "put"
}
func (sg Staging) stage(w StagedWrite) (*Staged, error) {
	it, err := w.Spool.iter()
	if err != nil {
		return nil, err
	}
	if w.Declared != nil {
		for _, e := range w.Spool.nonFlows {
			w.Declared(e.kind, e.id)
		}
	}
	ss := &stageState{w: w, it: it, st: &Staged{s: sg.s, bridge: w.Bridge, module: w.Module, plan: w.Plan}}
	err = sg.s.db.update(func(tx *bolt.Tx) error {
		if ss.st.plan == nil {
			p, err := planNonFlows(tx, w)
			if err != nil {
				return err
			}
			ss.st.plan = p
		}
		root, err := tx.CreateBucketIfNotExists(bucketStage)
		if err != nil {
			return err
		}
		if root.Bucket([]byte(w.Bridge)) != nil {
			if err := root.DeleteBucket([]byte(w.Bridge)); err != nil {
				return err
			}
		}
		sb, err := root.CreateBucket([]byte(w.Bridge))
		if err != nil {
			return err
		}
		_, err = sb.CreateBucket(flowBucket)
		return err
	})
	if err != nil {
		return nil, err
	}
	for done := false; !done; {
		err := sg.s.db.update(func(tx *bolt.Tx) error {
			var err error
			done, err = ss.chunk(tx)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	st := ss.st
	for _, c := range st.plan.Changed {
		if c.Existed {
			st.Changed++
		} else {
			st.Added++
		}
	}
	st.Removed += len(st.plan.Removed)
	if !st.refs.empty() {
		if err := sg.stageRefs(st); err != nil {
			return nil, err
		}
		st.refs = refMoves{}
	}
	if len(st.plan.Removed) > 0 {
		if err := sg.s.db.view(st.checkRemoved); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// Commit makes the staged bucket the bridge's flows, in one transaction.
func (st *Staged) Commit() error {
	if st.done {
		return fmt.Errorf("store: staged write of bridge %s already ended: %w", st.bridge, errdefs.ErrInternal)
	}
	st.done = true
	err := st.s.db.update(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketStage)
		var sb *bolt.Bucket
		if root != nil {
			sb = root.Bucket([]byte(st.bridge))
		}
		if sb == nil {
			return fmt.Errorf("the staged bucket is gone: %w", errdefs.ErrInternal)
		}
		br, err := bridgeBucket(tx, st.bridge, true)
		if err != nil {
			return err
		}
		if br.Bucket(flowBucket) != nil {
			if err := br.DeleteBucket(flowBucket); err != nil {
				return err
			}
		}
		if err := sb.MoveBucket(flowBucket, br); err != nil {
			return err
		}
		if st.refsStaged {
			if br.Bucket(bucketRefs) != nil {
				if err := br.DeleteBucket(bucketRefs); err != nil {
					return err
				}
			}
			if err := sb.MoveBucket(bucketRefs, br); err != nil {
				return err
			}
		}
		if err := root.DeleteBucket([]byte(st.bridge)); err != nil {
			return err
		}
		return st.plan.write(br, st.module)
	})
	if err != nil {
		if derr := st.s.Staging().dropStage(st.bridge); derr != nil {
			err = fmt.Errorf("%w (and dropping what was staged failed: %w)", err, derr)
		}
		return fmt.Errorf("store: staged write of bridge %s: %w", st.bridge, err)
	}
	return nil
}

// write stores p's groups and meters for module in br.
func (p *StagePlan) write(br *bolt.Bucket, module string) error {
	for _, c := range p.Changed {
		kb, err := kindBucket(br, c.Entry.Kind, true)
		if err == nil {
			err = kb.Put(c.Entry.ID, encodeRecord(c.Entry.ID, module, c.Entry.Payload))
		}
		if err != nil {
			return fmt.Errorf("%s %x: %w", c.Entry.Kind, c.Entry.ID, err)
		}
	}
	for _, e := range p.Removed {
		kb, err := kindBucket(br, e.Kind, false)
		if err == nil && kb != nil {
			err = kb.Delete(e.ID)
		}
		if err != nil {
			return fmt.Errorf("%s %x: %w", e.Kind, e.ID, err)
		}
	}
	return nil
}

// Discard drops the staged write: the bridge keeps its flows.
func (st *Staged) Discard() error {
	if st.done {
		return nil
	}
	st.done = true
	if err := st.s.Staging().dropStage(st.bridge); err != nil {
		return fmt.Errorf("store: discarding the staged write of bridge %s: %w", st.bridge, err)
	}
	return nil
}

// dropStage deletes what is staged for bridge ("" for every bridge).
func (sg Staging) dropStage(bridge string) error {
	// Most failures stage nothing: no write then, which on a full disk
	// could fail in turn.
	staged := false
	_ = sg.s.db.view(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketStage)
		staged = root != nil && (bridge == "" || root.Bucket([]byte(bridge)) != nil)
		return nil
	})
	if !staged {
		return nil
	}
	return sg.s.db.update(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketStage)
		if root == nil {
			return nil
		}
		if bridge == "" {
			return tx.DeleteBucket(bucketStage)
		}
		if root.Bucket([]byte(bridge)) == nil {
			return nil
		}
		return root.DeleteBucket([]byte(bridge))
	})
}
