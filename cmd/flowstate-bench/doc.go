// Command flowstate-bench measures flowstated against `ovs-ofctl --bundle`
// on the same generated flows, in the same run and the same private Open
// vSwitch sandbox, and prints markdown tables of medians, ranges and ratios.
//
//	go run ./cmd/flowstate-bench -flows 10000,50000,200000 -runs 3
//
// For each flow count it measures, in interleaved pairs (one flowstate run,
// then one ovs-ofctl run, -runs times), so that a noisy machine slows both
// sides of a ratio alike:
//
//  1. restore: ovs-vswitchd restarted with flow-restore-wait=true, from the
//     moment its management socket accepts until the bridge is restored and
//     the flag is cleared and acknowledged by vswitchd. flowstate: the
//     flag_cleared event of flowstated, which is published after vswitchd
//     acknowledged the clear (cur_cfg caught up), confirmed afterwards by
//     Status (converged) and OVSDB (flag gone). ovs-ofctl: `ovs-ofctl
//     --bundle replace-flows` then `ovs-vsctl remove Open_vSwitch .
//     other_config flow-restore-wait` (which waits for vswitchd), what a
//     shell restorer does. Both must leave identical dump-flows output.
//  2. declare: Put in batches of -batch flows on a live bridge (one bundle
//     and one bbolt transaction each) against one `ovs-ofctl --bundle
//     add-flows` of the whole file.
//  3. no-op reconcile: a Reconcile RPC with nothing to change (dump, diff,
//     nothing sent) against `ovs-ofctl --bundle replace-flows` on a bridge
//     that already holds the file.
//  4. memory: the Go heap in use after a restore (flowstated runs in this
//     process, so the process RSS says little) and the bbolt file size.
//
// Timing is never asserted: the command prints figures. It fails only when
// the two sides disagree on the resulting flow table, or an operation fails.
//
// flowstated runs in-process (server.Start) with flow-restore-wait re-arming
// off, so the flag, once cleared, stays cleared until the next restart of the
// measurement arms it again.
package main
