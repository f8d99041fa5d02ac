package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meridian-mq/meridian/tools/testutil"
)

// scrape reads a /metrics page with Prometheus's own text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return mfs
}

// sample is the value of the one series of family name whose labels
// include want; it fails when there is none or several.
func sample(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	var found []float64
	for _, m := range mfs[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range want {
			ok = ok && got[k] == v
		}
		if !ok {
			continue
		}
		switch {
		case m.Gauge != nil:
			found = append(found, m.Gauge.GetValue())
		case m.Counter != nil:
			found = append(found, m.Counter.GetValue())
		default:
			t.Fatalf("%s: neither gauge nor counter", name)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d series, want 1 (family has %d)", name, want, len(found), len(mfs[name].GetMetric()))
	}
	return found[0]
}

// adminTopicStats is the admin API's GetStats of a topic (the fields compared).
type adminTopicStats struct {
	MsgRateIn      float64 `json:"msgRateIn"`
	MsgInCounter   int64   `json:"msgInCounter"`
	BytesInCounter int64   `json:"bytesInCounter"`
	StorageSize    int64   `json:"storageSize"`
	Subscriptions  map[string]struct {
		MsgBacklog int64 `json:"msgBacklog"`
	} `json:"subscriptions"`
}

func getTopicStats(t *testing.T, adminURL, topic string) adminTopicStats {
	t.Helper()
	resp, err := http.Get(adminURL + "/admin/v2/" + strings.Replace(topic, "://", "/", 1) + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st adminTopicStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// Issue 29: a broker's /metrics carries Pulsar's topic, subscription and
// namespace metrics under Pulsar's names and labels, with the values the
// admin API's stats report: pulsar_in_messages_total is what was sent, a
// subscription's backlog is what it left unacknowledged, the topic's
// backlog their sum; the Go runtime and process collectors beside them.
func TestPulsarMetricsMatchWhatWasSent(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir())
	client := newPulsarClient(t, s.URL)
	topic := topicName(t)
	const sent, acked = 50, 20
	// Subscriptions before the messages: "reader" consumes and acks
	// some, "idle" none.
	reader, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "reader", Type: pulsar.Exclusive})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	idle, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "idle", Type: pulsar.Shared})
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range sent {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "message-%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Pulsar's storage write latency buckets: every entry just persisted
	// (the current stats interval: a scrape within 10 s of the first) in
	// exactly one bucket, their count, and a sum of plausible microseconds.
	lat := scrape(t, s.AdminURL+"/metrics")
	tl := map[string]string{"cluster": "standalone", "namespace": "public/default", "topic": topic}
	checkWriteLatency(t, lat, tl, sent)
	for range acked {
		m, err := reader.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := reader.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	// Acks travel asynchronously: wait until the broker's stats show them.
	testutil.Eventually(t, 20*time.Second, "acks applied", func() bool {
		return getTopicStats(t, s.AdminURL, topic).Subscriptions["reader"].MsgBacklog == sent-acked
	})

	// A backlog quota: its limit beside the backlog, for the alert on
	// a backlog near it.
	const quota = 1 << 20
	req, err := http.NewRequest("POST", s.AdminURL+"/admin/v2/namespaces/public/default/backlogQuota",
		strings.NewReader(fmt.Sprintf(`{"limitSize":%d,"policy":"producer_request_hold"}`, quota)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("set backlog quota: HTTP %d", resp.StatusCode)
	}
	testutil.Eventually(t, 20*time.Second, "quota limit exported", func() bool {
		return len(scrape(t, s.AdminURL+"/metrics")["pulsar_storage_backlog_quota_limit"].GetMetric()) > 0
	})

	mfs := scrape(t, s.AdminURL+"/metrics")
	st := getTopicStats(t, s.AdminURL, topic)
	for name, want := range map[string]float64{
		"pulsar_in_messages_total":           sent,
		"pulsar_in_bytes_total":              float64(st.BytesInCounter),
		"pulsar_storage_size":                float64(st.StorageSize),
		"pulsar_msg_backlog":                 (sent - acked) + sent,
		"pulsar_subscriptions_count":         2,
		"pulsar_producers_count":             1,
		"pulsar_consumers_count":             2,
		"pulsar_storage_backlog_quota_limit": quota,
	} {
		if got := sample(t, mfs, name, tl); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if st.BytesInCounter < sent*int64(len("message-000")) {
		t.Errorf("bytesInCounter %d below the payloads sent", st.BytesInCounter)
	}
	if got := mfs["pulsar_in_messages_total"].GetType(); got != dto.MetricType_COUNTER {
		t.Errorf("pulsar_in_messages_total is a %v, want a counter", got)
	}
	// The rate is the stats' rate (the same meter, read a moment apart).
	if got := sample(t, mfs, "pulsar_rate_in", tl); got <= 0 || math.Abs(got-st.MsgRateIn) > 0.25*st.MsgRateIn {
		t.Errorf("pulsar_rate_in = %v, the stats' msgRateIn %v", got, st.MsgRateIn)
	}
	for sub, want := range map[string]float64{"reader": sent - acked, "idle": sent} {
		sl := map[string]string{"cluster": "standalone", "namespace": "public/default", "topic": topic, "subscription": sub}
		if got := sample(t, mfs, "pulsar_subscription_back_log", sl); got != want {
			t.Errorf("pulsar_subscription_back_log{subscription=%q} = %v, want %v", sub, got, want)
		}
		if got := sample(t, mfs, "pulsar_subscription_consumers_count", sl); got != 1 {
			t.Errorf("pulsar_subscription_consumers_count{subscription=%q} = %v, want 1", sub, got)
		}
	}
	if got := sample(t, mfs, "pulsar_subscription_msg_rate_out", map[string]string{"topic": topic, "subscription": "reader"}); got <= 0 {
		t.Errorf("pulsar_subscription_msg_rate_out{subscription=reader} = %v after dispatching %d", got, sent)
	}
	if got := sample(t, mfs, "pulsar_topics_count", map[string]string{"namespace": "public/default"}); got < 1 {
		t.Errorf("pulsar_topics_count = %v", got)
	}
	if got := sample(t, mfs, "meridian_broker_ready", nil); got != 1 {
		t.Errorf("meridian_broker_ready = %v of a serving broker", got)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if len(mfs[name].GetMetric()) == 0 {
			t.Errorf("%s not exported", name)
		}
	}
}

// Issue 29, Pulsar's exposeTopicLevelMetricsInPrometheus=false: the topic
// figures are summed per namespace, with no topic or subscription series
// (of Pulsar's or of meridian_broker_topic_*).
func TestPulsarMetricsNamespaceLevel(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir(), "--expose-topic-level-metrics=false")
	client := newPulsarClient(t, s.URL)
	const topics, each = 3, 7
	for i := range topics {
		topic := fmt.Sprintf("%s-%d", topicName(t), i)
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		produce(t, p, each, nil)
	}
	mfs := scrape(t, s.AdminURL+"/metrics")
	nl := map[string]string{"cluster": "standalone", "namespace": "public/default"}
	checkWriteLatency(t, mfs, nl, topics*each)
	for name, want := range map[string]float64{
		"pulsar_topics_count":        topics,
		"pulsar_in_messages_total":   topics * each,
		"pulsar_msg_backlog":         topics * each,
		"pulsar_subscriptions_count": topics,
		"pulsar_producers_count":     topics,
	} {
		if got := sample(t, mfs, name, nl); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for name, mf := range mfs {
		if strings.HasPrefix(name, "meridian_broker_topic_") || name == "meridian_broker_subscription_backlog_messages" {
			t.Errorf("%s exported at namespace level", name)
		}
		// pulsar_subscription_delayed is, as Pulsar's, also a namespace
		// figure (the topic check below keeps it a sum).
		if strings.HasPrefix(name, "pulsar_subscription_") && name != "pulsar_subscription_delayed" {
			t.Errorf("%s exported at namespace level", name)
		}
		if !strings.HasPrefix(name, "pulsar_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "topic" {
					t.Errorf("%s has a topic label at namespace level", name)
				}
			}
		}
	}

	// Issue 35: the delayed-delivery indexes, summed per namespace as
	// Pulsar does: the entries held and their memory (no buckets sealed
	// at this size).
	dt := topicName(t) + "-delayed"
	dc, err := client.Subscribe(pulsar.ConsumerOptions{Topic: dt, SubscriptionName: "held", Type: pulsar.Shared})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	dp, err := client.CreateProducer(pulsar.ProducerOptions{Topic: dt})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	const delayed = 5
	for i := range delayed {
		if _, err := dp.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte{byte(i)}, DeliverAfter: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 30*time.Second, "the delayed messages held", func() bool {
		return topicStats(t, s.AdminURL, dt).Subscriptions["held"].MsgDelayed == delayed
	})
	bytes := topicStats(t, s.AdminURL, dt).Subscriptions["held"].DelayedIndexBytes
	mfs = scrape(t, s.AdminURL+"/metrics")
	if got := sample(t, mfs, "pulsar_subscription_delayed", nl); got != delayed {
		t.Errorf("pulsar_subscription_delayed%v = %v, want %d", nl, got, delayed)
	}
	if got := sample(t, mfs, "pulsar_delayed_message_index_size_bytes", nl); got != float64(bytes) || bytes <= 0 {
		t.Errorf("pulsar_delayed_message_index_size_bytes%v = %v, want the stats' %d (above 0)", nl, got, bytes)
	}
}

// pulsarLatencyBuckets are Pulsar's pulsar_storage_write_latency_*
// buckets, as its TopicStats writes them.
var pulsarLatencyBuckets = []string{"le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50", "le_100", "le_200", "le_1000", "overflow"}

// checkWriteLatency checks Pulsar's storage write latency series of the
// series labelled l: the buckets hold entries entries, which is their
// count, and their sum (µs) is above 0 and below a minute each.
func checkWriteLatency(t *testing.T, mfs map[string]*dto.MetricFamily, l map[string]string, entries int) {
	t.Helper()
	var inBuckets float64
	for _, b := range pulsarLatencyBuckets {
		name := "pulsar_storage_write_latency_" + b
		if got := mfs[name].GetType(); got != dto.MetricType_GAUGE {
			t.Errorf("%s is a %v, want a gauge (Pulsar's)", name, got)
		}
		inBuckets += sample(t, mfs, name, l)
	}
	count := sample(t, mfs, "pulsar_storage_write_latency_count", l)
	sum := sample(t, mfs, "pulsar_storage_write_latency_sum", l)
	if inBuckets != float64(entries) || count != float64(entries) {
		t.Errorf("storage write latency: %v entries in the buckets, count %v, want %d (the entries persisted)", inBuckets, count, entries)
	}
	if sum <= 0 || sum > float64(entries)*60e6 {
		t.Errorf("pulsar_storage_write_latency_sum = %v µs for %d entries", sum, entries)
	}
}
