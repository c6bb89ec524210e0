package write

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// A bridge's TLV table (tun_metadata<N> mappings of Geneve options) lives
// in vswitchd's memory only: a restarted vswitchd has none, and refuses
// every flow that uses a mapped field until the controller maps it again.
// The OpenFlow proxy records a controller's NXT_TLV_TABLE_MOD (applyTLV),
// and a replay puts the recorded mappings back before its meters and
// bundle (restoreTLVLocked). TLV table mods cannot be bundled; like meters
// they are sent before the bundle, while flow-restore-wait still holds.

// Nicira's TLV table errors, as OpenFlow 1.2+ experimenter errors.
const (
	nxtmfcBadCommand    = 16
	nxtmfcAlreadyMapped = 20
)

// RestoreTLVLocked adds the recorded mappings the switch lacks. A mapping
// the switch refuses is logged and left out: the flows that use it are
// then refused and quarantined, and the rest of the bridge is restored.
// the bridge's lock must be held.
func (ws *Writes) RestoreTLVLocked(ctx context.Context, b *bridge.State, conn *ofconn.Conn, log *slog.Logger) error {
	want, err := ws.cfg.Store.TLVMaps().Get(b.Name())
	if err != nil || len(want) == 0 {
		return err
	}
	have, err := conn.TLVTable(ctx)
	if err != nil {
		return fmt.Errorf("restore: tlv map of %s: %w", b.Name(), err)
	}
	var missing []ofconn.TLVMap
	for _, w := range want {
		m := ofconn.TLVMap{Class: w.Class, Type: w.Type, Len: w.Len, Index: w.Index}
		i := slices.IndexFunc(have, func(h ofconn.TLVMap) bool { return h.Index == w.Index })
		switch {
		case i < 0:
			missing = append(missing, m)
		case have[i] != m:
			log.Error("the switch maps a tun_metadata field otherwise than recorded; left as the switch has it",
				"field", fmt.Sprintf("tun_metadata%d", w.Index), "recorded", fmtTLV(m), "switch", fmtTLV(have[i]), "module", w.Module)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	err = conn.Send(ctx, ofconn.TLVTableMod(ofconn.TLVAdd, missing))
	var oe *ofconn.OFError
	if errors.As(err, &oe) && len(missing) > 1 {
		// One refused mapping refuses the message: the others one by one.
		for _, m := range missing {
			if err = conn.Send(ctx, ofconn.TLVTableMod(ofconn.TLVAdd, []ofconn.TLVMap{m})); errors.As(err, &oe) {
				log.Error("the switch refuses a recorded tun_metadata mapping; flows that use it will be refused", "mapping", fmtTLV(m), "err", err)
				continue
			}
			if err != nil {
				return fmt.Errorf("restore: tlv map of %s: %w", b.Name(), err)
			}
		}
		return nil
	}
	if errors.As(err, &oe) {
		log.Error("the switch refuses a recorded tun_metadata mapping; flows that use it will be refused", "mapping", fmtTLV(missing[0]), "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("restore: tlv map of %s: %w", b.Name(), err)
	}
	log.Info("tlv map restored", "mappings", len(missing))
	return nil
}

func fmtTLV(m ofconn.TLVMap) string {
	return fmt.Sprintf("{class=%#x,type=%d,len=%d}->tun_metadata%d", m.Class, m.Type, m.Len, m.Index)
}

// applyTLV records msgs[i], an NXT_TLV_TABLE_MOD of the controller, as the
// module's mappings and, when the bridge is live, sends it to the switch
// (whose refusal is the controller's); when the bridge is not live it is
// stored and replayed. The module changes only its own mappings: a CLEAR
// deletes the module's, and an index another module maps is refused as
// vswitchd refuses a mapped index. It is a write of the bridge's queue,
// which commits it alone (tlvStep).
func (r *recorder) applyTLV(ctx context.Context, msgs [][]byte, i int) error {
	s := &tlvStep{r: r, msg: msgs[i], i: i}
	res, err := r.ws.submit(ctx, r.bridge, &writeReq{module: r.module, alone: func(ctx context.Context, b *bridgeQueue) writeResult {
		t, err := r.ws.runTxn(ctx, b, "tlv table change", s)
		return writeResult{err: err, unknown: t.unknown}
	}})
	if err == nil && res.unknown != nil {
		// Stored, its outcome unknown: the bridge replays.
		return s.switchErr(res.unknown)
	}
	return err
}

// tlvStep is the store step of a TLV table change. The store may hold a
// mapping the switch lacks (every replay adds it), never the reverse (no
// replay removes one): an add is stored before it is sent and a delete
// sent before it is stored, so that a death between the two leaves the
// store ahead. Whatever the outcome, the transaction settles it: a switch
// that may differ from the store replays.
type tlvStep struct {
	r   *recorder
	msg []byte
	i   int
	// send is the message that makes the switch do what the store does
	// (nil: nothing to send).
	send ofconn.Message
}

// store is the change's store step; its commit lifts no quarantine and
// learns nothing.
func (s *tlvStep) store(t *txn, atSwitch func() error) (committed, error) {
	return committed{}, s.change(t, atSwitch)
}

// change stores the table mod and sends it (atSwitch) in the order above.
func (s *tlvStep) change(t *txn, atSwitch func() error) error {
	r := s.r
	stored, err := r.ws.cfg.Store.TLVMaps().Get(r.bridge)
	if err != nil {
		return err
	}
	cmd, add, del, send, err := r.tlvChange(s.msg, s.i, stored)
	if err != nil {
		return err
	}
	s.send = send
	if cmd == ofconn.TLVAdd {
		if err := r.ws.cfg.Store.TLVMaps().Update(r.bridge, r.module, add, nil); err != nil {
			return s.storeErr(err)
		}
		if err := atSwitch(); err != nil {
			// Refused: the store goes back to what it held.
			if uerr := r.ws.cfg.Store.TLVMaps().Update(r.bridge, r.module, previous(stored, add), add); uerr != nil {
				r.ws.log.Error("proxy: a tlv mapping the switch refused stays in the store; replays will try it", "bridge", r.bridge, "module", r.module, "err", uerr)
			}
			return err
		}
		return nil
	}
	sends := t.live && send != nil
	if err := atSwitch(); err != nil {
		return err // refused, nothing changed
	}
	if t.unknown != nil {
		return s.switchErr(t.unknown) // not stored: end replays
	}
	if err := r.ws.cfg.Store.TLVMaps().Update(r.bridge, r.module, nil, del); err != nil {
		if sends {
			// Not stored: put them back on the switch, or the switch
			// would be behind the store until vswitchd restarts.
			if uerr := t.undo(undoTLV(del)); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
		return s.storeErr(err)
	}
	return nil
}

// after is the table mod itself, which cannot be bundled.
func (s *tlvStep) after(*txn) (sendAfter, error) { return sendAfter{msg: s.send}, nil }

func (s *tlvStep) refused(re *plan.RejectedError) error { return s.switchErr(re) }

// switchErr is the controller's error for the switch's verdict err.
func (s *tlvStep) switchErr(err error) error {
	var oe *ofconn.OFError
	if errors.As(err, &oe) {
		return &ofconn.BundleError{Failed: []ofconn.AddError{{Index: s.i, Type: oe.Type, Code: oe.Code, Experimenter: oe.Experimenter, Name: oe.Name, Data: oe.Data}}}
	}
	return fmt.Errorf("restore: proxy %s/%s: tlv table: %w", s.r.bridge, s.r.module, err)
}

// storeErr is the controller's error for the store's refusal err.
func (s *tlvStep) storeErr(err error) error {
	if errors.Is(err, store.ErrTLVOwned) {
		return tlvRefusal(s.i, nxtmfcAlreadyMapped, "NXTTMFC_ALREADY_MAPPED")
	}
	return fmt.Errorf("restore: proxy %s/%s: tlv table: %w", s.r.bridge, s.r.module, err)
}

// tlvChange is what msg, the NXT_TLV_TABLE_MOD at index i of the module's
// change, does to the bridge's stored mappings: the mappings it adds and
// deletes (as stored), and the message that makes the switch do the same
// (nil: nothing to send). A message vswitchd would refuse, or that touches
// another module's mapping, gets the error vswitchd would give.
func (r *recorder) tlvChange(msg []byte, i int, stored []store.TLVMapping) (cmd uint16, add, del []store.TLVMapping, send []byte, err error) {
	cmd, maps, err := ofconn.ParseTLVTableMod(msg)
	if err != nil {
		return 0, nil, nil, nil, &ofconn.BundleError{Failed: []ofconn.AddError{{Index: i, Type: openflow15.ET_BAD_REQUEST, Code: openflow15.BRC_BAD_LEN}}}
	}
	owner := func(index uint16) (store.TLVMapping, bool) {
		j := slices.IndexFunc(stored, func(s store.TLVMapping) bool { return s.Index == index })
		if j < 0 {
			return store.TLVMapping{}, false
		}
		return stored[j], true
	}
	send = msg
	switch cmd {
	case ofconn.TLVAdd:
		for _, m := range maps {
			if s, ok := owner(m.Index); ok && s.Module != r.module {
				return 0, nil, nil, nil, tlvRefusal(i, nxtmfcAlreadyMapped, "NXTTMFC_ALREADY_MAPPED")
			}
			add = append(add, store.TLVMapping{Class: m.Class, Type: m.Type, Len: m.Len, Index: m.Index})
		}
	case ofconn.TLVDelete:
		for _, m := range maps {
			s, ok := owner(m.Index)
			if ok && s.Module != r.module {
				return 0, nil, nil, nil, &ofconn.BundleError{Failed: []ofconn.AddError{{Index: i, Type: openflow15.ET_BAD_REQUEST, Code: openflow15.BRC_EPERM}}}
			}
			if !ok {
				s = store.TLVMapping{Index: m.Index}
			}
			del = append(del, s)
		}
	case ofconn.TLVClear:
		// Only the module's own mappings: others' flows depend on theirs.
		var mine []ofconn.TLVMap
		for _, s := range stored {
			if s.Module == r.module {
				del = append(del, s)
				mine = append(mine, ofconn.TLVMap{Class: s.Class, Type: s.Type, Len: s.Len, Index: s.Index})
			}
		}
		send = ofconn.TLVTableMod(ofconn.TLVDelete, mine)
		if len(mine) == 0 {
			send = nil
		}
	default:
		return 0, nil, nil, nil, tlvRefusal(i, nxtmfcBadCommand, "NXTTMFC_BAD_COMMAND")
	}
	return cmd, add, del, send, nil
}

// tlvRefusal is vswitchd's Nicira error code (name) for the TLV table mod
// at index i of a controller's change.
func tlvRefusal(i int, code uint16, name string) error {
	return &ofconn.BundleError{Failed: []ofconn.AddError{{Index: i, Type: 0xffff, Code: code, Experimenter: openflow15.NxExperimenterID, Name: name}}}
}

// undoTLV adds back the mappings a delete removed (del, as stored).
func undoTLV(del []store.TLVMapping) ofconn.Message {
	back := make([]ofconn.TLVMap, 0, len(del))
	for _, d := range del {
		if d.Len != 0 { // a delete names only indexes: the stored mapping is needed
			back = append(back, ofconn.TLVMap{Class: d.Class, Type: d.Type, Len: d.Len, Index: d.Index})
		}
	}
	return ofconn.TLVTableMod(ofconn.TLVAdd, back)
}

// previous is what stored held at the indexes of add, for the module.
func previous(stored, add []store.TLVMapping) []store.TLVMapping {
	var out []store.TLVMapping
	for _, a := range add {
		if j := slices.IndexFunc(stored, func(s store.TLVMapping) bool { return s.Index == a.Index }); j >= 0 {
			out = append(out, stored[j])
		}
	}
	return out
}
