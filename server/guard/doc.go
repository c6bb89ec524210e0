// Package guard keeps flowstate's first promise when flowstated itself fails:
// a dead, frozen or wedged flowstated must never keep ovs-vswitchd from
// forwarding.
//
// flowstated holds other_config:flow-restore-wait armed so that a vswitchd
// that crashes comes back gated until the pipeline is restored. The flag is
// global and OVS has no timeout for it, so whoever arms it must be alive to
// clear it. The guard is the part that outlives flowstated:
//
//  1. flowstated renews a lease (a small file, normally in /run/flowstate)
//     from its engine loop while the engine is healthy.
//  2. A guard process holds an exclusive lock beside the lease for as long as
//     it runs, and proves that it can release: every heartbeat interval it
//     makes a write to its OVSDB (ovsconfig.Client.ProveWritable, a mutate
//     that changes nothing), since releasing is a write and a read-only copy
//     of the database (ovsdb-server --sync-from) answers reads with the same
//     _uuid; then it writes a heartbeat beside the lease (Heartbeat: its pid,
//     grace, the Open_vSwitch row it reached and whether OVSDB took the
//     write, or OVSDB's refusal). flowstated arms the flag only while the
//     lock holder's heartbeat is fresh, names flowstated's own OVSDB, reports
//     a write taken and a grace no longer than flowstated's
//     (Heartbeat.Check); a lock alone proves nothing, since a frozen or
//     misdirected guard holds it too.
//  3. The guard reads the lease every Grace/10. It measures staleness with its
//     own monotonic clock, from the last time the lease content changed, so
//     wall-clock jumps neither release nor hold the node.
//  4. Once the lease has not changed for Grace, the guard clears the flag in
//     OVSDB (and keeps it cleared while the lease stays stale), so vswitchd
//     forwards as plain Open vSwitch would. A flowstated back within the
//     grace renews the lease before that happens and keeps every gate it held.
//  5. flowstated re-creates a lease path that was unlinked (Lease.Renew), and
//     writes its OVSDB's identity into the lease: a spawned guard that reads
//     another database's there releases its own node and exits, so the new
//     flowstated spawns its own.
//  6. A guard given Config.Relays holds flowstated's OpenFlow proxy
//     sockets (package ofproxy) with flowstated, since the proxy is a
//     proxied controller's only path to its bridge (relay.go). flowstated
//     accepts on them while it runs; while the lease is stale the guard
//     accepts too and relays each connection straight to vswitchd,
//     unrecorded, following vswitchd's lifetime; once the lease is renewed it
//     closes those sessions, and the controller reconnects through
//     flowstated and reinstalls, which flowstated records. Each relayed
//     session is first recorded beside the lease (Relayed, RelayedPath:
//     bridge, module, the vswitchd relayed to and the one flowstated last
//     renewed its lease under, time), so that flowstated's first replay
//     after its return learns what the controller installed instead of
//     undoing it (server/restore, adopt.go). What sessions that do not
//     speak OpenFlow 1.5 install through the relay is noted beside it too
//     (RelayedKept, relaykept.go): those are another controller's, left
//     alone, not the module's to learn. A spawned guard
//     inherits the sockets; a restarted flowstated takes them over through
//     the hand-over socket beside the lease (RelayPath, SCM_RIGHTS, to a
//     peer of the guard's uid or root) instead of binding their paths again.
//     The hand-over ends the relaying first, and the guard relays no more
//     while that flowstated starts (handback.go): nothing a relayed session
//     sends can reach the switch after flowstated learned from it.
//     A flowstated that found the guard frozen binds a path anew; before the
//     guard relays or hands over a socket whose path names another, stale
//     one, it binds the path again itself (relay.go, rebindLocked).
//     A guard that holds one does not exit when idle while its path exists.
//
// Deployment forms: flowstated spawns a guard itself (--guard=spawn, a
// detached process in its own session, which survives SIGKILL and OOM kills
// of flowstated); under systemd and in the DaemonSet the guard runs as its own
// unit or container (--guard=external), because both kill every process of a
// stopped unit or container. An external guard holds proxy sockets only
// when given them (flowstated guard --openflow-relay): it binds them and
// hands them to flowstated, so it must start first.
package guard
