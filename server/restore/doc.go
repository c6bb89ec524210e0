// Package restore is flowstate's restore engine: it keeps every managed bridge
// of ovs-vswitchd equal to the desired state held in the store.
//
// On every (re)connection to a bridge it dumps the switch's flows, computes the
// difference with the desired entries and sends it in one ORDERED|ATOMIC
// bundle; when every bridge has converged it clears
// other_config:flow-restore-wait and waits until vswitchd acknowledged it.
// Writes from controllers (Put, Sync, Delete) go through the engine so they
// reach the switch and the store together, serialised with replays per
// bridge. It also mirrors the bridges it does not manage (package mirror) and
// audits the managed ones for drift (audit.go).
//
// # File map
//
// The rooms that need nothing of a bridge's lock are packages of their own,
// which never import this one (server/layers_test.go): plan (changes, the
// send order, applying them, dumps), flag (flow-restore-wait and the OVSDB
// client), gate (the cold-start gate), poison (crash records, bisection, the
// evidence of a crash) and mirror (the unmanaged bridges). This package
// wires them (flagnode.go, gate.go, poison.go, mirror.go) and keeps what
// works on a bridge's state under its lock.
//
// The Engine's API, by what it does:
//
//	engine.go        Config, New, Run, Wedged, Flag
//	writes.go        Put, Sync, Delete, PutSpool, SyncSpool, CheckDeclared
//	reads.go         Diff (counters.go: FlowCounters; status.go: Status,
//	                 Counts, Modules, Gate)
//	replay.go        Reconcile, and the numbered steps of a replay
//	faults.go        Faults: the tests' fault injection (nil in production)
//
// The write path, in the order a write crosses it:
//
//	writequeue.go    the bridge's request queue; submit (the caller's side)
//	                 and runWrites (the owner goroutine) choose a source
//	txn.go           the write transaction (txn.run) every source runs: the
//	                 four decisions, each made there; txnend.go its error
//	                 paths (discard, undo, a panic recovered)
//	groupcommit.go   source: a batch's ops in one store Update (groupStep)
//	writepipe.go     source: pipelined Puts of flows (PlanPut on the owner,
//	                 PutPlanned of several bundles on the pipe's storer)
//	writestaged.go   source: a spooled request staged on disk
//	writestream.go   a bundle that opens before the store has decided it
//	proxy.go         a change of a controller behind the OpenFlow proxy
//	                 (Recorder), turned into the module's net change by
//	                 package ofmods inside the transaction
//	resync.go        a controller's clear: deletions and changes to held
//	                 entries deferred until its reinstall is complete
//	tlv.go           the proxy's TLV table mods, queued alone, and their
//	                 restore first in a replay
//	adopt.go         what a controller installed through the guard's relay
//	                 while flowstated was away, learned by the bridge's first
//	                 reconcile (AdoptRelayed)
//	bridge.go        the bridge's state and its only writers; the connection
//
// The replay's side: switchflows.go (what the switch holds, as hashes),
// flowscan.go (the store's flows read against it), digest.go (a reconcile
// that compares by digest), quarantine.go and quarantineset.go (entries left
// out), damage.go (entries the store found damaged), cookie.go (flows outside
// the owned cookie space), owner.go (which store manages a bridge), kept.go
// and keptsave.go (what unrecorded controllers installed, left alone),
// forms.go (what the switch made of opaque entries), switchinfo.go, dial.go,
// audit.go; counters.go, metrics.go, status.go.
//
// # Still one package
//
// The write path and the replay stay here: both run under the bridge's lock
// with its connection, quarantine and convergence. They move out once the
// bridge's state is a package of its own that both can share.
//
// # A Put
//
//  1. Put (writes.go) builds a writeReq and calls submit (writequeue.go),
//     which queues it on the bridge and waits for its result or its ctx.
//  2. The bridge's owner, runWrites, takes the queued requests and hands
//     them to a source: a pipe while Puts of flows arrive on a live bridge
//     with nothing quarantined (writepipe.go); a staged request alone
//     (writestaged.go); anything else to group commit (commitBatch,
//     groupcommit.go).
//  3. The source's store step runs in one transaction (txn.run, txn.go):
//     lockLive takes b.mu and liveLocked says whether the changes go to
//     the switch; run opens the bundle the step streams into while the
//     store decides the changes; at the step's commit point atSwitch
//     commits it or sends the changes after, and decide turns each
//     verdict into an Outcome. Refused: the store rolls back and the
//     request fails naming the entry. Refused as a whole: resendWhole.
//     Unknown: stored, not applied.
//  4. commit (or end, when nothing was stored) settles: settleLocked lifts
//     the quarantine of what the write declared and, when the write was
//     not applied, asks the bridge for a replay. The caller gets applied or
//     not.
//
// # A replay
//
//  1. runBridge (bridge.go) dials the bridge and, on every connection and
//     every requestReplay, calls reconcile (replay.go).
//  2. reconcile checks the bridge's owner (owner.go), then under b.mu reads
//     the desired state, dumps the switch, diffs, leaves out the quarantined
//     entries and predicted refusals, and sends the plan in one bundle
//     (replayLocked, package plan); refused entries are quarantined and the rest
//     sent again, for at most MaxReplayTime.
//  3. The bridge is converged; Flag().BridgeConverged wakes the flag.
//
// # The flag
//
// Package flag owns flow-restore-wait and the OVSDB client (Engine.Flag);
// its doc states the protocol. The engine tells it when a bridge converged
// (BridgeConverged) and answers its questions (flagNode, flag.Node): the
// bridges' state, the gate, the mirrors, whether the engine is wedged.
package restore
