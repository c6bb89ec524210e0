// A parsed flow's encoding: as libOpenflow's FlowMod (ParseFlow) or straight
// to FLOW_MOD bytes (ParseFlowBinary).

package ofctl

import (
	"encoding/binary"

	"antrea.io/libOpenflow/openflow15"
)

// flowParts is a parsed flow before it is encoded: the FlowMod fields that
// the text sets, the match and the instructions.
type flowParts struct {
	cookie                                  uint64
	table                                   uint8
	idle, hard, priority, flags, importance uint16
	enc                                     []oxm
	is                                      *instrSet
}

// flowMod returns the flow as an ADD FlowMod with xid 0.
func (fp *flowParts) flowMod() *openflow15.FlowMod {
	fm := openflow15.NewFlowMod()
	fm.Header.Xid = 0
	fm.Cookie, fm.TableId = fp.cookie, fp.table
	fm.IdleTimeout, fm.HardTimeout, fm.Priority = fp.idle, fp.hard, fp.priority
	fm.Flags, fm.Importance = fp.flags, fp.importance
	fm.Match = buildMatch(fp.enc)
	fm.Instructions = buildInstructions(fp.is)
	return fm
}

// appendBinary appends the flow as flowMod's MarshalBinary encodes it, for
// a flow under 64 KiB.
func (fp *flowParts) appendBinary(b []byte) []byte {
	start := len(b)
	b = append(b, openflow15.VERSION, openflow15.Type_FlowMod, 0, 0, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, fp.cookie)
	b = binary.BigEndian.AppendUint64(b, 0) // cookie_mask
	b = append(b, fp.table, openflow15.FC_ADD)
	b = binary.BigEndian.AppendUint16(b, fp.idle)
	b = binary.BigEndian.AppendUint16(b, fp.hard)
	b = binary.BigEndian.AppendUint16(b, fp.priority)
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)          // buffer_id
	b = binary.BigEndian.AppendUint32(b, openflow15.P_ANY)    // out_port
	b = binary.BigEndian.AppendUint32(b, openflow15.OFPG_ANY) // out_group
	b = binary.BigEndian.AppendUint16(b, fp.flags)
	b = binary.BigEndian.AppendUint16(b, fp.importance)
	m := len(b)
	b = append(b, 0, openflow15.MatchType_OXM, 0, 0)
	b = appendOXMs(b, fp.enc)
	binary.BigEndian.PutUint16(b[m+2:], uint16(len(b)-m))
	b = append(b, make([]byte, pad8Len(len(b)-m))...)
	is := fp.is
	if len(is.apply) > 0 {
		b = appendInstrActions(b, openflow15.InstrType_APPLY_ACTIONS, is.apply)
	}
	if is.clear {
		b = append(b, 0, openflow15.InstrType_CLEAR_ACTIONS, 0, 8, 0, 0, 0, 0)
	}
	if is.hasWrite && len(is.write) > 0 { // OVS drops an empty write_actions
		b = appendInstrActions(b, openflow15.InstrType_WRITE_ACTIONS, is.write)
	}
	if is.meta != nil {
		b = append(b, 0, openflow15.InstrType_WRITE_METADATA, 0, 24, 0, 0, 0, 0)
		b = append(b, is.meta[:16]...)
	}
	if is.gotoTable >= 0 {
		b = append(b, 0, openflow15.InstrType_GOTO_TABLE, 0, 8, byte(is.gotoTable), 0, 0, 0)
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b
}

// binaryLen is the length appendBinary appends, so the FLOW_MOD is
// allocated once, at its size.
func (fp *flowParts) binaryLen() int {
	n := 4
	for _, f := range fp.enc {
		n += 4 + len(f.v) + len(f.m)
		if f.hdr.isExperimenter() {
			n += 4
		}
	}
	n = 48 + n + pad8Len(n)
	acts := func(as [][]byte) int {
		k := 8
		for _, a := range as {
			k += len(a)
		}
		return k
	}
	is := fp.is
	if len(is.apply) > 0 {
		n += acts(is.apply)
	}
	if is.clear {
		n += 8
	}
	if is.hasWrite && len(is.write) > 0 {
		n += acts(is.write)
	}
	if is.meta != nil {
		n += 24
	}
	if is.gotoTable >= 0 {
		n += 8
	}
	return n
}

// appendInstrActions appends an instruction of encoded actions, which
// libAction's types marshal to the same bytes.
func appendInstrActions(b []byte, typ uint16, acts [][]byte) []byte {
	h := len(b)
	b = append(b, byte(typ>>8), byte(typ), 0, 0, 0, 0, 0, 0)
	for _, a := range acts {
		b = append(b, a...)
	}
	binary.BigEndian.PutUint16(b[h+2:], uint16(len(b)-h))
	return b
}

// pad8Len is the padding that brings n to a multiple of 8.
func pad8Len(n int) int { return (n+7)&^7 - n }

// buildMatch wraps encoded fields in a libOpenflow Match.
func buildMatch(fs []oxm) openflow15.Match {
	m := openflow15.Match{Type: openflow15.MatchType_OXM, Length: 4}
	for _, f := range fs {
		mf := openflow15.MatchField{Class: uint16(f.hdr.class), Field: f.hdr.field, HasMask: f.m != nil}
		v := rawBytes(f.v)
		if f.hdr.isExperimenter() {
			// The experimenter id leads the body; libOpenflow's own
			// ExperimenterID is counted in Len but never written.
			mf.Class = 0xffff
			v = binary.BigEndian.AppendUint32(nil, experimenterIDs[f.hdr.class])
			v = append(v, f.v...)
		}
		mf.Value = &v
		if f.m != nil {
			mk := rawBytes(f.m)
			mf.Mask = &mk
		}
		mf.Length = uint8(len(v) + len(f.m))
		m.Fields = append(m.Fields, mf)
		m.Length += mf.Len()
	}
	return m
}

// buildInstructions wraps encoded actions in libOpenflow instructions, in
// the order OVS encodes them.
func buildInstructions(is *instrSet) []openflow15.Instruction {
	var out []openflow15.Instruction
	if len(is.apply) > 0 {
		in := openflow15.NewInstrApplyActions()
		for _, a := range is.apply {
			_ = in.AddAction(libAction(a), false)
		}
		out = append(out, in)
	}
	if is.clear {
		in := openflow15.NewInstrApplyActions()
		in.Type = openflow15.InstrType_CLEAR_ACTIONS
		out = append(out, in)
	}
	if is.hasWrite && len(is.write) > 0 { // OVS drops an empty write_actions
		in := openflow15.NewInstrWriteActions()
		for _, a := range is.write {
			_ = in.AddAction(libAction(a), false)
		}
		out = append(out, in)
	}
	if is.meta != nil {
		out = append(out, openflow15.NewInstrWriteMetadata(beUint(is.meta[:8]), beUint(is.meta[8:])))
	}
	if is.gotoTable >= 0 {
		out = append(out, openflow15.NewInstrGotoTable(uint8(is.gotoTable)))
	}
	return out
}
