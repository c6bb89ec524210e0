package write

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofmods"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// A controller starts over with a clear: ovn-controller, after every
// connect, deletes all meters, then all flows and groups, and installs
// everything again, in a few bundles as its flow computation yields them
// (three for 3,300 flows, 30–70 ms apart). Applied as they come, the clear
// would delete the module's entries from the switch and the next bundles
// add them back: every flow the first bundle does not carry would be
// missing for the time between, and a reinstall of what the switch holds
// would cost two flow_mods a flow.
//
// So a clear starts a resync, which ends once the module has been quiet for
// resyncQuiet, and at the latest resyncMax after the clear however busy the
// controller is:
//
//  1. What the controller declares anew (an identity the module did not
//     hold) is stored and applied at once.
//  2. A change to an entry the module held before is stored at once, so
//     nothing a barrier reply acknowledged lives only in memory; on the
//     switch it waits for the end (ovn-controller rewrites a few flows in a
//     later bundle of the same install, back to what they were, and the
//     switch then sees nothing). A change to a drop is never held back.
//  3. The clear's deletion of the module's flows is stored with the
//     clear's own change (a clear alone is a write too): the flows the
//     controller has not declared again leave the store before its barrier
//     reply passes, and stay on the switch (gone) until the end. A group or
//     meter of a cleared kind that it has not declared again leaves the
//     store in the same way once no stored flow uses it: in the clear's own
//     change, or in the later one that deletes or changes the last flow
//     that used it (checked first: the store refuses to delete a used one,
//     and would fail the write). It too stays on the switch until the end,
//     where the gone flows still use it; vswitchd would delete them with
//     it. One it declares again meanwhile is as a held entry: what the
//     switch holds is the gone copy, so its re-ADD stores it and sends
//     nothing now (no GROUP_EXISTS, METER_EXISTS), or a modify at the end.
//  4. At the end, in one write, the held changes go to the switch and the
//     gone entries leave it, flows before the groups and meters they use.
//
// A reinstall of the same state thus sends nothing to the switch and leaves
// nothing missing; entries the controller no longer wants stay on the
// switch until the end of its install, as with ovn-controller's own
// ovn-ofctrl-wait-before-clear. A barrier reply during a resync says every
// change before it is stored, the clear's deletion of flows included, and
// of the groups and meters no stored flow uses any more; the new entries
// are on the switch; the changes to old ones and the clear's deletions
// reach it by the end. Should flowstated stop before the
// end, its next replay makes the switch what the store holds, and the
// controller, whose connection goes with it, clears and installs again on
// its next connect.
//
// The gone and held copies say what the switch holds apart from the store.
// A replay or a new connection of the bridge (bridge.State.ResetsLocked)
// makes the switch the store's again: from then on the copies are dropped
// and the store is what the switch holds (rebaseLocked).

// resyncQuiet is how long a module's controller must be quiet after a
// clear before its install counts as complete; resyncMax bounds the resync
// of a controller that is never quiet that long.
const (
	resyncQuiet = 2 * time.Second
	resyncMax   = 4 * time.Second
)

// heldEntry is a held change, the index of the message that made it, and
// what the switch holds of the entry (the payload stored before the
// change).
type heldEntry struct {
	e    entry.Entry
	from int
	orig []byte
}

// resync is one clear's deferred deletions.
type resync struct {
	kinds [entry.KindMeter + 1]bool
	// declared holds the identities (key) declared since the clear.
	declared map[string]bool
	// held are the stored changes to entries the module held before the
	// clear, by key, sent to the switch at the end.
	held map[string]heldEntry
	// gone are the module's entries the clear deleted from the store that
	// the controller has not declared again, by key, with what the switch
	// holds of them: they leave the switch at the end (step 3).
	gone map[string]entry.Entry
	// swept: the store holds no flow of the module that the controller
	// has not declared since its last clear.
	swept bool
	// resets is the bridge's count of replays and connections (its
	// ResetsLocked) when held and gone were taken, once based.
	resets   uint64
	based    bool
	timer    *time.Timer
	last     time.Time // the module's last change
	deadline time.Time // the resync ends by then (resyncMax after it began)
}

