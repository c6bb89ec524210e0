// Package write is the restore engine's write path: every change a
// controller makes to a managed bridge (Put, Sync, Delete, their spooled
// forms, a change relayed by the OpenFlow proxy's Recorder, a TLV table
// change, what a relayed controller installed while flowstated was away)
// reaches the switch and the store together, serialised with the bridge's
// replays by the bridge's lock (package bridge).
//
// Writes holds, per managed bridge, the write queue and its owner (Run),
// and the one transaction every write runs in (txn.go). It never imports
// the coordinator: what it asks of the engine's other rooms is Rooms, and
// the tests' fault injection is Faults.
//
// # A Put
//
//  1. Put (writes.go) builds a writeReq and calls submit (writequeue.go),
//     which queues it on the bridge and waits for its result or its ctx.
//  2. The bridge's owner, runWrites, takes the queued requests and hands
//     them to a source: a pipe while Puts of flows arrive on a live bridge
//     with nothing quarantined (writepipe.go); a request that carries its
//     own transaction alone (a staged write, writestaged.go; a TLV table
//     change, tlv.go; an adoption, adopt.go); anything else to group
//     commit (groupcommit.go).
//  3. The source's store step runs in one transaction (txn.run): lockLive
//     takes the bridge's lock and liveLocked says whether the changes go to
//     the switch; run opens the bundle the step streams into while the
//     store decides the changes; at the step's commit point atSwitch
//     commits it or sends the changes after, and decide turns each verdict
//     into an Outcome. Refused: the store rolls back and the request fails
//     naming the entry. Refused as a whole: resendWhole. Unknown: stored,
//     not applied. A pipe commits its store while the switch decides, and
//     undoes the commit on a refusal before answering (pipeStep).
//  4. commit (or end, when nothing was stored) settles: settleLocked lifts
//     the quarantine of what the write declared and, when the write was not
//     applied, asks the bridge for a replay. The caller gets applied or not.
//
// A replay makes what a controller relayed by the guard installed while
// flowstated was away its module's (package owner) as a write too, an
// adoption (adopt.go): queued before the replay takes the bridge's lock,
// run alone, its switch step empty.
//
// A controller behind the proxy writes through a Recorder (proxy.go): each
// change is a request whose op turns the controller's messages into the
// module's net change inside the transaction (package ofmods); a
// controller's clear stores its deletions at once (of groups and meters
// once no stored flow uses them) but defers them on the switch until its
// reinstall is complete (resync.go; the gone entries in resyncsweep.go).
//
// # Where the store is written
//
// The desired state (the entries, the TLV mappings) is written only here,
// by a request of the bridge's queue in its write transaction:
//
//   - Put, Sync, Delete, Do (writes.go): the request's op, in group
//     commit's store transaction (groupcommit.go) or a pipe's
//     (writepipe.go, writepipestep.go; a refused pipe's commit is undone,
//     store.Writer.UndoPlanned);
//   - Put and Sync of a spool (Declared.Spool, writes.go): store.Stage and
//     Staged.Commit, in a staged write (writestaged.go);
//   - a controller's change (proxy.go): its op, by group commit, with a
//     resync's deletion of the entries it cleared (resyncsweep.go) and the
//     record of the switch's copies it holds back (store.Ahead, resync.go);
//   - a TLV table change (tlv.go): the store's TLVMaps;
//   - an adoption (adopt.go): the learned entries, put and deleted.
//
// The rooms keep their own records of the store beside it: the bridges'
// claim (owner/owner.go) and kept entries (owner/keptsave.go), where a
// replay last placed the entries (replay/placed.go), the mirrors (package
// mirror, replay/foreign.go), the switch's forms (package forms), the crash
// records (package poison), the flag's (package flag) and the gate's.
package write
