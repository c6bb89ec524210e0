// Package unixctl asks an Open vSwitch or OVN daemon a question over its
// control socket, as ovs-appctl and ovn-appctl do: flowstated uses it to
// read the version of the node's ovn-controller, which writes none into
// OVSDB. It holds no state; callers decide how often to ask.
//
// The protocol (OVS lib/unixctl.c, utilities/ovs-appctl.c):
//
//  1. A target named T (not a path) is found as ovs-appctl -t T finds it:
//     its pid is read from <rundir>/T.pid, and its socket is
//     <rundir>/T.<pid>.ctl. A missing or unreadable pidfile, or a missing
//     socket, is an error naming the path.
//  2. The client connects to the unix socket and sends one JSON-RPC 1.0
//     request, {"method":M,"params":[strings],"id":N}, with no framing:
//     OVS reads JSON values back to back.
//  3. The daemon answers one JSON object with the same id: "result" is the
//     command's text output and "error" is null, or "error" is its refusal
//     (a string) and "result" is null. The reply is read up to MaxReply
//     bytes; a longer one is refused, as is a result that is not text
//     (ovs-appctl --format json, not asked here).
//  4. Everything is bounded by the caller's ctx: its deadline is the
//     socket's, and its end closes the socket.
package unixctl
