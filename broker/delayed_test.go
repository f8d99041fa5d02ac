package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
)

type delayedStats struct {
	Subscriptions map[string]struct {
		MsgBacklog          int64 `json:"msgBacklog"`
		MsgBacklogNoDelayed int64 `json:"msgBacklogNoDelayed"`
		MsgDelayed          int64 `json:"msgDelayed"`
		DelayedIndexBuckets int   `json:"delayedIndexBuckets"`
		DelayedIndexMerges  int64 `json:"delayedIndexBucketMerges"`
		DelayedIndexBytes   int64 `json:"delayedMessageIndexSizeInBytes"`
	} `json:"subscriptions"`
}

func topicStats(t *testing.T, admin, topic string) delayedStats {
	t.Helper()
	code, b := adminCall(t, "GET", admin+"/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/stats", nil)
	if code != 200 {
		t.Fatalf("stats: %d %s", code, b)
	}
	var st delayedStats
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// receipt is a message as a consumer received it, and when.
type receipt struct {
	payload string
	at      time.Time
}

// collect receives from c, acknowledging, until ctx ends.
func collect(ctx context.Context, c pulsar.Consumer) func() []receipt {
	var mu sync.Mutex
	var got []receipt
	go func() {
		for {
			m, err := c.Receive(ctx)
			if err != nil {
				return
			}
			now := time.Now()
			c.Ack(m)
			mu.Lock()
			got = append(got, receipt{payload: string(m.Payload()), at: now})
			mu.Unlock()
		}
	}()
	return func() []receipt {
		mu.Lock()
		defer mu.Unlock()
		return append([]receipt(nil), got...)
	}
}

// Issue 35: messages with a deliver_at_time (DeliverAt / DeliverAfter)
// are held by Shared and Key_Shared subscriptions until their time, and
// counted as delayed in the backlog meanwhile; Exclusive and Failover
// deliver them at once, as Pulsar does. A retry-letter topic
// (ReconsumeLater with RetryEnable) redelivers after its delay.
func TestDelayedDeliveryHoldsSharedAndKeySharedOnly(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir())
	client := newPulsarClient(t, s.URL)
	topic := topicName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	types := map[string]pulsar.SubscriptionType{"sh": pulsar.Shared, "ks": pulsar.KeyShared, "ex": pulsar.Exclusive, "fo": pulsar.Failover}
	got := map[string]func() []receipt{}
	for name, typ := range types {
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: name, Type: typ,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got[name] = collect(ctx, c)
	}
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	const n = 10
	due := time.Now().Add(8 * time.Second).Truncate(time.Millisecond)
	for i := range n {
		for _, m := range []*pulsar.ProducerMessage{
			{Payload: []byte(fmt.Sprintf("d%d", i)), Key: fmt.Sprintf("k%d", i%3), DeliverAt: due},
			{Payload: []byte(fmt.Sprintf("n%d", i)), Key: fmt.Sprintf("k%d", i%3)},
		} {
			p.SendAsync(ctx, m, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					t.Errorf("send: %v", err)
				}
			})
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}

	// Before their time: Exclusive and Failover have everything, Shared
	// and Key_Shared the undelayed half, and count the rest as delayed.
	testutil.Eventually(t, time.Until(due), "Exclusive and Failover receive the delayed messages at once; Shared and Key_Shared the others", func() bool {
		st := topicStats(t, s.AdminURL, topic)
		return len(got["ex"]()) == 2*n && len(got["fo"]()) == 2*n && len(got["sh"]()) == n && len(got["ks"]()) == n &&
			st.Subscriptions["sh"].MsgDelayed == n && st.Subscriptions["ks"].MsgDelayed == n
	})
	st := topicStats(t, s.AdminURL, topic)
	for _, sub := range []string{"sh", "ks"} {
		ss := st.Subscriptions[sub]
		if ss.MsgBacklog < n || ss.MsgBacklogNoDelayed != ss.MsgBacklog-n {
			t.Fatalf("%s while %d are delayed: msgBacklog %d, msgBacklogNoDelayed %d", sub, n, ss.MsgBacklog, ss.MsgBacklogNoDelayed)
		}
	}
	if ss := st.Subscriptions["ex"]; ss.MsgDelayed != 0 {
		t.Fatalf("the Exclusive subscription counts %d delayed", ss.MsgDelayed)
	}

	testutil.Eventually(t, time.Until(due)+time.Minute, "Shared and Key_Shared receive the delayed messages", func() bool {
		return len(got["sh"]()) == 2*n && len(got["ks"]()) == 2*n
	})
	for _, sub := range []string{"sh", "ks"} {
		for _, r := range got[sub]() {
			if strings.HasPrefix(r.payload, "d") && r.at.Before(due) {
				t.Errorf("%s received %s at %s, %s before its deliver_at_time", sub, r.payload, r.at.Format(time.StampMilli), due.Sub(r.at))
			}
		}
	}
	for _, sub := range []string{"ex", "fo"} {
		if len(got[sub]()) != 2*n {
			t.Errorf("%s received %d messages, want %d", sub, len(got[sub]()), 2*n)
		}
	}
	st = topicStats(t, s.AdminURL, topic)
	if ss := st.Subscriptions["sh"]; ss.MsgDelayed != 0 {
		t.Fatalf("after delivery: msgDelayed %d", ss.MsgDelayed)
	}

	// A retry-letter topic: ReconsumeLater publishes to the retry topic
	// with DeliverAfter, which the consumer also subscribes (Shared).
	rc, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "retrying", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, RetryEnable: true,
		DLQ: &pulsar.DLQPolicy{MaxDeliveries: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	const later = 3 * time.Second
	var reconsumed time.Time
	for {
		m, err := rc.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) == "n0" && reconsumed.IsZero() {
			reconsumed = time.Now()
			rc.ReconsumeLater(m, later)
			continue
		}
		rc.Ack(m)
		if string(m.Payload()) == "n0" {
			if at := time.Now(); at.Before(reconsumed.Add(later)) {
				t.Fatalf("reconsumed %s after %s, before its delay of %s", m.Payload(), at.Sub(reconsumed), later)
			}
			t.Logf("ReconsumeLater(%s) came back after %s", later, time.Since(reconsumed).Round(time.Millisecond))
			break
		}
	}
}

