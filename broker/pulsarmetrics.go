package broker

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-mq/meridian/broker/admin"
	"github.com/meridian-mq/meridian/internal/ratemeter"
)

// Pulsar's topic, subscription and replication metrics, under Pulsar's
// names and labels (cluster, namespace, topic, subscription,
// remote_cluster), so that dashboards and alerts written for Pulsar read
// them unchanged. They are computed at scrape time from the admin API's
// stats of each loaded topic (adminstats.go: Topic.stats), so a scrape and
// GetStats agree; nothing is counted per message beyond what the stats
// already count — but for the storage write latency buckets, which come
// from the topic's managed ledger (mledger.AddLatency).
//
// Topic level (the default, Pulsar's exposeTopicLevelMetricsInPrometheus
// true): one series per topic, per subscription and per (topic, remote
// region). Namespace level (Config.NamespaceLevelMetrics): the topic
// figures summed per namespace, the replication figures per (namespace,
// remote region), no subscription series — the bound for many topics.

// pulsarMetric is one of Pulsar's metrics and its type.
type pulsarMetric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
}

// pulsarCollector exports a broker's loaded topics as Pulsar does.
type pulsarCollector struct {
	b *Broker
	// namespaceLevel: aggregate per namespace (no topic or subscription
	// label); otherwise one series per topic.
	namespaceLevel bool

	topicsCount *prometheus.Desc
	// quotaLimit: the backlog quota's size limit (exported when set);
	// labels as topic's.
	quotaLimit *prometheus.Desc
	// topic: labels namespace[, topic]; values from topicValues, then
	// latencyValues.
	topic []pulsarMetric
	// sub: labels namespace, topic, subscription; topic level only.
	sub []pulsarMetric
	// repl: labels namespace[, topic], remote_cluster.
	repl []pulsarMetric
	// nsDelayed: pulsar_subscription_delayed summed per namespace
	// (namespace level only, as Pulsar's; at topic level it is a
	// subscription series).
	nsDelayed *prometheus.Desc
}

