package store

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/flowstate-io/flowstate/entry"
)

// keyOrder is the order of a request's entries by kind and identity. It
// finds duplicates and answers "does the request declare this identity" in
// O(log n) with 4 bytes an entry: a map of keys cost about 100 bytes an
// entry, 200 MB for a Sync of a million flows.
type keyOrder struct {
	es  []entry.Entry
	idx []int32
}

func compareKey(ak entry.Kind, aid []byte, bk entry.Kind, bid []byte) int {
	return cmp.Or(cmp.Compare(ak, bk), bytes.Compare(aid, bid))
}

func newKeyOrder(es []entry.Entry) keyOrder {
	o := keyOrder{es: es, idx: make([]int32, len(es))}
	for i := range o.idx {
		o.idx[i] = int32(i)
	}
	// Among equal identities the first in the request comes first: the
	// index breaks ties, which makes an unstable sort stable (and
	// O(n log n): SortStableFunc merges in place, O(n log² n), a third of
	// a large Put's CPU).
	slices.SortFunc(o.idx, func(a, b int32) int {
		return cmp.Or(compareKey(es[a].Kind, es[a].ID, es[b].Kind, es[b].ID), cmp.Compare(a, b))
	})
	return o
}

// duplicate fails for the first entry, in request order, whose identity an
// earlier entry of the request has, naming that earlier one.
func (o keyOrder) duplicate() error {
	first, earlier := -1, -1
	run := 0 // where the run of equal identities that k is in starts
	for k := 1; k < len(o.idx); k++ {
		a, b := o.es[o.idx[k-1]], o.es[o.idx[k]]
		if compareKey(a.Kind, a.ID, b.Kind, b.ID) != 0 {
			run = k
			continue
		}
		// Within a run of equal identities the first is the earliest.
		if i := int(o.idx[k]); first < 0 || i < first {
			first, earlier = i, int(o.idx[run])
		}
	}
	if first < 0 {
		return nil
	}
	e := o.es[first]
	return sameIdentityError(first, e.Kind, earlier)
}

// contains reports whether the request declares the identity.
func (o keyOrder) contains(kind entry.Kind, id []byte) bool {
	_, found := slices.BinarySearchFunc(o.idx, 0, func(i int32, _ int) int {
		return compareKey(o.es[i].Kind, o.es[i].ID, kind, id)
	})
	return found
}
