#!/usr/bin/env bash
# Declares N flows (default 1,000,000) in one command each through
# `flowctl add-flows` and `flowctl replace-flows` (half of the set new), into a
# private, unprivileged OVS sandbox and a flowstated process, then prints
# `flowctl diff` of the bridge emptied behind flowstate's back. Reports each
# command's time and the peak memory of flowstated (VmHWM, and the peak of
# RssAnon sampled every 100 ms) and of flowctl. See docs/benchmarks.md.
#
#   N=1000000 ./scripts/declare-large.sh
#   N=1000000 ECHO_TIMEOUT=60s ./scripts/declare-large.sh   # flowstated --ofp-echo-timeout
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000000}

dir=$(mktemp -d /tmp/ovsXXXX)
bin=$dir/bin
go build -o "$bin/" ./cmd/flowstated ./cmd/flowctl
export OVS_RUNDIR=$dir OVS_DBDIR=$dir OVS_LOGDIR=$dir OVS_SYSCONFDIR=$dir
db=unix:$dir/db.sock
fs=
sampler=
cleanup() {
	[[ -n $sampler ]] && kill "$sampler" 2>/dev/null
	[[ -n $fs ]] && kill "$fs" 2>/dev/null && wait "$fs" 2>/dev/null
	for d in ovs-vswitchd ovsdb-server; do
		[[ -f $dir/$d.pid ]] && kill "$(cat "$dir/$d.pid")" 2>/dev/null
	done
	rm -rf "$dir"
}
trap cleanup EXIT

ovsdb-tool create "$dir/conf.db" "${OVS_PKGDATADIR:-/usr/share/openvswitch}/vswitch.ovsschema"
ovsdb-server "$dir/conf.db" --remote=punix:"$dir/db.sock" --no-chdir --pidfile="$dir/ovsdb-server.pid" \
	--log-file="$dir/ovsdb-server.log" --unixctl="$dir/ovsdb-server.ctl" -vconsole:off --detach 2>/dev/null
ovs-vsctl --db="$db" --no-wait init
ovs-vswitchd "$db" --enable-dummy=override --disable-system --no-chdir --pidfile="$dir/ovs-vswitchd.pid" \
	--log-file="$dir/ovs-vswitchd.log" --unixctl="$dir/ovs-vswitchd.ctl" -vconsole:off --detach 2>/dev/null
ovs-vsctl --db="$db" add-br br-int -- set Bridge br-int datapath_type=dummy
echo boot > "$dir/boot_id"

flows() { # flows FROM COUNT: distinct flows of table 10, about 80 bytes a line
	awk -v from="$1" -v n="$2" 'BEGIN { for (j = from; j < from + n; j++)
		printf "table=10,priority=100,tcp,nw_src=10.%d.%d.%d,tp_dst=80,actions=resubmit(,20)\n", int(j / 65536), int(j / 256) % 256, j % 256 }'
}
flows 0 "$N" >"$dir/first.flows"
flows $((N / 2)) "$N" >"$dir/next.flows"

"$bin/flowstated" --listen "unix://$dir/fs.sock" --db "$dir/fs.db" --boot-id-file "$dir/boot_id" \
	--ovs-rundir "$dir" --ovsdb "$db" --bridge br-int --guard off --metrics-listen "" \
	--audit-interval 0 --rearm-flow-restore-wait=false --log-level warn --ofp-echo-timeout "${ECHO_TIMEOUT:-5s}" &
fs=$!
flowctl=("$bin/flowctl" --server "$dir/fs.sock" --timeout 30m)
"${flowctl[@]}" wait >/dev/null

# The peak of RssAnon (what a cgroup cannot reclaim), sampled.
echo 0 >"$dir/rssanon.peak"
(while kill -0 "$fs" 2>/dev/null; do
	a=$(awk '/^RssAnon/ {print $2}' "/proc/$fs/status" 2>/dev/null || echo 0)
	((a > $(cat "$dir/rssanon.peak"))) && echo "$a" >"$dir/rssanon.peak"
	sleep 0.1
done) &
sampler=$!

mem() { # mem LABEL: flowstated's peaks since the last call, then reset them
	sleep 0.3
	printf '%-14s flowstated VmHWM %6d MB, RssAnon peak %6d MB, RssAnon now %6d MB\n' "$1" \
		$(($(awk '/^VmHWM/ {print $2}' "/proc/$fs/status") / 1024)) $(($(cat "$dir/rssanon.peak") / 1024)) \
		$(($(awk '/^RssAnon/ {print $2}' "/proc/$fs/status") / 1024))
	echo 5 >"/proc/$fs/clear_refs" # resets VmHWM
	echo 0 >"$dir/rssanon.peak"
}
timed() { # timed LABEL CMD...: wall time and flowctl's peak RSS
	local label=$1
	shift
	/usr/bin/time -f "$label: %e s, flowctl max RSS %M kB" "$@"
}

echo "$N flows, $(wc -c <"$dir/first.flows") bytes; $(nproc) CPUs; $(ovs-vswitchd --version | head -1)"
mem start
timed add-flows "${flowctl[@]}" add-flows --module policy "$dir/first.flows"
mem add-flows
timed replace-flows "${flowctl[@]}" replace-flows --module policy "$dir/next.flows"
mem replace-flows
ovs-ofctl -O OpenFlow15 del-flows br-int table=10
# shellcheck disable=SC2016 # expanded by the inner sh
timed diff sh -c '"$@" diff >"$0"; echo "flowctl diff: exit status $?, $(wc -l <"$0") lines"' "$dir/diff.out" "${flowctl[@]}"
mem diff
echo "store: $(($(stat -c %s "$dir/fs.db") / 1024 / 1024)) MB"
