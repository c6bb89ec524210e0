// Package canon is the one place where flowstate decides the canonical form
// of its entries: the bytes OVS itself sends back for a flow, group or meter
// in a dump, as an OpenFlow 1.5 FLOW_MOD, GROUP_MOD or METER_MOD (command
// ADD, xid 0). Desired entries (text or bytes from controllers) and dumped
// entries (from the switch) go through the same functions, so the engine
// compares them byte for byte.
//
// # Entry points
//
//   - [Decode] and [DecodeDelete]: encoded messages from a controller;
//     [Join] adds an INSERT_BUCKET entry to the group entry before it.
//   - [Parse] and [ParseDelete]: ovs-ofctl text.
//   - [Format]: text of a canonical entry, for List, Diff and errors.
//   - [Messages]: the messages that install a canonical entry.
//
// Entries of a dump are OVS's own form and need no decision: package entry
// turns them into messages on bytes (entry.FlowFromDesc, GroupFromDesc,
// MeterFromDesc), for server/ofconn, which sits below ofctl and so cannot
// import this package.
//
// # How a message is brought to OVS's form
//
// Text is parsed by package ofctl, which encodes as OVS does (tested byte
// for byte against vswitchd). An encoded flow is rebuilt field by field: its
// match re-encoded (a finite field set: OVS's field order, exact matches for
// all-ones masks, prerequisites checked), its instructions put in OVS's
// order, and each action printed and parsed back alone when ofctl knows it,
// kept field for field when it is an output, group or meter (the text of an
// output hides its max_len, which OVS keeps), and kept as the controller
// encoded it otherwise. Groups are rebuilt bucket by bucket the
// same way (bucket properties in OVS's order, the default weight of a select
// bucket made explicit); meters are printed and parsed back. What ofctl does
// not know is never re-implemented here: OVS is the judge of it, and where
// OVS rewrites it, the engine learns the switch's form after installing it
// ([Opaque], [Forms]).
//
// # What vswitchd cannot take
//
// An encoded flow or bucket is held to OVS's limits on actions
// (ofctl.CheckInstructions, ofctl.CheckActions) as sent, before it is
// canonicalised, and as it will be sent: an action or list past 65,535
// bytes in vswitchd's internal form, which aborts vswitchd 3.1, and nesting
// past OVS's depth limit are refused at declaration, as for text.
//
// # Groups of any size
//
// A GROUP_MOD's length is 16 bits and a BUNDLE_ADD's inner message at most
// [MaxMessage] bytes, so a group that does not fit is kept as a sequence of
// messages: the ADD with the properties and as many buckets as fit, then
// GROUP_MOD INSERT_BUCKET messages (command_bucket_id LAST) with the rest,
// each filled greedily. The split depends only on the group, so a declared
// and a dumped group compare by bytes. A controller may send the group as
// those messages, in one entry or as an ADD entry followed by INSERT_BUCKET
// entries of the same request ([Join]). A group entry is at most
// [MaxPayload] bytes and [MaxBuckets] buckets.
//
// The package works on bytes and is safe for concurrent use.
package canon
