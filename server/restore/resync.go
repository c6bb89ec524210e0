package restore

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"time"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofmods"
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
// So a clear starts a resync, and the install counts as complete once the
// module has been quiet for resyncQuiet. Meanwhile what the controller
// declares anew (an identity the module did not hold) is stored and applied
// at once; what it changes of an entry the module held before is held back
// in memory (ovn-controller rewrites a few flows in a later bundle of the
// same install, back to what they were); at the end, in one write, the held
// changes are stored and applied and the entries of the cleared kinds it did
// not declare again are deleted. A reinstall of the same state thus sends
// nothing to the switch and leaves nothing missing; entries the controller
// no longer wants stay until the end of its install, as with
// ovn-controller's own ovn-ofctrl-wait-before-clear. A barrier reply during
// a resync says the controller's new entries are on the switch, not yet its
// changes to old ones or its clear's deletions. Should flowstated stop
// before the end, the controller, whose connection goes with it, clears and
// installs again on its next connect.

// resyncQuiet is how long a module's controller must be quiet after a
// clear before its install counts as complete.
const resyncQuiet = 2 * time.Second

// heldEntry is a held change and the index of the message that made it.
type heldEntry struct {
	e    entry.Entry
	from int
}

// resync is one clear's deferred deletions.
type resync struct {
	kinds [entry.KindMeter + 1]bool
	// declared holds the identities (key) declared since the clear.
	declared map[string]bool
	// held are the changes to entries the module held before the clear,
	// by key, applied at the end.
	held  map[string]heldEntry
	timer *time.Timer
	last  time.Time // the module's last change
}

