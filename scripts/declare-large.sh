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
#   N=1000000 NGROUPS=10000 ./scripts/declare-large.sh      # every flow uses one of 10,000 groups (module lb)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000000}
NGROUPS=${NGROUPS:-0}

dir=$(mktemp -d /tmp/ovsXXXX)
# shellcheck source=scripts/sandbox.sh
. scripts/sandbox.sh
sandbox_up
flows 0 "$N" "$NGROUPS" >"$dir/first.flows"
flows $((N / 2)) "$N" "$NGROUPS" >"$dir/next.flows"
flowstated_start
"${flowctl[@]}" wait >/dev/null
if ((NGROUPS > 0)); then
	groups "$NGROUPS" >"$dir/groups"
	"${flowctl[@]}" add-groups --module lb "$dir/groups" >/dev/null
fi

timed() { # timed LABEL CMD...: wall time and flowctl's peak RSS
	local label=$1
	shift
	/usr/bin/time -f "$label: %e s, flowctl max RSS %M kB" "$@"
}

echo "$N flows ($NGROUPS groups), $(wc -c <"$dir/first.flows") bytes; $(nproc) CPUs; $(ovs-vswitchd --version | head -1)"
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
