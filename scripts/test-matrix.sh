#!/usr/bin/env bash
# Runs the tests that start an ovs-vswitchd against each Open vSwitch of the
# support matrix (docs/operations.md): Debian 11's OVS 2.15 and Debian 13's
# OVS 3.5 with OVN 25.03, each in a root that debootstrap builds from
# Debian's packages, and the host's own (Debian 12: OVS 3.1, OVN 23.03).
#
#   scripts/test-matrix.sh               build the missing roots, run every root
#   scripts/test-matrix.sh build         build the missing roots only
#   scripts/test-matrix.sh run [ROOT...] run roots (bullseye trixie host) as built
#   scripts/test-matrix.sh build-tests   build the test binaries only
#
# A root runs its binaries through wrappers on PATH that chroot into it, with
# /tmp bind-mounted so that the sandboxes' sockets are shared with the tests
# (internal/sandbox finds every binary through PATH, and the schemas through
# OVS_PKGDATADIR and OVN_PKGDATADIR, pointed at copies under /tmp). Every
# line of a root's output starts with its version, so a failure names it.
# Needs root (debootstrap, chroot, mount). Environment:
#   FLOWSTATE_ROOTS  where the roots live (default /var/tmp/roots)
#   MATRIX_LOGS      where the logs and wrappers go (default /tmp/flowstate-matrix)
#   MATRIX_MIRROR    the Debian mirror (default http://deb.debian.org/debian)
#   MATRIX_TESTS     "PACKAGE REGEXP" lines: run these instead of the selection
#   MATRIX_JOBS      how many roots run at the same time (default 1)
#   MATRIX_NO_REBUILD set: run uses the test binaries build-tests made
set -euo pipefail
cd "$(dirname "$0")/.."

roots=${FLOWSTATE_ROOTS:-/var/tmp/roots}
logs=${MATRIX_LOGS:-/tmp/flowstate-matrix}
mirror=${MATRIX_MIRROR:-http://deb.debian.org/debian}

# The packages of each root. bullseye's OVN (20.12) is left out: no fleet
# runs it beside 2.15 (docs/operations.md).
packages() {
	case $1 in
	bullseye) echo openvswitch-switch,openvswitch-testcontroller ;;
	trixie) echo openvswitch-switch,openvswitch-testcontroller,ovn-host,ovn-central ;;
	*) echo "test-matrix: unknown root $1 (want bullseye, trixie or host)" >&2 && return 1 ;;
	esac
}

# The binaries a root's wrappers run: what internal/sandbox and the proxy's
# tests start (osken-manager is a controller, not OVS: the host's serves).
bins="ovsdb-tool ovsdb-server ovsdb-client ovs-vswitchd ovs-vsctl ovs-ofctl ovs-appctl ovs-dpctl
ovs-testcontroller ovn-northd ovn-controller ovn-nbctl ovn-sbctl ovn-appctl"

