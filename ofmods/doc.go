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
//     nothing (OpenFlow 1.1 and later), but its match and instructions are
//     checked all the same. out_port and out_group restrict deletes only:
//     a modify selects by match and cookie.
//   - Match fields are read in the order sent, each needing its
//     prerequisites before it (OFPBMC_BAD_PREREQ, nw_dst before eth_type
//     included, which the canonical form would otherwise reorder).
//   - Only a delete may name every table (OFPTT_ALL; else
//     OFPFMFC_BAD_TABLE_ID); a strict delete of every table deletes the
//     flow of that priority and match in each. Table 254 is vswitchd's
//     own: an add or modify there is refused (OFPBRC_EPERM), and so is a
//     delete that selects none of the module's flows but one of
//     vswitchd's read-only ones (table 254, or cookie 0 under a full mask
//     in every table), as if the switch held the module's flows alone.
//   - Group and meter mods are checked as vswitchd decodes them: a
//     command_bucket_id that does not suit the command, a REMOVE_BUCKET
//     carrying buckets (OFPGMFC_BAD_BUCKET), bucket framing and ids, the
//     group type against its buckets (weights, watch ports), reserved
//     group ids (OFPGMFC_INVALID_GROUP) and meter ids (0, above
//     OFPM_MAX but slowpath and controller: OFPMMFC_INVALID_METER).
//   - INSERT_BUCKET inserts first, last or after a bucket id
//     (OFPGMFC_UNKNOWN_BUCKET, OFPGMFC_BUCKET_EXISTS) and keeps the
//     group's type: the type it names gives the buckets their default
//     weight (ovs-ofctl insert-buckets names all, so weight 0 in a select
//     group).
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
