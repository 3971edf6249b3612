# custody — build, test and demo. Every target installs what it needs first.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
STATICCHECK_VERSION := v0.8.2
GREMLINS_VERSION := v0.6.0
GOBIN_TOOLS := $(CURDIR)/.tools
PYTHON := $(CURDIR)/.venv/bin/python
PROTO := sdk/plugin/proto/custody/transport/v1/transport.proto api/engine/v1/engine.proto

.PHONY: all build test test-ucx test-ucx-current test-python lint-python test-nixl demo vllm-demo soak proto bench lint deps clean mutate explore explore-breaks

all: build

# UCX_PREFIX builds the ucx transport against the UCX installed there
# (make UCX_PREFIX=$$(scripts/ucx.sh current): the registry's current UCX);
# empty, against the one pkg-config finds (Debian's libucx-dev).
UCX_PREFIX ?=
UCX_ENV = $(if $(UCX_PREFIX),UCX_PREFIX=$(UCX_PREFIX) PKG_CONFIG=$(CURDIR)/scripts/ucx-pkg-config CGO_LDFLAGS=-Wl$(,)-rpath$(,)$(UCX_PREFIX)/lib,)
, := ,
# UCX_VERSION is the version of the UCX the build uses, as pkg-config
# reports it; the ucx transport's tests check that they load that one.
UCX_VERSION = $$(env $(UCX_ENV) sh -c '"$${PKG_CONFIG:-pkg-config}" --modversion ucx')

# deps installs the system packages the build needs (UCX for the ucx
# transport) with apt-get when running as root, or says what to run.
deps:
	@./scripts/deps.sh

build: deps
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/custody ./cmd/host
	$(GO) build -o $(BIN)/custody-bench-ref ./cmd/benchref
	$(GO) build -o $(BIN)/custody-transport-fake ./plugins/fake/cmd/custody-transport-fake
	$(UCX_ENV) $(GO) build -o $(BIN)/custody-transport-ucx ./plugins/ucx/cmd/custody-transport-ucx
	$(GO) build -o $(BIN)/custody-transport-memcopy ./examples/memcopy/cmd/custody-transport-memcopy
	@./scripts/nixl.sh build $(GO) $(BIN)

test: build lint
	$(UCX_ENV) CUSTODY_BIN=$(BIN) CUSTODY_UCX_VERSION=$(UCX_VERSION) $(GO) test -race -count=1 -timeout 20m ./...
	$(if $(UCX_PREFIX),,@$(MAKE) --no-print-directory test-ucx-current)
	set -o pipefail; $(GO) test -count=1 -run '^TestExplore$$' -v ./core ./host/group/ledger | grep -vE '^=== (RUN|PAUSE|CONT)'
	@$(MAKE) --no-print-directory explore-breaks
	@$(MAKE) --no-print-directory test-python
	@$(MAKE) --no-print-directory test-nixl

# test-ucx-current runs the ucx transport's tests (conformance over tcp and
# shared memory, in process and as the plugin binary, included) against
# the registry's current UCX (scripts/ucx.sh current), as make test runs
# every test against the UCX the build uses (Debian's, by default; make
# test runs this only then).
test-ucx-current: deps
	@prefix=$$(./scripts/ucx.sh current) && $(MAKE) --no-print-directory test-ucx UCX_PREFIX=$$prefix

# test-ucx runs the ucx transport's tests against the UCX the build uses.
test-ucx: deps
	$(UCX_ENV) CUSTODY_UCX_VERSION=$(UCX_VERSION) $(GO) test -race -count=1 -timeout 10m ./plugins/ucx/...

# test-python makes .venv (scripts/python.sh: the custody package, its test
# tools and vLLM from the registry), lints the package and runs its tests
# against the hosts make build built: the engine API client, and a real
# vLLM prefill/decode pair on custody (python/tests/test_vllm_pair.py).
test-python: build lint-python
	CUSTODY_BIN=$(BIN) $(PYTHON) -m pytest python/tests -q

# lint-python: ruff (lint and format) and mypy --strict over the package.
lint-python:
	@./scripts/python.sh
	$(PYTHON) -m ruff check python
	$(PYTHON) -m ruff format --check python
	$(PYTHON) -m mypy --config-file python/pyproject.toml python/custody

