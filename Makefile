# Meridian — see README.md. Every target runs from a clean clone.
GO      ?= go
BIN     := bin/meridian
# Pinned code generators for `make proto` (protoc itself: Debian's
# protobuf-compiler, installed by .ci/run).
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin
PROTOS := proto/bookiepb/bookie.proto proto/metapb/meta.proto proto/pulsarpb/pulsar.proto proto/mlpb/ml.proto proto/replpb/repl.proto

# Pure packages run with the race detector; multi-process integration tests
# without it (on 2 cores it slows processes enough to trip timeouts).
RACE_PKGS := ./rack/... ./cluster/... ./bookie/ ./proto/... ./broker/codec/ ./replicator/ ./failover/
PROC_PKGS := ./bookie/ledger/ ./bookie/autorecovery/ ./broker/ ./broker/mledger/... ./internal/up/ ./cmd/... ./internal/georep/

.PHONY: build run test test-race test-integration bench proto proto-tools lint drill fuzz clean

build:
	$(GO) build -o $(BIN) ./cmd/meridian

# Two regions (east, west) replicating, as separate processes; the summary
# it prints says how to produce in one, consume in the other, kill one.
# The single-region option: ./bin/meridian standalone --data-dir ./data
run: build
	./$(BIN) up --data-dir ./data/up

test: lint test-race test-integration fuzz

test-race:
	$(GO) test -race -count=1 -timeout 15m $(RACE_PKGS)

test-integration:
	$(GO) test -count=1 -p 1 -timeout 25m $(PROC_PKGS)

# Short fuzz runs of every fuzz target, bounded by a count of executions
# (about 15 s each here), not by time: a duration -fuzztime can fail with a
# bare "context deadline exceeded" under load in Go 1.26 (golang/go#75804,
# fixed in 1.27). Longer: FUZZN=2000000x make fuzz.
FUZZN ?= 50000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzPlace$$' -fuzztime $(FUZZN) ./rack/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZN) ./broker/codec/
	$(GO) test -run '^$$' -fuzz '^FuzzAdminJSON$$' -fuzztime $(FUZZN) ./broker/
	$(GO) test -run '^$$' -fuzz '^FuzzParseEntryMeta$$' -fuzztime $(FUZZN) ./broker/

# Storage first (disk fsync rate vs bookie adds with 1 and 64 in flight),
# then the broker beside its storage, then geo-replication (a 2-region
# `meridian up` deployment: async and sync vs a single-region namespace,
# replication lag and throughput; ~2.5 min); all go to BENCHMARKS.md.
bench: build
	./$(BIN) bench storage --out BENCHMARKS.md
	MERIDIAN_BENCH_APPEND=1 ./$(BIN) bench all --out BENCHMARKS.md

proto-tools:
	$(GO) install $(PROTOC_GEN_GO)
	$(GO) install $(PROTOC_GEN_GO_GRPC)

proto: proto-tools
	PATH="$(GOBIN_DIR):$$PATH" protoc -I proto --go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative $(PROTOS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -count=1 -run TestGeneratedCodeIsFresh ./proto/

drill:
	@echo "drills arrive with the drills issue (scenarios/)"; exit 1

clean:
	rm -rf bin
