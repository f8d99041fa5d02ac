package broker

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/meridian-mq/meridian/broker/replication"
)

// metrics are the broker's Prometheus metrics, in a registry of its own
// (several brokers can run in one process in tests).
type metrics struct {
	reg            *prometheus.Registry
	connections    prometheus.Gauge
	topics         prometheus.Gauge
	producers      prometheus.Gauge
	consumers      prometheus.Gauge
	subscriptions  prometheus.Gauge
	msgsIn         prometheus.Counter
	bytesIn        prometheus.Counter
	msgsOut        prometheus.Counter
	dedupDropped   prometheus.Counter
	dedupReplayed  prometheus.Counter
	dedupExpired   prometheus.Counter
	dedupSnapshots prometheus.Counter
	rejectedFrames prometheus.Counter
	limitExceeded  *prometheus.CounterVec // by limit (limits.go)
	lookups        *prometheus.CounterVec // by where the answer came from
	storageLatency prometheus.Histogram
	replSent       prometheus.Counter
	replApplied    prometheus.Counter
	replDuplicates prometheus.Counter
	replAlerts     *prometheus.CounterVec // by alert kind
	// replStages and replStoreToStore: where the replication lag goes
	// (broker/replication/stamps.go).
	replStages, replStoreToStore *prometheus.HistogramVec
	probes                       *prometheus.CounterVec // write probes by result
	probeLatency                 prometheus.Histogram
	orphans                      prometheus.Counter
	// npMsgsIn and npDropped: messages of non-persistent topics received
	// from producers, and dropped (nonpersistent.go), by where.
	npMsgsIn  prometheus.Counter
	npDropped *prometheus.CounterVec
}

// topicCollector exports per-topic and per-subscription figures of the
// loaded topics, computed at scrape time; none at namespace level
// (Config.NamespaceLevelMetrics).
type topicCollector struct {
	b        *Broker
	backlog  *prometheus.Desc
	entries  *prometheus.Desc
	bytes    *prometheus.Desc
	subCount *prometheus.Desc
	dedupN   *prometheus.Desc
	snapSize *prometheus.Desc
}

func (c *topicCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.entries
	ch <- c.bytes
	ch <- c.subCount
	ch <- c.dedupN
	ch <- c.snapSize
}

func (c *topicCollector) Collect(ch chan<- prometheus.Metric) {
	if c.b.cfg.NamespaceLevelMetrics {
		return // bounded by namespaces: meridian_broker_backlog_messages and pulsar_* per namespace stay
	}
	for _, t := range c.b.loadedTopics() {
		name := t.name.String()
		ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(t.ml.NumberOfEntries()), name)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(t.ml.TotalSizeBytes()), name)
		subs := t.subscriptions()
		ch <- prometheus.MustNewConstMetric(c.subCount, prometheus.GaugeValue, float64(len(subs)), name)
		ch <- prometheus.MustNewConstMetric(c.dedupN, prometheus.GaugeValue, float64(t.dedupProducers()), name)
		ch <- prometheus.MustNewConstMetric(c.snapSize, prometheus.GaugeValue, float64(t.snapBytes.Load()), name)
		for _, s := range subs {
			// A label must be UTF-8 or the whole scrape fails; names
			// are validated, but a cursor may predate that.
			ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(s.cursor.Backlog()), name, strings.ToValidUTF8(s.name, "\uFFFD"))
		}
	}
}