# The tests that start a vswitchd, by package, chosen to take a few minutes
# a root: the restore and mirror (unmanaged bridge) paths, the guard, the
# proxy with OVN and OVS's own controller, the CI chaos seeds. OVN's run
# only where the root has OVN; the syntax of the OVS test-suite corpus and
# the Antrea pipeline against the root's ovs-ofctl (ofctl's
# testdata/ovs-suite/expected.txt lists what differs, by version, and why).
# Left out on bullseye: TestReconcileIsIdempotent, whose oracle is ovs-ofctl,
# and 2.15's encodes learn's FIELD[a..b]=immediate wrongly (OVS commit
# 8b3c86897, fixed in 3.1); TestSwitchDump and TestRoundTripSwitch, since
# 2.15's `ovs-ofctl -O OpenFlow15 del-meters` dies of a segmentation fault.
selection() {
	local name=$1 ovn=$2 reconcile='|TestReconcileIsIdempotent' switch='|TestSwitchDump|TestRoundTripSwitch' ovnstatus=''
	[ "$name" = bullseye ] && reconcile='' switch=''
	[ "$ovn" = yes ] && ovnstatus='|TestStatusNamesOVNController'
	if [ -n "${MATRIX_TESTS:-}" ]; then
		echo "$MATRIX_TESTS"
		return
	fi
	echo "./ofctl" "^(TestSyntaxOnThisVersion$switch)$"
	echo "./server/ofconn" '.'
	echo "./server/ovsconfig" '.'
	echo "./server/unixctl" '.'
	echo "./server/guard" '^(TestGuard|TestGuardStop|TestLeaseRecreated|TestHeartbeatFollowsOVSDB)$'
	echo "./server" "^(TestUnmanaged[A-Za-z]*|TestMirror[A-Za-z]*|TestArmAndRelease|TestColdStartGate|TestCrashProofGating|TestFrozenVswitchd|TestSeveralBridges|TestOutageReplay|TestMeterRollback|TestLargeGroups|TestTunMetadataCompareClean|TestPutRejectedByOVS|TestStatusNamesVswitchd|TestStatusNoOVNController$ovnstatus|TestVersionDecides|TestProxyRecordsAndRestores$reconcile)$"
	if [ "$ovn" = yes ]; then
		echo "./server/ofproxy" '^(TestTestControllerThroughProxy|TestTestController10LeftAlone|TestOSKenThroughFlowstated|TestOVNThroughProxy|TestOVNRecorded|TestOVNThroughFlowstated)$'
	else
		echo "./server/ofproxy" '^(TestTestControllerThroughProxy|TestTestController10LeftAlone|TestOSKenThroughFlowstated)$'
	fi
	echo "./internal/chaos" '^TestChaosSeeds$'
	# The host's Open vSwitch upgraded in place to this root's.
	[ "$name" = trixie ] && echo "./cmd/flowctl" '^TestOVSUpgrade$'
	return 0
}

# host_bins links the host's Open vSwitch binaries into one directory, the
# older Open vSwitch of TestOVSUpgrade (FLOWSTATE_UPGRADE_FROM).
host_bins() {
	local b p
	mkdir -p "$logs/host/bin"
	for b in ovsdb-tool ovsdb-server ovs-vswitchd ovs-vsctl ovs-ofctl ovs-appctl; do
		p=$(PATH=$PATH:/usr/sbin:/sbin command -v "$b") || return 1
		ln -sf "$p" "$logs/host/bin/$b"
	done
	echo "$logs/host/bin"
}

need_root() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "test-matrix: $1 needs root (debootstrap, chroot, mount)" >&2
		exit 1
	fi
}

# build_root makes $roots/$1 with debootstrap unless a complete one with the
# same packages is there. It builds into $1.tmp and renames at the end, so an
# interrupted build is never taken for a root.
build_root() {
	local name=$1 pkgs dir
	pkgs=$(packages "$name")
	dir=$roots/$name
	if [ -f "$dir/.flowstate-root" ] && [ "$(cat "$dir/.flowstate-root")" = "$name $pkgs" ]; then
		echo "test-matrix: reusing $dir"
		return 0
	fi
	need_root "building $dir"
	command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
	mkdir -p "$roots"
	unmount_root "$dir.tmp"
	rm -rf "$dir.tmp"
	echo "test-matrix: debootstrap $name with $pkgs into $dir"
	debootstrap --variant=minbase --include="$pkgs" "$name" "$dir.tmp" "$mirror" >"$roots/$name.debootstrap.log" 2>&1 ||
		{ tail -20 "$roots/$name.debootstrap.log" >&2; return 1; }
	stop_root_daemons "$dir.tmp"
	unmount_root "$dir"
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
	echo "$name $pkgs" >"$dir/.flowstate-root"
}

