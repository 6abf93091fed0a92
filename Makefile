# xetcdn — `make help` lists the targets.
#
#   make run                   origin + edge on embedded defaults; prints the client exports (scripts/run.sh)
#   make test                  test services, lint, check-edge-deps, then every package's tests
#   make fuzz FUZZTIME=30s     every Fuzz target, FUZZTIME each
#   make bench BENCH=. BENCHTIME=200ms COUNT=1 PKG=./...
#   make budgets               re-measure the allocation budgets (perf/allocbudget/budgets.txt)
#   make perf SCENARIO=zipf SCALE=0   a short end-to-end performance run (perf/run.sh)
#   make regions               simulated regions over the user-space link emulator, as root (perf/regions.sh)
#   make perf-scale SCALE=10000000    the index-at-scale measurements on their own PostgreSQL (perf/scale.sh)
#
# Variables worth overriding: RACE (set RACE= to test without the race detector),
# TEST_TIMEOUT, TEST_FLAGS (extra `go test` flags, e.g. -short), PKG.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH := $(dir $(GO)):$(PATH)
export GOFLAGS ?= -buildvcs=false

STATICCHECK := honnef.co/go/tools/cmd/staticcheck
STATICCHECK_VERSION := v0.8.2
GOTESTSUM := gotest.tools/gotestsum
GOTESTSUM_VERSION := v1.13.0

PKG ?= ./...
# The race detector multiplies CPU time; on 2 cores it still fits the CI budget.
RACE ?= -race
# Per test binary. The client interop suite is the long pole (two backends, origin and edge).
TEST_TIMEOUT ?= 25m
TEST_FLAGS ?=
FUZZTIME ?= 10s
# make perf: the trace scenario and the size of the synthetic index loaded first (0: none).
SCENARIO ?= zipf
SCALE ?= 0
EDGES ?= 1
# make perf: MiB a new version of a weight file replaces in one aligned piece (tracegen
# -change-span); 1 changes scattered 1 MiB blocks, the traces of before the option.
CHANGE_SPAN_MB ?= 1
# make perf: KiB of new first bytes (1..N, per version) every version of a weight file gets
# (tracegen -head); 0 writes none, the traces of before the option.
HEAD_KB ?= 0
BENCH ?= .
BENCHTIME ?= 200ms
COUNT ?= 1

# Modules the edge binary must never link (docs/architecture.md §1).
EDGE_FORBIDDEN := github.com/jackc/pgx|github.com/lib/pq|github.com/minio/minio-go|modernc.org/sqlite|github.com/mattn/go-sqlite3

.PHONY: help build run test go-test lint fmt-check vet staticcheck check-edge-deps fuzz bench \
	services services-stop services-status clean alloc-budgets budgets perf perf-scale

help:
	@echo "make run          run xetcdn on embedded defaults: origin :8080 + edge :8443"
	@echo "make test         start test services, lint, check-edge-deps, go test $(RACE) $(PKG)"
	@echo "make build        build every binary into bin/"
	@echo "make lint         gofmt -l, go vet, staticcheck $(STATICCHECK_VERSION)"
	@echo "make check-edge-deps  fail if cmd/xet-edge links pgx, minio-go or sqlite"
	@echo "make fuzz         every Fuzz target for FUZZTIME=$(FUZZTIME)"
	@echo "make alloc-budgets  check the hot paths' allocations against perf/allocbudget/budgets.txt"
	@echo "make budgets      re-measure those budgets and rewrite the file (commit it with the change)"
	@echo "make perf         replay SCENARIO=$(SCENARIO) twice and the 100k-term gate on Postgres+MinIO; results in perf/results/"
	@echo "make regions      origin, edges and clients in network namespaces over emulated 100 ms/0.5 % links (root); results in perf/results/"
	@echo "make perf-scale   10^4 vs SCALE (10^7) files: open-loop reconstructions, gate, shards, sizes (perf/scale.sh)"
	@echo "make bench        benchmarks (BENCH=$(BENCH) BENCHTIME=$(BENCHTIME) COUNT=$(COUNT) PKG=$(PKG))"
	@echo "make services / services-stop / services-status   the integration test services"

# Every main package of the module, one binary each, named after its directory.
build:
	@mkdir -p bin
	@mains=$$($(GO) list -e -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./... | grep -v '^$$'); \
	$(GO) build -ldflags "-X github.com/xetcdn/xetcdn/shared/buildinfo.commit=$$(git rev-parse --short=12 HEAD 2>/dev/null)" -o bin/ $$mains; \
	echo "build: $$(cd bin && ls | tr '\n' ' ')"

run: build
	@scripts/run.sh

services:
	@scripts/services.sh start

services-stop:
	@scripts/services.sh stop

services-status:
	@scripts/services.sh status

# Lint and the edge dependency check run before the tests; when they fail the tests still run
# (so one report shows everything) and make test fails at the end. The test runner's summary
# stays the last thing printed.
test: services
	@status=0; \
	$(MAKE) --no-print-directory lint || { status=1; echo "test: LINT FAILED (see above); make test will fail"; }; \
	$(MAKE) --no-print-directory check-edge-deps || { status=1; echo "test: CHECK-EDGE-DEPS FAILED (see above); make test will fail"; }; \
	$(MAKE) --no-print-directory alloc-budgets || { status=1; echo "test: ALLOC-BUDGETS FAILED (see above); make test will fail"; }; \
	$(MAKE) --no-print-directory go-test || status=1; \
	exit $$status

# The tests alone, against the services already started (make services).
go-test:
	@gotestsum=$$(scripts/gotool.sh $(GOTESTSUM) $(GOTESTSUM_VERSION)); \
	if [ -f .cache/testenv.sh ]; then . .cache/testenv.sh; fi; \
	mkdir -p .cache; \
	"$$gotestsum" --format pkgname-and-test-fails --format-hide-empty-pkg --jsonfile .cache/test.json -- \
		$(RACE) -timeout=$(TEST_TIMEOUT) $(TEST_FLAGS) $(PKG)

# All three run even when one fails, so one run shows every problem.
lint:
	@status=0; \
	$(MAKE) --no-print-directory fmt-check || status=1; \
	$(MAKE) --no-print-directory vet || status=1; \
	$(MAKE) --no-print-directory staticcheck || status=1; \
	exit $$status

fmt-check:
	@files=$$(find . -name '*.go' -not -path './.*' -not -path '*/node_modules/*' -not -path '*/testdata/*' -print | xargs -r gofmt -l); \
	if [ -n "$$files" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$files"; exit 1; fi; \
	echo "lint: gofmt ok"

vet:
	@$(GO) vet $(PKG) && echo "lint: go vet ok"

staticcheck:
	@sc=$$(scripts/gotool.sh $(STATICCHECK) $(STATICCHECK_VERSION)); \
	"$$sc" $(PKG) && echo "lint: staticcheck ok"

check-edge-deps:
	@deps=$$($(GO) list -deps ./cmd/xet-edge); \
	bad=$$(grep -E '^($(EDGE_FORBIDDEN))(/|$$)' <<<"$$deps" || true); \
	if [ -n "$$bad" ]; then echo "check-edge-deps: cmd/xet-edge links forbidden packages:"; echo "$$bad"; exit 1; fi; \
	echo "check-edge-deps: ok ($$(wc -l <<<"$$deps") packages, none of pgx/minio-go/sqlite)"

# The allocation-budget guard (perf/README.md, "Allocation budgets"): the packages whose tests
# import perf/allocbudget, their TestAllocBudget* tests, without -race (the race detector makes
# allocation counts random; under -race those tests skip). Deterministic, so CI can fail on it.
ALLOC_BUDGET_PKGS = $$($(GO) list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | \
	grep -E ' github.com/xetcdn/xetcdn/perf/allocbudget( |$$)' | cut -d' ' -f1)

alloc-budgets:
	@pkgs=$(ALLOC_BUDGET_PKGS); \
	$(GO) test -count=1 -run '^TestAllocBudget' $$pkgs && echo "alloc-budgets: ok ($$(wc -w <<<"$$pkgs") packages)"

# Re-measure every budget into a fresh file (so budgets nobody measures any more disappear) and
# replace perf/allocbudget/budgets.txt only when every measurement ran. -p 1: one test binary at
# a time writes the file.
budgets:
	@pkgs=$(ALLOC_BUDGET_PKGS); tmp=$$(mktemp); trap 'rm -f "$$tmp" "$$tmp.tmp"' EXIT; rm -f "$$tmp"; \
	XETCDN_ALLOC_BUDGETS=$$tmp $(GO) test -count=1 -p 1 -run '^TestAllocBudget' $$pkgs -args -allocbudget.update; \
	cp "$$tmp" perf/allocbudget/budgets.txt; git --no-pager diff --stat -- perf/allocbudget/budgets.txt; \
	echo "budgets: perf/allocbudget/budgets.txt rewritten; review the diff and commit it"

# A short end-to-end performance run (about 10 minutes on 2 cores): perf/run.sh, perf/README.md.
perf:
	@SCENARIO=$(SCENARIO) SCALE=$(SCALE) EDGES=$(EDGES) CHANGE_SPAN_MB=$(CHANGE_SPAN_MB) HEAD_KB=$(HEAD_KB) perf/run.sh

# The index-at-scale measurements (issue 13): its own PostgreSQL, 10^4 and SCALE (10^7) files
# side by side; about an hour on 2 cores and ~16 GB of disk at 10^7: perf/scale.sh, perf/README.md.
perf-scale:
	@SCALE=$(filter-out 0,$(SCALE)) perf/scale.sh

# Environment knobs (SIZE_MB, SHARDS, ROUNDS, HF, RTT_INTER, LOSS_INTER, ...): perf/regions.sh.
.PHONY: regions
regions:
	@REGIONS_COMMAND="make regions" perf/regions.sh

fuzz:
	@scripts/fuzz.sh "$(FUZZTIME)" $(PKG)

bench: services
	@. .cache/testenv.sh; \
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -count $(COUNT) -benchmem $(PKG)

clean:
	rm -rf bin .cache/test.json