// Pulsar's names, in the order topicValues, subValues and replValues
// return their values.
var (
	pulsarTopicNames = []struct {
		name, help string
		typ        prometheus.ValueType
		// labels: constant labels of the series besides cluster.
		labels prometheus.Labels
	}{
		{"pulsar_subscriptions_count", "Subscriptions of the topic.", prometheus.GaugeValue, nil},
		{"pulsar_producers_count", "Connected producers of the topic.", prometheus.GaugeValue, nil},
		{"pulsar_consumers_count", "Connected consumers of the topic's subscriptions.", prometheus.GaugeValue, nil},
		{"pulsar_rate_in", "Messages a second persisted from producers and, replicated, from the remote regions' origins (the stats' msgRateIn, over the last 10 s interval).", prometheus.GaugeValue, nil},
		{"pulsar_rate_out", "Messages a second dispatched to consumers (msgRateOut).", prometheus.GaugeValue, nil},
		{"pulsar_throughput_in", "Bytes a second persisted from producers and replicated from the remote regions (msgThroughputIn).", prometheus.GaugeValue, nil},
		{"pulsar_throughput_out", "Bytes a second dispatched to consumers (msgThroughputOut).", prometheus.GaugeValue, nil},
		{"pulsar_in_messages_total", "Messages persisted, from producers and replicated from the remote regions, since the topic was loaded on this broker (msgInCounter).", prometheus.CounterValue, nil},
		{"pulsar_in_bytes_total", "Bytes persisted, from producers and replicated from the remote regions, since the topic was loaded on this broker (bytesInCounter).", prometheus.CounterValue, nil},
		{"pulsar_out_messages_total", "Messages dispatched since the topic was loaded on this broker (msgOutCounter).", prometheus.CounterValue, nil},
		{"pulsar_out_bytes_total", "Bytes dispatched since the topic was loaded on this broker (bytesOutCounter).", prometheus.CounterValue, nil},
		{"pulsar_storage_size", "Bytes stored for the topic (storageSize).", prometheus.GaugeValue, nil},
		{"pulsar_storage_backlog_size", "Estimated bytes of the topic's largest subscription backlog (backlogSize).", prometheus.GaugeValue, nil},
		{"pulsar_msg_backlog", "Unacknowledged entries summed over the topic's subscriptions (a batch is one entry).", prometheus.GaugeValue, nil},
		// The delayed-delivery indexes of the topic's Shared and
		// Key_Shared subscriptions (broker/delayed.go), summed.
		{"pulsar_delayed_message_index_size_bytes", "Bytes (an estimate) the topic's delayed-delivery indexes hold in memory, summed over its subscriptions (delayedMessageIndexSizeInBytes).", prometheus.GaugeValue, nil},
		{"pulsar_delayed_message_index_bucket_total", "Sealed buckets of the topic's delayed-delivery indexes (each persisted as a ledger snapshot), summed over its subscriptions (delayedIndexBuckets).", prometheus.GaugeValue, nil},
		{"pulsar_delayed_message_index_bucket_op_count", "Merges of delayed-delivery index buckets (type merge, state succeed) done by the topic's subscriptions since each was loaded on this broker (delayedIndexBucketMerges; Pulsar's resets at each scrape, this one counts on).", prometheus.CounterValue, prometheus.Labels{"type": "merge", "state": "succeed"}},
	}
	// pulsarLatencyNames are Pulsar's storage write latency buckets (its
	// TopicStats, names as its code writes them: the last bucket is
	// _overflow, not _le_overflow as its docs say), their count and sum
	// (microseconds): gauges of the last stats interval, not cumulative,
	// from the managed ledger's add latency (mledger.AddLatency).
	pulsarLatencyNames = []string{
		"pulsar_storage_write_latency_le_0_5", "pulsar_storage_write_latency_le_1", "pulsar_storage_write_latency_le_5",
		"pulsar_storage_write_latency_le_10", "pulsar_storage_write_latency_le_20", "pulsar_storage_write_latency_le_50",
		"pulsar_storage_write_latency_le_100", "pulsar_storage_write_latency_le_200", "pulsar_storage_write_latency_le_1000",
		"pulsar_storage_write_latency_overflow", "pulsar_storage_write_latency_count", "pulsar_storage_write_latency_sum",
	}
	pulsarSubNames = []struct {
		name, help string
		typ        prometheus.ValueType
	}{
		{"pulsar_subscription_back_log", "Unacknowledged entries of the subscription (msgBacklog).", prometheus.GaugeValue},
		{"pulsar_subscription_back_log_no_delayed", "The subscription's backlog less the entries held for delayed delivery.", prometheus.GaugeValue},
		{"pulsar_subscription_delayed", "Entries held by the subscription's delayed-delivery index.", prometheus.GaugeValue},
		{"pulsar_subscription_delayed_message_index_size_bytes", "Bytes (an estimate) the subscription's delayed-delivery index holds in memory.", prometheus.GaugeValue},
		{"pulsar_subscription_msg_rate_out", "Messages a second dispatched to the subscription's consumers.", prometheus.GaugeValue},
		{"pulsar_subscription_msg_throughput_out", "Bytes a second dispatched to the subscription's consumers.", prometheus.GaugeValue},
		{"pulsar_subscription_unacked_messages", "Messages dispatched to the subscription's consumers and not acknowledged yet.", prometheus.GaugeValue},
		{"pulsar_subscription_consumers_count", "Connected consumers of the subscription.", prometheus.GaugeValue},
	}
	pulsarReplNames = []struct {
		name, help string
		typ        prometheus.ValueType
	}{
		{"pulsar_replication_backlog", "Entries not yet acknowledged by the remote region.", prometheus.GaugeValue},
		{"pulsar_replication_rate_out", "Entries a second sent to the remote region.", prometheus.GaugeValue},
		{"pulsar_replication_throughput_out", "Bytes a second sent to the remote region.", prometheus.GaugeValue},
		{"pulsar_replication_connected_count", "Open replication streams to the remote region.", prometheus.GaugeValue},
		{"pulsar_replication_delay_in_seconds", "Age in whole seconds of the oldest entry the remote region has not acknowledged (replicationDelayInSeconds; at namespace level the largest of the namespace's topics).", prometheus.GaugeValue},
		{"pulsar_replication_rate_in", "Entries a second of the remote region's origin persisted here (replication.msgRateIn; a batch is one entry).", prometheus.GaugeValue},
		{"pulsar_replication_throughput_in", "Bytes a second of the remote region's origin persisted here (replication.msgThroughputIn).", prometheus.GaugeValue},
	}
)

