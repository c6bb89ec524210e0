package forms

import (
	"context"
	"encoding/binary"
	"log/slog"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// Learn learns what the switch made of the entries of cs that canon
// keeps in part as the controller sent them (canon.Opaque), right after
// they were installed: OVS re-encodes what it decodes, and for an action
// canon does not know that may differ from what was sent (NXAST_SET_TUNNEL
// comes back as set_field:->tun_id). Without the learned form such an entry
// would differ from the switch at every comparison and be resent for ever;
// with it, the engine compares and sends the entry in the switch's form
// (canon.Forms.Apply). The form is learned only here, from a dump that follows
// flowstated's own install, so it is OVS's normalisation and not someone
// else's change, and it is persisted, so it survives restarts.
//
// A write learns from its adds and modifies whose entries canon marked
// (Entry.Opaque, set as the request was converted, free); a replay, whose
// entries come from the store unmarked, only from its modifies, checked with
// canon.Opaque (which costs what decoding does, about 9 µs a flow: for every
// add of a replay of a whole bridge, more than the one extra MODIFY an entry
// stored while the switch was away costs at the next comparison). A dump that
// fails teaches nothing: the next comparison modifies the entry and learns.
func Learn(ctx context.Context, conn *ofconn.Conn, forms *canon.Forms, st Store, cs []plan.Change, replay bool, log *slog.Logger) {
	var opaque []plan.Change
	for _, c := range cs {
		switch {
		case c.Op == plan.OpDelete:
		case !replay && c.Desired.Opaque, replay && c.Op == plan.OpModify && canon.Opaque(c.Kind, c.Desired.Payload):
			opaque = append(opaque, c)
		}
	}
	if len(opaque) == 0 {
		return
	}
	actual, err := dumpSome(ctx, conn, opaque)
	if err != nil {
		log.Warn("dump to learn the switch's form of entries failed; the next comparison learns it", "err", err)
		return
	}
	held := make(map[string][]byte, len(actual))
	for _, a := range actual {
		held[plan.Key(a.Kind, a.ID)] = a.Payload
	}
	learned := map[canon.Key][]byte{}
	for _, c := range opaque {
		a, ok := held[plan.Key(c.Kind, c.Desired.ID)]
		if !ok {
			continue
		}
		if k, isNew := forms.Learn(c.Desired.Payload, a); isNew {
			learned[k] = a
		}
	}
	if len(learned) == 0 {
		return
	}
	log.Info("learned the switch's form of entries with actions flowstate keeps as sent", "entries", len(learned))
	if err := st.Put(learned); err != nil {
		// The forms hold in memory until flowstated restarts; then the
		// first comparison learns them again.
		log.Error("storing the switch's form of entries failed", "err", err)
	}
}

// Store keeps the learned forms across restarts (store.Forms).
type Store interface {
	Put(forms map[canon.Key][]byte) error
}

// dumpSome returns what the switch holds of the entries cs change, in
// canonical form: one request per entry, not a dump of the bridge.
func dumpSome(ctx context.Context, conn *ofconn.Conn, cs []plan.Change) ([]plan.ActualEntry, error) {
	var keys []ofconn.FlowKey
	var gids, mids []uint32
	for _, c := range cs {
		switch c.Kind {
		case entry.KindFlow:
			keys = append(keys, ofconn.FlowKey{Table: entry.FlowTable(c.Desired.ID), Match: entry.FlowMatch(c.Desired.Payload)})
		case entry.KindGroup:
			gids = append(gids, binary.BigEndian.Uint32(c.Desired.ID))
		case entry.KindMeter:
			mids = append(mids, binary.BigEndian.Uint32(c.Desired.ID))
		}
	}
	flows, err := conn.DumpFlowsMatching(ctx, keys)
	if err != nil {
		return nil, err
	}
	groups, err := conn.DumpGroupsByID(ctx, gids)
	if err != nil {
		return nil, err
	}
	meters, err := conn.DumpMetersByID(ctx, mids)
	if err != nil {
		return nil, err
	}
	return plan.ActualEntries(flows, groups, meters)
}
