// Package entry holds flowstate's domain types: an Entry is one desired flow,
// group or meter of one bridge, owned by one module, kept as its canonical
// OpenFlow 1.5 encoding (command ADD, xid 0) together with its identity, the
// key under which OVS itself tells entries apart:
//
//	flow:  table (1 byte) | priority (2 bytes) | match fields (OXM/NXM bytes)
//	group: group_id (4 bytes)
//	meter: meter_id (4 bytes)
//
// A group too large for one message is kept as the GROUP_MOD ADD followed by
// the INSERT_BUCKET messages that install it (Group.Encode; package canon
// describes the split).
//
// The package works on bytes, so the store and the restore engine compare and
// key entries without decoding them; it also turns the entries of a dump into
// messages (FlowFromDesc, GroupFromDesc, MeterFromDesc). Deciding the
// canonical form of what controllers send lives in package canon, the
// ovs-ofctl text syntax in package ofctl.
package entry