# stop_root_daemons stops what the packages' init scripts started inside the
# root while they were configured (no init system: invoke-rc.d runs them).
stop_root_daemons() {
	local pidfile pid
	for pidfile in "$1"/run/openvswitch/*.pid "$1"/run/ovn/*.pid; do
		[ -f "$pidfile" ] || continue
		pid=$(cat "$pidfile")
		kill "$pid" 2>/dev/null || true
	done
}

# unmount_root unmounts what setup_root mounted in root $1, deepest first.
unmount_root() {
	local m
	awk -v r="$1/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
		umount "$m"
	done
}

# setup_root writes the wrappers and schema copies of root $1 into
# $logs/$1, and mounts /tmp and this repository into it at the same paths:
# a wrapper runs its binary in the caller's directory (a test passes
# ovs-ofctl a file relative to its package).
setup_root() {
	local name=$1 dir=$roots/$1 out=$logs/$1 b repo
	need_root "running in $dir"
	repo=$(pwd -P)
	mountpoint -q "$dir/tmp" || mount --bind /tmp "$dir/tmp"
	mkdir -p "$dir$repo"
	mountpoint -q "$dir$repo" || mount --bind "$repo" "$dir$repo"
	rm -rf "${out:?}/bin" "${out:?}/share"
	mkdir -p "$out/bin" "$out/share/openvswitch" "$out/share/ovn"
	for b in $bins; do
		local inside
		inside=$(chroot "$dir" sh -c "command -v $b" 2>/dev/null) || continue
		# shellcheck disable=SC2016 # $PWD and $@ are the wrapper's
		printf '#!/bin/sh\n[ -d %q"$PWD" ] || exec chroot %q %q "$@"\nexec chroot %q env -C "$PWD" %q "$@"\n' \
			"$dir" "$dir" "$inside" "$dir" "$inside" >"$out/bin/$b"
		chmod +x "$out/bin/$b"
	done
	cp "$dir"/usr/share/openvswitch/*.ovsschema "$out/share/openvswitch/"
	if [ -d "$dir/usr/share/ovn" ]; then cp "$dir"/usr/share/ovn/*.ovsschema "$out/share/ovn/"; fi
}

# label is the name every output line of a root starts with.
label() {
	local v
	if [ "$1" = host ]; then
		v=$(ovs-vswitchd --version | head -1)
	else
		v=$(chroot "$roots/$1" ovs-vswitchd --version | head -1)
	fi
	echo "[OVS ${v##* } $1]"
}

# run_root runs the selection in root $1 (host: the host's binaries) and
# reports whether every test passed.
run_root() {
	local name=$1 lbl ovn=no path=$PATH pkg sel rc=0
	export OVS_PKGDATADIR OVN_PKGDATADIR
	if [ "$name" = host ]; then
		command -v ovn-controller >/dev/null && ovn=yes
		OVS_PKGDATADIR=${OVS_PKGDATADIR:-/usr/share/openvswitch} OVN_PKGDATADIR=${OVN_PKGDATADIR:-/usr/share/ovn}
	else
		setup_root "$name"
		[ -x "$logs/$name/bin/ovn-controller" ] && ovn=yes
		path=$logs/$name/bin:$PATH
		OVS_PKGDATADIR=$logs/$name/share/openvswitch OVN_PKGDATADIR=$logs/$name/share/ovn
		if FLOWSTATE_UPGRADE_FROM=$(host_bins); then
			export FLOWSTATE_UPGRADE_FROM FLOWSTATE_UPGRADE_FROM_SCHEMA=/usr/share/openvswitch/vswitch.ovsschema
		fi
	fi
	lbl=$(label "$name")
	mkdir -p "$logs/$name"
	: >"$logs/$name/test.log"
	echo "$lbl running (OVN: $ovn)"
	while read -r pkg sel; do
		local bin start=$SECONDS
		bin=$(test_bin "$pkg")
		# Every line names the version; the summary shows failures and results.
		if ! (
			cd "$pkg"
			PATH=$path "$bin" -test.run "$sel" -test.count=1 -test.timeout=10m -test.v 2>&1 | sed -u "s|^|$lbl |" >>"$logs/$name/test.log"
			exit "${PIPESTATUS[0]}"
		); then
			rc=1
			grep -E -- '--- FAIL|panic:' "$logs/$name/test.log" | tail -20 >&2 || true
			echo "$lbl FAIL $pkg $((SECONDS - start))s" >&2
		else
			echo "$lbl ok $pkg $((SECONDS - start))s"
		fi
	done < <(selection "$name" "$ovn")
	slowest "$lbl" "$logs/$name/test.log"
	# Unmounted at once: an rm -rf of the root must not reach /tmp or the repository.
	[ "$name" = host ] || unmount_root "$roots/$name"
	if [ "$rc" -ne 0 ]; then
		echo "$lbl FAILED: $logs/$name/test.log" >&2
	else
		echo "$lbl ok"
	fi
	return "$rc"
}

# slowest prints the slowest top-level tests of a root's log (-test.v lines
# "--- PASS: TestX (12.34s)"), where the matrix's time goes.
slowest() {
	grep -E -- '^\[[^]]*\] --- (PASS|FAIL): Test[^/ ]* ' "$2" |
		sed -E 's/.*--- [A-Z]+: ([^ ]+) \(([0-9.]+)s\).*/\2 \1/' | sort -rn |
		awk -v l="$1" '{ t += $1; if (NR <= 8) s = s sprintf(" %s %ss", $2, $1) } END { printf "%s tests %.0fs, slowest:%s\n", l, t, s }'
}