// clears returns raw without its clears, with the index in raw of each
// message kept, and starts (or, after another clear, restarts) the resync
// of the kinds they clear. r.mu must be held.
func (r *recorder) clears(raw [][]byte) (msgs [][]byte, from []int, cleared bool) {
	for i, m := range raw {
		if kind, ok := ofmods.Clears(m); ok {
			if !cleared {
				r.startResyncLocked()
				cleared = true
			}
			r.resync.kinds[kind] = true
			continue
		}
		msgs, from = append(msgs, m), append(from, i)
	}
	return msgs, from, cleared
}

// startResyncLocked starts a resync, or starts over what the controller
// declared in the one under way; its held changes and its deadline stay,
// as the switch still lacks those changes.
func (r *recorder) startResyncLocked() {
	if r.resync == nil {
		r.resync = &resync{held: make(map[string]heldEntry), gone: make(map[string]entry.Entry), deadline: time.Now().Add(resyncMax)}
		r.ws.log.Info("proxy: the controller cleared its entries; what it does not install again leaves the store now, the switch once it is quiet",
			"bridge", r.bridge, "module", r.module, "quiet", resyncQuiet, "at_most", resyncMax)
	}
	r.resync.declared = make(map[string]bool)
	r.resync.swept = false
}

// holdLocked notes, during a resync, the changes of ch to entries the
// module held before the clear (step 2; a gone flow declared again is one,
// sw its write's sweep) and returns the keys of those the switch must not
// get now: held ones, and ones changed back to what the switch holds. They
// stay in ch: the store takes them. It runs in the write's store
// transaction. r.mu must be held.
//
// What the switch then holds apart from the store is recorded with the
// write (aheadLocked): a held change's original, dropped once the switch
// gets the change.
func (r *recorder) holdLocked(w *store.Writer, st ofmods.Store, ch *ofmods.Change, sw *sweep) (map[string]bool, error) {
	rs := r.resync
	if rs == nil {
		return nil, nil
	}
	var deferred map[string]bool
	later := func(k string) {
		if deferred == nil {
			deferred = make(map[string]bool)
		}
		deferred[k] = true
	}
	put, from := ch.Put[:0:0], ch.PutFrom[:0:0]
	for i, e := range ch.Put {
		k := plan.Key(e.Kind, e.ID)
		h, isHeld := rs.held[k]
		if g, ok := sw.goneEntry(k); ok {
			// Not in the store (swept), still on the switch as g.
			h, isHeld = heldEntry{orig: g.Payload}, true
			sw.redeclared(k)
		}
		if !isHeld {
			if rs.declared[k] {
				put, from = append(put, e), append(from, ch.PutFrom[i])
				continue
			}
			old, ok, err := st.Get(e.Kind, e.ID)
			if err != nil {
				return nil, err
			}
			switch {
			case !ok || old.Module != r.module:
				put, from = append(put, e), append(from, ch.PutFrom[i]) // new: at once
				continue
			case bytes.Equal(old.Payload, e.Payload):
				rs.declared[k] = true // what it was: nothing to do
				continue
			}
			h = heldEntry{orig: old.Payload}
		}
		rs.declared[k] = true
		put, from = append(put, e), append(from, ch.PutFrom[i])
		var err error
		switch {
		case bytes.Equal(e.Payload, h.orig):
			delete(rs.held, k) // back to what the switch holds
			later(k)
			err = r.aheadLocked(w, k, nil)
		case e.Kind == entry.KindFlow && entry.FlowDrops(e.Payload):
			delete(rs.held, k) // stricter: at once
			err = r.aheadLocked(w, k, nil)
		default:
			rs.held[k] = heldEntry{e: e, from: ch.PutFrom[i], orig: h.orig}
			later(k)
			err = r.aheadLocked(w, k, h.orig)
		}
		if err != nil {
			return nil, err
		}
	}
	ch.Put, ch.PutFrom = put, from
	for _, e := range ch.Delete {
		k := plan.Key(e.Kind, e.ID)
		delete(rs.held, k)
		if err := r.aheadLocked(w, k, nil); err != nil {
			return nil, err
		}
	}
	return deferred, nil
}

// aheadLocked records, in the write's transaction w, what the switch holds
// of the module's entry k apart from the store: orig, a payload of the
// entry it holds, or nil when it holds what the store does (store.Ahead):
// a flowstated started after this one died mid-resync does not take it for
// a relayed controller's change. r.mu must be held.
func (r *recorder) aheadLocked(w *store.Writer, k string, orig []byte) error {
	var err error
	if orig == nil {
		err = w.DropAhead(r.bridge, r.module, k)
	} else {
		err = w.SetAhead(r.bridge, r.module, k, r.ws.cfg.Forms.Form(orig))
	}
	if err != nil {
		return fmt.Errorf("resync of %s/%s: %w", r.bridge, r.module, err)
	}
	return nil
}

