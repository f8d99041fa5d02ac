package bookie

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/meridian-mq/meridian/proto/bookiepb"
)

// metrics are one Server's Prometheus metrics, in a registry of its own so
// several bookies can run in one process. Every metric carries the constant
// labels region, rack and bookie.
type metrics struct {
	reg *prometheus.Registry

	adds           *prometheus.CounterVec // by status
	addLatency     prometheus.Histogram
	groupCommits   prometheus.Counter
	commitFailures prometheus.Counter
	commitEntries  prometheus.Histogram
	commitLatency  prometheus.Histogram
	bytesWritten   prometheus.Counter
	reads          *prometheus.CounterVec // by status
	fences         *prometheus.CounterVec // by status
	readOnly       prometheus.Gauge
	diskUsage      prometheus.Gauge
	clientAuth     prometheus.Gauge

	gcPasses        *prometheus.CounterVec // by result
	gcLedgers       prometheus.Counter
	gcFiles         prometheus.Counter
	gcBytes         prometheus.Counter
	gcCompacted     prometheus.Counter
	gcRewritten     prometheus.Counter
	gcLastPass      prometheus.Gauge
	gcLastPassStamp prometheus.Gauge
}

func newMetrics(region, rack, bookieID string) *metrics {
	labels := prometheus.Labels{"region": region, "rack": rack, "bookie": bookieID}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_bookie_adds_total", Help: "Adds answered, by status.", ConstLabels: labels,
		}, []string{"status"}),
		addLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_bookie_add_latency_seconds", Help: "Time from receiving an add to answering it.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16), // 100µs .. 3.3s
		}),
		groupCommits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_group_commits_total", Help: "Synced (fdatasync) entry log frames committed.", ConstLabels: labels,
		}),
		commitFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_group_commit_failures_total", Help: "Group commits that failed (the bookie turned read-only).", ConstLabels: labels,
		}),
		commitEntries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_bookie_group_commit_entries", Help: "Entries per group commit (per fsync).", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(1, 2, 14), // 1 .. 8192
		}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_bookie_group_commit_seconds", Help: "Duration of a group commit (write + fsync).", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}),
		bytesWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_written_bytes_total", Help: "Bytes of committed entry log frames (records and headers).", ConstLabels: labels,
		}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_bookie_reads_total", Help: "ReadEntry and ReadLac answers, by status.", ConstLabels: labels,
		}, []string{"status"}),
		fences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_bookie_fences_total", Help: "Fence requests, by status.", ConstLabels: labels,
		}, []string{"status"}),
		readOnly: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_read_only", Help: "1 while the bookie refuses adds.", ConstLabels: labels,
		}),
		diskUsage: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_disk_usage_ratio", Help: "Used fraction of the data directory's filesystem.", ConstLabels: labels,
		}),
		clientAuth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_client_auth_required", ConstLabels: labels,
			Help: "1 when the gRPC port authenticates its callers (mutual TLS; adds, reads and fencing only for a certificate of the CA naming role broker or autorecovery), 0 when it serves any caller (plaintext).",
		}),
		gcPasses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_bookie_gc_passes_total", Help: "Garbage collection passes, by result (ok; failed: a metadata listing or the identity check failed, nothing was deleted).", ConstLabels: labels,
		}, []string{"result"}),
		gcLedgers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_gc_deleted_ledgers_total", Help: "Ledgers deleted from the index by garbage collection (absent from cluster metadata).", ConstLabels: labels,
		}),
		gcFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_gc_removed_files_total", Help: "Entry log files removed by garbage collection (no live entry left in them).", ConstLabels: labels,
		}),
		gcBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_gc_reclaimed_bytes_total", Help: "Bytes of the entry log files removed by garbage collection.", ConstLabels: labels,
		}),
		gcCompacted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_gc_compacted_files_total", Help: "Entry log files below the compaction threshold whose live entries were written again (the files are then removed).", ConstLabels: labels,
		}),
		gcRewritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_gc_rewritten_bytes_total", Help: "Bytes of live entries compaction wrote again.", ConstLabels: labels,
		}),
		gcLastPass: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_gc_last_pass_seconds", Help: "Duration of the last garbage collection pass that completed.", ConstLabels: labels,
		}),
		gcLastPassStamp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_gc_last_success_timestamp_seconds", Help: "Unix time of the last garbage collection pass that completed (0: none yet).", ConstLabels: labels,
		}),
	}
	m.reg.MustRegister(m.gcPasses, m.gcLedgers, m.gcFiles, m.gcBytes, m.gcCompacted, m.gcRewritten, m.gcLastPass, m.gcLastPassStamp)
	m.gcPasses.WithLabelValues("ok")
	m.gcPasses.WithLabelValues("failed")
	m.reg.MustRegister(m.adds, m.addLatency, m.groupCommits, m.commitFailures, m.commitEntries,
		m.commitLatency, m.bytesWritten, m.reads, m.fences, m.readOnly, m.diskUsage, m.clientAuth)
	// Every status series exists from the start, at 0, so alerts and
	// dashboards see a 0 before the first event of a status (a fence,
	// a corrupt read), not an absent series that rate() and
	// comparisons silently skip. 3 × 9 series a bookie.
	for _, st := range allStatuses() {
		m.adds.WithLabelValues(st.String())
		m.reads.WithLabelValues(st.String())
		m.fences.WithLabelValues(st.String())
	}
	// The process's own (Go runtime, process): a bookie process serves
	// one bookie; several in one process (the standalone) each serve the
	// same process's figures.
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) onCommit(ci CommitInfo) {
	if ci.Err != nil {
		m.commitFailures.Inc()
		return
	}
	m.groupCommits.Inc()
	m.commitEntries.Observe(float64(ci.Entries))
	m.commitLatency.Observe(ci.Duration.Seconds())
	m.bytesWritten.Add(float64(ci.Bytes))
}

func (m *metrics) onGC(r GCResult, err error) {
	m.gcLedgers.Add(float64(r.LedgersDeleted))
	m.gcFiles.Add(float64(r.FilesRemoved))
	m.gcBytes.Add(float64(r.BytesReclaimed))
	m.gcCompacted.Add(float64(r.FilesCompacted))
	m.gcRewritten.Add(float64(r.BytesRewritten))
	if err != nil {
		m.gcPasses.WithLabelValues("failed").Inc()
		return
	}
	m.gcPasses.WithLabelValues("ok").Inc()
	m.gcLastPass.Set(r.Duration.Seconds())
	m.gcLastPassStamp.Set(float64(time.Now().UnixNano()) / 1e9)
}

// allStatuses are the statuses a bookie answers with (bookiepb.Status),
// in number order.
func allStatuses() []bookiepb.Status {
	out := make([]bookiepb.Status, 0, len(bookiepb.Status_name))
	for n := range bookiepb.Status_name {
		out = append(out, bookiepb.Status(n))
	}
	slices.Sort(out)
	return out
}