// Issue 35: a delayed message is delivered at its time — not before, and
// not lost — across a kill -9 of the broker, while the index merges its
// buckets. The index is small (--delayed-bucket-entries 10) so most
// messages are in sealed buckets, persisted as ledger snapshots, when the
// broker dies, and bounded to 2 buckets (--delayed-max-buckets 2) so the
// ten it seals are merged (Pulsar's delayedDeliveryMaxNumBuckets); the
// restarted broker restores the buckets its list names, and reads the
// rest from the log again.
func TestDelayedDeliverySurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	const maxBuckets = 2
	s := testutil.StartStandalone(t, dir, "--delayed-bucket-entries", "10", "--delayed-segment-entries", "2",
		"--delayed-max-buckets", strconv.Itoa(maxBuckets), "--log-level", "info")
	client := newPulsarClient(t, s.URL)
	topic := topicName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "delayed", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := collect(ctx, c)
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// 105 messages due one every 60 ms from 5 s on; sent in reverse order
	// of their times, so the log's order is not the time order.
	const n = 105
	start := time.Now().Add(5 * time.Second).Truncate(time.Millisecond)
	dueOf := func(i int) time.Time { return start.Add(time.Duration(i) * 60 * time.Millisecond) }
	for i := n - 1; i >= 0; i-- {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i)), DeliverAt: dueOf(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Ten buckets sealed, merged down to the bound before the first is
	// due (their segments are then all still unloaded).
	var merges int64
	testutil.Eventually(t, time.Until(start), "every message held, the buckets merged down to the bound", func() bool {
		ss := topicStats(t, s.AdminURL, topic).Subscriptions["delayed"]
		merges = ss.DelayedIndexMerges
		return ss.MsgDelayed == n && ss.DelayedIndexBuckets <= maxBuckets && ss.DelayedIndexMerges >= 3
	})
	t.Logf("%d merges of buckets before the first message's time", merges)
	// Kill once some were delivered: the rest are in the merged buckets
	// and the open one.
	testutil.Eventually(t, time.Minute, "the first messages delivered", func() bool { return len(got()) >= 10 })
	killed := time.Now()
	s.Kill()
	s.Restart()
	t.Logf("killed %s after the first message's time; serving again %s later", killed.Sub(start).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))

	testutil.Eventually(t, time.Until(dueOf(n-1))+time.Minute, "every message delivered after the restart", func() bool {
		seen := map[string]bool{}
		for _, r := range got() {
			seen[r.payload] = true
		}
		return len(seen) == n
	})
	late := time.Duration(0)
	for _, r := range got() {
		i, _ := strconv.Atoi(r.payload)
		if r.at.Before(dueOf(i)) {
			t.Errorf("message %d received %s before its deliver_at_time", i, dueOf(i).Sub(r.at))
		}
		late = max(late, r.at.Sub(dueOf(i)))
	}
	t.Logf("%d receipts of %d messages, the latest %s after its time (the restart included)", len(got()), n, late.Round(time.Millisecond))
	log, err := os.ReadFile(s.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "delayed-delivery index restored") {
		t.Fatal("the restarted broker did not restore the index from its persisted buckets (no 'delayed-delivery index restored' in its log)")
	}
}