# test-nixl runs the NIXL transport's tests and the demo over it against
# NIXL_PREFIX, pkg-config's nixl, or else NIXL from the package registries
# (scripts/nixl.sh registry installs it into .nixl): the conformance suite
# over UCX tcp and shared memory, in process and as the plugin binary.
test-nixl: build lint
	@./scripts/nixl.sh need
	@./scripts/nixl.sh build $(GO) $(BIN)
	@eval "$$(./scripts/nixl.sh env)" && $(GO) vet -tags nixl ./plugins/nixl/... && $(GOBIN_TOOLS)/staticcheck -tags nixl ./plugins/nixl/... && \
		CUSTODY_BIN=$(BIN) $(GO) test -tags nixl -race -count=1 -timeout 20m ./plugins/nixl/...
	$(BIN)/custody demo --transport nixl

demo: build
	$(BIN)/custody demo

# vllm-demo runs a vLLM prefill/decode pair on custody with faults injected
# (python -m custody.vllm.demo) and prints its summary.
vllm-demo: build
	@./scripts/python.sh
	CUSTODY_BIN=$(BIN) $(PYTHON) -m custody.vllm.demo

# soak runs the demo long (custody soak): 10,000 requests with every fault
# kind firing all along and 20 transport processes killed, and fails unless
# nothing was corrupted, leaked or lost. It takes about ten minutes, so
# make test runs only a short one (demo's TestSoakShort).
SOAK_REQUESTS ?= 10000
SOAK_KILLS ?= 20
soak: build
	nice -n 10 $(BIN)/custody soak --requests $(SOAK_REQUESTS) --kills $(SOAK_KILLS)

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...

# lint: gofmt, go vet, staticcheck (pinned, installed into .tools) and a
# tidy go.mod.
lint: deps
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'); echo 'gofmt: files above need formatting'; exit 1; }
	$(GO) vet ./...
	@test -x $(GOBIN_TOOLS)/staticcheck || GOBIN=$(GOBIN_TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN_TOOLS)/staticcheck ./...
	$(GO) mod tidy -diff

# mutate runs mutation testing (gremlins, pinned, installed into .tools)
# over core and prints its efficacy: the share of mutants the tests kill.
# It takes tens of minutes, so make test does not run it. core's tests run
# on the scripted double and wait for nothing (what needs the real fake is in
# host/coreonfake, which mutate does not run); -short stays for any that may
# come to; -vet=off and -ldflags=-w cut the build of each mutant (vet runs
# in CI).
# gremlins times a mutant out at coefficient x the time of its coverage run,
# which is short when that build is cached: a timed-out mutant counts as
# neither killed nor lived, so keep the coefficient generous.
mutate:
	@test -x $(GOBIN_TOOLS)/gremlins || GOBIN=$(GOBIN_TOOLS) $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)
	GOFLAGS="-count=1 -short -vet=off -ldflags=-w" $(GOBIN_TOOLS)/gremlins unleash --timeout-coefficient 15 ./core

# explore runs core's explorer (core/explore_test.go) at its larger bound:
# every configuration one input deeper than in make test, with every
# failure code the contract allows; then the rank ledger's
# (host/group/ledger/explore_test.go): one input deeper, every terminal
# state. It takes hours; -explore.depth=N (EXPLORE_FLAGS) overrides the
# depth. The explorers' flags go after the packages, where go test hands
# them to the test binaries.
EXPLORE_FLAGS ?=
explore:
	$(GO) test -count=1 -timeout 0 -v ./core -run '^TestExplore$$' -explore.large $(EXPLORE_FLAGS)
	$(GO) test -count=1 -timeout 0 -v ./host/group/ledger -run '^TestExplore$$' -explore.large $(EXPLORE_FLAGS)

# explore-breaks makes each one-line break of core's rules listed in
# scripts/explorebreaks (in a scratch worktree of HEAD) and fails unless
# the explorer's CI bound finds every one of them; it prints what found
# each, after how many inputs.
explore-breaks:
	$(GO) run ./scripts/explorebreaks

# proto regenerates the checked-in gRPC code from $(PROTO): Go, and the
# Python package's engine API stubs (grpcio-tools, pinned in
# python/requirements-dev.txt).
proto:
	@command -v protoc >/dev/null || ./scripts/deps.sh protoc
	GOBIN=$(GOBIN_TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(GOBIN_TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH=$(GOBIN_TOOLS):$$PATH protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative $(PROTO)
	@./scripts/python.sh
	$(PYTHON) -m grpc_tools.protoc -Icustody/api/engine/v1=api/engine/v1 \
		--python_out=python --grpc_python_out=python --pyi_out=python custody/api/engine/v1/engine.proto

clean:
	rm -rf $(BIN) $(GOBIN_TOOLS) .venv .nixl
