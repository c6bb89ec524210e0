// Package ofproxy is the OpenFlow front door for controllers that were not
// written for flowstate: a unix socket that looks like vswitchd's
// <rundir>/<bridge>.mgmt, so that a controller finding its bridge under a run
// directory (ovn-controller through OVS_RUNDIR, Antrea through its OVS run
// directory) can be pointed at it with no code change.
//
// # Relay
//
// A [Proxy] owns one listening socket for one bridge. Every controller
// connection it accepts gets its own upstream connection to vswitchd's real
// socket, and two pumps copy OpenFlow messages in order, one per direction,
// framed but not decoded: hello and version negotiation, echo, barrier,
// bundles, packet-in/out, multipart and errors all pass through unchanged.
// Each pump flushes when its source has nothing more buffered, so a burst of
// messages leaves in a few writes and a lone message leaves at once.
//
// The proxy follows vswitchd's lifetime. When the upstream connection ends
// (vswitchd stopped or crashed) the controller's connection is closed, as
// vswitchd would have closed it. While vswitchd's socket does not accept, a
// new controller connection is closed right after it is accepted: the
// controller sees a refused connection and backs off, instead of a
// connection that hangs.
//
// A controller that floods the proxy slows only itself: each connection has
// its own goroutines and buffers, and a pump blocks only on its own
// destination.
//
// # Recording
//
// With a [Recorder], a session that agrees on OpenFlow 1.5 takes the
// controller's state out of the stream: FLOW_MOD, GROUP_MOD, METER_MOD and
// NXT_TLV_TABLE_MOD go to the Recorder instead of the switch, and the proxy
// answers as vswitchd would (record.go):
//
//   - A bundle (BUNDLE_CONTROL and BUNDLE_ADD_MESSAGE) is held until its
//     commit and handed over whole; the proxy sends the open, close,
//     commit and discard replies itself, and for a refused message the
//     switch's OFPT_ERROR re-addressed to the controller's BUNDLE_ADD, then
//     OFPBFC_MSG_FAILED for the commit. Its mistakes about bundles (an
//     unknown id, a second open, other flags, an add after close) get the
//     errors vswitchd sends, and drop the bundle where vswitchd drops it.
//     TestRecordedAnswersAsVswitchd holds the two to the same bytes.
//   - Standalone changes are applied on a goroutine of the session's own
//     (applier.go), while the proxy goes on reading: what arrives while a
//     change is applied is handed over together next, at most 1 MiB of
//     messages a change and 2 MiB queued before the proxy stops reading.
//     One that the switch refuses gets its error and the others are
//     applied without it, as the switch applies standalone messages one by
//     one.
//   - A barrier goes to the switch at once, and its reply reaches the
//     controller only after every change before the barrier was applied,
//     behind the errors of those refused: a barrier reply means the
//     change is durable and on the switch. Anything else is sent to the
//     switch (or answered, a bundle's control) only after every change
//     before it was applied.
//   - A flow with an idle or hard timeout or the send_flow_rem flag is not
//     desired state: alone it passes through unrecorded. In a bundle it is
//     refused with OFPBFC_MSG_UNSUP, as are packet-outs and port mods,
//     which only the switch's own bundle could apply atomically with the
//     rest.
//   - When the Recorder cannot tell whether a change was applied, the
//     controller's connection is closed: the controller reconnects and
//     installs everything again, which is what it does after a vswitchd
//     restart too.
//
// A session that does not agree on OpenFlow 1.5 (an OpenFlow 1.3 os-ken
// app, an OpenFlow 1.0 controller) is relayed unchanged and not recorded.
// With a [Keeper] the proxy tells it, before each message goes to the
// switch, what the session installs (unrecorded.go): the identity of each
// permanent flow, translated to the OpenFlow 1.5 form (the ofp_flow_mod of
// 1.2 to 1.4 is 1.5's up to its OXM match), of each group and meter by id,
// and for a flow whose match it does not translate (OpenFlow 1.0 and 1.1,
// NXT_FLOW_MOD) its table and priority; strict deletes and deletes of
// everything outside bundles. flowstated's Keeper (server/restore/kept.go)
// leaves those entries on the switch, never deletes them, and does not
// restore them after a vswitchd restart: the controller installs them
// again, as it would with plain OVS. Status counts them as left alone.
//
// A connection's open bundles may hold at most 1 GiB; past that the bundle
// is dropped with OFPBFC_MSG_TOO_MANY.
//
// flowstated's Recorder is the engine's (server/restore/proxy.go): each
// change is one request of the bridge's write queue, recorded as the
// module's declarations and sent to the switch as the difference against
// the store. flowstated starts a proxy per --openflow-proxy
// (server/proxies.go). This package's tests use a Recorder that applies
// each change to the switch over a connection of its own, so that the
// proxy is held to vswitchd's behaviour alone.
//
// # TCP
//
// With Config.ListenTCP the proxy also accepts controllers on a loopback
// TCP address, for those that dial a switch over TCP (os-ken's
// --ofp-switch-address-list); a connection there is relayed and recorded
// exactly as one on the socket. Only loopback addresses are taken: a local
// peer is the only one whose user can be told.
//
// # Admission
//
// Any local user can connect to the TCP address, and whoever vswitchd's
// socket admits to the unix one; what they send is recorded as the module
// and restored after every vswitchd restart. With Config.Admit, every
// accepted connection is asked about before anything of it is read or
// vswitchd is dialled; a refused one is closed (the controller sees its
// connection closed), logged with the peer and the reason, and counted
// in Stats.Denied. flowstated's Admit (server/proxyauth.go) holds the
// peer to the module's --module-writer rules as gRPC writes are held: the
// unix peer by SO_PEERCRED, the TCP peer by the owner of its socket in
// /proc/net/tcp (server/peercred); without rules there is no check.
//
// # Lifecycle
//
// [Listen] creates the socket ([Bind]: with the mode and owner of
// vswitchd's socket when that exists) and [Proxy.Serve] accepts until its
// context ends or [Proxy.Close] is called; both close every session and
// wait for its goroutines, and remove the socket.
//
// With Config.Listener the proxy serves a socket bound already, which
// another process may hold too: flowstated and its guard share each
// proxy socket, so that a controller keeps a path to its bridge while
// flowstated is away (server/guard, relay.go: the guard relays it with a
// Proxy of its own, without a Recorder, and a record of each relayed
// session that flowstated's first replay learns from: server/restore,
// adopt.go). Such a proxy's Close leaves the socket's path in place.
package ofproxy
