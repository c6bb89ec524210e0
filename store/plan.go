package store

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// A Plan is a Put decided without writing: what it changes (Result), checked
// as Put checks (duplicate identities, ownership, refs), against the store as
// a read transaction saw it. Writer.PutPlanned writes it later, in a write
// transaction, without looking again.
//
// This splits a Put in two so that its reads can run while another write
// commits (server/restore's write pipeline). It is only right if nothing
// changes the plan's entries, nor the groups and meters its flows use,
// between PlanPut and PutPlanned: the caller, the bridge's one writer,
// guarantees that. PutPlanned then leaves the store exactly as Put would
// have (TestPlanSameAsPut).
type Plan struct {
	bridge, module string
	// Result lists the changes; their Old contents are copies, valid after
	// the read transaction.
	Result
}

// PlanPut decides Put(bridge, module, es) of flows against the store as it
// is now, with Put's errors. A bridge the store does not hold yet is empty.
// Groups and meters go through Put: a flow may use a group of its own
// request, which a plan made before anything is written would not find.
func (s *Store) PlanPut(bridge, module string, es []entry.Entry) (Plan, error) {
	p := Plan{bridge: bridge, module: module, Result: Result{Changed: make([]Change, 0, len(es))}}
	for i, e := range es {
		if e.Kind != entry.KindFlow {
			return p, fmt.Errorf("store: plan %s/%s: entry %d is a %s: only flows are planned: %w", bridge, module, i, e.Kind, errdefs.ErrInvalidArgument)
		}
	}
	order := newKeyOrder(es)
	if err := order.duplicate(); err != nil {
		return p, fmt.Errorf("store: put %s/%s: %w", bridge, module, err)
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		br := tx.Bucket(bucketBridges).Bucket([]byte(bridge))
		var cur *bolt.Cursor
		if br != nil {
			if kb := br.Bucket(kindBuckets[entry.KindFlow]); kb != nil {
				cur = kb.Cursor()
			}
		}
		for _, at := range order.idx {
			i, e := int(at), es[at]
			prev, existed, same, err := decideOwned(cur, module, i, e)
			if err != nil {
				return err
			}
			if same {
				continue
			}
			p.Changed = append(p.Changed, Change{Entry: e, Index: i, Existed: existed, Old: bytes.Clone(prev)})
		}
		return checkRefs(br, es)
	})
	if err != nil {
		return p, fmt.Errorf("store: put %s/%s: %w", bridge, module, err)
	}
	return p, nil
}

// PutPlanned writes p, made by PlanPut, and returns its Result: the store is
// then as Put would have left it (see Plan for when that holds).
func (w *Writer) PutPlanned(p Plan) (Result, error) {
	if len(p.Changed) == 0 {
		return p.Result, nil
	}
	br, err := bridgeBucket(w.tx, p.bridge, true)
	if err != nil {
		return p.Result, fmt.Errorf("store: put %s/%s: %w", p.bridge, p.module, err)
	}
	var kbs kindCursors
	for _, c := range p.Changed {
		kbs.want += 2 + len(p.module) + len(c.Entry.Payload)
	}
	for _, c := range p.Changed {
		kb, _, err := kbs.get(br, c.Entry.Kind)
		if err == nil {
			err = writeOwned(br, kb, &kbs, p.module, c.Index, c.Entry, c.Old)
		}
		if err != nil {
			return p.Result, fmt.Errorf("store: put %s/%s: %w", p.bridge, p.module, err)
		}
	}
	return p.Result, nil
}