func newPulsarCollector(b *Broker, cluster string, namespaceLevel bool) *pulsarCollector {
	cl := prometheus.Labels{"cluster": cluster}
	topicLabels := []string{"namespace", "topic"}
	replLabels := []string{"namespace", "topic", "remote_cluster"}
	if namespaceLevel {
		topicLabels = []string{"namespace"}
		replLabels = []string{"namespace", "remote_cluster"}
	}
	c := &pulsarCollector{b: b, namespaceLevel: namespaceLevel,
		topicsCount: prometheus.NewDesc("pulsar_topics_count", "Topics of the namespace loaded on this broker.", []string{"namespace"}, cl)}
	c.quotaLimit = prometheus.NewDesc("pulsar_storage_backlog_quota_limit",
		"The backlog quota's limit in bytes of each subscription's backlog (destination_storage; exported when set; at namespace level the largest of its topics').", topicLabels, cl)
	for _, n := range pulsarTopicNames {
		l := prometheus.Labels{"cluster": cluster}
		for k, v := range n.labels {
			l[k] = v
		}
		c.topic = append(c.topic, pulsarMetric{prometheus.NewDesc(n.name, n.help, topicLabels, l), n.typ})
	}
	if namespaceLevel {
		c.nsDelayed = prometheus.NewDesc("pulsar_subscription_delayed", "Entries held by the delayed-delivery indexes of the namespace's subscriptions.", []string{"namespace"}, cl)
	}
	for i, name := range pulsarLatencyNames {
		help := latencyHelp(i)
		c.topic = append(c.topic, pulsarMetric{prometheus.NewDesc(name, help, topicLabels, cl), prometheus.GaugeValue})
	}
	if !namespaceLevel {
		for _, n := range pulsarSubNames {
			c.sub = append(c.sub, pulsarMetric{prometheus.NewDesc(n.name, n.help, []string{"namespace", "topic", "subscription"}, cl), n.typ})
		}
	}
	for _, n := range pulsarReplNames {
		c.repl = append(c.repl, pulsarMetric{prometheus.NewDesc(n.name, n.help, replLabels, cl), n.typ})
	}
	return c
}

// topicValues are a topic's values of pulsarTopicNames, in order.
func topicValues(st *admin.TopicStats) []float64 {
	var consumers, backlog, indexBytes, buckets, merges int64
	for _, ss := range st.Subscriptions {
		consumers += int64(len(ss.Consumers))
		backlog += ss.MsgBacklog
		indexBytes += ss.DelayedIndexBytes
		buckets += int64(ss.DelayedIndexBuckets)
		merges += ss.DelayedIndexMerges
	}
	return []float64{float64(len(st.Subscriptions)), float64(len(st.Publishers)), float64(consumers),
		st.MsgRateIn, st.MsgRateOut, st.MsgThroughputIn, st.MsgThroughputOut,
		float64(st.MsgInCounter), float64(st.BytesInCounter), float64(st.MsgOutCounter), float64(st.BytesOutCounter),
		float64(st.StorageSize), float64(st.BacklogSize), float64(backlog),
		float64(indexBytes), float64(buckets), float64(merges)}
}

// latencyHelp is the help of pulsarLatencyNames[i].
func latencyHelp(i int) string {
	const what = "the topic's managed ledger confirmed over the last 10 s stats interval (Pulsar: its 60 s stats period), from the append to the ack quorum's confirmation"
	switch n := len(ratemeter.LatencyBounds); {
	case i < n:
		return fmt.Sprintf("Entries whose storage write latency was at most %v (above the bucket before), of those %s.", ratemeter.LatencyBounds[i], what)
	case i == n:
		return fmt.Sprintf("Entries whose storage write latency was above %v, of those %s.", ratemeter.LatencyBounds[n-1], what)
	case i == n+1:
		return "Entries " + what + "."
	default:
		return "Storage write latencies summed, in microseconds, of the entries " + what + "."
	}
}

// latencyValues are a topic's values of pulsarLatencyNames, in order.
func latencyValues(lc ratemeter.LatencyCounts) []float64 {
	out := make([]float64, 0, len(lc.Buckets)+2)
	for _, n := range lc.Buckets {
		out = append(out, float64(n))
	}
	return append(out, float64(lc.Count), float64(lc.SumMicros))
}

// subValues are a subscription's values of pulsarSubNames, in order.
func subValues(ss *admin.SubscriptionStats) []float64 {
	return []float64{float64(ss.MsgBacklog), float64(ss.MsgBacklogNoDelayed), float64(ss.MsgDelayed), float64(ss.DelayedIndexBytes),
		ss.MsgRateOut, ss.MsgThroughputOut, float64(ss.UnackedMessages), float64(len(ss.Consumers))}
}

