// Package ofproxy is the OpenFlow front door for controllers that were not
// written for flowstate: a unix socket that looks like vswitchd's
// <rundir>/<bridge>.mgmt, so that a controller finding its bridge under a run
// directory (ovn-controller through OVS_RUNDIR, Antrea through its OVS run
// directory) can be pointed at it with no code change.
//
// # What it does today
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
// # What it does not do yet
//
// Recording the controller's flows, groups, meters and TLV mappings as a
// module's desired state (issue 23) needs the write pipeline's source
// interface: state messages will then be taken out of the stream and applied
// through the engine instead of being relayed. Until then the proxy is not
// wired into flowstated; it is the transport, tested against an unmodified
// ovn-controller.
//
// # Lifecycle
//
// [Listen] creates the socket (with the mode and owner of vswitchd's socket
// when that exists) and [Proxy.Serve] accepts until its context ends or
// [Proxy.Close] is called; both close every session and wait for its
// goroutines, and remove the socket.
package ofproxy
