// Messages built from an entry's bytes: strict deletes, probes, and copies
// with another command or out port and group.

package entry

import (
	"bytes"
	"encoding/binary"
)

// DeleteFlowStrict returns a FLOW_MOD DELETE_STRICT for the flow whose
// canonical ADD payload is given: same table, priority and match, any out port
// and group, no instructions. It is built on bytes because libOpenflow writes
// out_port into the out_group field of a FlowMod.
func DeleteFlowStrict(add []byte) []byte {
	return DeleteFlowByMatch(FlowModTable(add), FlowModPriority(add), FlowMatch(add))
}

// DeleteFlowByMatch returns a FLOW_MOD DELETE_STRICT for the flow of table and
// priority with the given ofp_match (header, fields and padding).
func DeleteFlowByMatch(table uint8, priority uint16, match []byte) []byte {
	return flowByMatch(flowCmdDelStrict, table, priority, match)
}

// FlowProbe returns the FLOW_MOD ADD of a flow's identity alone: table,
// priority and an OXM match of fields (nil for the empty match), no
// instructions.
func FlowProbe(table uint8, priority uint16, fields []byte) []byte {
	match := make([]byte, 4, 4+len(fields))
	binary.BigEndian.PutUint16(match, matchOXM)
	binary.BigEndian.PutUint16(match[2:], uint16(4+len(fields)))
	return flowByMatch(flowCmdAdd, table, priority, append(match, fields...))
}

// flowByMatch returns a FLOW_MOD of command cmd, no instructions, for the
// flow of table and priority with the given ofp_match (header and fields;
// padded here to 8 bytes).
func flowByMatch(cmd, table uint8, priority uint16, match []byte) []byte {
	n := flowModFixed + pad8(len(match))
	m := make([]byte, n)
	m[0], m[1] = ofVersion15, typeFlowMod
	binary.BigEndian.PutUint16(m[offLength:], uint16(n))
	m[offTable] = table
	m[offFlowCommand] = cmd
	binary.BigEndian.PutUint16(m[offPriority:], priority)
	binary.BigEndian.PutUint32(m[offBufferID:], noBuffer)
	binary.BigEndian.PutUint32(m[offOutPort:], portAny)
	binary.BigEndian.PutUint32(m[offOutGroup:], groupAny)
	copy(m[flowModFixed:], match)
	return m
}

// OpenFlow 1.5 GROUP_MOD and METER_MOD commands.
const (
	cmdModify       = 1
	cmdDelete       = 2
	cmdInsertBucket = 3
)

// WithModify returns a copy of a canonical GROUP_MOD or METER_MOD ADD with
// command MODIFY: ADD fails for an id the switch already has.
func WithModify(add []byte) []byte { return WithCommand(add, cmdModify) }

// WithCommand returns a copy of a GROUP_MOD or METER_MOD with command cmd.
func WithCommand(m []byte, cmd uint16) []byte {
	m = bytes.Clone(m)
	binary.BigEndian.PutUint16(m[offModCommand:], cmd)
	return m
}

// WithFlowCommand returns a copy of a FLOW_MOD with command cmd. m must
// hold at least the fixed part of a FLOW_MOD.
func WithFlowCommand(m []byte, cmd uint8) []byte {
	m = bytes.Clone(m)
	m[offFlowCommand] = cmd
	return m
}

// WithFlowOut returns a copy of a FLOW_MOD with out_port and out_group
// port and group. m must hold at least the fixed part of a FLOW_MOD.
func WithFlowOut(m []byte, port, group uint32) []byte {
	m = bytes.Clone(m)
	binary.BigEndian.PutUint32(m[offOutPort:], port)
	binary.BigEndian.PutUint32(m[offOutGroup:], group)
	return m
}

// DeleteGroup returns a GROUP_MOD DELETE of the group with identity id.
func DeleteGroup(id []byte) []byte {
	m := make([]byte, 24)
	m[0], m[1] = ofVersion15, typeGroupMod
	binary.BigEndian.PutUint16(m[offLength:], 24)
	binary.BigEndian.PutUint16(m[offModCommand:], cmdDelete)
	copy(m[offModID:modFixed], id)
	binary.BigEndian.PutUint32(m[20:], 0xffffffff) // command_bucket_id: all
	return m
}

// DeleteMeter returns a METER_MOD DELETE of the meter with identity id.
func DeleteMeter(id []byte) []byte {
	m := make([]byte, 16)
	m[0], m[1] = ofVersion15, typeMeterMod
	binary.BigEndian.PutUint16(m[offLength:], modFixed)
	binary.BigEndian.PutUint16(m[offModCommand:], cmdDelete)
	copy(m[offModID:modFixed], id)
	return m
}
