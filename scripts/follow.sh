#!/usr/bin/env bash
# Follow a Put and a proxied FLOW_MOD through flowstated, function by
# function (issue 32; docs/architecture.md, "A Put and a proxied FLOW_MOD,
# followed"). A private OVS sandbox with br-int, flowstated built without
# inlining (-gcflags=all=-N -l, so that every call of the source is one),
# its OpenFlow proxy for module ctl, and `dlv trace` attached to it with a
# breakpoint on every function of the module. Then one Put of a new flow
# (flowctl add-flow) and one FLOW_MOD with its barrier through the proxy
# (ovs-ofctl add-flow), each after a first one not traced. tools/follow
# prints each one's stays, package by package, goroutine by goroutine.
#
#   ./scripts/follow.sh            # about 2 minutes; needs root for ptrace
#   KEEP=/tmp/traces ./scripts/follow.sh   # also keep the raw traces there
set -euo pipefail
cd "$(dirname "$0")/.."
dlv=$(command -v dlv || true)
if [[ -z $dlv ]]; then
	GOBIN=$PWD/.bin go install github.com/go-delve/delve/cmd/dlv@v1.27.2
	dlv=$PWD/.bin/dlv
fi

dir=$(mktemp -d /tmp/ovsXXXX)
# shellcheck source=scripts/sandbox.sh
. scripts/sandbox.sh
sandbox_up
go build -gcflags='all=-N -l' -o "$bin/flowstated" ./cmd/flowstated
go build -o "$bin/follow" ./tools/follow
mkdir "$dir/px"
# The engine's echoes wait longer: a traced flowstated answers slowly.
ECHO_TIMEOUT=60s FS_EXTRA="--openflow-proxy ctl=br-int --openflow-proxy-dir $dir/px --proc-connector=false" flowstated_start
"${flowctl[@]}" wait >/dev/null
"${flowctl[@]}" add-flow --module m 'table=0,priority=10,ip,nw_dst=10.0.0.1,actions=drop' >/dev/null
ovs-ofctl -O OpenFlow15 add-flow "unix:$dir/px/br-int.mgmt" 'table=0,priority=10,ip,nw_dst=10.0.1.1,actions=drop'
# The proxied controller connects before the trace: its session's start is
# not what is followed.
mkfifo "$dir/go"
"$bin/follow" -controller "$dir/px/br-int.mgmt" -flow 'table=0,priority=10,ip,nw_dst=10.0.1.2,actions=drop' \
	<"$dir/go" >"$dir/controller.out" &
controller=$!
exec 3>"$dir/go"
for i in $(seq 300); do
	grep -q ready "$dir/controller.out" && break
	kill -0 "$controller" 2>/dev/null || { echo "follow: the controller ended before its HELLO" >&2; exit 1; }
	((i < 300)) || { echo "follow: the controller is not past its HELLO after 30 s" >&2; exit 1; }
	sleep 0.1
done

trace=$dir/trace
"$dlv" trace --pid "$fs" '^github\.com/flowstate-io/flowstate/' >"$trace" 2>&1 &
tracer=$!
# Killed, delve leaves flowstated stopped under its breakpoints, where a
# SIGTERM does not end it: on any exit from here, both go with SIGKILL.
trap 'kill -9 "$tracer" $fs 2>/dev/null || true; fs=; sandbox_down' EXIT
# Breakpoints take a while to set; the engine's periodic work hits them
# within a few seconds once they are.
for i in $(seq 600); do
	grep -q '^> goroutine' "$trace" && break
	kill -0 "$tracer" 2>/dev/null || { cat "$trace" >&2; exit 1; }
	((i < 600)) || { echo "follow: no breakpoint of dlv was hit in 5 minutes" >&2; exit 1; }
	sleep 0.5
done
"${flowctl[@]}" add-flow --module m 'table=0,priority=10,ip,nw_dst=10.0.0.2,actions=drop' >/dev/null
echo go >&3
wait "$controller"
# The proxied window ends when the controller's session does (its pump
# returns once the applier is done, after the barrier's reply): wait for
# that return to be traced.
for _ in $(seq 600); do
	grep -q 'server/ofproxy\.(\*session)\.fromController =>' "$trace" && break
	sleep 0.5
done
# flowstated stays stopped under the breakpoints once delve is killed: it
# goes with it.
kill -9 "$tracer" "$fs"
wait "$tracer" "$fs" 2>/dev/null || true
fs=
if [[ -n ${KEEP:-} ]]; then
	mkdir -p "$KEEP"
	cp "$trace" "$KEEP/"
fi

echo "== a Put, from the gRPC handler to its answer"
"$bin/follow" -from '^server\.\(\*service\)\.Put$' <"$trace"
echo
echo "== a proxied FLOW_MOD and its barrier, from the proxy's read of the FLOW_MOD to the end of its session"
"$bin/follow" -from '^server/ofconn\.ReadMessage$' -to '^server/ofproxy\.\(\*session\)\.fromController$' \
	-via '^server/(ofproxy|restore/write)\.' <"$trace"
