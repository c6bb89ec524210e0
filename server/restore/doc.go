// Package restore is flowstate's restore engine: it keeps every managed bridge
// of ovs-vswitchd equal to the desired state held in the store.
//
// On every (re)connection to a bridge it dumps the switch's flows, computes the
// difference with the desired entries and sends it in one ORDERED|ATOMIC
// bundle; when every bridge has converged it clears
// other_config:flow-restore-wait and waits until vswitchd acknowledged it.
// Writes from controllers (Put, Sync, Delete) reach the switch and the store
// together, serialised with replays per bridge. It also mirrors the bridges it
// does not manage and audits the managed ones for drift.
//
// # Rooms
//
// Each concern is a package of its own, named for what it holds; none imports
// this one, and the imports point down (server/layers_test.go):
//
//	write     the writes: the queue and owner per bridge, the transaction
//	          every write runs in, its sources, the proxy's Recorder, TLV
//	replay    a replay, an audit, a Diff; quarantine; what the switch holds
//	owner     claim and stand-aside, cookies, adoption, what is kept
//	vswitchd  the running vswitchd and the bridges' connections
//	bridge    one bridge's state and lock, its quarantine, its snapshot
//	forms     what the switch made of entries kept in part as sent
//	flag      flow-restore-wait and the OVSDB client
//	gate      the cold-start gate
//	mirror    the mirrors of the unmanaged bridges
//	poison    crash records, bisection, the evidence of a crash
//	plan      changes, the send order, applying them, dumps
//
// # File map
//
// This package is the coordinator: it builds the rooms and wires them, and
// runs one goroutine per managed bridge.
//
//	engine.go    Config, New, Run, Wedged, Bridges, and the rooms (Writes,
//	             Owners, Vswitchd, Flag) for the server's Run to hand on
//	bridge.go    runBridge: keep the bridge connected; serveConn: the gate,
//	             the claim, then a replay at every connection, kick and audit
//	rooms.go     what the replay and the writes ask of the other rooms
//	             (replay.Rooms, write.Rooms)
//	flagnode.go  what the flag asks of the engine (flag.Node)
//	gate.go      the gate's config; MarkReady
//	mirror.go    the mirrors' config; Mirrors
//	poison.go    the crash protection's config
//	reads.go     Diff, Reconcile (counters.go: FlowCounters; status.go:
//	             Status, Gate, Modules)
//	faults.go    Faults: the tests' fault injection (nil in production)
//	metrics.go   the engine's metrics
//
// # A Put
//
// The server calls write.Writes (Engine.Writes) directly; package write's
// doc follows a Put from the queue through the transaction to the switch and
// the store.
//
// # A replay
//
//  1. runBridge (bridge.go) keeps the bridge connected (vswitchd.Daemon's
//     KeepConnected); serveConn waits for the gate and the claim
//     (owner.Owners.Claim), then calls replay.Replayer.Reconcile on every
//     connection, every RequestReplay and every audit that found drift.
//  2. Package replay's doc follows the replay itself: under the bridge's
//     lock, read the desired state, dump the switch, diff, leave out the
//     quarantined entries and predicted refusals, and send the plan in one
//     bundle (package plan).
//  3. The bridge is converged; the flag learns it (flag.Flag.BridgeConverged)
//     and clears flow-restore-wait once nothing holds the node.
//
// # The flag
//
// Package flag owns flow-restore-wait and the OVSDB client (Engine.Flag);
// its doc states the protocol. The engine answers its questions through
// flagNode (flag.Node): the bridges' state, the gate, the mirrors, whether the
// engine is wedged.
package restore
