package store

import (
	"bytes"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// A PutPlan is a Put decided without writing: what it changes (Result), checked
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
type PutPlan struct {
	bridge, module string
	// Result lists the changes; their Old contents are copies, valid after
	// the read transaction.
	Result
	// undo is what UndoPlanned needs beyond Result: see planUndo.
	undo planUndo
}

// PlanPut decides Put(bridge, module, es) of flows against the store as it
// is now, with Put's errors. A bridge the store does not hold yet is empty.
// Groups and meters go through Put: a flow may use a group of its own
// request, which a plan made before anything is written would not find.
func (en Entries) PlanPut(bridge, module string, es []entry.Entry) (PutPlan, error) {
	p := PutPlan{bridge: bridge, module: module, Result: Result{Changed: make([]Change, 0, len(es))}}
	for i, e := range es {
		if e.Kind != entry.KindFlow {
			return p, fmt.Errorf("store: plan %s/%s: entry %d is a %s: only flows are planned: %w", bridge, module, i, e.Kind, errdefs.ErrInvalidArgument)
		}
	}
	order := newKeyOrder(es)
	if err := order.duplicate(); err != nil {
		return p, fmt.Errorf("store: put %s/%s: %w", bridge, module, err)
	}
	err := en.s.db.view(func(tx *bolt.Tx) error {
		br := tx.Bucket(bucketBridges).Bucket([]byte(bridge))
		var cur *bolt.Cursor
		p.undo.fresh(br)
		if br != nil {
			if kb := br.Bucket(kindBuckets[entry.KindFlow]); kb != nil {
				cur = kb.Cursor()
			}
		}
		for _, at := range order.idx {
			i, e := int(at), es[at]
			prev, existed, same, damaged, err := decideOwned(cur, module, i, e)
			if err != nil {
				return err
			}
			if same {
				continue
			}
			if damaged != nil {
				p.undo.damaged(br, len(p.Changed), e, damaged)
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

// PutPlanned writes plans made by PlanPut, for one bridge, and leaves the
// store as their Puts, one after the other, would have (see PutPlan for when
// that holds). The plans must not change the same identity. Their changes
// are written in key order across the plans (each plan lists its own in
// key order: they are merged), so bbolt walks its tree once, not once per
// plan.
func (w *Writer) PutPlanned(plans ...PutPlan) error {
	if len(plans) == 0 {
		return nil
	}
	bridge, want := plans[0].bridge, 0
	for _, p := range plans {
		if p.bridge != bridge {
			return fmt.Errorf("store: put plans of bridges %s and %s in one call", bridge, p.bridge)
		}
		for _, c := range p.Changed {
			want += 2 + len(p.module) + len(c.Entry.Payload)
		}
	}
	if want == 0 {
		return nil
	}
	br, err := bridgeBucket(w.tx, bridge, true)
	if err != nil {
		return fmt.Errorf("store: put %s: %w", bridge, err)
	}
	kbs := kindCursors{want: want}
	write := func(p *PutPlan, c *Change) error {
		kb, _, err := kbs.get(br, c.Entry.Kind)
		if err == nil {
			err = writeOwned(kb, &kbs, p.module, c.Index, c.Entry, c.Old)
		}
		if err != nil {
			return fmt.Errorf("store: put %s/%s: %w", bridge, p.module, err)
		}
		return nil
	}
	less := func(a, b *Change) int { return compareKey(a.Entry.Kind, a.Entry.ID, b.Entry.Kind, b.Entry.ID) }
	if len(plans) > mergePlans {
		type at struct{ p, c int32 }
		var order []at
		for i, p := range plans {
			for j := range p.Changed {
				order = append(order, at{int32(i), int32(j)})
			}
		}
		slices.SortFunc(order, func(a, b at) int { return less(&plans[a.p].Changed[a.c], &plans[b.p].Changed[b.c]) })
		for _, a := range order {
			if err := write(&plans[a.p], &plans[a.p].Changed[a.c]); err != nil {
				return err
			}
		}
		return kbs.refs.apply(br)
	}
	next := make([]int, len(plans)) // each plan's next change
	for {
		// The least next change of all plans: a few plans, so a scan.
		pick := -1
		for i, p := range plans {
			if next[i] < len(p.Changed) && (pick < 0 || less(&p.Changed[next[i]], &plans[pick].Changed[next[pick]]) < 0) {
				pick = i
			}
		}
		if pick < 0 {
			return kbs.refs.apply(br)
		}
		next[pick]++
		if err := write(&plans[pick], &plans[pick].Changed[next[pick]-1]); err != nil {
			return err
		}
	}
}

// mergePlans is how many plans PutPlanned merges by scanning their next
// changes; more are sorted.
const mergePlans = 8
