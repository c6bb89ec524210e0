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
//     it runs; flowstated arms the flag only while some guard holds it.
//  3. The guard reads the lease every Grace/10. It measures staleness with its
//     own monotonic clock, from the last time the lease content changed, so
//     wall-clock jumps neither release nor hold the node.
//  4. Once the lease has not changed for Grace, the guard clears the flag in
//     OVSDB (and keeps it cleared while the lease stays stale), so vswitchd
//     forwards as plain Open vSwitch would. A flowstated back within the
//     grace renews the lease before that happens and keeps every gate it held.
//
// Deployment forms: flowstated spawns a guard itself (--guard=spawn, a
// detached process in its own session, which survives SIGKILL and OOM kills
// of flowstated); under systemd and in the DaemonSet the guard runs as its own
// unit or container (--guard=external), because both kill every process of a
// stopped unit or container.
package guard
