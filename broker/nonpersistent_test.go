package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// npStats is what the tests read of a non-persistent topic's admin stats.
type npStats struct {
	MsgInCounter   int64   `json:"msgInCounter"`
	MsgDropRate    float64 `json:"msgDropRate"`
	MsgDropCounter int64   `json:"msgDropCounter"`
	Publishers     []struct {
		ProducerName string  `json:"producerName"`
		MsgDropRate  float64 `json:"msgDropRate"`
	} `json:"publishers"`
	Subscriptions map[string]struct {
		Type           string  `json:"type"`
		IsDurable      bool    `json:"isDurable"`
		MsgDropRate    float64 `json:"msgDropRate"`
		MsgDropCounter int64   `json:"msgDropCounter"`
		Consumers      []struct {
			ConsumerName    string `json:"consumerName"`
			AvailablePermit int    `json:"availablePermits"`
		} `json:"consumers"`
	} `json:"subscriptions"`
}

func npTopicName(t testing.TB) string {
	return fmt.Sprintf("non-persistent://public/default/%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
}

func getNPStats(t testing.TB, adminURL, topic string) (npStats, int) {
	t.Helper()
	resp, err := http.Get(adminURL + "/admin/v2/non-persistent/" + strings.TrimPrefix(topic, "non-persistent://") + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st npStats
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
	}
	return st, resp.StatusCode
}

// waitPermits waits until every consumer of sub (want of them) has
// permits: the Go client sends its first FLOW from its own goroutine after
// Subscribe returned, and a non-persistent message that finds a consumer
// without permits is dropped.
func waitPermits(t testing.TB, adminURL, topic, sub string, want int) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "the consumers' first permits", func() bool {
		st, code := getNPStats(t, adminURL, topic)
		if code != http.StatusOK {
			return false
		}
		s, ok := st.Subscriptions[sub]
		if !ok || len(s.Consumers) != want {
			return false
		}
		for _, c := range s.Consumers {
			if c.AvailablePermit <= 0 {
				return false
			}
		}
		return true
	})
}

func sendN(t testing.TB, p pulsar.Producer, from, to int, key func(int) string) {
	t.Helper()
	for i := from; i < to; i++ {
		m := &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i))}
		if key != nil {
			m.Key = key(i)
		}
		if _, err := p.Send(context.Background(), m); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

// npReceive receives from the consumers until n messages came in all (30 s
// at most), then for another quiet period, so what should not arrive has
// had time to: what each one got, in order.
func npReceive(n int, quiet time.Duration, cs ...pulsar.Consumer) [][]string {
	got := make([][]string, len(cs))
	total := 0
	deadline := time.After(30 * time.Second)
	var after <-chan time.Time
	for {
		if total >= n && after == nil {
			after = time.After(quiet)
		}
		var m pulsar.ConsumerMessage
		i := -1
		switch len(cs) {
		case 1:
			select {
			case m = <-cs[0].Chan():
				i = 0
			case <-deadline:
			case <-after:
			}
		default:
			select {
			case m = <-cs[0].Chan():
				i = 0
			case m = <-cs[1].Chan():
				i = 1
			case <-deadline:
			case <-after:
			}
		}
		if i < 0 {
			return got
		}
		got[i] = append(got[i], string(m.Payload()))
		cs[i].Ack(m)
		total++
	}
}

// receiveUntilQuiet receives n messages from c (and any more that come
// within quiet).
func receiveUntilQuiet(c pulsar.Consumer, n int) []string {
	return npReceive(n, 500*time.Millisecond, c)[0]
}

func seq(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, strconv.Itoa(i))
	}
	return out
}

