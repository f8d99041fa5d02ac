package broker_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
)

func standalone(t *testing.T) *testutil.Standalone {
	t.Helper()
	return testutil.StartStandalone(t, t.TempDir())
}

func receiveN(t testing.TB, c pulsar.Consumer, n int, ack bool) []pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := make([]pulsar.Message, 0, n)
	for len(out) < n {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(out), n, err)
		}
		out = append(out, m)
		if ack {
			if err := c.Ack(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// Broker issue test 1: 10,000 messages with batching and 10,000 without,
// consumed all, in order, with Exclusive.
func TestProduceConsumeExclusiveInOrder(t *testing.T) {
	s := standalone(t)
	client := newPulsarClient(t, s.URL)
	for _, batching := range []bool{true, false} {
		t.Run("batching="+strconv.FormatBool(batching), func(t *testing.T) {
			topic := topicName(t)
			cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Exclusive, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: !batching, BatchingMaxPublishDelay: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			const n = 10000
			ids := produce(t, prod, n, nil)
			msgs := receiveN(t, cons, n, true)
			for i, m := range msgs {
				if string(m.Payload()) != strconv.Itoa(i) {
					t.Fatalf("message %d: got %q (out of order or lost)", i, m.Payload())
				}
				if m.ID().LedgerID() != ids[i].LedgerID() || m.ID().EntryID() != ids[i].EntryID() || m.ID().BatchIdx() != ids[i].BatchIdx() {
					t.Fatalf("message %d: id %v, receipt said %v", i, m.ID(), ids[i])
				}
			}
		})
	}
}

// Shared with 3 consumers: every message delivered exactly once across
// them (disjoint and complete).
func TestSharedDeliversEachMessageOnce(t *testing.T) {
	s := standalone(t)
	client := newPulsarClient(t, s.URL)
	topic := topicName(t)
	var consumers []pulsar.Consumer
	for i := 0; i < 3; i++ {
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "shared", Type: pulsar.Shared, ReceiverQueueSize: 50})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		consumers = append(consumers, c)
	}
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	produce(t, prod, n, nil)
	var mu sync.Mutex
	seen := map[string]int{}
	per := make([]int, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	done := make(chan struct{})
	for i, c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := c.Receive(ctx)
				if err != nil {
					return
				}
				c.Ack(m)
				mu.Lock()
				seen[string(m.Payload())]++
				per[i]++
				total := len(seen)
				mu.Unlock()
				if total == n {
					select {
					case <-done:
					default:
						close(done)
					}
				}
			}
		}()
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("received %d distinct of %d", len(seen), n)
	}
	// Give a would-be duplicate a moment to arrive.
	time.Sleep(500 * time.Millisecond)
	cancel()
	wg.Wait()
	for k, v := range seen {
		if v != 1 {
			t.Fatalf("message %s delivered %d times", k, v)
		}
	}
	for i, c := range per {
		if c == 0 {
			t.Fatalf("consumer %d got nothing: %v", i, per)
		}
	}
	t.Logf("spread over consumers: %v", per)
}

// Failover with 2 consumers: the active one dies mid-stream; the other
// becomes active and continues in order.
func TestFailoverSubscriptionTakeover(t *testing.T) {
	s := standalone(t)
	topic := topicName(t)
	c1client := newPulsarClient(t, s.URL)
	c2client := newPulsarClient(t, s.URL)
	var events sync.Map
	mk := func(cl pulsar.Client, name string) pulsar.Consumer {
		c, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "fo", Type: pulsar.Failover, Name: name,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: 10,
			EventListener: &activeListener{name: name, m: &events}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := mk(c1client, "a-consumer") // sorts first: active
	b := mk(c2client, "b-consumer")
	defer b.Close()
	prod, err := newPulsarClient(t, s.URL).CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	produce(t, prod, n, nil)
	got := receiveN(t, a, 200, true)
	for i, m := range got {
		if string(m.Payload()) != strconv.Itoa(i) {
			t.Fatalf("active consumer message %d: %q", i, m.Payload())
		}
	}
	c1client.Close() // the active consumer's process goes away
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	next := 200
	for next < n {
		m, err := b.Receive(ctx)
		if err != nil {
			t.Fatalf("standby got %d..%d then: %v", 200, next, err)
		}
		v, _ := strconv.Atoi(string(m.Payload()))
		if v != next {
			t.Fatalf("after takeover: got %d, want %d (in order, nothing acked redelivered)", v, next)
		}
		b.Ack(m)
		next++
	}
	if v, ok := events.Load("b-consumer"); !ok || !v.(bool) {
		t.Fatal("b-consumer never told it became active (ACTIVE_CONSUMER_CHANGE)")
	}
}

type activeListener struct {
	name string
	m    *sync.Map
}

func (l *activeListener) BecameActive(pulsar.Consumer, string, int32)   { l.m.Store(l.name, true) }
func (l *activeListener) BecameInactive(pulsar.Consumer, string, int32) { l.m.Store(l.name, false) }

// Key_Shared with 3 consumers and a 4th joining mid-stream: per-key order
// holds throughout and keys spread over consumers.
func TestKeySharedOrderWithJoiningConsumer(t *testing.T) {
	s := standalone(t)
	client := newPulsarClient(t, s.URL)
	topic := topicName(t)
	type rec struct {
		consumer int
		key      string
		seq      int
	}
	var mu sync.Mutex
	var log []rec
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	start := func(i int) pulsar.Consumer {
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ks", Type: pulsar.KeyShared,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: 20, Name: "c" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := c.Receive(ctx)
				if err != nil {
					return
				}
				seq, _ := strconv.Atoi(string(m.Payload()))
				mu.Lock()
				log = append(log, rec{i, m.Key(), seq})
				mu.Unlock()
				time.Sleep(time.Millisecond) // slow consumers keep keys in flight
				c.Ack(m)
			}
		}()
		return c
	}
	for i := 0; i < 3; i++ {
		defer start(i).Close()
	}
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const keys, n = 20, 4000
	keyOf := func(i int) string { return "k" + strconv.Itoa(i%keys) }
	produce(t, prod, n/2, keyOf)
	defer start(3).Close() // joins mid-stream
	// second half continues the sequence
	for i := n / 2; i < n; i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i)), Key: keyOf(i)}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 2*time.Minute, "all messages received", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(log) >= n
	})
	cancel()
	wg.Wait()
	last := map[string]int{}
	owners := map[int]bool{}
	seen := map[int]bool{}
	for _, r := range log {
		if seen[r.seq] {
			t.Fatalf("message %d delivered twice", r.seq)
		}
		if prev, ok := last[r.key]; ok && r.seq < prev {
			t.Fatalf("key %s: message %d delivered after %d (per-key order broken)", r.key, r.seq, prev)
		}
		last[r.key] = r.seq
		owners[r.consumer] = true
		seen[r.seq] = true
	}
	if len(seen) != n {
		t.Fatalf("distinct messages %d, want %d", len(seen), n)
	}
	if len(owners) < 3 {
		t.Fatalf("keys did not spread: consumers used %v", owners)
	}
	if !owners[3] {
		t.Fatalf("the consumer that joined mid-stream received no key: %v", owners)
	}
}
