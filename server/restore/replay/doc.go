// Package replay makes a managed bridge's switch hold exactly the bridge's
// desired state: on every connection, when a write asks for it, at every
// audit, and for a Diff (Replayer).
//
// A replay compares without holding either side in memory: the switch's
// flows are dumped into hashes (switchflows.go, digest.go) and the store's
// flows read against them in identity order (flowscan.go). It runs under
// the bridge's lock (package bridge), which it takes itself; what it needs
// of the engine's other rooms (ownership, the adoption of a relayed
// controller's state, the TLV table, what unrecorded controllers installed)
// is Rooms, and of the flag, Flag. It never imports the coordinator.
//
// # A replay (Reconcile)
//
//  1. Check that this engine may change the bridge (Rooms.CheckOwner),
//     learn what a controller relayed by the guard installed (a write of
//     the bridge's queue, Rooms.LearnRelayed), and take the lock.
//  2. Read the desired groups and meters; put back the TLV mappings the
//     switch lacks (Rooms.RestoreTLVLocked); dump the switch.
//  3. Leave out the quarantined entries, the predicted refusals and the
//     entries the crash-loop protection holds out (quarantine.go,
//     poison.go), and the entries the store found damaged (damage.go).
//  4. Send the plan in one ORDERED|ATOMIC bundle (package plan), with the
//     foreign entries to bring back after a restart (foreign.go). Entries
//     the switch refused are quarantined and the rest sent again, for at
//     most Config.MaxReplayTime.
//  5. Record the replay on the bridge (bridge.State.ReplayedLocked): the
//     bridge is converged when it succeeded.
//
// An audit (Audit) is a Diff that counts: when the switch differs from the
// store, the bridge is unconverged and the replay that follows corrects it.
package replay
