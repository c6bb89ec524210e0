// Command flowstate-bench measures flowstated against `ovs-ofctl --bundle`
// on the same generated flows, in the same run and the same private Open
// vSwitch sandbox, and prints one markdown table of medians, ranges, ratios,
// flowstated's peak memory and the CPU of both sides and of vswitchd.
//
//	go run ./cmd/flowstate-bench                              # 200,000 flows, 3 runs (make bench)
//	go run ./cmd/flowstate-bench -flows 200000,1000000 -runs 1
//
// flowstated and flowctl run as processes of their own, built once with go
// build before any clock starts (or given with -flowstated and -flowctl), so
// that flowstated's memory (VmHWM, and RssAnon sampled every 20 ms, both
// from /proc/PID/status, VmHWM reset with clear_refs before each interval)
// and CPU (/proc/PID/stat) are its own. flowstated runs with
// --rearm-flow-restore-wait=false, so a cleared flag stays observable, and
// with -cpuprofile each flowstated process writes a profile (flowstated
// --cpuprofile).
//
// For each flow count it measures, in interleaved runs (flowstate, then
// ovs-ofctl, back to back, -runs times), so that a noisy machine slows both
// sides of a ratio alike:
//
//  1. declare into an empty live bridge and a fresh store: `flowctl
//     add-flows` of the whole file (one command), and the Go client with
//     -writers goroutines Putting -batch pre-encoded FLOW_MODs each
//     (client.FlowBytes); against one `ovs-ofctl --bundle add-flows`.
//     Then both again with vswitchd down (stored only, nothing to compare
//     with), and vswitchd started again for the rest.
//  2. no-op reconcile: a Reconcile RPC with nothing to change, against
//     `ovs-ofctl --bundle replace-flows` on the same, identical bridge.
//  3. restore: vswitchd restarted with flow-restore-wait=true under the
//     running flowstated, from its management socket accepting until
//     forwarding resumes (an `ovsdb-client monitor` sees vswitchd apply the
//     cleared flag: cur_cfg caught up with the next_cfg of the clear) and
//     until flowstated's flag_cleared event (published once it saw that
//     acknowledgement). Against, flowstated stopped, `ovs-ofctl --bundle
//     replace-flows` and `ovs-vsctl remove Open_vSwitch . other_config
//     flow-restore-wait` into a freshly restarted vswitchd, the same monitor
//     watching. Then start-up: flowstated started with the flows stored
//     beside a held, empty vswitchd, from its exec to its flag_cleared
//     event; and its idle memory two seconds later.
//
// Every restore must leave the same `ovs-ofctl dump-flows` on both sides,
// and the first declare run the same on all three. Timing is never
// asserted: the command prints figures. It fails only when the sides
// disagree on the resulting flow table, or an operation fails.
package main