// clears returns raw without its clears, with the index in raw of each
// message kept, and starts (or, after another clear, restarts) the resync
// of the kinds they clear. r.mu must be held.
func (r *Recorder) clears(raw [][]byte) (msgs [][]byte, from []int, cleared bool) {
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

func (r *Recorder) startResyncLocked() {
	if r.resync == nil {
		r.resync = &resync{}
		r.e.log.Info("proxy: the controller cleared its entries; deleting what it does not install again once it is quiet",
			"bridge", r.bridge, "module", r.module, "quiet", resyncQuiet)
	}
	r.resync.declared = make(map[string]bool)
	r.resync.held = make(map[string]heldEntry)
}

// holdLocked takes out of ch, during a resync, the changes to entries the
// module held before the clear and has not declared again since: they are
// held until its end. It runs in the write's store transaction. r.mu must
// be held.
func (r *Recorder) holdLocked(st ofmods.Store, ch *ofmods.Change) error {
	rs := r.resync
	if rs == nil {
		return nil
	}
	put, from := ch.Put[:0:0], ch.PutFrom[:0:0]
	for i, e := range ch.Put {
		k := key(e.Kind, e.ID)
		_, isHeld := rs.held[k]
		if !isHeld && rs.declared[k] {
			put, from = append(put, e), append(from, ch.PutFrom[i])
			continue
		}
		old, ok, err := st.Get(e.Kind, e.ID)
		if err != nil {
			return err
		}
		switch {
		case !ok || old.Module != r.module:
			put, from = append(put, e), append(from, ch.PutFrom[i]) // new: at once
		case bytes.Equal(old.Payload, e.Payload):
			delete(rs.held, k) // back to what it was: nothing to do
			rs.declared[k] = true
		default:
			rs.held[k] = heldEntry{e: e, from: ch.PutFrom[i]}
			rs.declared[k] = true
		}
	}
	ch.Put, ch.PutFrom = put, from
	for _, e := range ch.Delete {
		delete(rs.held, key(e.Kind, e.ID))
	}
	return nil
}

// declaredLocked notes a stored change of the module (nil: none) during a
// resync, and restarts its quiet period. r.mu must be held.
func (r *Recorder) declaredLocked(ch *ofmods.Change) {
	rs := r.resync
	if rs == nil || r.closed {
		return
	}
	if ch != nil {
		for _, e := range ch.Put {
			rs.declared[key(e.Kind, e.ID)] = true
		}
		for _, e := range ch.Delete {
			delete(rs.declared, key(e.Kind, e.ID))
		}
	}
	rs.last = time.Now()
	if rs.timer == nil {
		rs.timer = time.AfterFunc(resyncQuiet, r.endResync)
		return
	}
	rs.timer.Reset(resyncQuiet)
}

// endResync deletes the entries of the cleared kinds the controller did not
// declare again, flows before the groups and meters they use. It runs on
// the resync's timer; a change that comes first restarts the timer, and
// one that waits for r.mu is applied after.
func (r *Recorder) endResync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := r.resync
	if rs == nil || r.closed || time.Since(rs.last) < resyncQuiet {
		return // ended, stopped, or a change came while this waited (its timer runs again)
	}
	r.resync = nil
	ctx, cancel := context.WithTimeout(context.Background(), r.e.cfg.WriteTimeout)
	defer cancel()
	var n int
	req := &writeReq{module: r.module}
	req.op = func(w *store.Writer) (store.Result, error) {
		ch := &ofmods.Change{}
		for _, h := range rs.held {
			ch.Put = append(ch.Put, h.e)
			ch.PutFrom = append(ch.PutFrom, h.from)
		}
		req.declared = ch.Put
		for _, kind := range []entry.Kind{entry.KindFlow, entry.KindGroup, entry.KindMeter} {
			if !rs.kinds[kind] {
				continue
			}
			err := w.Each(r.bridge, r.module, kind, func(e entry.Entry) error {
				if !rs.declared[key(e.Kind, e.ID)] {
					ch.Delete = append(ch.Delete, entry.Entry{Kind: e.Kind, ID: e.ID})
					ch.DeleteFrom = append(ch.DeleteFrom, 0)
				}
				return nil
			})
			if err != nil {
				return store.Result{}, err
			}
		}
		n = len(ch.Put) + len(ch.Delete)
		return storeChange(w, r.bridge, r.module, ch)
	}
	res, err := r.e.submit(ctx, r.bridge, req)
	switch {
	case err != nil:
		// The stale entries stay; the controller's next clear deletes
		// them.
		r.e.log.Error("proxy: the end of a controller's resync failed: its held changes and the deletions of what it did not install again wait for its next install",
			"bridge", r.bridge, "module", r.module, "err", err)
	case res.unknown != nil:
		r.e.log.Warn("proxy: the end of a controller's resync is stored, its outcome on the switch unknown; the replay settles it",
			"bridge", r.bridge, "module", r.module, "changes", n)
	default:
		r.e.log.Info("proxy: the controller's install is complete", "bridge", r.bridge, "module", r.module, "changes", n)
	}
	if r.readyAtEnd {
		r.readyAtEnd = false
		if err := r.markReady(); err != nil {
			r.e.log.Warn("proxy: could not mark the module ready", "bridge", r.bridge, "module", r.module, "err", err)
		}
	}
}

// Close stops the recorder's resync timer; an unfinished resync's
// deletions are left to the controller's next clear. The proxy closes it
// when it stops.
func (r *Recorder) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.resync != nil && r.resync.timer != nil {
		r.resync.timer.Stop()
	}
}

// GROUP_MOD and METER_MOD: where the command and the id sit, and the
// commands readdsLocked writes.
const (
	modCommand    = 8
	modID         = 12
	groupAddOrMod = 0x8000 // OVS's extension: add, or modify if it exists
)

// readdsLocked returns msgs with, during a resync, each ADD of a group or
// meter of a cleared kind that the module holds and has not declared again
// since the clear turned into a modify: after the clear vswitchd would not
// have it, so its ADD must not fail as GROUP_EXISTS or METER_EXISTS. It
// runs in the write's store transaction. r.mu must be held.
func (r *Recorder) readdsLocked(st ofmods.Store, msgs [][]byte) ([][]byte, error) {
	rs := r.resync
	if rs == nil {
		return msgs, nil
	}
	out := msgs
	cloned := false
	for i, m := range msgs {
		if len(m) < modID+4 || m[0] != openflow15.VERSION || binary.BigEndian.Uint16(m[modCommand:]) != openflow15.OFPGC_ADD { // MC_ADD is 0 too
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
		id := m[modID : modID+4]
		if !rs.kinds[kind] || rs.declared[key(kind, id)] {
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
		c := slices.Clone(m)
		binary.BigEndian.PutUint16(c[modCommand:], cmd)
		out[i] = c
	}
	return out, nil
}
