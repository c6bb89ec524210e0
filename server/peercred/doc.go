// Package peercred tells who is at the other end of a local connection
// where the kernel has no SO_PEERCRED to say so: a loopback TCP
// connection. It reads /proc as identd and ss do.
//
//   - [TCPPeer] finds the peer's socket in /proc/net/tcp and tcp6: the
//     line whose local address is the peer's and whose remote address is
//     ours, both address and port. Its uid column is the socket's owner
//     (the uid that created it, as SO_PEERCRED reports the connecting
//     process). A match without an inode (a socket in TIME_WAIT, or
//     orphaned by its process) has no owner and is an error, not uid 0.
//   - [Holders] lists the processes holding a socket inode, and
//     [ReadStatus] reads who a process is from /proc/<pid>/status, for a
//     rule by group.
//
// /proc/net is the reader's network namespace; a loopback peer is always
// in it, since loopback does not cross namespaces. Every lookup fails
// closed: an error means the peer is unknown.
package peercred
