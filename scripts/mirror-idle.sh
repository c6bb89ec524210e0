#!/usr/bin/env bash
# The idle cost of the mirror of an unmanaged bridge (issue 21, item 15): a
# private, unprivileged OVS sandbox with br-int (managed, empty) and br-ex
# (unmanaged) holding N flows (default 100,000) installed with ovs-ofctl,
# flowstated mirroring br-ex every --mirror-interval (2 s) and nothing
# changing. After WARMUP seconds (default 10: the first dump stored; Go
# returns the dump's memory after its next two collections, forced every
# 2 minutes on an idle process, so WARMUP=300 shows the steady state) it reads utime+stime
# of flowstated and of ovs-vswitchd from /proc/PID/stat over SECS seconds
# (default 30) and prints each one's share of a core, their sum, flowstated's
# memory (RssAnon now and its peak since start, VmHWM), and the machine's load (CPU figures on a shared machine
# are noisy: run it more than once). See docs/benchmarks.md.
#
#   ./scripts/mirror-idle.sh
#   N=100000 SECS=60 ./scripts/mirror-idle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
SECS=${SECS:-30}
WARMUP=${WARMUP:-10}

dir=$(mktemp -d /tmp/ovsXXXX)
# shellcheck source=scripts/sandbox.sh
. scripts/sandbox.sh
sandbox_up
ovs-vsctl --db="$db" add-br br-ex -- set Bridge br-ex datapath_type=dummy
awk -v n="$N" 'BEGIN { for (j = 0; j < n; j++)
	printf "table=0,priority=100,tcp,nw_dst=10.%d.%d.%d,tp_dst=443,actions=drop\n", int(j / 65536), int(j / 256) % 256, j % 256 }' >"$dir/ex.flows"
ovs-ofctl -O OpenFlow15 add-flows br-ex "$dir/ex.flows"
FS_EXTRA="--log-level info ${FS_EXTRA:-}" flowstated_start
"${flowctl[@]}" wait >/dev/null
sleep "$WARMUP"

vs=$(cat "$dir/ovs-vswitchd.pid")
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
fs0=$(ticks "$fs") vs0=$(ticks "$vs") t0=$(now_ms)
sleep "$SECS"
fs1=$(ticks "$fs") vs1=$(ticks "$vs") t1=$(now_ms)
pct() { awk -v d="$1" -v hz="$hz" -v ms="$((t1 - t0))" 'BEGIN { printf "%.2f", 100 * d / hz / (ms / 1000) }'; }
echo "$N idle flows on br-ex, $SECS s; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $(ovs-vswitchd --version | head -1)"
echo "flowstated $(pct $((fs1 - fs0)))% of a core, ovs-vswitchd $(pct $((vs1 - vs0)))%, together $(pct $((fs1 - fs0 + vs1 - vs0)))%"
mem "since start"
