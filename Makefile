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
# One package a line, so that branches adding packages merge cleanly.
RACE_PKGS :=
RACE_PKGS += ./rack/...
RACE_PKGS += ./cluster/...
RACE_PKGS += ./bookie/
RACE_PKGS += ./bookie/digest/
RACE_PKGS += ./proto/...
RACE_PKGS += ./broker/codec/
RACE_PKGS += ./broker/meta/
RACE_PKGS += ./broker/entry/
RACE_PKGS += ./broker/security/
RACE_PKGS += ./broker/admin/
RACE_PKGS += ./broker/failoverctl/
RACE_PKGS += ./broker/replication/
RACE_PKGS += ./broker/stretched/
RACE_PKGS += ./broker/dispatch/
RACE_PKGS += ./broker/access/
RACE_PKGS += ./replicator/...
RACE_PKGS += ./failover/
RACE_PKGS += ./drill/...
RACE_PKGS += ./tools/wanproxy/
RACE_PKGS += ./internal/ports/
RACE_PKGS += ./internal/procstop/
RACE_PKGS += ./internal/grpcpool/
RACE_PKGS += ./tools/bench/
RACE_PKGS += ./internal/authtoken/
RACE_PKGS += ./internal/tlsutil/
RACE_PKGS += ./internal/ratelog/
RACE_PKGS += ./internal/httpserve/
RACE_PKGS += ./internal/clientopts/
RACE_PKGS += ./internal/ratemeter/
RACE_PKGS += ./internal/clock/...
RACE_PKGS += ./internal/healthz/
RACE_PKGS += ./internal/config/
RACE_PKGS += ./internal/netaddr/
RACE_PKGS += ./deploy/monitoring/
PROC_PKGS := ./bookie/ledger/ ./bookie/autorecovery/ ./broker/ ./broker/mledger/... ./tools/netfault/ ./tools/testutil/ ./tools/up/ ./cmd/... ./tools/georep/ ./deploy/monitoring/livetest/

.PHONY: docs bench-delayed image test-image test-hosts test-helm build run test test-race test-integration bench bench-scale bench-failover bench-client-rto proto proto-tools lint drill drill-all fuzz soak print-test-pkgs clean

build:
	$(GO) build -o $(BIN) ./cmd/meridian

# The container image meridian:VERSION, from scratch (needs dockerd).
image:
	scripts/image.sh

# Not in CI: builds the image, runs a standalone in it until its
# HEALTHCHECK says healthy, produces and consumes from the host, restarts
# it on the same volume (starts and stops dockerd if none runs).
test-image:
	scripts/test-image.sh

# Not in CI: two regions and the witness as 17 containers
# (deploy/compose/: a network per region and an inter-region one), TLS and
# tokens on; from the host, with pulsar-client-go through the external
# listener: east -> west replication, docker kill of east, a partition of
# east from west and the witness then the heal and failback, docker pause
# of east, a rolling restart of west (RTO, lost, duplicates printed).
# HOSTS_RUN='TestHosts/3-' runs one step. Starts and stops dockerd if none
# runs. Duration: docs/deploy.md, "Compose".
test-hosts:
	scripts/test-hosts.sh

# The Helm chart (deploy/helm/meridian), not in CI: no cluster runs here.
# Builds helm $(HELM_VERSION) from the Go module proxy into bin/, lints the
# chart with each value set, then deploy/helm's own module (the Kubernetes
# types stay out of go.mod): every rendered object decoded strictly, every
# flag, variable, listener and probe checked against
# `meridian <role> --print-config`, the default values' etcd, bookie and
# broker started on loopback and probed. Cold (helm, k8s.io and etcd
# built): ~11 minutes on this 2-core machine; warm: 13-25 s.
HELM_VERSION := v4.3.2
HELM := bin/helm-$(HELM_VERSION)/helm
HELM_VALUES := "" deploy/helm/examples/east.yaml deploy/helm/examples/west.yaml deploy/helm/testdata/quorum.yaml
test-helm: build
	@test -x $(HELM) || GOBIN=$(CURDIR)/bin/helm-$(HELM_VERSION) $(GO) install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)
	@for v in $(HELM_VALUES); do echo "helm lint --strict $${v:-(default values)}"; \
	  $(HELM) lint --strict deploy/helm/meridian $${v:+-f $$v} >/dev/null || { $(HELM) lint --strict deploy/helm/meridian $${v:+-f $$v}; exit 1; }; done
	cd deploy/helm && HELMTEST_HELM=$(CURDIR)/$(HELM) HELMTEST_MERIDIAN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m ./...

