// Package ofmods is what a controller's OpenFlow 1.5 state messages do to
// the desired entries of the module it speaks for: FLOW_MOD (add, modify
// and delete, strict and not, with cookie masks, out_port and out_group),
// GROUP_MOD (add, modify, delete, insert and remove bucket) and METER_MOD,
// applied in order, as vswitchd applies them to its tables, to the
// module's entries alone.
//
// The OpenFlow proxy records a controller this way (server/ofproxy,
// server/restore's Recorder): [Apply] reads the stored entries through a
// [Store], runs the messages against an overlay of them, and returns the
// net [Change], which the engine writes and sends to the switch as one
// diff. A controller that deletes everything and installs it again (what
// ovn-controller does after every reconnect) thus changes nothing.
//
// # Isolation
//
// A module owns its entries; a controller behind the proxy speaks for one
// module. A non-strict delete or modify selects only the module's flows,
// and deleting all groups or meters deletes only the module's. An add of
// an identity another module owns is refused with the error vswitchd
// sends for a change it does not permit (OFPFMFC_EPERM, OFPGMFC_EPERM,
// OFPBRC_EPERM for a meter).
//
// # What vswitchd does, and so Apply
//
//   - A modify keeps the flow's cookie, timeouts, flags and importance and
//     takes the new instructions; a modify that selects nothing does
//     nothing (OpenFlow 1.1 and later).
//   - Deleting a group or a meter deletes the flows that use it.
//   - Adding a group or meter that exists fails (GROUP_EXISTS,
//     METER_EXISTS); modifying one that does not fails (UNKNOWN_GROUP,
//     UNKNOWN_METER); deleting one that does not is no error.
//   - Messages apply in order: a bundle's later message sees the earlier
//     ones, and a refused message refuses the whole change ([Refusal]
//     names it).
//
// A message the package cannot decode is refused with a [Refusal] that
// names no code (Type 0): the caller asks the switch what it thinks of it.
package ofmods
