# shellcheck shell=bash
# Sourced by the large-scale scripts: a private, unprivileged OVS sandbox in
# $dir (ovsdb-server, ovs-vswitchd --enable-dummy=override, bridge br-int on
# the dummy datapath), flowstated and flowctl built into $dir/bin, and
# flowstated's memory sampled. Callers set dir and call sandbox_up.

db=
fs=
sampler=

sandbox_up() {
	: "${dir:?set dir to an empty directory}"
	bin=$dir/bin
	go build -o "$bin/" ./cmd/flowstated ./cmd/flowctl
	export OVS_RUNDIR=$dir OVS_DBDIR=$dir OVS_LOGDIR=$dir OVS_SYSCONFDIR=$dir
	db=unix:$dir/db.sock
	trap sandbox_down EXIT
	ovsdb-tool create "$dir/conf.db" "${OVS_PKGDATADIR:-/usr/share/openvswitch}/vswitch.ovsschema"
	ovsdb-server "$dir/conf.db" --remote=punix:"$dir/db.sock" --no-chdir --pidfile="$dir/ovsdb-server.pid" \
		--log-file="$dir/ovsdb-server.log" --unixctl="$dir/ovsdb-server.ctl" -vconsole:off --detach 2>/dev/null
	ovs-vsctl --db="$db" --no-wait init
	vswitchd_start
	ovs-vsctl --db="$db" add-br br-int -- set Bridge br-int datapath_type=dummy
	echo boot >"$dir/boot_id"
	# shellcheck disable=SC2034 # used by the scripts that source this one
	flowctl=("$bin/flowctl" --server "$dir/fs.sock" --timeout 30m)
}

sandbox_down() {
	set +e
	[[ -n $sampler ]] && kill "$sampler" 2>/dev/null
	[[ -n $fs ]] && kill "$fs" 2>/dev/null && wait "$fs" 2>/dev/null
	for d in ovs-vswitchd ovsdb-server; do
		[[ -f $dir/$d.pid ]] && kill "$(cat "$dir/$d.pid")" 2>/dev/null
	done
	rm -rf "$dir"
}

vswitchd_start() {
	ovs-vswitchd "$db" --enable-dummy=override --disable-system --no-chdir --pidfile="$dir/ovs-vswitchd.pid" \
		--log-file="$dir/ovs-vswitchd.log" --unixctl="$dir/ovs-vswitchd.ctl" -vconsole:off --detach 2>/dev/null
}

# vswitchd_restart_held: kill vswitchd, arm flow-restore-wait, start it again
# (it comes back with empty tables and holds forwarding).
vswitchd_restart_held() {
	local pid
	pid=$(cat "$dir/ovs-vswitchd.pid")
	kill -9 "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
	ovs-vsctl --db="$db" --no-wait set Open_vSwitch . other_config:flow-restore-wait=true
	vswitchd_start
}

# flowstated_start: start flowstated in the background (FS_EXTRA: more
# flags, such as --cpuprofile FILE).
flowstated_start() {
	# shellcheck disable=SC2086 # FS_EXTRA is split into flags on purpose
	"$bin/flowstated" --listen "unix://$dir/fs.sock" --db "$dir/fs.db" --boot-id-file "$dir/boot_id" \
		--ovs-rundir "$dir" --ovsdb "$db" --bridge br-int --guard off --metrics-listen "" \
		--audit-interval 0 --rearm-flow-restore-wait=false --log-level warn --ofp-echo-timeout "${ECHO_TIMEOUT:-5s}" ${FS_EXTRA:-} &
	fs=$!
	# The peak of RssAnon (what a cgroup cannot reclaim), sampled every 50 ms.
	echo 0 >"$dir/rssanon.peak"
	[[ -z $sampler ]] || kill "$sampler" 2>/dev/null || true
	(while kill -0 "$fs" 2>/dev/null; do
		a=$(awk '/^RssAnon/ {print $2}' "/proc/$fs/status" 2>/dev/null || true)
		a=${a:-0} # flowstated gone between the check and the read
		((a > $(cat "$dir/rssanon.peak"))) && echo "$a" >"$dir/rssanon.peak"
		sleep 0.05
	done) &
	sampler=$!
}

flowstated_stop() {
	kill "$fs"
	wait "$fs" 2>/dev/null || true
	fs=
}

# mem LABEL: flowstated's peaks since the last call, then reset them.
mem() {
	sleep 0.2
	printf '%-16s flowstated VmHWM %6d MB, RssAnon peak %6d MB, RssAnon now %6d MB\n' "$1" \
		$(($(awk '/^VmHWM/ {print $2}' "/proc/$fs/status") / 1024)) $(($(cat "$dir/rssanon.peak") / 1024)) \
		$(($(awk '/^RssAnon/ {print $2}' "/proc/$fs/status") / 1024))
	echo 5 >"/proc/$fs/clear_refs" # resets VmHWM
	echo 0 >"$dir/rssanon.peak"
}

# flows FROM COUNT [GROUPS]: distinct flows of table 10, about 80 bytes a
# line; with GROUPS, each uses one of groups 1..GROUPS (groups GROUPS).
flows() {
	awk -v from="$1" -v n="$2" -v g="${3:-0}" 'BEGIN { for (j = from; j < from + n; j++) {
		a = g > 0 ? sprintf("group:%d", j % g + 1) : "resubmit(,20)"
		printf "table=10,priority=100,tcp,nw_src=10.%d.%d.%d,tp_dst=80,actions=%s\n", int(j / 65536), int(j / 256) % 256, j % 256, a } }'
}

# groups COUNT: select groups 1..COUNT of two buckets.
groups() {
	awk -v n="$1" 'BEGIN { for (g = 1; g <= n; g++)
		printf "group_id=%d,type=select,bucket=weight:10,actions=resubmit(,30),bucket=weight:20,actions=resubmit(,31)\n", g }'
}

# now_ms: a monotonic-enough wall clock in milliseconds.
now_ms() { date +%s%3N; }
