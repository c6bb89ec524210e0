#!/usr/bin/env bash
# Restore at scale, in a private, unprivileged OVS sandbox: N flows (default
# 1,000,000) declared through flowctl; flowstated started beside a vswitchd
# that came back empty under flow-restore-wait (start-up and a full replay:
# time to the flag cleared and acknowledged, peak VmHWM and RssAnon sampled
# every 50 ms, idle RssAnon); vswitchd killed and started under the flag
# while flowstated runs (time from vswitchd's start to the flag cleared),
# against `ovs-ofctl --bundle replace-flows` plus the flag's removal; a
# no-op reconcile against `ovs-ofctl --bundle replace-flows` on the same
# bridge. vswitchd's CPU is printed beside each restore. See
# docs/benchmarks.md.
#
#   N=1000000 ./scripts/restore-large.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000000}

dir=$(mktemp -d /tmp/ovsXXXX)
# shellcheck source=scripts/sandbox.sh
. scripts/sandbox.sh
sandbox_up
flows 0 "$N" >"$dir/flows"
echo "$N flows, $(wc -c <"$dir/flows") bytes; $(nproc) CPUs; $(ovs-vswitchd --version | head -1)"

flowstated_start
"${flowctl[@]}" wait >/dev/null
t0=$(now_ms)
"${flowctl[@]}" add-flows --module policy "$dir/flows" >/dev/null
echo "declare (flowctl add-flows): $(($(now_ms) - t0)) ms"
mem declare
flowstated_stop
echo "store: $(($(stat -c %s "$dir/fs.db") / 1024 / 1024)) MB, $(($(stat -c %s "$dir/fs.db") / N)) bytes per flow"

# Start-up with N stored and a full replay into an empty, held vswitchd.
vswitchd_restart_held
t0=$(now_ms)
flowstated_start
"${flowctl[@]}" wait --converged --released >/dev/null
echo "start-up and full replay: $(($(now_ms) - t0)) ms from flowstated's start to the flag cleared"
mem "start+replay"
sleep 2
mem idle

for run in 1 2; do
	# flowstated running, vswitchd killed and started with the flag.
	since=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
	vswitchd_restart_held
	t0=$(now_ms)
	"${flowctl[@]}" wait --converged --released --since "$since" >/dev/null
	t1=$(now_ms)
	vcpu=$(awk '{print $14 + $15}' "/proc/$(cat "$dir/ovs-vswitchd.pid")/stat")
	echo "restore $run, flowstated: $((t1 - t0)) ms from vswitchd's start to the flag cleared (vswitchd CPU $((vcpu * 10)) ms)"
	mem "restore $run"
done
flowstated_stop
for run in 1 2; do
	vswitchd_restart_held
	t0=$(now_ms)
	while ! ovs-ofctl -O OpenFlow15 show br-int >/dev/null 2>&1; do sleep 0.01; done
	ovs-ofctl -O OpenFlow15 --bundle replace-flows br-int "$dir/flows"
	ovs-vsctl --db="$db" remove Open_vSwitch . other_config flow-restore-wait
	t1=$(now_ms)
	vcpu=$(awk '{print $14 + $15}' "/proc/$(cat "$dir/ovs-vswitchd.pid")/stat")
	echo "restore $run, ovs-ofctl --bundle replace-flows + flag removal: $((t1 - t0)) ms from vswitchd's start (vswitchd CPU $((vcpu * 10)) ms)"
done

flowstated_start
"${flowctl[@]}" wait --converged >/dev/null
mem start
t0=$(now_ms)
"${flowctl[@]}" reconcile >/dev/null
echo "no-op reconcile, flowstated: $(($(now_ms) - t0)) ms"
mem reconcile
t0=$(now_ms)
ovs-ofctl -O OpenFlow15 --bundle replace-flows br-int "$dir/flows"
echo "no-op reconcile, ovs-ofctl --bundle replace-flows: $(($(now_ms) - t0)) ms"