// replDelay is the index of pulsar_replication_delay_in_seconds in
// replValues: aggregated by max, the others by sum.
const replDelay = 4

// replValues are a replicator's values of pulsarReplNames, in order.
func replValues(rs *admin.ReplicatorStats) []float64 {
	up := 0.0
	if rs.Connected {
		up = 1
	}
	return []float64{float64(rs.ReplicationBacklog), rs.MsgRateOut, rs.MsgThroughputOut, up, float64(rs.ReplicationDelayInSeconds),
		rs.MsgRateIn, rs.MsgThroughputIn}
}

func (c *pulsarCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.topicsCount
	ch <- c.quotaLimit
	if c.nsDelayed != nil {
		ch <- c.nsDelayed
	}
	for _, ms := range [][]pulsarMetric{c.topic, c.sub, c.repl} {
		for _, m := range ms {
			ch <- m.desc
		}
	}
}

// label makes a label value valid UTF-8, or the whole scrape fails (names
// are validated, but a cursor may predate that).
func label(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func (c *pulsarCollector) Collect(ch chan<- prometheus.Metric) {
	type nsAgg struct {
		topics  int
		quota   int64
		delayed int64
		vals    []float64
		repl    map[string][]float64
	}
	byNS := map[string]*nsAgg{}
	now := time.Now()
	for _, t := range c.b.loadedTopics() {
		st := t.stats()
		ns, name := label(t.name.NamespaceName()), label(t.name.String())
		agg := byNS[ns]
		if agg == nil {
			agg = &nsAgg{vals: make([]float64, len(c.topic)), repl: map[string][]float64{}}
			byNS[ns] = agg
		}
		agg.topics++
		quota := t.policies().BacklogQuotas["destination_storage"].SizeLimit()
		agg.quota = max(agg.quota, quota)
		tv := append(topicValues(&st), latencyValues(t.ml.AddLatency(now))...)
		if c.namespaceLevel {
			for _, ss := range st.Subscriptions {
				agg.delayed += ss.MsgDelayed
			}
			for i, v := range tv {
				agg.vals[i] += v
			}
			for remote, rs := range st.Replication {
				rv := replValues(&rs)
				a := agg.repl[remote]
				if a == nil {
					a = make([]float64, len(rv))
					agg.repl[remote] = a
				}
				for i, v := range rv {
					if i == replDelay {
						a[i] = max(a[i], v)
					} else {
						a[i] += v
					}
				}
			}
			continue
		}
		for i, v := range tv {
			ch <- prometheus.MustNewConstMetric(c.topic[i].desc, c.topic[i].typ, v, ns, name)
		}
		if quota > 0 {
			ch <- prometheus.MustNewConstMetric(c.quotaLimit, prometheus.GaugeValue, float64(quota), ns, name)
		}
		for sub, ss := range st.Subscriptions {
			for i, v := range subValues(&ss) {
				ch <- prometheus.MustNewConstMetric(c.sub[i].desc, c.sub[i].typ, v, ns, name, label(sub))
			}
		}
		for remote, rs := range st.Replication {
			for i, v := range replValues(&rs) {
				ch <- prometheus.MustNewConstMetric(c.repl[i].desc, c.repl[i].typ, v, ns, name, label(remote))
			}
		}
	}
	names := make([]string, 0, len(byNS))
	for ns := range byNS {
		names = append(names, ns)
	}
	sort.Strings(names)
	for _, ns := range names {
		agg := byNS[ns]
		ch <- prometheus.MustNewConstMetric(c.topicsCount, prometheus.GaugeValue, float64(agg.topics), ns)
		if !c.namespaceLevel {
			continue
		}
		for i, v := range agg.vals {
			ch <- prometheus.MustNewConstMetric(c.topic[i].desc, c.topic[i].typ, v, ns)
		}
		ch <- prometheus.MustNewConstMetric(c.nsDelayed, prometheus.GaugeValue, float64(agg.delayed), ns)
		if agg.quota > 0 {
			ch <- prometheus.MustNewConstMetric(c.quotaLimit, prometheus.GaugeValue, float64(agg.quota), ns)
		}
		for remote, rv := range agg.repl {
			for i, v := range rv {
				ch <- prometheus.MustNewConstMetric(c.repl[i].desc, c.repl[i].typ, v, ns, label(remote))
			}
		}
	}
}
