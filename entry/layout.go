package entry

import (
	"encoding/binary"
	"fmt"
)

// The byte layout of the OpenFlow 1.5 messages an entry is kept as. Every
// field flowstate reads from or writes into a FLOW_MOD, GROUP_MOD or
// METER_MOD on bytes is named here, and other packages read them through the
// accessors below, never through raw offsets.
//
//	header (all):      version(1) type(1) length(2) xid(4)
//	FLOW_MOD:          cookie(8) cookie_mask(8) table_id(1) command(1)
//	                   idle_timeout(2) hard_timeout(2) priority(2) buffer_id(4)
//	                   out_port(4) out_group(4) flags(2) importance(2)
//	                   ofp_match (type(2) length(2) fields, padded to 8) instructions
//	GROUP_MOD:         command(2) type(1) pad(1) group_id(4)
//	                   bucket_array_len(2) pad(2) command_bucket_id(4)
//	                   buckets, then group properties
//	METER_MOD:         command(2) flags(2) meter_id(4) bands
//
// A GROUP_MOD's buckets are read by bucket.go, the one parser of them.
//
// The FLOW_MOD of OpenFlow 1.1 to 1.4 has this layout up to its match, so
// the FlowMod accessors read those too (server/ofproxy's unrecorded).
const (
	offLength = 2
	offXID    = 4

	offCookie      = 8
	offCookieMask  = 16
	offTable       = 24
	offFlowCommand = 25
	offIdle        = 26
	offHard        = 28
	offPriority    = 30
	offBufferID    = 32
	offOutPort     = 36
	offOutGroup    = 40
	offFlags       = 44
	flowModFixed   = 48 // header .. importance, the match starts here

	// GROUP_MOD and METER_MOD share the place of their command and id.
	offModCommand = 8
	offModID      = 12
	modFixed      = 16 // header, command and id

	offGroupType     = 10
	offBucketLen     = 16
	offCommandBucket = 20
	// GroupModFixed is the length of a GROUP_MOD without its buckets and
	// properties.
	GroupModFixed = 24
	groupModFixed = GroupModFixed
	// FlowModFixed is the length of a FLOW_MOD up to its ofp_match.
	FlowModFixed = flowModFixed

	matchOXM = 1 // OFPMT_OXM
)

// FlowModCommand returns the command of a FLOW_MOD (OFPFC_*). m must hold
// at least the fixed part of a FLOW_MOD.
func FlowModCommand(m []byte) uint8 { return m[offFlowCommand] }

// FlowModCookieMask returns the cookie_mask of a FLOW_MOD (the cookie is
// FlowCookie's). m must hold at least the fixed part of a FLOW_MOD.
func FlowModCookieMask(m []byte) uint64 { return be.Uint64(m[offCookieMask:]) }

// FlowModTimeouts returns the idle and hard timeouts of a FLOW_MOD. m must
// hold at least the fixed part of a FLOW_MOD.
func FlowModTimeouts(m []byte) (idle, hard uint16) {
	return be.Uint16(m[offIdle:]), be.Uint16(m[offHard:])
}

// FlowModFlags returns the flags of a FLOW_MOD (OFPFF_*). m must hold at
// least the fixed part of a FLOW_MOD.
func FlowModFlags(m []byte) uint16 { return be.Uint16(m[offFlags:]) }

// FlowModOut returns the out_port and out_group of a FLOW_MOD, which
// restrict a delete. m must hold at least the fixed part of a FLOW_MOD.
func FlowModOut(m []byte) (port, group uint32) {
	return be.Uint32(m[offOutPort:]), be.Uint32(m[offOutGroup:])
}

// FlowModMatchHeader returns the type and length (header and fields,
// without padding) of a FLOW_MOD's ofp_match. m must hold at least the
// fixed part of a FLOW_MOD and the match's 4-byte header.
func FlowModMatchHeader(m []byte) (typ uint16, length int) {
	return be.Uint16(m[flowModFixed:]), int(be.Uint16(m[flowModFixed+2:]))
}

// FlowModMatchFields returns the fields of a FLOW_MOD's OXM ofp_match,
// sharing m's memory; ok is false when the match is not OXM (type 1) or
// its length does not fit in m. m must hold at least the fixed part of a
// FLOW_MOD and the match's 4-byte header.
func FlowModMatchFields(m []byte) (fields []byte, ok bool) {
	typ, n := FlowModMatchHeader(m)
	if typ != matchOXM || n < 4 || flowModFixed+n > len(m) {
		return nil, false
	}
	return m[flowModFixed+4 : flowModFixed+n], true
}

// SetFlowModMatchHeader writes the header of an OXM ofp_match of length
// bytes (header included, without padding) into a FLOW_MOD. m must hold at
// least the fixed part of a FLOW_MOD and the match's 4-byte header.
func SetFlowModMatchHeader(m []byte, length int) {
	be.PutUint16(m[flowModFixed:], matchOXM)
	be.PutUint16(m[flowModFixed+2:], uint16(length))
}

// ClearFlowModRequest sets the fields of a FLOW_MOD that belong to one
// request, not to the flow, to what a stored ADD carries: xid 0,
// cookie_mask 0 (meaningless for an ADD), out_port and out_group ANY (they
// restrict a delete only). m must hold at least the fixed part of a
// FLOW_MOD.
func ClearFlowModRequest(m []byte) {
	be.PutUint32(m[offXID:], 0)
	be.PutUint64(m[offCookieMask:], 0)
	be.PutUint32(m[offOutPort:], portAny)
	be.PutUint32(m[offOutGroup:], groupAny)
}

// SetLength writes len(m) into the header of the message m.
func SetLength(m []byte) { be.PutUint16(m[offLength:], uint16(len(m))) }

// FlowModTable returns the table of a FLOW_MOD (canonical, or built from a
// dump). m must hold at least the fixed part of a FLOW_MOD.
func FlowModTable(m []byte) uint8 { return m[offTable] }

// FlowModPriority returns the priority of a FLOW_MOD. m must hold at least
// the fixed part of a FLOW_MOD.
func FlowModPriority(m []byte) uint16 { return be.Uint16(m[offPriority:]) }

// FlowID returns the identity of a canonical FLOW_MOD ADD: table (1 byte),
// priority (2 bytes), match fields. It is the key under which OVS tells
// flows apart, and the one definition of it: Identify, the store's keys
// and the restore engine's view of the switch all use it.
func FlowID(m []byte) ([]byte, error) {
	if err := checkMessage(KindFlow, m); err != nil {
		return nil, err
	}
	return flowID(m)
}

// AppendFlowID appends the identity of a FLOW_MOD to dst (FlowID without
// its checks and without allocating, for dumps of a million flows). m must
// be a FLOW_MOD whose match length fits in it: one that passed Identify or
// was built by FlowFromDesc.
func AppendFlowID(dst, m []byte) []byte {
	mlen := int(be.Uint16(m[flowModFixed+2:]))
	dst = append(dst, m[offTable], m[offPriority], m[offPriority+1])
	return append(dst, m[flowModFixed+4:flowModFixed+mlen]...)
}

// ModID returns the 4 identity bytes of a GROUP_MOD (group_id) or METER_MOD
// (meter_id), sharing m's memory, or nil when m is too short to hold one.
func ModID(m []byte) []byte {
	if len(m) < modFixed {
		return nil
	}
	return m[offModID:modFixed:modFixed]
}

// ModRef returns the group a GROUP_MOD or the meter a METER_MOD names, kind
// saying which; ok is false when m is too short to hold an id.
func ModRef(kind Kind, m []byte) (r Ref, ok bool) {
	if len(m) < modFixed {
		return Ref{}, false
	}
	return Ref{Kind: kind, ID: be.Uint32(m[offModID:])}, true
}

// ModCommand returns the command of a GROUP_MOD or METER_MOD. m must hold at
// least its header and command.
func ModCommand(m []byte) uint16 { return be.Uint16(m[offModCommand:]) }

// GroupMod is the fixed part of a GROUP_MOD, read in place: Buckets and
// Props share the message's memory.
type GroupMod struct {
	Command       uint16 // OFPGC15_*
	Type          uint8  // OFPGT11_*
	ID            uint32 // group_id
	CommandBucket uint32 // command_bucket_id
	// Buckets is the bucket array (SplitBuckets, NextBucket), Props what
	// follows it: the group's properties.
	Buckets, Props []byte
}

// ReadGroupMod reads the GROUP_MOD m, which must hold at least its fixed
// part (GroupModFixed bytes). When the bucket array's length overruns m,
// err says so and only the fixed fields are set.
func ReadGroupMod(m []byte) (GroupMod, error) {
	g := GroupMod{
		Command: ModCommand(m), Type: m[offGroupType], ID: be.Uint32(m[offModID:]),
		CommandBucket: be.Uint32(m[offCommandBucket:]),
	}
	blen := int(be.Uint16(m[offBucketLen:]))
	if groupModFixed+blen > len(m) {
		return g, fmt.Errorf("bucket array of %d bytes does not fit in %d", blen, len(m))
	}
	g.Buckets, g.Props = m[groupModFixed:groupModFixed+blen], m[groupModFixed+blen:]
	return g, nil
}

// FlowTable returns the table of a flow identity.
func FlowTable(id []byte) uint8 {
	if len(id) == 0 {
		return 0
	}
	return id[0]
}

// FlowPriority returns the priority of a flow identity, 0 when id is too
// short to hold one.
func FlowPriority(id []byte) uint16 {
	if len(id) < 3 {
		return 0
	}
	return binary.BigEndian.Uint16(id[1:3])
}

// FlowMatch returns the ofp_match (header, fields and padding) of a
// canonical FLOW_MOD.
func FlowMatch(fm []byte) []byte {
	mlen := int(binary.BigEndian.Uint16(fm[flowModFixed+2:]))
	return fm[flowModFixed : flowModFixed+pad8(mlen)]
}