# Two regions (east, west) replicating, as separate processes; the summary
# it prints says how to produce in one, consume in the other, kill one.
# The single-region option: ./bin/meridian standalone --data-dir ./data
run: build
	./$(BIN) up --data-dir ./data/up

test: lint test-race test-integration fuzz drill

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
	$(GO) test -run '^$$' -fuzz '^FuzzAdminJSON$$' -fuzztime $(FUZZN) ./broker/admin/
	$(GO) test -run '^$$' -fuzz '^FuzzNamespacePolicyBodies$$' -fuzztime $(FUZZN) ./broker/admin/
	$(GO) test -run '^$$' -fuzz '^FuzzReplicateRequest$$' -fuzztime $(FUZZN) ./replicator/transport/
	$(GO) test -run '^$$' -fuzz '^FuzzParseEntryMeta$$' -fuzztime $(FUZZN) ./broker/entry/
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZN) ./internal/authtoken/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeMetadata$$' -fuzztime $(FUZZN) ./bookie/ledger/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRecords$$' -fuzztime $(FUZZN) ./broker/mledger/
	$(GO) test -run '^$$' -fuzz '^FuzzRecvAddDecode$$' -fuzztime $(FUZZN) ./bookie/

# One command, one run, one report (BENCHMARKS.md, ~15 min): installs the
# peers with go install at pinned versions (nats-server, natscli,
# pulsar-client-go's perf; into bin/peers), then storage (disk fsync and
# sequential rates vs bookie adds), the broker beside its storage with NATS
# JetStream R1/R3 (default fsync and sync_interval: always) alternating
# round by round, geo-replication (a 2-region `meridian up` deployment)
# beside a JetStream mirror, CPU and allocation profiles of the broker and
# a bookie under load (bin/bench-profiles); the report leads with the
# ratios Meridian/peer and Meridian/limit.
bench: build
	./$(BIN) bench all --out BENCHMARKS.md

# Scale (long, heavy, not in CI): one broker made to hold TOPICS topics
# (default 100,000), each with a ledger and a subscription with a connected
# consumer, created over raw Pulsar-protocol connections within TIME_BOX
# (default 25m); broker memory per idle topic, topic-creation rate, lookup
# latency while it creates, etcd's database size -> BENCHMARKS-scale.md.
bench-scale: build
	./$(BIN) bench scale --out BENCHMARKS-scale.md --topics $${TOPICS:-100000} --time-box $${TIME_BOX:-25m}

# Delayed delivery (issue 35; not in CI): a standalone's heap and RSS with
# MESSAGES (default 1,000,000) messages delayed by up to an hour, held by a
# Shared subscription, with the bucketed index and, side by side, with all
# in memory (--delayed-bucket-entries -1). About 5-15 minutes. The bucketed
# run takes BUCKET_ENTRIES (--delayed-bucket-entries, default the broker's
# 50,000) and MAX_BUCKETS (--delayed-max-buckets, default 50): a bound below
# MESSAGES/BUCKET_ENTRIES makes it merge buckets, e.g.
# `make bench-delayed MESSAGES=300000 MAX_BUCKETS=2`; it prints the buckets
# held and the merges done.
bench-delayed:
	MERIDIAN_BENCH_DELAYED=$${MESSAGES:-1000000} MERIDIAN_BENCH_DELAYED_BUCKET_ENTRIES=$${BUCKET_ENTRIES:-} \
	  MERIDIAN_BENCH_DELAYED_MAX_BUCKETS=$${MAX_BUCKETS:-} $(GO) test ./broker/ -run '^TestDelayedIndexMemoryBench$$' -count=1 -v -timeout 90m