// Issue 35, non-persistent topics, with the unmodified Go client against
// one `meridian standalone`: messages go from memory to the consumers
// connected now (Pulsar's NonPersistentTopic): a consumer that subscribes
// later gets only later messages, whatever its initial position; a
// consumer without permits misses what it cannot take, and the drops are
// counted (admin stats msgDropRate, the Prometheus counter); every
// subscription type dispatches as Pulsar's; nothing is stored.
func TestNonPersistentTopics(t *testing.T) {
	s := standalone(t)
	client := newPulsarClient(t, s.URL)
	noBatch := func(t *testing.T, topic string) pulsar.Producer {
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatalf("producer on %s: %v", topic, err)
		}
		t.Cleanup(p.Close)
		return p
	}
	subscribe := func(t *testing.T, opts pulsar.ConsumerOptions) pulsar.Consumer {
		c, err := client.Subscribe(opts)
		if err != nil {
			t.Fatalf("subscribe %s: %v", opts.SubscriptionName, err)
		}
		t.Cleanup(c.Close)
		return c
	}

	// Sent before anyone subscribed: gone, even for a consumer that asks
	// for the earliest message; a re-created subscription starts again
	// from now (its earlier consumer's leaving removed it).
	t.Run("late-consumer-gets-only-later-messages", func(t *testing.T) {
		topic := npTopicName(t)
		p := noBatch(t, topic)
		sendN(t, p, 0, 5, nil)
		c := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "late", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		waitPermits(t, s.AdminURL, topic, "late", 1)
		sendN(t, p, 5, 10, nil)
		if got := receiveUntilQuiet(c, 5); !slices.Equal(got, seq(5, 10)) {
			t.Fatalf("late consumer received %v, want only %v", got, seq(5, 10))
		}
		c.Close()
		sendN(t, p, 10, 12, nil) // nobody subscribed: gone
		c2 := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "late", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		waitPermits(t, s.AdminURL, topic, "late", 1)
		sendN(t, p, 12, 14, nil)
		if got := receiveUntilQuiet(c2, 2); !slices.Equal(got, seq(12, 14)) {
			t.Fatalf("re-created subscription received %v, want only %v", got, seq(12, 14))
		}
		st, code := getNPStats(t, s.AdminURL, topic)
		if code != http.StatusOK || st.MsgInCounter != 14 || st.Subscriptions["late"].IsDurable {
			t.Fatalf("stats (status %d): %+v; want 14 messages in and a non-durable subscription", code, st)
		}
	})

	// A consumer whose receiver queue holds 10 and that does not receive
	// gets what its permits cover, and the rest is dropped for its
	// subscription and counted; a second subscription with a consumer that keeps up
	// gets all 100 (drops are per subscription).
	t.Run("slow-consumer-drops-counted", func(t *testing.T) {
		topic := npTopicName(t)
		dropsBefore := metricValue(t, s.AdminURL, "meridian_broker_nonpersistent_dropped_messages_total", `where="subscription"`)
		slow := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "slow", ReceiverQueueSize: 10})
		fast := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "fast", ReceiverQueueSize: 1000})
		waitPermits(t, s.AdminURL, topic, "slow", 1)
		waitPermits(t, s.AdminURL, topic, "fast", 1)
		p := noBatch(t, topic)
		sendN(t, p, 0, 100, nil)
		if got := receiveUntilQuiet(fast, 100); !slices.Equal(got, seq(0, 100)) {
			t.Fatalf("fast consumer received %d messages %v, want all 100 in order", len(got), got)
		}
		// The Go client asks for more as its queues drain into the
		// consumer's channel (ReceiverQueueSize 10 there, up to 10 more
		// held behind it), not as the application receives: what it got
		// is the first k messages, k between 10 and 20, and every later
		// one was dropped.
		got := receiveUntilQuiet(slow, 10)
		k := len(got)
		if k < 10 || k > 20 || !slices.Equal(got, seq(0, k)) {
			t.Fatalf("slow consumer received %v, want the first 10 to 20 messages", got)
		}
		drops := int64(100 - k)
		st, code := getNPStats(t, s.AdminURL, topic)
		if code != http.StatusOK {
			t.Fatalf("stats: status %d", code)
		}
		if sl := st.Subscriptions["slow"]; sl.MsgDropCounter != drops || sl.MsgDropRate <= 0 {
			t.Fatalf("slow subscription: %d dropped at %.2f/s, want %d at a rate > 0", sl.MsgDropCounter, sl.MsgDropRate, drops)
		}
		if f := st.Subscriptions["fast"]; f.MsgDropCounter != 0 {
			t.Fatalf("fast subscription dropped %d", f.MsgDropCounter)
		}
		if st.MsgDropCounter != drops || st.MsgDropRate <= 0 || len(st.Publishers) != 1 || st.Publishers[0].MsgDropRate != 0 {
			t.Fatalf("topic: %d dropped at %.2f/s, publishers %+v; want %d, a rate > 0, one publisher dropping nothing", st.MsgDropCounter, st.MsgDropRate, st.Publishers, drops)
		}
		if d := metricValue(t, s.AdminURL, "meridian_broker_nonpersistent_dropped_messages_total", `where="subscription"`) - dropsBefore; d != float64(drops) {
			t.Fatalf("dropped-messages counter rose by %v, want %d", d, drops)
		}
		// Nothing was stored: no topic of that name in the persistent list.
		resp, err := http.Get(s.AdminURL + "/admin/v2/persistent/public/default")
		if err != nil {
			t.Fatal(err)
		}
		var persistent []string
		json.NewDecoder(resp.Body).Decode(&persistent)
		resp.Body.Close()
		local := strings.TrimPrefix(topic, "non-persistent://public/default/")
		for _, n := range persistent {
			if strings.HasSuffix(n, "/"+local) {
				t.Fatalf("a persistent topic %s was created for %s", n, topic)
			}
		}
		resp, err = http.Get(s.AdminURL + "/admin/v2/non-persistent/public/default")
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		json.NewDecoder(resp.Body).Decode(&listed)
		resp.Body.Close()
		if !slices.Contains(listed, topic) {
			t.Fatalf("non-persistent list %v lacks %s", listed, topic)
		}
	})

	t.Run("exclusive", func(t *testing.T) {
		topic := npTopicName(t)
		c := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "x", Type: pulsar.Exclusive})
		if c2, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "x", Type: pulsar.Exclusive}); err == nil {
			c2.Close()
			t.Fatal("a second consumer joined an exclusive subscription")
		}
		waitPermits(t, s.AdminURL, topic, "x", 1)
		sendN(t, noBatch(t, topic), 0, 10, nil)
		if got := receiveUntilQuiet(c, 10); !slices.Equal(got, seq(0, 10)) {
			t.Fatalf("received %v", got)
		}
	})

	t.Run("shared", func(t *testing.T) {
		topic := npTopicName(t)
		c1 := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sh", Type: pulsar.Shared})
		c2 := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sh", Type: pulsar.Shared})
		waitPermits(t, s.AdminURL, topic, "sh", 2)
		sendN(t, noBatch(t, topic), 0, 20, nil)
		got1, got2 := receiveBoth(c1, c2, 20)
		all := append(slices.Clone(got1), got2...)
		slices.SortFunc(all, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
		if len(got1) == 0 || len(got2) == 0 || !slices.Equal(all, seq(0, 20)) {
			t.Fatalf("shared: %v and %v, want all 20 once, spread over both", got1, got2)
		}
	})

	t.Run("failover", func(t *testing.T) {
		topic := npTopicName(t)
		a := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "fo", Type: pulsar.Failover, Name: "a"})
		b := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "fo", Type: pulsar.Failover, Name: "b"})
		waitPermits(t, s.AdminURL, topic, "fo", 2)
		p := noBatch(t, topic)
		sendN(t, p, 0, 10, nil)
		gotA, gotB := receiveBoth(a, b, 10)
		if !slices.Equal(gotA, seq(0, 10)) || len(gotB) != 0 {
			t.Fatalf("failover: active a got %v, standby b got %v; want all 10 on a", gotA, gotB)
		}
		// The active one leaves: the other takes over for what comes next.
		a.Close()
		sendN(t, p, 10, 15, nil)
		if got := receiveUntilQuiet(b, 5); !slices.Equal(got, seq(10, 15)) {
			t.Fatalf("after the active consumer left, b got %v, want %v", got, seq(10, 15))
		}
	})

	t.Run("key-shared", func(t *testing.T) {
		topic := npTopicName(t)
		c1 := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ks", Type: pulsar.KeyShared, Name: "k1"})
		c2 := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ks", Type: pulsar.KeyShared, Name: "k2"})
		waitPermits(t, s.AdminURL, topic, "ks", 2)
		key := func(i int) string { return "key-" + strconv.Itoa(i%16) }
		sendN(t, noBatch(t, topic), 0, 64, key)
		got1, got2 := receiveBoth(c1, c2, 64)
		if len(got1)+len(got2) != 64 || len(got1) == 0 || len(got2) == 0 {
			t.Fatalf("key_shared: %d and %d messages, want 64 spread over both", len(got1), len(got2))
		}
		owner := map[string]int{}
		for n, got := range [][]string{got1, got2} {
			for _, v := range got {
				i, _ := strconv.Atoi(v)
				if o, ok := owner[key(i)]; ok && o != n {
					t.Fatalf("key %s went to both consumers", key(i))
				}
				owner[key(i)] = n
			}
		}
	})

	// A partitioned non-persistent topic (its count apart from the
	// persistent topic of the same name): the client's producer and
	// consumer use every partition.
	t.Run("partitioned", func(t *testing.T) {
		topic := npTopicName(t)
		path := "/admin/v2/non-persistent/" + strings.TrimPrefix(topic, "non-persistent://") + "/partitions"
		req, _ := http.NewRequest("PUT", s.AdminURL+path, strings.NewReader("3"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("create 3 partitions: status %d", resp.StatusCode)
		}
		c := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "parts", Type: pulsar.Shared})
		for i := range 3 {
			waitPermits(t, s.AdminURL, topic+"-partition-"+strconv.Itoa(i), "parts", 1)
		}
		p := noBatch(t, topic)
		sendN(t, p, 0, 30, func(i int) string { return "k" + strconv.Itoa(i) })
		got := npReceive(30, 500*time.Millisecond, c)[0]
		slices.SortFunc(got, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
		if !slices.Equal(got, seq(0, 30)) {
			t.Fatalf("partitioned: received %v, want all 30 once", got)
		}
		used := 0
		for i := range 3 {
			if st, code := getNPStats(t, s.AdminURL, topic+"-partition-"+strconv.Itoa(i)); code == http.StatusOK && st.MsgInCounter > 0 {
				used++
			}
		}
		if used < 2 {
			t.Fatalf("messages went to %d of 3 partitions", used)
		}
		// The persistent topic of the same name is not partitioned.
		resp, err = http.Get(s.AdminURL + "/admin/v2/persistent/" + strings.TrimPrefix(topic, "non-persistent://") + "/partitions")
		if err != nil {
			t.Fatal(err)
		}
		var pm struct{ Partitions int }
		json.NewDecoder(resp.Body).Decode(&pm)
		resp.Body.Close()
		if pm.Partitions != 0 {
			t.Fatalf("persistent topic of the same name has %d partitions", pm.Partitions)
		}
	})

	// Issue 35: pulsaradmin's GetPartitionedStats of a partitioned
	// non-persistent topic, as of a persistent one: each partition's stats
	// (what its own GetStats says) and their sum — messages in and out,
	// the subscription's consumers of every partition, the producer once.
	t.Run("partitioned-stats", func(t *testing.T) {
		adm, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: s.AdminURL})
		if err != nil {
			t.Fatal(err)
		}
		topic := npTopicName(t)
		tn, err := utils.GetTopicName(topic)
		if err != nil {
			t.Fatal(err)
		}
		if err := adm.Topics().Create(*tn, 3); err != nil {
			t.Fatalf("create 3 partitions: %v", err)
		}
		c := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "st", Type: pulsar.Shared})
		for i := range 3 {
			waitPermits(t, s.AdminURL, topic+"-partition-"+strconv.Itoa(i), "st", 1)
		}
		// Named: a producer the broker names gets a name per partition.
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "np-stats", DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		const n = 30
		sendN(t, p, 0, n, func(i int) string { return "k" + strconv.Itoa(i) })
		if got := npReceive(n, 500*time.Millisecond, c)[0]; len(got) != n {
			t.Fatalf("received %d of %d", len(got), n)
		}
		st, err := adm.Topics().GetPartitionedStats(*tn, true)
		if err != nil {
			t.Fatalf("GetPartitionedStats of %s: %v", topic, err)
		}
		if st.Metadata.Partitions != 3 || len(st.Partitions) != 3 {
			t.Fatalf("partitioned stats: %d partitions in metadata, stats of %d, want 3 and 3", st.Metadata.Partitions, len(st.Partitions))
		}
		var in, out int64
		for name, ps := range st.Partitions {
			own, code := getNPStats(t, s.AdminURL, name)
			if code != http.StatusOK || own.MsgInCounter != ps.MsgCounterIn {
				t.Errorf("%s: msgInCounter %d in the partitioned stats, its own stats say %d (HTTP %d)", name, ps.MsgCounterIn, own.MsgInCounter, code)
			}
			in += ps.MsgCounterIn
			out += ps.Subscriptions["st"].MsgOutCounter
		}
		if in != n || out != n {
			t.Errorf("the partitions took in %d and sent %d messages, want %d and %d", in, out, n, n)
		}
		agg, ok := st.Subscriptions["st"]
		if !ok || agg.MsgOutCounter != n || len(agg.Consumers) != 3 || agg.IsDurable {
			t.Errorf("summed subscription: %+v (present %v), want msgOutCounter %d, 3 consumers, not durable", agg, ok, n)
		}
		if len(st.Publishers) != 1 || st.Publishers[0].ProducerName != "np-stats" {
			t.Errorf("summed publishers %+v, want np-stats once", st.Publishers)
		}
		if sum, err := adm.Topics().GetPartitionedStats(*tn, false); err != nil || len(sum.Partitions) != 0 || sum.Subscriptions["st"].MsgOutCounter != n {
			t.Errorf("perPartition=false: %d partitions' stats, msgOutCounter %d, err %v; want none, %d", len(sum.Partitions), sum.Subscriptions["st"].MsgOutCounter, err, n)
		}
		plain, _ := utils.GetTopicName(npTopicName(t) + "-plain")
		if _, err := adm.Topics().GetPartitionedStats(*plain, false); err == nil || !strings.Contains(err.Error(), "404") {
			t.Errorf("GetPartitionedStats of a topic not created partitioned: %v, want 404", err)
		}
	})

	// Seek has nothing to go back to; a topic nobody uses has no stats.
	t.Run("seek-refused-unknown-topic-not-found", func(t *testing.T) {
		topic := npTopicName(t)
		c := subscribe(t, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sk"})
		if err := c.Seek(pulsar.EarliestMessageID()); err == nil {
			t.Fatal("seek on a non-persistent topic succeeded")
		}
		if _, code := getNPStats(t, s.AdminURL, npTopicName(t)); code != http.StatusNotFound {
			t.Fatalf("stats of an unused non-persistent topic: status %d, want 404", code)
		}
	})
}

// receiveBoth receives n messages from two consumers together.
func receiveBoth(c1, c2 pulsar.Consumer, n int) (got1, got2 []string) {
	got := npReceive(n, 500*time.Millisecond, c1, c2)
	return got[0], got[1]
}
