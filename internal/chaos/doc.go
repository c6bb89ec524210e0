// Package chaos searches for the faults nobody named: it runs a seeded,
// randomized schedule of faults against the real binaries (flowstated, its
// spawned guard, ovsdb-server and ovs-vswitchd in a private sandbox) while
// several modules write, and checks flowstate's promises continuously and at
// quiescence.
//
// # What a run does
//
//  1. Start a sandbox with two bridges: br-int, managed by flowstated, and
//     br-ex, unmanaged (preserved from flowstated's mirror). Both carry the
//     same deny policy: TCP to 10.0.0.99 is dropped, everything else from
//     port 1 goes out of port 2. br-ex's copy is installed with ovs-ofctl.
//  2. Start flowstated (spawn guard, short grace and --max-hold) and wait
//     until br-int is converged and the flag re-armed.
//  3. Run module writers (Put, Delete, Sync, a staged Sync, MarkReady, and a
//     Backup reader; a controller behind the OpenFlow proxy; an OpenFlow
//     1.3 controller behind it, unrecorded) and a prober (SYNs to an allowed and to the denied
//     address on both bridges) for the whole run, while the schedule's
//     faults run one after another: vswitchd killed, terminated, frozen;
//     flowstated killed, frozen, terminated, restarted with a new boot id;
//     the guard killed or frozen; the lease unlinked; br-int's protocols
//     restricted to OpenFlow 1.3 for a while; a Backup reader that stalls;
//     ovsdb-server restarted; a flow_limit on one of br-int's tables;
//     the store's tmpfs filled (as root); a byte of a record flipped in the
//     stopped store, or under a running flowstated; br-int or br-ex
//     deleted from OVSDB and created again; flowstated killed and, past
//     the guard's grace, vswitchd restarted inside the outage
//     (proxied-outage); the guard lock handed to a guard on a read-only
//     replica of the database (readonly-guard); uid 65534 writing over
//     every listener (foreign-writes).
//     A vswitchd that dies without the schedule killing it is restarted,
//     as systemd would, and counted. The schedule is drawn as clusters of
//     one to three kinds in quick succession (cluster.go: ordered pairs
//     and triples come up on purpose), and a step may wait for the next
//     replay or resync, or the replay under way, to land inside it, or
//     for the node at rest (Trigger). Covered draws also hold crash loops
//     (20k harmless drops declared, then vswitchd SIGKILLed twice inside
//     its restore: bulk.go) and the frozen-guard shape on purpose, begun
//     at rest and left alone until its promise is due.
//  4. Quiesce: stop the writers, heal everything, and wait for convergence.
//  5. Check the invariants at quiescence, stop flowstated, and check that
//     nothing it started is left running.
//
// # Invariants
//
//   - hold: once vswitchd runs unfrozen, the node forwards the allowed SYN
//     within the promise (the guard's grace, then the longest bounded hold,
//     then slack) of the last disruption.
//   - deny: the denied SYN is never forwarded on br-int after a vswitchd
//     start that found the flag armed while flowstated was alive. (Without
//     the flag armed, plain Open vSwitch forwards with NORMAL until the
//     replay: that is the promise's floor, not a violation.)
//   - acked: every acknowledged write (and acknowledged deletion) is what
//     the store lists at quiescence; writes whose outcome is unknown (the
//     call failed with UNAVAILABLE, a deadline, a cancellation) are skipped.
//   - converged: at quiescence the diff of br-int is empty, status says
//     converged, and br-ex holds its policy again (or exactly plain OVS's
//     default flow after a vswitchd start that found the flag clear).
//   - protected: at rest the flag stays armed, with a guard running, for
//     longer than a grace.
//   - crashloop: vswitchd never dies by itself more than twice in a row.
//   - leftover: nothing flowstated started (its guard) runs after the run.
//   - disk-full: a call that failed because the disk is full says so, as
//     RESOURCE_EXHAUSTED or UNAVAILABLE, never UNKNOWN.
//   - damage: a store with a flipped record is refused at start, naming
//     it; one damaged under a running flowstated is quarantined, left out
//     and taken off the switch until its module declares it again.
//   - barrier-delay: every change the proxied controller's barrier
//     acknowledged (the newest per flow) is on br-int within 5 s and
//     slack, unless a fault touched its window or a later write of the
//     flow has an unknown outcome; its resyncs (a clear, a reinstall with
//     changed policy, while it stays busy) included.
//   - poisoned: nothing is quarantined as crashing vswitchd, held out as
//     a suspect or found poisoned, during the run or at rest, as no writer
//     declares such an entry; excused once vswitchd died at a replay twice
//     (its own deaths, or the harness's SIGKILLs near a replay; an entry
//     named poisoned, as root, by its own deaths only). Checked once a
//     bisection under way has its verdict.
//   - path: while flowstated is dead past the guard's grace, vswitchd runs
//     and the guard runs unfrozen, a controller dialling the proxy socket
//     gets its barrier reply and finds its flow on br-int within 6 s (the
//     guard relays: path.go).
//   - kept: every flow the OpenFlow 1.3 controller's barrier acknowledged
//     is on br-int while the vswitchd and br-int it went to run, across
//     flowstated's restarts (of13.go).
//   - foreign: every write of uid 65534 (gRPC, the proxy's unix socket
//     and TCP listener, the guard's relay) is refused, and none is in the
//     store or on the switch (foreign.go).
//   - readonly-guard: while the only guard runs on a read-only replica,
//     the flag is never armed and status says the guard is unproven
//     (readonly.go).
//   - flowstated-exit, refused, crashloop: see docs/testing.md.
//
// # Reproducing
//
// Every violation is printed with the seed and the schedule up to it. The
// schedule is a function of the seed and the step count alone (and of the
// coverage file, with -coverage), so `flowstate-chaos -seed N -steps K`
// replays it (timing against real
// processes still varies between runs). `-shrink` reruns a failing schedule
// with steps removed until no step can be dropped, and prints the shortest
// schedule that still fails: that schedule becomes a regular test (see
// chaos_test.go).
package chaos