func newMetrics(cluster string, b *Broker) *metrics {
	l := prometheus.Labels{"cluster": cluster}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "meridian", Subsystem: "broker", Name: name, Help: help, ConstLabels: l})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "meridian", Subsystem: "broker", Name: name, Help: help, ConstLabels: l})
	}
	m := &metrics{
		reg:            prometheus.NewRegistry(),
		connections:    g("connections", "Open client connections."),
		topics:         g("topics", "Topics loaded on this broker."),
		producers:      g("producers", "Connected producers."),
		consumers:      g("consumers", "Connected consumers."),
		subscriptions:  g("subscriptions", "Subscriptions of loaded topics."),
		msgsIn:         c("messages_in_total", "Messages persisted from producers."),
		bytesIn:        c("bytes_in_total", "Message bytes persisted from producers."),
		msgsOut:        c("entries_out_total", "Entries dispatched to consumers."),
		dedupDropped:   c("dedup_dropped_total", "Sends dropped as duplicates (a producer resent what was already persisted or in flight)."),
		dedupReplayed:  c("dedup_replayed_entries_total", "Entries read at topic loads to rebuild deduplication state past the dedup snapshot."),
		dedupExpired:   c("dedup_producers_expired_total", "Producer names whose deduplication state expired (no producer connected for the inactivity timeout)."),
		dedupSnapshots: c("dedup_snapshots_written_total", "Dedup snapshots written."),
		rejectedFrames: c("rejected_frames_total", "Frames refused: malformed, oversize, unknown command, bad checksum."),
		limitExceeded: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "meridian", Subsystem: "broker", Name: "limit_exceeded_total",
			Help: "Requests and connections refused by a per-client limit (Config.Max*), by limit.", ConstLabels: l}, []string{"limit"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "meridian", Subsystem: "broker", Name: "lookups_total",
			Help: "Topic lookups answered, by where the answer came from: memory (the watched copies of the policies, bundles and owners) or store (etcd reads).", ConstLabels: l}, []string{"answered"}),
		storageLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "meridian", Subsystem: "broker", Name: "storage_write_latency_seconds",
			Help: "Time from a SEND's append to its persistence on the ack quorum of bookies.", ConstLabels: l,
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16)}),
	}
	m.replSent = c("replication_sent_entries_total", "Entries sent to other regions (resends included).")
	m.replApplied = c("replication_applied_entries_total", "Entries from other regions persisted here.")
	m.replDuplicates = c("replication_duplicate_entries_total", "Entries from other regions received again and dropped (already persisted).")
	m.replAlerts = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "meridian", Subsystem: "broker", Name: "replication_alerts_total",
		Help: "Replication alerts (over-quota, needs-resync, ...), by kind.", ConstLabels: l}, []string{"kind"})
	m.replStages = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "meridian", Subsystem: "replication", Name: "stage_seconds",
		Help:        "Seconds replicated entries spend in each stage of their way, by stage: east_persist (origin: handed to its managed ledger → quorum-confirmed; the same work as west_persist, before both lags), east_read (quorum-confirmed → the sender read it), east_send (read → sent), wire (sent → received by the target's transport; two brokers' clocks), west_apply (received → handed to the target's managed ledger), west_persist (handed → quorum-confirmed at the target), west_dispatch (confirmed → first sent to a consumer).",
		ConstLabels: l, Buckets: replication.LagBuckets}, []string{"stage"})
	m.replStoreToStore = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "meridian", Subsystem: "replication", Name: "store_to_store_seconds",
		Help:        "Seconds from a replicated entry's quorum-confirmed add in its origin region to its quorum-confirmed add here, by origin region (two brokers' clocks: exact on one machine).",
		ConstLabels: l, Buckets: replication.LagBuckets}, []string{"origin"})
	m.reg.MustRegister(m.replStages, m.replStoreToStore)
	m.reg.MustRegister(m.replSent, m.replApplied, m.replDuplicates, m.replAlerts, &replCollector{b: b,
		entries: prometheus.NewDesc("meridian_replication_backlog_entries", "Local entries not yet acknowledged by a remote region.", []string{"topic", "remote"}, l),
		bytes:   prometheus.NewDesc("meridian_replication_backlog_bytes", "Bytes of local entries not yet acknowledged by a remote region.", []string{"topic", "remote"}, l),
		age:     prometheus.NewDesc("meridian_replication_seconds_behind", "Age of the oldest local entry a remote region has not acknowledged.", []string{"topic", "remote"}, l),
		up:      prometheus.NewDesc("meridian_replication_connected", "1 while the replication stream to the remote region is open.", []string{"topic", "remote"}, l),
		verifyMissing: prometheus.NewDesc("meridian_replication_verify_missing_entries",
			"Entries of this region's origin the remote region lacks, as the background verifier last found (not compared: within its settle time).", []string{"topic", "remote"}, l),
		verifyMismatched: prometheus.NewDesc("meridian_replication_verify_mismatched_entries",
			"Entries of this region's origin the remote region holds with different contents, as the background verifier last found.", []string{"topic", "remote"}, l),
		rpoSeconds: prometheus.NewDesc("meridian_replication_rpo_at_risk_seconds",
			"RPO at risk now: the age of the oldest local entry the remote region has not acknowledged (what losing this region now would lose, in time of produce).", []string{"namespace", "topic", "remote"}, l),
		rpoEntries: prometheus.NewDesc("meridian_replication_rpo_at_risk_messages",
			"RPO at risk now, in entries: local entries the remote region has not acknowledged (a batch counts once).", []string{"namespace", "topic", "remote"}, l),
		rpoBytes: prometheus.NewDesc("meridian_replication_rpo_at_risk_bytes",
			"RPO at risk now, in bytes of local entries the remote region has not acknowledged.", []string{"namespace", "topic", "remote"}, l),
		rpoExceeded: prometheus.NewDesc("meridian_replication_rpo_budget_exceeded",
			"1 while the remote region's lag passes the namespace's RPO budget (maxReplicationLagMs/Bytes) and the topic's producers are held or refused; exported for topics with a budget.", []string{"namespace", "topic", "remote"}, l),
		rpoSuspended: prometheus.NewDesc("meridian_replication_rpo_budget_suspended",
			"1 while the namespace's RPO budget does not count the remote region: the failover core declares it failed (or it has not caught up since); exported for topics with a budget.", []string{"namespace", "topic", "remote"}, l),
		rpoGate: prometheus.NewDesc("meridian_replication_rpo_gate_closed",
			"1 while the RPO budget holds (hold) or refuses (refuse) the topic's producers, by action; exported for topics with a budget.", []string{"namespace", "topic", "action"}, l),
	})
	m.reg.MustRegister(m.connections, m.topics, m.producers, m.consumers, m.subscriptions, m.msgsIn, m.bytesIn, m.msgsOut, m.dedupDropped, m.dedupReplayed, m.dedupExpired, m.dedupSnapshots, m.rejectedFrames, m.limitExceeded, m.lookups, m.storageLatency)
	for _, name := range limitLabels {
		m.limitExceeded.WithLabelValues(name)
	}
	m.lookups.WithLabelValues("memory")
	m.lookups.WithLabelValues("store")
	m.reg.MustRegister(&topicCollector{b: b,
		backlog:  prometheus.NewDesc("meridian_broker_subscription_backlog_messages", "Unacknowledged entries of a subscription.", []string{"topic", "subscription"}, l),
		entries:  prometheus.NewDesc("meridian_broker_topic_entries", "Entries stored for a topic.", []string{"topic"}, l),
		bytes:    prometheus.NewDesc("meridian_broker_topic_storage_bytes", "Bytes stored for a topic.", []string{"topic"}, l),
		subCount: prometheus.NewDesc("meridian_broker_topic_subscriptions", "Subscriptions of a topic.", []string{"topic"}, l),
		dedupN:   prometheus.NewDesc("meridian_broker_topic_dedup_producers", "Producer names a topic keeps deduplication state for.", []string{"topic"}, l),
		snapSize: prometheus.NewDesc("meridian_broker_topic_dedup_snapshot_bytes", "Size of a topic's last dedup snapshot read or written.", []string{"topic"}, l),
	})
	backlog := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "meridian", Subsystem: "broker", Name: "backlog_messages",
		Help: "Unacknowledged entries summed over the subscriptions of loaded topics.", ConstLabels: l}, func() float64 {
		var n int64
		for _, t := range b.loadedTopics() {
			for _, s := range t.subscriptions() {
				n += s.cursor.Backlog()
			}
		}
		return float64(n)
	})
	m.reg.MustRegister(backlog)
	m.probes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "meridian", Subsystem: "broker", Name: "write_probes_total",
		Help: "Write probes (region store write, append on the ack quorum, read back), by result ok|fail.", ConstLabels: l}, []string{"result"})
	m.probeLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "meridian", Subsystem: "broker", Name: "write_probe_seconds",
		Help: "Time a write probe took (a failed one included).", ConstLabels: l, Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})
	m.orphans = c("failover_orphans_total", "Messages the previous active region acknowledged and had not replicated at the failover, applied here late (the async tail).")
	m.reg.MustRegister(m.probes, m.probeLatency, m.orphans)
	m.npMsgsIn = c("nonpersistent_messages_in_total", "Messages received from producers of non-persistent topics (never stored).")
	m.npDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "meridian", Subsystem: "broker", Name: "nonpersistent_dropped_messages_total",
		Help: "Messages of non-persistent topics dropped, by where: subscription (a subscription without a consumer, or whose chosen consumer had no permits or a full connection; counted once per subscription), replication (never sent to a remote region: its sender's queue full, the stream down, a send failed; counted once per region).", ConstLabels: l}, []string{"where"})
	m.npDropped.WithLabelValues("subscription")
	m.reg.MustRegister(m.npMsgsIn, m.npDropped)
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "meridian", Subsystem: "broker", Name: "ensemble_replacements_breaking_placement_total",
		Help: "Ensemble members of this broker's ledgers replaced, under an enforced placement policy, by a bookie that breaks its rack rule because no bookie kept it (each logged as a warning; the auto-recovery scrub re-places such fragments once completed).", ConstLabels: l},
		func() float64 {
			// The broker's ledger clients': the region's and, while a
			// stretched namespace is served, the stretched one's.
			var n uint64
			if b.cfg.Ledgers != nil {
				n = b.cfg.Ledgers.Stats().ReplacementsBreakingPlacement
			}
			if p := b.stretchedLive.Load(); p != nil {
				n += p.LedgerStats().ReplacementsBreakingPlacement
			}
			return float64(n)
		}))
	m.reg.MustRegister(newPulsarCollector(b, cluster, b.cfg.NamespaceLevelMetrics), newFailoverCollector(b, cluster))
	// The process's own (Go runtime, process): one broker per process
	// outside tests; the recovery in its process adds none.
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) probe(ok bool, took time.Duration) {
	r := "fail"
	if ok {
		r = "ok"
	}
	m.probes.WithLabelValues(r).Inc()
	m.probeLatency.Observe(took.Seconds())
}

