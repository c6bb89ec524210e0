// Package entry holds flowstate's domain types: an Entry is one desired flow,
// group or meter of one bridge, owned by one module, kept as its canonical
// OpenFlow 1.5 encoding (command ADD, xid 0) together with its identity, the
// key under which OVS itself tells entries apart:
//
//	flow:  table (1 byte) | priority (2 bytes) | match fields (OXM/NXM bytes)
//	group: group_id (4 bytes)
//	meter: meter_id (4 bytes)
//
// The package works on bytes, so the store and the restore engine compare and
// key entries without decoding them; decoding and the ovs-ofctl text syntax
// live in package ofctl.
package entry