// Issue 35: the delayed-delivery index on /metrics, under Pulsar's names
// and equal to the admin stats: per subscription the entries held
// (pulsar_subscription_delayed) and the index's memory
// (pulsar_subscription_delayed_message_index_size_bytes); per topic the
// subscriptions' sums of the memory (pulsar_delayed_message_index_size_bytes),
// the sealed buckets (pulsar_delayed_message_index_bucket_total) and the
// merges (pulsar_delayed_message_index_bucket_op_count{type="merge",
// state="succeed"}). The index is small (--delayed-bucket-entries 10,
// --delayed-max-buckets 2) so the 60 messages, due in an hour, fill six
// buckets and merges bring them down to two.
func TestDelayedIndexMetrics(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir(), "--delayed-bucket-entries", "10", "--delayed-segment-entries", "2", "--delayed-max-buckets", "2")
	client := newPulsarClient(t, s.URL)
	topic := topicName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "held", Type: pulsar.Shared})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 60
	for i := range n {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i)), DeliverAfter: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, time.Minute, "every message held, the buckets merged down to the bound", func() bool {
		ss := topicStats(t, s.AdminURL, topic).Subscriptions["held"]
		return ss.MsgDelayed == n && ss.DelayedIndexMerges >= 1 && ss.DelayedIndexBuckets <= 2
	})
	sl := map[string]string{"cluster": "standalone", "topic": topic, "subscription": "held"}
	tl := map[string]string{"cluster": "standalone", "topic": topic}
	ml := map[string]string{"cluster": "standalone", "topic": topic, "type": "merge", "state": "succeed"}
	var got, want []float64
	for deadline := time.Now().Add(30 * time.Second); ; {
		// A scrape between two equal stats (the index may still be
		// sealing or merging).
		before := topicStats(t, s.AdminURL, topic).Subscriptions["held"]
		mfs := scrape(t, s.AdminURL+"/metrics")
		after := topicStats(t, s.AdminURL, topic).Subscriptions["held"]
		got = []float64{sample(t, mfs, "pulsar_subscription_delayed", sl), sample(t, mfs, "pulsar_subscription_delayed_message_index_size_bytes", sl),
			sample(t, mfs, "pulsar_delayed_message_index_size_bytes", tl), sample(t, mfs, "pulsar_delayed_message_index_bucket_total", tl),
			sample(t, mfs, "pulsar_delayed_message_index_bucket_op_count", ml)}
		want = []float64{n, float64(after.DelayedIndexBytes), float64(after.DelayedIndexBytes), float64(after.DelayedIndexBuckets), float64(after.DelayedIndexMerges)}
		if before == after && slices.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delayed, sub size, topic size, buckets, merges on /metrics %v, the stats %v", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got[1] <= 0 || got[3] < 1 || got[4] < 1 {
		t.Fatalf("index memory %v, buckets %v, merges %v: want all above 0", got[1], got[3], got[4])
	}
	t.Logf("on /metrics: %v entries held, %v bytes, %v buckets, %v merges", got[0], got[1], got[3], got[4])
}
