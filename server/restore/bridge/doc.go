// Package bridge holds the restore engine's state of one managed bridge
// (State): its OpenFlow connection, whether it converged and why not, the
// last replay, its quarantine (Quarantine), its crash-loop protection
// (package poison), the drift the audits found, and the snapshot of all of
// it that status reads without waiting (Snapshot).
//
// It is a package of its own so that the replay and the write transaction,
// which both work on this state under its lock, can share it without
// reaching into each other. Its fields change only through its own methods.
//
// # The lock
//
//  1. Lock serialises everything that talks to the switch or reads the
//     desired state for it, so a write never slips between a replay's read
//     of the store and its bundle.
//  2. Who holds it when: the bridge goroutine for a replay or an audit; the
//     write owner for one write transaction, or for the whole life of a
//     pipe, whose storer goroutine then works under the owner's lock (the
//     owner waits for it before it unlocks), a controller's TLV table change
//     included; a Diff or a Reconcile for its call; the methods without
//     Locked in their name briefly, to read or publish.
//  3. A method whose name ends in Locked must be called with the lock held;
//     so must the reads of Quarantine and every call on Poison but Death.
//  4. Every change publishes a Snapshot (after the change, under the lock),
//     so Snapshot, IsConverged and BusySince never wait for a replay or a
//     write in progress.
package bridge