// withoutDeferred returns res without the changes of the entries in
// deferred: stored, not sent.
func withoutDeferred(res store.Result, deferred map[string]bool) store.Result {
	if len(deferred) == 0 {
		return res
	}
	res.Changed = slices.DeleteFunc(res.Changed, func(c store.Change) bool { return deferred[plan.Key(c.Entry.Kind, c.Entry.ID)] })
	return res
}

// declaredLocked notes a stored change of the module (nil: none) during a
// resync, and restarts its quiet period, up to its deadline. r.mu must be
// held.
func (r *recorder) declaredLocked(ch *ofmods.Change) {
	rs := r.resync
	if rs == nil || r.closed {
		return
	}
	if ch != nil {
		for _, e := range ch.Put {
			rs.declared[plan.Key(e.Kind, e.ID)] = true
		}
		for _, e := range ch.Delete {
			delete(rs.declared, plan.Key(e.Kind, e.ID))
		}
	}
	rs.last = time.Now()
	wait := max(min(resyncQuiet, time.Until(rs.deadline)), 0)
	if rs.timer == nil {
		rs.timer = time.AfterFunc(wait, r.endResync)
		return
	}
	rs.timer.Reset(wait)
}

// endResync sends the held changes and deletes the gone entries from the
// switch, with those of the cleared kinds the controller did not declare
// again that are still stored and not used by a stored flow, flows before
// the groups and meters they use. It runs on the resync's timer; a change
// that comes first restarts the timer, and one that waits for r.mu is
// applied after.
func (r *recorder) endResync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := r.resync
	if rs == nil || r.closed || (time.Since(rs.last) < resyncQuiet && time.Now().Before(rs.deadline)) {
		return // ended, stopped, or a change came while this waited (its timer runs again)
	}
	r.resync = nil
	ctx, cancel := context.WithTimeout(context.Background(), r.ws.cfg.WriteTimeout)
	defer cancel()
	var n int
	var sw *sweep
	req := &writeReq{module: r.module}
	req.op = func(w *store.Writer) (store.Result, error) {
		// The resync's last sweep, should a write's have failed.
		var err error
		if sw, err = r.sweepLocked(w, rs); err != nil {
			return store.Result{}, err
		}
		ch := &ofmods.Change{}
		gone := map[string]bool{}
		if rs.kinds[entry.KindFlow] {
			err := w.Each(r.bridge, r.module, entry.KindFlow, func(e entry.Entry) error {
				if k := plan.Key(e.Kind, e.ID); !rs.declared[k] {
					ch.Delete = append(ch.Delete, entry.Entry{Kind: e.Kind, ID: e.ID})
					ch.DeleteFrom = append(ch.DeleteFrom, 0)
					gone[k] = true
				}
				return nil
			})
			if err != nil {
				return store.Result{}, fmt.Errorf("resync of %s/%s: listing the cleared flows: %w", r.bridge, r.module, err)
			}
		}
		res, err := storeChange(w, r.bridge, r.module, ch)
		if err != nil {
			return res, err
		}
		// The groups and meters that no stored flow uses now; one still
		// used stays in both.
		if err := r.sweepUnusedLocked(w, sw, nil); err != nil {
			return res, err
		}
		// The gone entries are no longer stored: the switch gets their
		// deletion (flows before the groups and meters they use,
		// plan.NewSendOrder), unless the store holds one again.
		var off []entry.Entry
		for k, e := range rs.gone {
			if _, again := sw.add[k]; again {
				continue // stored again by another way, swept just now
			}
			if _, ok, err := w.Get(r.bridge, e.Kind, e.ID); err != nil {
				return res, fmt.Errorf("resync of %s/%s: %w", r.bridge, r.module, err)
			} else if !ok {
				off = append(off, e)
				gone[k] = true
			}
		}
		for k, e := range sw.add {
			off = append(off, e) // swept now, or left by a write whose sweep failed
			gone[k] = true
		}
		res.Removed = append(off, res.Removed...)
		// The held changes are stored: what goes to the switch is the
		// store's entry against what the switch holds.
		req.declared = nil
		for k, h := range rs.held {
			cur, ok, err := w.Get(r.bridge, h.e.Kind, h.e.ID)
			if err != nil {
				return res, fmt.Errorf("resync of %s/%s: %w", r.bridge, r.module, err)
			}
			if gone[k] || !ok || cur.Module != r.module || bytes.Equal(cur.Payload, h.orig) {
				continue
			}
			res.Changed = append(res.Changed, store.Change{Entry: cur, Index: len(req.declared), Existed: true, Old: h.orig})
			req.declared = append(req.declared, cur)
		}
		n = len(req.declared) + len(res.Removed)
		// Sent, the switch holds what the store does.
		if err := w.ClearAhead(r.bridge, r.module); err != nil {
			return res, fmt.Errorf("resync of %s/%s: %w", r.bridge, r.module, err)
		}
		return res, nil
	}
	res, err := r.ws.submit(ctx, r.bridge, req)
	switch {
	case err != nil:
		// The held changes are stored, the gone entries are not: a replay
		// makes the switch what the store holds. Stale entries still
		// stored stay until the controller's next clear.
		r.ws.log.Error("proxy: the end of a controller's resync failed: the deletions of what it did not install again wait for a replay or its next install, its stored changes for a replay",
			"bridge", r.bridge, "module", r.module, "err", err)
		if b, berr := r.ws.bridge(r.bridge); berr == nil && (len(rs.held) > 0 || len(rs.gone) > 0 || sw != nil && len(sw.add) > 0) {
			b.RequestReplay()
		}
	case res.unknown != nil:
		r.ws.log.Warn("proxy: the end of a controller's resync is stored, its outcome on the switch unknown; the replay settles it",
			"bridge", r.bridge, "module", r.module, "changes", n)
	default:
		r.ws.log.Info("proxy: the controller's install is complete", "bridge", r.bridge, "module", r.module, "changes", n)
	}
	if r.readyAtEnd {
		r.readyAtEnd = false
		if err := r.markReady(); err != nil {
			r.ws.log.Warn("proxy: could not mark the module ready", "bridge", r.bridge, "module", r.module, "err", err)
		}
	}
}

