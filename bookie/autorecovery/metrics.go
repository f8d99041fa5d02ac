package autorecovery

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are auto-recovery's Prometheus metrics, in a registry of their
// own (an auditor and its workers share one; several can run in one process
// in tests). The under-replication gauges are set by the elected auditor:
// read them where meridian_autorecovery_auditor_leader is 1. Safe for
// concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	leader          prometheus.Gauge
	lost            prometheus.Gauge
	draining        prometheus.Gauge
	urLedgers       prometheus.Gauge
	urFragments     prometheus.Gauge
	urEntries       prometheus.Gauge
	misplaced       prometheus.Gauge
	timeToFull      prometheus.Gauge
	episodeSeconds  prometheus.Gauge
	scans           prometheus.Counter
	copiedEntries   prometheus.Counter
	copiedBytes     prometheus.Counter
	fragmentsFixed  prometheus.Counter
	ledgersDone     prometheus.Counter
	ledgersRecoverd prometheus.Counter
	failures        prometheus.Counter
}

// NewMetrics returns the metrics of one region's auto-recovery.
func NewMetrics(region string) *Metrics {
	reg := prometheus.NewRegistry()
	l := prometheus.Labels{"region": region}
	g := func(name, help string) prometheus.Gauge {
		x := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "meridian", Subsystem: "autorecovery", Name: name, Help: help, ConstLabels: l})
		reg.MustRegister(x)
		return x
	}
	c := func(name, help string) prometheus.Counter {
		x := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "meridian", Subsystem: "autorecovery", Name: name, Help: help, ConstLabels: l})
		reg.MustRegister(x)
		return x
	}
	return &Metrics{
		reg:             reg,
		leader:          g("auditor_leader", "1 while this process is the region's elected auditor"),
		lost:            g("lost_bookies", "bookies declared lost (their fragments are re-replicated)"),
		draining:        g("draining_bookies", "bookies being decommissioned"),
		urLedgers:       g("underreplicated_ledgers", "ledgers with an under-replication marker"),
		urFragments:     g("underreplicated_fragments", "fragments still naming a lost or draining bookie, or breaking their placement rule"),
		urEntries:       g("underreplicated_entries", "entries with a replica on a lost or draining bookie (completed fragments)"),
		misplaced:       g("misplaced_fragments", "fragments breaking their placement rule under the current rack labels, at the last scan"),
		timeToFull:      g("time_to_full_replication_seconds", "the last episode's time from a bookie declared lost (or draining) to no marker left"),
		episodeSeconds:  g("underreplicated_for_seconds", "how long the current episode has lasted (0: fully replicated)"),
		scans:           c("scans_total", "full ledger-metadata scans by the auditor"),
		copiedEntries:   c("copied_entries_total", "entry copies acknowledged by a replacement bookie"),
		copiedBytes:     c("copied_bytes_total", "payload bytes of those copies (rate() of it is the copy rate)"),
		fragmentsFixed:  c("fragments_replicated_total", "fragment positions swapped to a replacement in metadata"),
		ledgersDone:     c("ledgers_replicated_total", "under-replication markers completed"),
		ledgersRecoverd: c("ledgers_recovered_total", "open ledgers whose writer was gone, fenced and closed before re-replication"),
		failures:        c("failures_total", "ledger repair attempts that failed (retried)"),
	}
}

// Gatherer returns the registry, to serve on /metrics.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }
