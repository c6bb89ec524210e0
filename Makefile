# flowstate: `make help` lists the targets.
SHELL := /usr/bin/env bash
GOBIN := $(shell go env GOPATH)/bin
export PATH := $(PATH):$(GOBIN)

.PHONY: help
help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: demo
demo: ## run the restart demo on a private OVS sandbox (installs openvswitch-switch if missing, nothing else)
	@./scripts/install-deps.sh --demo
	go run ./cmd/flowstate-demo

# The nested modules, with a go.mod of their own so that a controller
# importing the client gets none of the daemon's dependencies (docs/api.md).
# ./... stops at a nested go.mod: each target runs in each of them too.
MODULES := api client entry errdefs
in-modules = for m in $(MODULES); do (cd $$m && $(1)) || exit 1; done

.PHONY: test
test: ## run every test, against private OVS sandboxes, with -race
	@./scripts/install-deps.sh
	go test -race -count=1 -timeout 15m ./...
	$(call in-modules,go test -race -count=1 -timeout 5m ./...)

# VERSION is what --version prints; a release build sets it (make build VERSION=v1.2.0).
# COMMIT is stamped as deploy/Dockerfile does, for toolchains and trees
# (a worktree, -buildvcs=false) where Go records no VCS revision.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/flowstate-io/flowstate/internal/version.Version=$(VERSION) -X github.com/flowstate-io/flowstate/internal/version.Commit=$(COMMIT)

.PHONY: test-matrix
test-matrix: ## run the tests that start a vswitchd against OVS 2.15 and 3.5 (Debian roots, built or reused) and the host's; needs root (docs/operations.md)
	./scripts/test-matrix.sh

.PHONY: build
build: ## build flowstated, flowctl and the demo into bin/
	go build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

.PHONY: vet
vet: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	go vet ./...
	$(call in-modules,go vet ./...)
	@# A nested module's go.mod must stay exactly its imports: grpc, protobuf, ours.
	$(call in-modules,go mod tidy -diff)

.PHONY: lint
lint: ## golangci-lint (.golangci.yml: depguard, staticcheck, errorlint, unused, revive, ...)
	golangci-lint run ./...
	$(call in-modules,golangci-lint run ./...)

.PHONY: lint-shell
lint-shell: ## shellcheck the shell scripts
	shellcheck -x deploy/ovs-restart scripts/*.sh .ci/run

.PHONY: proto
proto: ## regenerate api/ from the protos
	buf format -w
	buf generate

.PHONY: proto-check
proto-check: ## lint the protos; fail if generated code or formatting is stale
	buf lint
	buf format --diff --exit-code
	buf generate
	git diff --exit-code -- api/ docs/api-reference.md
	@test -z "$$(git status --porcelain -- api/ docs/api-reference.md)" || { git status --short -- api/ docs/api-reference.md; exit 1; }

.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME (default 20s)
	@for d in . $(MODULES); do \
	  for p in $$(cd $$d && go list ./...); do \
	    for f in $$(cd $$d && go test -list '^Fuzz' $$p | grep '^Fuzz'); do \
	      (cd $$d && go test -run '^$$' -fuzz "^$$f$$" -fuzztime $${FUZZTIME:-20s} $$p) || exit 1; \
	    done; \
	  done; \
	done

.PHONY: bench
bench: ## flowstate against ovs-ofctl --bundle: one table of restore, start-up, declare, reconcile, memory (FLOWS=200000 RUNS=3); small writes against the fsync floor (PUTS=2000 FLOWMODS=10000; docs/benchmarks.md)
	@./scripts/install-deps.sh
	go run ./cmd/flowstate-bench -flows $${FLOWS:-200000} -runs $${RUNS:-3}
	go test -run '^$$' -bench OVNThroughFlowstated -benchtime 3x -count 1 -timeout 30m ./server/ofproxy
	go test -run '^$$' -bench 'SmallPut' -benchtime $${PUTS:-2000}x -count 1 -timeout 30m ./server
	go test -run '^$$' -bench SingleFlowMods -benchtime $${FLOWMODS:-10000}x -count 1 -timeout 30m ./server/ofproxy

.PHONY: chaos
chaos: ## seeded fault schedules against the real binaries, fresh seeds for DURATION (default 5m; SEED=N STEPS=K replays one; docs/testing.md)
	@./scripts/install-deps.sh
	@if [ -n "$${SEED:-}" ]; then go run ./cmd/flowstate-chaos -seed "$$SEED" -steps $${STEPS:-20}; \
	else go run ./cmd/flowstate-chaos -duration $${DURATION:-5m} -steps $${STEPS:-20}; fi

.PHONY: follow
follow: ## follow a Put and a proxied FLOW_MOD through flowstated, package by package (dlv trace; docs/architecture.md)
	@./scripts/install-deps.sh
	./scripts/follow.sh

.PHONY: bench-go
bench-go: ## run every go test Benchmark function
	go test -run '^$$' -bench . -benchmem ./...

.PHONY: deps
deps: ## install OVS, buf and the pinned protoc plugins
	./scripts/install-deps.sh --dev
