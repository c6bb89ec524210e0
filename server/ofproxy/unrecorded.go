package ofproxy

import (
	"encoding/binary"

	"github.com/flowstate-io/flowstate/entry"
)

// Keeper is told what a session that the proxy relays without recording
// (one that does not agree on OpenFlow 1.5) installs and deletes, so that
// the owner of the switch leaves those entries alone instead of deleting
// them as undeclared (server/restore/kept.go). Each call is made before the
// message goes to the switch; calls must not block.
type Keeper interface {
	// Begin starts an unrecorded session.
	Begin()
	// Keep: the session installs the entry msg names, an OpenFlow 1.5
	// FLOW_MOD ADD holding the flow's table, priority and match (no
	// instructions), or a GROUP_MOD or METER_MOD holding its id.
	Keep(kind entry.Kind, msg []byte)
	// KeepRule: the session installs a flow of table (0xff: any) and
	// priority whose match the proxy cannot translate (OpenFlow 1.0 and
	// 1.1, NXT_FLOW_MOD); every flow there but the match-all one is its.
	KeepRule(table uint8, priority uint16)
	// Forget: the session deletes, strictly and outside any bundle, the
	// entry msg names (as for Keep).
	Forget(kind entry.Kind, msg []byte)
	// ForgetAll: the session deletes every entry of kind.
	ForgetAll(kind entry.Kind)
}

// OpenFlow numbers of the versions before 1.5 that unrecorded reads. The
// ofp_flow_mod of OpenFlow 1.1 to 1.4 has 1.5's layout up to its match
// (1.4 and 1.5 call the last pad importance), 1.2 to 1.4 with the same OXM
// match; OpenFlow 1.0's has an ofp10_match first (lib/ofp-flow.c,
// ofputil_decode_flow_mod).
const (
	of10FlowModLen   = 72 // header, ofp10_match, cookie .. flags
	of10OffCommand   = 56
	of10OffIdle      = 58
	of10OffPriority  = 62
	of10OffOutPort   = 68
	of10PortNone     = 0xffff
	flowModMatchAt   = 48 // the FLOW_MOD's fixed part, read through entry
	flowModDelete    = 3
	flowModDelStrict = 4
	tableAll         = 0xff
	anyPort          = 0xffffffff
	groupAll         = 0xfffffffc
	meterAll         = 0xffffffff
	modCmdDelete     = 2
	typeGroupMod11   = 15 // GROUP_MOD from OpenFlow 1.1 (1.0's PORT_MOD)
	typeMeterMod13   = 29 // METER_MOD from OpenFlow 1.3
	typeBundleAdd14  = 34 // BUNDLE_ADD_MESSAGE from OpenFlow 1.4
	onfExperimenter  = 0x4f4e4600
	onftBundleAdd    = 2301 // OpenFlow 1.3's bundles, an ONF extension
	nxExperimenter   = 0x2320
	nxtFlowMod       = 13
	nxtFlowModTable  = 15
	nxFlowModLen     = 48
	of10WildL2       = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<4 | 1<<20 // in_port, vlan, dl_src, dl_dst, dl_type, vlan_pcp
)

// unrecorded follows one unrecorded session for its Keeper, on the
// session's controller-to-switch pump.
type unrecorded struct {
	k       Keeper
	version uint8
	// tableID: the session turned on NXT_FLOW_MOD_TABLE_ID, so an OpenFlow
	// 1.0 FLOW_MOD carries its table in the command's high byte.
	tableID bool
}

// note tells the Keeper what m, a message of the controller about to go to
// the switch, installs or deletes.
func (u *unrecorded) note(m []byte) { u.noteIn(m, false) }

// noteIn is note of m, inside a bundle when bundled: a bundle may be
// discarded, so its deletes forget nothing (leaving an entry alone is the
// safe side).
func (u *unrecorded) noteIn(m []byte, bundled bool) {
	if len(m) < 16 || m[0] != u.version {
		return // the switch refuses another version's message
	}
	switch {
	case m[1] == typeFlowMod && u.version == of10Version:
		u.of10FlowMod(m, bundled)
	case m[1] == typeFlowMod:
		u.flowMod(m, bundled)
	case m[1] == typeGroupMod11 && u.version >= 2:
		u.mod(entry.KindGroup, m, groupAll, bundled)
	case m[1] == typeMeterMod13 && u.version >= 4:
		u.mod(entry.KindMeter, m, meterAll, bundled)
	case m[1] == typeBundleAdd14 && u.version >= 5:
		u.bundled(m[16:])
	case m[1] == typeExperimenter:
		u.experimenter(m, bundled)
	}
}

// bundled notes the message a BUNDLE_ADD carries.
func (u *unrecorded) bundled(inner []byte) {
	if len(inner) < 8 {
		return
	}
	if n := int(binary.BigEndian.Uint16(inner[2:4])); n >= 8 && n <= len(inner) {
		u.noteIn(inner[:n], true)
	}
}