// Close stops the recorder's resync timer; an unfinished resync's
// deletions are left to the controller's next clear. The proxy closes it
// when it stops.
func (r *recorder) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.resync != nil && r.resync.timer != nil {
		r.resync.timer.Stop()
	}
}

// groupAddOrMod is OVS's GROUP_MOD command extension: add, or modify if it
// exists.
const groupAddOrMod = 0x8000

// readdsLocked returns msgs with, during a resync, each ADD of a group or
// meter of a cleared kind that the module holds and has not declared again
// since the clear (one that stored flows still use) turned into a modify:
// after the clear vswitchd would not have it, so its ADD must not fail as
// GROUP_EXISTS or METER_EXISTS. One the store no longer holds needs none:
// ofmods takes its ADD, and holdLocked keeps it off the switch while the
// switch holds a gone copy; after a replay the switch holds none and gets
// the ADD. It runs in the write's store transaction. r.mu must be held.
func (r *recorder) readdsLocked(st ofmods.Store, msgs [][]byte) ([][]byte, error) {
	rs := r.resync
	if rs == nil {
		return msgs, nil
	}
	out := msgs
	cloned := false
	for i, m := range msgs {
		id := entry.ModID(m)
		if id == nil || m[0] != openflow15.VERSION || entry.ModCommand(m) != openflow15.OFPGC_ADD { // MC_ADD is 0 too
			continue
		}
		var kind entry.Kind
		cmd := uint16(groupAddOrMod)
		switch m[1] {
		case openflow15.Type_GroupMod:
			kind = entry.KindGroup
		case openflow15.Type_MeterMod:
			kind, cmd = entry.KindMeter, openflow15.MC_MODIFY
		default:
			continue
		}
		if !rs.kinds[kind] || rs.declared[plan.Key(kind, id)] {
			continue
		}
		e, ok, err := st.Get(kind, id)
		if err != nil {
			return nil, err
		}
		if !ok || e.Module != r.module {
			continue
		}
		if !cloned {
			out, cloned = slices.Clone(msgs), true
		}
		out[i] = entry.WithCommand(m, cmd)
	}
	return out, nil
}
