package broker

import (
	"github.com/prometheus/client_golang/prometheus"
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
	rejectedFrames prometheus.Counter
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
		rejectedFrames: c("rejected_frames_total", "Frames refused: malformed, oversize, unknown command, bad checksum."),
	}
	m.reg.MustRegister(m.connections, m.topics, m.producers, m.consumers, m.subscriptions, m.msgsIn, m.bytesIn, m.msgsOut, m.dedupDropped, m.rejectedFrames)
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
	return m
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
