# The two commands a newcomer needs: `make run` and `make test`.
GO ?= go
# Only `make bench` needs a server given by URL; tests find or start their own.
BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable

.PHONY: run test test-batch1 test-stack test-gameday generate check-generated vet lint bench build

## run: everything on this machine (API + PostgreSQL, demo event, tokens)
run:
	$(GO) run ./cmd/boxoffice dev

## test: all tests, with the race detector, against real PostgreSQL; then
## the Go client's own (client/ is a module of its own, which the root's
## ./... does not reach)
test:
	$(GO) test -race -count=1 -timeout 15m ./...
	cd client && $(GO) test -race -count=1 ./...

## test-batch1: every package that runs consumers, again with one message
## per consumer transaction (make test runs them at the default batch size)
test-batch1:
	BOXOFFICE_CONSUMER_BATCH_SIZE=1 $(GO) test -race -count=1 -timeout 15m $$($(GO) list -f '{{.ImportPath}} {{join .Deps " "}}' ./... | awk '$$1 == "boxoffice/consumers" || / boxoffice\/consumers( |$$)/ { print $$1 }')

## test-stack: api x2, relay x2, worker x2 as processes on a 3-node NATS
## cluster; kills a NATS node, a worker, a relay and PostgreSQL mid-run;
## then audits
STACK_RUNS ?= 1
test-stack:
	$(GO) test -tags stack -count=$(STACK_RUNS) -timeout 30m -v -run TestStackSurvivesKills ./testkit/stacktest/

## test-gameday: a short regional failover drill (lab/gameday): SIGKILL of the
## primary region mid-sale, failover by the commands, the sale sells out in
## the standby; fails on a lost event that had crossed, an oversold seat, an
## audit failure or an old epoch that still writes
test-gameday:
	$(GO) test -tags gameday -count=1 -timeout 10m -v -run TestGameDay ./lab/gameday/

## generate: sqlc code from queries/ + migrations/, openapi.yaml, the
## reference page /docs serves (.ci/build-reference), the
## Go client in client/ (oapi-codegen, from the 3.0 rendering of the same
## document: client/oapi-codegen.yaml), and README.md's configuration table
## (from the settings of cmd/boxoffice/roles/settings.go)
generate:
	$(GO) tool sqlc generate
	$(GO) run ./cmd/boxoffice openapi > openapi.yaml
	$(GO) run ./cmd/boxoffice settings -readme README.md
	.ci/build-reference
	@spec=$$(mktemp) && trap 'rm -f "$$spec"' EXIT && \
		$(GO) run ./cmd/boxoffice openapi --3.0 > "$$spec" && \
		$(GO) tool oapi-codegen -config client/oapi-codegen.yaml "$$spec"

## check-generated: fail when sqlcgen/, openapi.yaml, client/ or README.md's
## configuration table drift from their sources
GENERATED := sqlcgen openapi.yaml client handlers/reference.html README.md
check-generated: generate
	@git diff --exit-code -- $(GENERATED)
	@test -z "$$(git status --porcelain -- $(GENERATED))" || { git status --porcelain -- $(GENERATED); echo "generated files are not committed"; exit 1; }

vet:
	$(GO) vet ./...
	cd client && $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt would change these files"; exit 1; }

## lint: golangci-lint with .golangci.yml; the version is pinned in go.mod (tool)
## (in client/ too, with the root's pinned binary: the client's module has
## no tools)
lint:
	$(GO) tool golangci-lint run ./...
	lint=$$($(GO) tool -n golangci-lint) && cd client && "$$lint" run ./...

## build: bin/boxoffice (the production roles) and bin/boxoffice-lab (the
## same roles plus the benchmarks and the onsale simulator)
VERSION ?= $(shell git describe --tags --always 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X boxoffice/cmd/boxoffice/roles.Version=$(VERSION) -X boxoffice/cmd/boxoffice/roles.Commit=$(COMMIT)
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/boxoffice ./cmd/boxoffice
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/boxoffice-lab ./cmd/boxoffice-lab

## bench: HTTP holds/s against the pgbench baseline of a plain-SQL hold transaction
bench:
	DATABASE_URL="$${DATABASE_URL:-$(BENCH_DATABASE_URL)}" $(GO) run ./cmd/boxoffice-lab bench holds
	DATABASE_URL="$${DATABASE_URL:-$(BENCH_DATABASE_URL)}" $(GO) run ./cmd/boxoffice-lab bench purchases
	TEST_DATABASE_URL="$${DATABASE_URL:-$(BENCH_DATABASE_URL)}" $(GO) test -run '^$$' -bench BenchmarkHold -benchtime 5000x ./domain/purchase/
	TEST_DATABASE_URL="$${DATABASE_URL:-$(BENCH_DATABASE_URL)}" $(GO) test -run '^$$' -bench . -benchtime 1x ./relay/
