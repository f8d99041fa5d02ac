package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Issue 35: docs/broker.md's table of client options names every field of
// ProducerOptions, ConsumerOptions and ReaderOptions of the
// pulsar-client-go this module builds with (go.mod), and no field that
// is gone: upgrading the client fails here until the table says what
// Meridian does with each new option. Each row is supported, not
// supported or client-side only; a supported row names the test that
// backs it, and that test exists.
func TestClientOptionsTableCoversEveryOption(t *testing.T) {
	doc, err := os.ReadFile("../docs/broker.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `((?:Producer|Consumer|Reader)Options)\\.(\\w+)` \\| ([^|]+) \\|[^|]*\\|[^|]*\\| ([^|]*) \\|$")
	rows := map[string][2]string{} // struct.field → status, tests
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		key := m[1] + "." + m[2]
		if _, dup := rows[key]; dup {
			t.Errorf("docs/broker.md: %s has two rows", key)
		}
		rows[key] = [2]string{strings.TrimSpace(m[3]), strings.TrimSpace(m[4])}
	}
	want := map[string]bool{}
	for _, typ := range []reflect.Type{reflect.TypeOf(pulsar.ProducerOptions{}), reflect.TypeOf(pulsar.ConsumerOptions{}), reflect.TypeOf(pulsar.ReaderOptions{})} {
		for i := range typ.NumField() {
			key := typ.Name() + "." + typ.Field(i).Name
			want[key] = true
			if _, ok := rows[key]; !ok {
				t.Errorf("docs/broker.md's client options table has no row `%s` (an option of the client in go.mod): say whether Meridian supports it", key)
			}
		}
	}
	for key := range rows {
		if !want[key] {
			t.Errorf("docs/broker.md's client options table has a row `%s`, which the client in go.mod does not have", key)
		}
	}
	tests := testFuncs(t)
	named := regexp.MustCompile("`(Test\\w+)(?:/([\\w-]+))?`")
	for key, r := range rows {
		status, cite := r[0], r[1]
		switch {
		case status == "supported" || strings.HasPrefix(status, "supported "):
			if !named.MatchString(cite) {
				t.Errorf("%s is supported, but its row names no test", key)
			}
		case status == "not supported" || strings.HasPrefix(status, "not supported "), status == "client-side only":
		default:
			t.Errorf("%s: status %q, want supported, not supported or client-side only", key, status)
		}
		for _, m := range named.FindAllStringSubmatch(cite, -1) {
			file, ok := tests[m[1]]
			if !ok {
				t.Errorf("%s cites %s, which is no test of the module", key, m[1])
				continue
			}
			if m[2] != "" && !strings.Contains(file, `t.Run("`+m[2]+`"`) {
				t.Errorf("%s cites %s/%s: %s has no such subtest", key, m[1], m[2], m[1])
			}
		}
	}
	if len(want) < 50 {
		t.Fatalf("reflection found only %d options", len(want))
	}
}

