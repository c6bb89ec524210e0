#!/usr/bin/env bash
# Installs what flowstate's tests need: Open vSwitch, OVN and
# systemd-container (Debian packages) and promtool, and with --dev also buf and the pinned protoc plugins.
# With --demo, only what make demo needs: Open vSwitch (openvswitch-switch).
# Idempotent; says what it installed.
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
PROTOC_GEN_DOC_VERSION=v1.5.1
BUF_VERSION=v1.75.0
GOLANGCI_LINT_VERSION=v2.15.0

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v ovs-vswitchd >/dev/null && [ ! -x /usr/sbin/ovs-vswitchd ]; then
	echo "installing openvswitch-switch" >&2
	as_root apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openvswitch-switch >/dev/null
	echo "installed openvswitch-switch" >&2
fi

# The demo runs a private ovsdb-server and ovs-vswitchd: nothing else.
[ "${1:-}" = "--demo" ] && exit 0

# OVN 23.03 (ovn-northd, ovn-controller, the NB/SB schemas), Open vSwitch's
# ovs-testcontroller and os-ken (osken-manager) are the real, unmodified
# OpenFlow controllers the proxy's tests run.
# The tests start their own daemons in a temp dir; the packages' services,
# where an init system starts them, use /var/run/ovn and never meet those.
if ! command -v ovn-controller >/dev/null || ! command -v ovn-northd >/dev/null || ! command -v ovs-testcontroller >/dev/null ||
	! command -v osken-manager >/dev/null; then
	echo "installing ovn-host ovn-central openvswitch-testcontroller python3-os-ken" >&2
	as_root apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ovn-host ovn-central openvswitch-testcontroller python3-os-ken >/dev/null
fi

# systemd-nspawn boots this machine's file system under a real systemd for
# the unit tests (deploy/systemd_test.go).
if ! command -v systemd-nspawn >/dev/null; then
	echo "installing systemd-container" >&2
	as_root apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd-container >/dev/null
fi

# promtool evaluates the alert rules in server/alerts_test.go. Debian ships it
# only inside the prometheus package, whose install would also enable and
# start a Prometheus server (and pull ~100 MB of web UI): take promtool alone
# from the package instead.
if ! command -v promtool >/dev/null; then
	echo "installing promtool (from Debian's prometheus package)" >&2
	as_root apt-get update -qq
	tmp=$(mktemp -d)
	(cd "$tmp" && apt-get download -qq prometheus)
	dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/promtool
	as_root install -m 0755 "$tmp/usr/bin/promtool" /usr/local/bin/promtool
	rm -rf "$tmp"
fi

[ "${1:-}" = "--dev" ] || exit 0

if ! command -v shellcheck >/dev/null; then
	echo "installing shellcheck" >&2
	as_root apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null
fi

gobin=$(go env GOPATH)/bin
if ! "$gobin/protoc-gen-go" --version 2>/dev/null | grep -q "${PROTOC_GEN_GO_VERSION}"; then
	go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO_VERSION}"
fi
if ! "$gobin/protoc-gen-go-grpc" --version 2>/dev/null | grep -q "${PROTOC_GEN_GO_GRPC_VERSION#v}"; then
	go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION}"
fi
if [ ! -x "$gobin/protoc-gen-doc" ]; then
	go install "github.com/pseudomuto/protoc-gen-doc/cmd/protoc-gen-doc@${PROTOC_GEN_DOC_VERSION}"
fi
if ! "$gobin/golangci-lint" version 2>/dev/null | grep -q "${GOLANGCI_LINT_VERSION#v}"; then
	go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@${GOLANGCI_LINT_VERSION}"
fi
if ! buf --version >/dev/null 2>&1 && ! "$gobin/buf" --version >/dev/null 2>&1; then
	npm install -g "@bufbuild/buf@${BUF_VERSION#v}" >/dev/null 2>&1 || true
	# The npm package may install without a working binary (blocked install
	# scripts): fall back to building it.
	buf --version >/dev/null 2>&1 || go install "github.com/bufbuild/buf/cmd/buf@${BUF_VERSION}"
fi
