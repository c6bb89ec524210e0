package write

import (
	"fmt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofmods"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// What a resync knows of its gone entries (resync.go, step 3): the flows,
// groups and meters a clear deleted from the store that the switch keeps
// until the end.

// sweep is what one write of a resync changes of its gone entries, kept
// apart until the write is stored (commit): a write's op may run again in
// another batch, or its transaction roll back.
type sweep struct {
	rs *resync
	// add are the entries this write deletes from the store, back the gone
	// ones it declares again; swept: it swept the store of flows.
	add   map[string]entry.Entry
	back  map[string]bool
	swept bool
}

// goneEntry returns what the switch holds of k if k is gone as of this
// write.
func (sw *sweep) goneEntry(k string) (entry.Entry, bool) {
	if sw == nil {
		return entry.Entry{}, false
	}
	if e, ok := sw.add[k]; ok {
		return e, true
	}
	e, ok := sw.rs.gone[k]
	return e, ok && !sw.back[k]
}

// goes notes that the write deletes e, of key k, from the store, while the
// switch keeps it: e as stored or, for a held change, its original. It
// returns what the switch keeps.
func (sw *sweep) goes(k string, e entry.Entry) []byte {
	if h, ok := sw.rs.held[k]; ok {
		e.Payload = h.orig
	}
	if sw.add == nil {
		sw.add = make(map[string]entry.Entry)
	}
	sw.add[k] = e
	return e.Payload
}

// redeclared notes that the write declares the gone k again.
func (sw *sweep) redeclared(k string) {
	delete(sw.add, k)
	if sw.back == nil {
		sw.back = make(map[string]bool)
	}
	sw.back[k] = true
}

// commit records the stored write's sweep in its resync. r.mu must be
// held.
func (sw *sweep) commit() {
	if sw == nil {
		return
	}
	for k := range sw.back {
		delete(sw.rs.gone, k)
	}
	for k, e := range sw.add {
		delete(sw.rs.held, k) // its orig is in e
		sw.rs.gone[k] = e
	}
	if sw.swept {
		sw.rs.swept = true
	}
}

// rebaseLocked drops, once a replay or a new connection made the switch
// the store's again, what the resync knew of the switch apart from the
// store: the held changes are on it, the gone flows off it. It runs in a
// write's store transaction w, under the bridge's lock.
func (r *recorder) rebaseLocked(w *store.Writer, rs *resync) error {
	b, err := r.ws.bridge(r.bridge)
	if err != nil {
		return err
	}
	n := b.ResetsLocked()
	switch {
	case !rs.based:
		rs.resets, rs.based = n, true
	case n != rs.resets:
		r.ws.log.Info("proxy: the bridge was replayed during a controller's resync: the store is what the switch holds",
			"bridge", r.bridge, "module", r.module, "held", len(rs.held), "gone", len(rs.gone))
		rs.resets = n
		clear(rs.held)
		clear(rs.gone)
		return w.ClearAhead(r.bridge, r.module)
	}
	return nil
}

// sweepLocked deletes from the store, in the write's transaction, the
// module's flows the controller has not declared since the last clear of
// rs (step 3) and returns them as the write's sweep; nil without a
// resync. It runs before the write's own change, which then finds the
// store as the controller's clear left it. The switch keeps them until
// the end. r.mu must be held.
func (r *recorder) sweepLocked(w *store.Writer, rs *resync) (*sweep, error) {
	if rs == nil {
		return nil, nil
	}
	if err := r.rebaseLocked(w, rs); err != nil {
		return nil, fmt.Errorf("resync of %s/%s: %w", r.bridge, r.module, err)
	}
	sw := &sweep{rs: rs}
	if !rs.kinds[entry.KindFlow] || rs.swept {
		return sw, nil
	}
	var keys []entry.Entry
	err := w.Each(r.bridge, r.module, entry.KindFlow, func(e entry.Entry) error {
		k := plan.Key(e.Kind, e.ID)
		if rs.declared[k] {
			return nil
		}
		keys = append(keys, entry.Entry{Kind: e.Kind, ID: e.ID})
		return r.aheadLocked(w, k, sw.goes(k, e))
	})
	if err != nil {
		return nil, fmt.Errorf("resync of %s/%s: listing the cleared flows: %w", r.bridge, r.module, err)
	}
	if len(keys) > 0 {
		if _, err := w.Delete(r.bridge, r.module, keys); err != nil {
			return nil, fmt.Errorf("resync of %s/%s: deleting the cleared flows: %w", r.bridge, r.module, err)
		}
	}
	sw.swept = true
	return sw, nil
}

// sweepUnusedLocked deletes from the store, in the write's transaction and
// after its own change ch (nil: none), the module's groups and meters of a
// cleared kind that the controller has not declared since the clear and
// that no stored flow uses any more, and adds them to the write's sweep sw
// (nil without a resync). The switch keeps them until the end, as the
// gone flows that may use them. A used one stays: the store would refuse
// its deletion, and fail the write. r.mu must be held.
func (r *recorder) sweepUnusedLocked(w *store.Writer, sw *sweep, ch *ofmods.Change) error {
	if sw == nil || !sw.rs.kinds[entry.KindGroup] && !sw.rs.kinds[entry.KindMeter] {
		return nil
	}
	rs := sw.rs
	put := make(map[string]bool)
	if ch != nil {
		for _, e := range ch.Put {
			put[plan.Key(e.Kind, e.ID)] = true // declared by this write
		}
	}
	var keys []entry.Entry
	for _, kind := range []entry.Kind{entry.KindGroup, entry.KindMeter} {
		if !rs.kinds[kind] {
			continue
		}
		err := w.Each(r.bridge, r.module, kind, func(e entry.Entry) error {
			k := plan.Key(e.Kind, e.ID)
			if rs.declared[k] || put[k] || w.Used(r.bridge, e.Kind, e.ID) {
				return nil
			}
			keys = append(keys, entry.Entry{Kind: e.Kind, ID: e.ID})
			return r.aheadLocked(w, k, sw.goes(k, e))
		})
		if err != nil {
			return fmt.Errorf("resync of %s/%s: listing the cleared %ss: %w", r.bridge, r.module, kind, err)
		}
	}
	if len(keys) > 0 {
		if _, err := w.Delete(r.bridge, r.module, keys); err != nil {
			return fmt.Errorf("resync of %s/%s: deleting the cleared groups and meters: %w", r.bridge, r.module, err)
		}
	}
	return nil
}