// testFuncs maps each test function of the module to its file's text.
func testFuncs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	fn := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fn.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Issue 35: the client options with broker behaviour that no other test
// covers, each with the unmodified client against a real standalone.
func TestClientOptions(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir())
	client := newPulsarClient(t, s.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// ProducerOptions.Name: a second producer of the same name on a topic
	// is refused (ProducerBusy) while the first is connected, as Pulsar.
	t.Run("producer-name", func(t *testing.T) {
		topic := topicName(t)
		p1, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "only-one"})
		if err != nil {
			t.Fatal(err)
		}
		if p1.Name() != "only-one" {
			t.Fatalf("producer name %q, want only-one", p1.Name())
		}
		if p2, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "only-one"}); err == nil {
			p2.Close()
			t.Fatal("a second producer named only-one joined the topic")
		} else if !strings.Contains(err.Error(), "ProducerBusy") {
			t.Fatalf("second producer of the name: %v, want ProducerBusy", err)
		}
		p1.Close()
		p2, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "only-one"})
		if err != nil {
			t.Fatalf("once the first left: %v", err)
		}
		p2.Close()
	})

	// ProducerOptions.CompressionType: compressed batches are stored and
	// delivered as sent; the consumer decompresses them.
	t.Run("compression", func(t *testing.T) {
		for _, ct := range []pulsar.CompressionType{pulsar.LZ4, pulsar.ZLib, pulsar.ZSTD, pulsar.SNAPPY} {
			topic := topicName(t)
			c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
			if err != nil {
				t.Fatal(err)
			}
			p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, CompressionType: ct, BatchingMaxPublishDelay: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			const n = 20
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(strings.Repeat(fmt.Sprintf("m%02d ", i), 200))}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err != nil {
						t.Errorf("send: %v", err)
					}
					wg.Done()
				})
			}
			wg.Wait()
			for i := range n {
				m, err := c.Receive(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if want := strings.Repeat(fmt.Sprintf("m%02d ", i), 200); string(m.Payload()) != want {
					t.Fatalf("compression %d: message %d arrived as %.20q…, want %.20q…", ct, i, m.Payload(), want)
				}
				c.Ack(m)
			}
			p.Close()
			c.Close()
		}
	})

	// ProducerOptions.BatcherBuilderType KeyBasedBatchBuilder on Key_Shared:
	// a batch holds one key, and a key's batches all reach one consumer.
	t.Run("key-based-batching", func(t *testing.T) {
		topic := topicName(t)
		owner := map[string]string{}
		var mu sync.Mutex
		got := 0
		done := make(chan struct{})
		const n = 200
		for _, name := range []string{"c1", "c2"} {
			c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ks", Type: pulsar.KeyShared, Name: name})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go func() {
				for {
					m, err := c.Receive(ctx)
					if err != nil {
						return
					}
					c.Ack(m)
					mu.Lock()
					if o, ok := owner[m.Key()]; ok && o != name {
						t.Errorf("key %s reached %s and %s", m.Key(), o, name)
					}
					owner[m.Key()] = name
					if got++; got == n {
						close(done)
					}
					mu.Unlock()
				}
			}()
		}
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatcherBuilderType: pulsar.KeyBasedBatchBuilder,
			BatchingMaxPublishDelay: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		produce(t, p, n, func(i int) string { return fmt.Sprintf("k%d", i%8) })
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatalf("received %d of %d", got, n)
		}
		mu.Lock()
		defer mu.Unlock()
		consumers := map[string]bool{}
		for _, c := range owner {
			consumers[c] = true
		}
		if len(owner) != 8 || len(consumers) != 2 {
			t.Fatalf("keys %v: want 8 keys spread over both consumers", owner)
		}
	})

	// ProducerOptions.PartitionsAutoDiscoveryInterval and
	// ConsumerOptions.AutoDiscoveryPeriod: partitions added to a topic
	// (POST .../partitions) are found by a running producer and consumer.
	t.Run("partition-discovery", func(t *testing.T) {
		topic := topicName(t)
		adminPath := strings.Replace(topic, "persistent://", s.AdminURL+"/admin/v2/persistent/", 1) + "/partitions"
		if code, body := adminCall(t, "PUT", adminPath, 1); code/100 != 2 {
			t.Fatalf("create 1 partition: %d %s", code, body)
		}
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", AutoDiscoveryPeriod: time.Second,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, PartitionsAutoDiscoveryInterval: time.Second,
			MessageRouter: func(_ *pulsar.ProducerMessage, md pulsar.TopicMetadata) int { return int(md.NumPartitions()) - 1 }})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if code, body := adminCall(t, "POST", adminPath, 2); code/100 != 2 {
			t.Fatalf("add a partition: %d %s", code, body)
		}
		testutil.Eventually(t, 30*time.Second, "the producer sends to the new partition", func() bool {
			id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("to-the-last")})
			return err == nil && id.PartitionIdx() == 1
		})
		for {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatalf("the consumer never received from the new partition: %v", err)
			}
			c.Ack(m)
			if m.ID().PartitionIdx() == 1 {
				break
			}
		}
	})

	// ReaderOptions.SubscriptionName and Name: the reader's non-durable
	// subscription and its consumer carry them (topic stats), and the
	// subscription goes when the reader closes.
	t.Run("reader-names", func(t *testing.T) {
		topic := topicName(t)
		r, err := client.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(),
			SubscriptionName: "my-reader-sub", Name: "my-reader"})
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Subscriptions map[string]struct {
				IsDurable bool `json:"isDurable"`
				Consumers []struct {
					ConsumerName string `json:"consumerName"`
				} `json:"consumers"`
			} `json:"subscriptions"`
		}
		stats := func() {
			t.Helper()
			code, b := adminCall(t, "GET", s.AdminURL+"/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/stats", nil)
			if code != 200 {
				t.Fatalf("stats: %d %s", code, b)
			}
			st.Subscriptions = nil
			if err := json.Unmarshal(b, &st); err != nil {
				t.Fatal(err)
			}
		}
		stats()
		ss, ok := st.Subscriptions["my-reader-sub"]
		if !ok || ss.IsDurable || len(ss.Consumers) != 1 || ss.Consumers[0].ConsumerName != "my-reader" {
			t.Fatalf("subscriptions %+v: want a non-durable my-reader-sub with the consumer my-reader", st.Subscriptions)
		}
		r.Close()
		testutil.Eventually(t, 10*time.Second, "the reader's subscription is gone once it closed", func() bool {
			stats()
			_, ok := st.Subscriptions["my-reader-sub"]
			return !ok
		})
	})

	// ConsumerOptions.AutoDiscoveryPeriod with TopicsPattern: a topic
	// created later that matches is subscribed.
	t.Run("pattern-discovery", func(t *testing.T) {
		base := topicName(t)
		c, err := client.Subscribe(pulsar.ConsumerOptions{TopicsPattern: regexp.QuoteMeta(base) + "-.*", SubscriptionName: "s",
			AutoDiscoveryPeriod: time.Second, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: base + "-later"})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("found")}); err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		defer rcancel()
		m, err := c.Receive(rctx)
		if err != nil || string(m.Payload()) != "found" {
			t.Fatalf("pattern consumer: %v %v, want the message of the topic created after it", m, err)
		}
	})
}