# Failover RTO, median and max over RUNS runs of the kill -9 and SIGSTOP
# region-loss tests (about 1 minute per run): with the default settings
# (gossip profile meridian, 5 s lease, the client's backoff), then tuned
# (gossip fast, 2 s lease, failover delay 500 ms, client backoff capped at
# 500 ms); 1,000 msgs/s. Then the split-view test with the tuned settings
# (SPLIT_RUNS times): they must not flap.
bench-failover:
	MERIDIAN_TEST_SEND_INTERVAL=1ms MERIDIAN_TEST_GOSSIP_PROFILE=meridian RUNS=$${RUNS:-5} scripts/failover-rto.sh
	MERIDIAN_TEST_SEND_INTERVAL=1ms MERIDIAN_TEST_GOSSIP_PROFILE=fast MERIDIAN_TEST_FAILOVER_LEASE_TTL=2s \
	  MERIDIAN_TEST_FAILOVER_DELAY=500ms MERIDIAN_TEST_CLIENT_MAX_BACKOFF=500ms RUNS=$${RUNS:-5} scripts/failover-rto.sh
	# The tuned settings must not flap: the split-view test with them.
	MERIDIAN_TEST_GOSSIP_PROFILE=fast MERIDIAN_TEST_FAILOVER_LEASE_TTL=2s MERIDIAN_TEST_FAILOVER_DELAY=500ms \
	  $(GO) test -count=$${SPLIT_RUNS:-3} -p 1 -v -run 'TestSplitViewsNeverOverlap$$' ./tools/georep/

# What each client setting buys when a region dies silently (~45 min):
# the drill region-blackhole-default-client once per pulsar-client-go
# setting (the client's defaults, each setting alone, the recommended
# set), a table of produce/consume RTO, failed sends, lost, duplicates.
bench-client-rto:
	scripts/client-rto.sh

# docs/configuration.md: every key of every role (flag, environment name,
# default, meaning), generated from the roles' flags; TestConfigDocIsFresh
# (cmd/meridian) fails when it and the code disagree.
docs:
	$(GO) generate ./cmd/meridian

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

# Disaster drills (scenarios/, `meridian drill`): the quick ones run in CI
# (make test), the whole set with drill-all. Reports in drill-out/NAME/.
DRILLS_CI  := region-outage-async region-outage-sync rack-loss
DRILLS_ALL := $(DRILLS_CI) region-blackhole region-blackhole-default-client failback bookie-crash-under-load bookie-power-loss owner-broker-crash disk-full region-partition slow-wan stretched-region-outage rpo-budget planned-switchover region-outage-100-topics region-switchover switchover-abort
drill: build
	@failed=; for d in $(DRILLS_CI); do ./$(BIN) drill $$d --out drill-out/$$d || failed="$$failed $$d"; done; \
	  if [ -n "$$failed" ]; then echo "drills failed:$$failed"; exit 1; fi

drill-all: build
	@failed=; for d in $(DRILLS_ALL); do ./$(BIN) drill $$d --out drill-out/$$d || failed="$$failed $$d"; done; \
	  if [ -n "$$failed" ]; then echo "drills failed:$$failed"; exit 1; fi

# The disaster paths in a loop (not CI): the owner-broker loss, failback,
# stretched, rack-loss and gossip-key tests and the region-outage,
# failback, owner-broker-crash and region-partition drills, each with a
# fresh deployment, within SOAK_TIME (default 2h); every run is appended
# to docs/soak.md (commit it: the count grows across sessions) and a
# failed run's logs are kept under soak-out/.
soak:
	$(GO) run ./tools/soak -time $${SOAK_TIME:-2h}

# The packages the CI targets test (tools/testutil's
# TestEveryTestedPackageRunsInCI holds that no package's tests are left out).
print-test-pkgs:
	@echo $(RACE_PKGS) $(PROC_PKGS)

clean:
	rm -rf bin