# test_bin is where package $1's test binary is built.
test_bin() {
	echo "$logs/tests/$(echo "$1" | tr ./ __).test"
}

# build_tests compiles the test binary of every package of the selection
# once, before the roots run (concurrently: none of them builds).
build_tests() {
	local pkg sel start=$SECONDS
	mkdir -p "$logs/tests"
	rm -f "$logs"/tests/*.test
	while read -r pkg sel; do
		go test -race -c -o "$(test_bin "$pkg")" "$pkg"
	done < <(selection trixie yes)
	echo "test-matrix: test binaries built in $((SECONDS - start))s"
}

# unmount_all unmounts every root's mounts, on any exit.
unmount_all() {
	local r
	for r in bullseye trixie; do unmount_root "$roots/$r"; done
}

main() {
	local cmd=${1:-all} name failed=()
	[ $# -gt 0 ] && shift
	case $cmd in
	build)
		for name in bullseye trixie; do build_root "$name"; done
		return 0
		;;
	build-tests)
		build_tests
		return 0
		;;
	run) ;;
	all) for name in bullseye trixie; do build_root "$name"; done ;;
	*) echo "usage: $0 [build | build-tests | run [bullseye|trixie|host...]]" >&2 && return 2 ;;
	esac
	local list=("$@")
	[ ${#list[@]} -gt 0 ] || list=(bullseye trixie host)
	trap unmount_all EXIT
	[ -n "${MATRIX_NO_REBUILD:-}" ] || build_tests
	# MATRIX_JOBS roots at a time: their tests mostly wait on vswitchd,
	# each in its own sandboxes, so two share two cores.
	local jobs=${MATRIX_JOBS:-1} start=$SECONDS
	rm -f "$logs/failed"
	for name in "${list[@]}"; do
		if [ "$name" != host ] && [ ! -f "$roots/$name/.flowstate-root" ]; then
			echo "test-matrix: no root $roots/$name (run $0 build)" >&2
			failed+=("$name")
			continue
		fi
		if [ "$jobs" -le 1 ]; then
			run_root "$name" || failed+=("$name")
			continue
		fi
		while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
		(run_root "$name" || echo "$name" >>"$logs/failed") &
	done
	wait
	if [ -s "$logs/failed" ]; then mapfile -t -O "${#failed[@]}" failed <"$logs/failed"; fi
	echo "test-matrix: roots ran in $((SECONDS - start))s (${jobs} at a time)"
	if [ ${#failed[@]} -gt 0 ]; then
		echo "test-matrix: failed in ${failed[*]}" >&2
		return 1
	fi
	echo "test-matrix: every root passed"
}

main "$@"