// Gatherer returns the broker's metrics registry.
func (b *Broker) Gatherer() prometheus.Gatherer { return b.metrics.reg }

func (t *Topic) subscriptions() []*Subscription {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*Subscription, 0, len(t.subs))
	for _, s := range t.subs {
		out = append(out, s)
	}
	return out
}

// replCollector exports each replicator's backlog at scrape time.
type replCollector struct {
	b                               *Broker
	entries, bytes, age, up         *prometheus.Desc
	verifyMissing, verifyMismatched *prometheus.Desc // exported once a topic was verified
	// The RPO budget (broker/replication/rpo.go).
	rpoSeconds, rpoEntries, rpoBytes, rpoExceeded, rpoSuspended, rpoGate *prometheus.Desc
}

func (c *replCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.entries
	ch <- c.bytes
	ch <- c.age
	ch <- c.up
	ch <- c.verifyMissing
	ch <- c.verifyMismatched
	ch <- c.rpoSeconds
	ch <- c.rpoEntries
	ch <- c.rpoBytes
	ch <- c.rpoExceeded
	ch <- c.rpoSuspended
	ch <- c.rpoGate
}

func (c *replCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.b.repl.Status("") {
		ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(st.BacklogEntries), st.Topic, st.Remote)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.BacklogBytes), st.Topic, st.Remote)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, st.SecondsBehind, st.Topic, st.Remote)
		up := 0.0
		if st.Connected {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, st.Topic, st.Remote)
		if st.VerifiedAt != nil {
			ch <- prometheus.MustNewConstMetric(c.verifyMissing, prometheus.GaugeValue, float64(st.VerifyMissing), st.Topic, st.Remote)
			ch <- prometheus.MustNewConstMetric(c.verifyMismatched, prometheus.GaugeValue, float64(st.VerifyMismatched), st.Topic, st.Remote)
		}
	}
	bit := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, rt := range c.b.repl.RPO("") {
		ns := rt.Namespace
		budget := false
		for _, r := range rt.Remotes {
			ch <- prometheus.MustNewConstMetric(c.rpoSeconds, prometheus.GaugeValue, r.AtRiskSeconds, ns, rt.Topic, r.Remote)
			ch <- prometheus.MustNewConstMetric(c.rpoEntries, prometheus.GaugeValue, float64(r.AtRiskEntries), ns, rt.Topic, r.Remote)
			ch <- prometheus.MustNewConstMetric(c.rpoBytes, prometheus.GaugeValue, float64(r.AtRiskBytes), ns, rt.Topic, r.Remote)
			if r.State == "" {
				continue
			}
			budget = true
			ch <- prometheus.MustNewConstMetric(c.rpoExceeded, prometheus.GaugeValue, bit(r.State == replication.RPOExceeded), ns, rt.Topic, r.Remote)
			ch <- prometheus.MustNewConstMetric(c.rpoSuspended, prometheus.GaugeValue, bit(r.State == replication.RPOSuspended), ns, rt.Topic, r.Remote)
		}
		if budget || rt.Gate != replication.RPOOpen.String() {
			for _, action := range []string{replication.RPOHold.String(), replication.RPORefuse.String()} {
				ch <- prometheus.MustNewConstMetric(c.rpoGate, prometheus.GaugeValue, bit(rt.Gate == action), ns, rt.Topic, action)
			}
		}
	}
}