func (u *unrecorded) experimenter(m []byte, bundled bool) {
	exp, sub := binary.BigEndian.Uint32(m[8:12]), binary.BigEndian.Uint32(m[12:16])
	switch {
	case exp == onfExperimenter && sub == onftBundleAdd && u.version == 4 && len(m) >= 24:
		u.bundled(m[24:])
	case exp == nxExperimenter && sub == nxtFlowModTable && len(m) >= 17:
		u.tableID = m[16] != 0
	case exp == nxExperimenter && sub == nxtFlowMod && len(m) >= nxFlowModLen:
		cmd := binary.BigEndian.Uint16(m[24:26])
		// Only an OpenFlow 1.0 session's table is certain (the high byte
		// with NXT_FLOW_MOD_TABLE_ID, else table 0); elsewhere any.
		table := uint8(tableAll)
		if u.version == of10Version {
			table = u.of10Table(cmd)
		} else if uint8(cmd) == flowModDelete {
			return // which table it empties is not certain: forget nothing
		}
		matchAll := binary.BigEndian.Uint16(m[40:42]) == 0
		u.ruleFlow(table, uint8(cmd), binary.BigEndian.Uint32(m[26:30]) == 0, binary.BigEndian.Uint16(m[30:32]), matchAll,
			binary.BigEndian.Uint16(m[36:38]) == of10PortNone, bundled)
	}
}

func (u *unrecorded) of10Table(cmd uint16) uint8 {
	if u.tableID {
		return uint8(cmd >> 8)
	}
	return 0
}

// of10FlowMod notes an OpenFlow 1.0 FLOW_MOD by rule: its ofp10_match is
// not translated.
func (u *unrecorded) of10FlowMod(m []byte, bundled bool) {
	if len(m) < of10FlowModLen {
		return
	}
	cmd := binary.BigEndian.Uint16(m[of10OffCommand:])
	wild := binary.BigEndian.Uint32(m[8:12])
	u.ruleFlow(u.of10Table(cmd), uint8(cmd), binary.BigEndian.Uint32(m[of10OffIdle:]) == 0,
		binary.BigEndian.Uint16(m[of10OffPriority:]), wild&of10WildL2 == of10WildL2,
		binary.BigEndian.Uint16(m[of10OffOutPort:]) == of10PortNone, bundled)
}

// ruleFlow notes a flow mod whose match is not translated: an add keeps a
// rule, or with an empty match that exact flow; a modify, which may add in
// OpenFlow 1.0, keeps a rule (a match-all modify changes flows, it adds
// none but on an empty table); a delete of everything forgets every flow.
func (u *unrecorded) ruleFlow(table, cmd uint8, permanent bool, priority uint16, matchAll, anyOut, bundled bool) {
	switch cmd {
	case flowModAdd, flowModModify, flowModModStrict:
		switch {
		case !permanent:
		case matchAll && cmd == flowModAdd && table != tableAll:
			u.k.Keep(entry.KindFlow, entry.FlowProbe(table, priority, nil))
		case !matchAll:
			u.k.KeepRule(table, priority)
		}
	case flowModDelete:
		if matchAll && anyOut && !bundled && (table == tableAll || !u.tableID && u.version == of10Version) {
			u.k.ForgetAll(entry.KindFlow)
		}
	}
}

// flowMod notes a FLOW_MOD of OpenFlow 1.1 to 1.4. In 1.2 and later only
// an ADD adds a flow (a modify that matches nothing adds nothing).
func (u *unrecorded) flowMod(m []byte, bundled bool) {
	if len(m) < flowModMatchAt+4 {
		return
	}
	table, cmd := entry.FlowModTable(m), entry.FlowModCommand(m)
	idle, hard := entry.FlowModTimeouts(m)
	permanent := idle == 0 && hard == 0
	priority := entry.FlowModPriority(m)
	fields, oxm := entry.FlowModMatchFields(m)
	if !oxm {
		// OpenFlow 1.1's ofp11_match: by rule, as 1.0's.
		u.ruleFlow(table, cmd, permanent, priority, false, false, bundled)
		return
	}
	switch cmd {
	case flowModAdd:
		if permanent && table != tableAll {
			u.k.Keep(entry.KindFlow, entry.FlowProbe(table, priority, fields))
		}
	case flowModDelStrict:
		if !bundled && table != tableAll {
			u.k.Forget(entry.KindFlow, entry.FlowProbe(table, priority, fields))
		}
	case flowModDelete:
		port, group := entry.FlowModOut(m)
		if !bundled && table == tableAll && len(fields) == 0 && entry.FlowModCookieMask(m) == 0 && port == anyPort && group == anyPort {
			u.k.ForgetAll(entry.KindFlow)
		}
	}
}

// mod notes a GROUP_MOD or METER_MOD: header, command, and the id at the
// same offsets in every version that has them; all is the id that deletes
// every one.
func (u *unrecorded) mod(kind entry.Kind, m []byte, all uint32, bundled bool) {
	r, _ := entry.ModRef(kind, m)
	id := r.ID
	switch entry.ModCommand(m) {
	case 0, 1: // ADD, MODIFY
		u.k.Keep(kind, m[:16])
	case modCmdDelete:
		switch {
		case bundled:
		case id == all:
			u.k.ForgetAll(kind)
		default:
			u.k.Forget(kind, m[:16])
		}
	}
}
