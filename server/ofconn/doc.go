// Package ofconn is flowstate's OpenFlow 1.5 channel to one bridge of ovs-vswitchd over its <rundir>/<bridge>.mgmt
// unix socket: handshake, echo keepalive, atomic bundles, dumps.
//
// # Connection
//
// [Dial] exchanges HELLO messages offering OpenFlow 1.5 only and confirms the switch accepted them with a barrier.
// A bridge whose protocols column excludes OpenFlow 1.5 fails with [ErrVersion]; vswitchd would drop the
// connection anyway.
//
// A [Conn] is safe for concurrent use. It owns three goroutines: a reader that dispatches every reply to the
// operation that waits for its xid, a keepalive that sends ECHO_REQUEST when nothing was received for
// [Options.EchoInterval] and declares the switch dead when nothing comes back within [Options.EchoTimeout], and a
// small writer for echo traffic so a keepalive never waits behind a stalled bulk write. When the connection dies
// (EOF, write error, echo timeout) the socket is closed, [Conn.Done] is closed and [Conn.Err] says why; every pending
// and later operation fails with an error matching [ErrClosed]. [Conn.Close] stops everything and waits for the
// goroutines.
//
// # Bundles
//
// [Conn.Bundle] sends messages in one ORDERED|ATOMIC OpenFlow 1.5 bundle (the native OFPT_BUNDLE_CONTROL and
// OFPT_BUNDLE_ADD_MESSAGE messages; OVS refuses the ONF experimenter form):
//
//  1. BUNDLE_OPEN, then one BUNDLE_ADD per message, each with the xid of the message it carries (OVS rejects an
//     add whose xid differs from its inner message's, and would still commit the empty bundle) and the flags of
//     the OPEN, then a BARRIER, all pipelined through one buffered writer.
//  2. OVS answers a rejected add with an OFPT_ERROR carrying the add's xid and keeps the bundle open, so every
//     error that arrives before the barrier reply is collected.
//  3. If any add (or the OPEN) failed: BUNDLE_DISCARD, and a [*BundleError] lists every rejected message.
//     Otherwise BUNDLE_COMMIT; a failure at commit (table full) arrives as the failing add's error followed by
//     OFPBFC_MSG_FAILED on the commit's xid, everything is rolled back, and it is reported as a [*BundleError] too.
//  4. A bundle of one message skips the barrier: BUNDLE_OPEN, the BUNDLE_ADD and BUNDLE_COMMIT go in one write,
//     one round trip instead of two. OVS answers a refused add with its error, keeps the bundle open and empty,
//     and answers the COMMIT of the empty bundle with success: nothing is installed, as after a discard, and the
//     add's error is the [*BundleError]. A refusal at commit arrives as in step 3. With several messages this
//     would not do: OVS commits the adds it took (bundleorder_ovs_test.go).
//
// [Conn.BundleStream] makes the messages one at a time, as the switch takes them; [Conn.BundleStreamUpTo] does
// the same when the producer learns the count as it goes (a write streamed while the store decides it): the xids
// of a bound are reserved and fewer messages are fine. A bundle left open by a dead connection is dropped by
// vswitchd.
//
// Lengths in OpenFlow are 16 bits: a bundled message may be at most [MaxBundledMessage] bytes, and larger messages
// are refused before anything is sent ([ErrTooLarge]).
//
// # Dumps
//
// [Conn.DumpFlowsRaw] (OFPMP_FLOW_DESC over all tables), [Conn.DumpGroups] (OFPMP_GROUP_STATS for the ids, then one
// OFPMP_GROUP_DESC per group: OVS 3.1 aborts when a description over 64 KiB is followed by another, and wraps
// its lengths, which the read loop undoes in wrapped.go) and [Conn.DumpMeters] (OFPMP_METER_DESC) follow
// multipart replies until REPLY_MORE clears; [Conn.EachFlow] hands them over one reply at a time. vswitchd
// builds every reply of a dump before it sends the first, so a dump's replies queue at most 4 MiB here: past
// that the reader waits for the consumer (echo replies wait in the socket meanwhile, a few milliseconds).
// Every entry keeps its raw bytes. Decoding
// with libOpenflow is guarded: the entry's structure is checked first (a zero-length action makes libOpenflow
// loop forever), panics are recovered, and the decoded entry must encode back to the raw bytes. An entry that
// fails any of this (the ct_clear and exit actions, a masked eth_dst, in libOpenflow v0.15.0) has Err set and
// no Desc, instead of crashing the daemon or comparing unequal forever.
//
// To compare desired and actual state by bytes, turn a dumped entry back into the message that installs it:
// [Flow.FlowMod], [Group.GroupMod] and [Meter.MeterMod] build it from the raw bytes (package entry), so they work
// for entries libOpenflow cannot decode, and for a group too large for one message give the ADD followed by its
// INSERT_BUCKET messages; [FlowModFromDesc], [GroupModFromDesc] and [MeterModFromDesc] build the same from the
// decoded form. The bytes equal the desired message's when it was encoded the way OVS encodes it (match fields
// in OVS's order, set_field rather than load; package canon brings controllers' messages there; OVS also turns an OpenFlow 1.5 match on a
// register into a masked packet-register field).
//
// # Flow monitor
//
// [Conn.MonitorFlows] asks the switch (OpenFlow 1.5 OFPMP_FLOW_MONITOR, which OVS supports since 3.0) to report
// every flow added, modified or removed, by any client, and returns a channel that receives a value whenever
// reports arrived: a signal to dump again, not the change itself. The reader takes the reports (xid 0) apart from
// replies. Groups and meters have no monitor in OpenFlow. OVS 2.15 refuses the request with an OpenFlow 1.0 error
// that names no request: the connection reads past it ([ForeignError]) and stays up.
//
// # Other OpenFlow versions
//
// A message framed in another OpenFlow version after the handshake is counted and skipped, never a reason to
// drop the connection (foreign.go): [Conn.Send] and [Conn.MonitorFlows] return a [*ForeignError] when one arrived
// before the barrier that follows their request.
//
// # Errors
//
// Errors returned by the switch are [*OFError] (single messages) and [*BundleError] (bundles); both match
// errdefs.ErrInvalidArgument. A dead or closed connection matches [ErrClosed] and errdefs.ErrUnavailable.
package ofconn
