// Package flag owns other_config:flow-restore-wait, the flag that keeps a
// starting ovs-vswitchd from forwarding until flowstated has restored its
// bridges, and the OVSDB connection it is written through.
//
// One type, Flag, holds the protocol and its state; its fields change only
// through its methods. The restore engine creates it (New) and passes in
// what the flag needs to know of the rest as a Node: the managed bridges'
// convergence, the cold-start gate, the mirrors of the unmanaged bridges and
// whether the engine is wedged. The package never imports server/restore.
//
// # The protocol
//
//  1. Run dials OVSDB (the client is shared: OVSDB, OVSDBUp). When a bridge
//     converges (BridgeConverged), something changes (Recheck: a mirror
//     settled, a hold ran out; GuardChanged), and periodically, it brings
//     the flag to its intended state (sync).
//  2. The node is held while a managed bridge is neither converged nor
//     excused. A bridge is excused when it is missing from OVSDB, stood
//     aside from, or unconverged for longer than MaxHold since it stopped
//     converging, the gate opened or the running vswitchd started; each
//     excuse is logged, published and counted (flowstate_bridge_not_restored).
//     The cold-start gate holds the node while something can be restored.
//  3. Once nothing holds it, and the unmanaged bridges' mirrors are
//     settled, the flag is cleared in one transaction that bumps next_cfg,
//     and the clear waits until cur_cfg reaches it: vswitchd forwards
//     through the restored pipeline from then on. The vswitchd it released
//     (named by its pidfile) and the time are stored, so a restarted
//     flowstated neither counts the release again nor holds it again.
//  4. With Rearm and a proven guard (GuardPresent), the flag is set again
//     for the next vswitchd start, only once vswitchd has acknowledged every
//     change so far: a re-arm that overtook an unread clear would hold it
//     for ever. vswitchd reads the flag only until it first sees it false,
//     so a re-armed flag never pauses a running switch.
//  5. Without a guard the flag is cleared, whoever set it: nobody would
//     release the node if flowstated died. With nothing to restore (every
//     managed bridge missing or stood aside from) it is not armed either.
//  6. Arm and Release are the operator's (flowctl, deploy/ovs-restart);
//     Arm only when this flowstated can restore and release the switch
//     afterwards.
//  7. Close, at stop, disarms the flag unless something still holds the
//     node (the gate, an unrestored bridge): then the next flowstated, or
//     the guard after its grace, releases it.
//
// Pin keeps the flag from changing while a caller decides and writes by
// whether the running vswitchd is held (VswitchdHeld): a mirror restores an
// unmanaged bridge only on a vswitchd nobody released.
package flag
