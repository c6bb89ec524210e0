// FLOW_MOD on the overlay: add, modify and delete (strict or not) of the
// module's flows, and vswitchd's read-only flows that a delete must not reach.

package ofmods

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofctl"
)

func (o *overlay) flowMod(i int, m []byte) error {
	if len(m) < flowModMin {
		return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_LEN, fmt.Errorf("FLOW_MOD of %d bytes", len(m)))
	}
	cmd, table := entry.FlowModCommand(m), entry.FlowModTable(m)
	// As vswitchd's ofputil_decode_flow_mod: the match, field by field,
	// then the table, then the command.
	if fields, ok := entry.FlowModMatchFields(m); ok {
		if err := ofctl.CheckMatchOrder(fields); err != nil {
			return refuse(i, openflow15.PET_BAD_MATCH, openflow15.BMC_BAD_PREREQ, err)
		}
	}
	if table == openflow15.OFPTT_ALL && cmd != flowDelete && cmd != flowDelStrict {
		return refuse(i, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_BAD_TABLE_ID, errors.New("only a delete may name every table (OFPTT_ALL)"))
	}
	// readOnly refuses an add or modify in vswitchd's own table, as its
	// add_flow_init does (after decoding the message).
	readOnly := func() error {
		if table == tableInternal {
			return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM, fmt.Errorf("table %d is vswitchd's own: read-only", table))
		}
		return nil
	}
	switch cmd {
	case flowAdd:
		e, err := canon.DecodeEntry(entry.KindFlow, m)
		if err != nil {
			return askSwitch(i, err)
		}
		if err := readOnly(); err != nil {
			return err
		}
		if err := entry.CheckDesiredFlow(e.Payload); err != nil {
			return askSwitch(i, err)
		}
		s, owner, err := o.lookup(entry.KindFlow, e.ID)
		if err != nil {
			return err
		}
		if owner != "" && owner != o.module {
			return refuse(i, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_EPERM, errOwned(entry.KindFlow, owner))
		}
		o.set(i, s, e)
		return nil
	case flowModify, flowModStrict, flowDelete, flowDelStrict:
	default:
		return refuse(i, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_BAD_COMMAND, fmt.Errorf("FLOW_MOD command %d", cmd))
	}
	del := cmd == flowDelete || cmd == flowDelStrict
	sel := m
	if !del {
		// vswitchd decodes a modify's match and instructions whatever it
		// selects, and selects by cookie alone: out_port and out_group
		// restrict deletes only (modify_flows_init_loose and _strict).
		if _, err := canon.DecodeEntry(entry.KindFlow, entry.WithFlowCommand(m, flowAdd)); err != nil {
			return askSwitch(i, err)
		}
		if err := readOnly(); err != nil {
			return err
		}
		sel = entry.WithFlowOut(m, anyOutPort, anyOutGroup)
	}
	ff, err := ofctl.FilterOf(sel)
	if err != nil {
		return askSwitch(i, err)
	}
	act := func(s *slot) error {
		if del {
			return o.remove(i, s)
		}
		e, err := canon.ModifyFlow(s.e.Payload, m)
		if err != nil {
			return askSwitch(i, err)
		}
		o.set(i, s, e)
		return nil
	}
	// Every table (OFPTT_ALL, deletes only) is every table but vswitchd's
	// hidden one.
	visible := func(s *slot) bool { return table != openflow15.OFPTT_ALL || s.e.ID[0] != tableInternal }
	if cmd == flowModify || cmd == flowDelete {
		n := 0
		err := o.each(entry.KindFlow, func(s *slot) error {
			if !visible(s) {
				return nil
			}
			ok, err := ff.Match(s.e.Payload)
			if err != nil || !ok {
				return err
			}
			n++
			return act(s)
		})
		if err != nil || !del || n > 0 {
			return err
		}
		return refuseReadOnly(i, m, ff, nil)
	}
	_, id, err := canon.DecodeDelete(entry.KindFlow, entry.WithFlowCommand(m, flowAdd))
	if err != nil {
		return askSwitch(i, err)
	}
	if table == openflow15.OFPTT_ALL {
		// A strict delete of every table deletes the flow of that priority
		// and match in each (collect_rules_strict): of the module's flows,
		// as a non-strict delete.
		n := 0
		err := o.each(entry.KindFlow, func(s *slot) error {
			if !visible(s) || !bytes.Equal(s.e.ID[1:], id[1:]) || !ff.MatchRestrictions(s.e.Payload) {
				return nil
			}
			n++
			return act(s)
		})
		if err != nil || n > 0 {
			return err
		}
		return refuseReadOnly(i, m, ff, id)
	}
	s, owner, err := o.lookup(entry.KindFlow, id)
	switch {
	case err != nil:
		return err
	case owner != "" && owner != o.module:
		return refuse(i, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_EPERM, errOwned(entry.KindFlow, owner))
	case s == nil || !s.present || !ff.MatchRestrictions(s.e.Payload):
		if del {
			return refuseReadOnly(i, m, ff, id)
		}
		return nil
	}
	return act(s)
}

// internalFlowText are the flows ofproto-dpif's add_internal_flows puts in
// vswitchd's hidden table, as a delete can select them (out_port reads
// the controller action of the first as an output to CONTROLLER). The
// fourth, priority=2,recirc_id=0 with no actions, needs a field a
// controller's match does not name (FilterOf refuses recirc_id).
var internalFlowText = []string{
	"table=254,priority=0,reg0=0x1,actions=CONTROLLER:65535",
	"table=254,priority=0,reg0=0x2,actions=drop",
	"table=254,priority=0,reg0=0x3,actions=drop",
}

// internalFlows are internalFlowText, parsed.
var internalFlows = sync.OnceValue(func() []entry.Entry {
	out := make([]entry.Entry, len(internalFlowText))
	for k, text := range internalFlowText {
		p, id, err := canon.Parse(entry.KindFlow, text)
		if err != nil {
			panic(fmt.Sprintf("ofmods: vswitchd's internal flow %q: %v", text, err))
		}
		out[k] = entry.Entry{Kind: entry.KindFlow, ID: id, Payload: p}
	}
	return out
})

// refuseReadOnly refuses, as vswitchd refuses it (OFPBRC_EPERM), the
// delete m that selected none of the module's flows when it selects one of
// vswitchd's read-only flows (collect_rules_loose and _strict): those of
// its hidden table, which a delete names by that table or, through the
// switch's cookie index, by cookie 0 under a full mask in every table. id
// is the identity a strict delete names, nil for a loose one. The module
// speaks as if the switch held its flows alone: another module's flows
// that the delete would select on the switch do not count.
func refuseReadOnly(i int, m []byte, ff *ofctl.FlowFilter, id []byte) error {
	table, cookie, mask := entry.FlowModTable(m), entry.FlowCookie(m), entry.FlowModCookieMask(m)
	if table != tableInternal && (table != openflow15.OFPTT_ALL || mask != ^uint64(0) || cookie != 0) {
		return nil
	}
	for _, f := range internalFlows() {
		ok := id != nil && bytes.Equal(f.ID[1:], id[1:]) && ff.MatchRestrictions(f.Payload)
		if id == nil {
			var err error
			if ok, err = ff.Match(f.Payload); err != nil {
				return askSwitch(i, err)
			}
		}
		if ok {
			return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM, errors.New("the delete selects only vswitchd's own read-only flows (table 254)"))
		}
	}
	return nil
}
