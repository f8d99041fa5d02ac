package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// Issue 35's "last message ids and zero-queue consumers across
// partitions": what pulsar-client-go v0.19.0 offers on partitioned,
// multi-topic and regex subscriptions, on one standalone.
func TestLastMessageIDsAndZeroQueueAcrossPartitions(t *testing.T) {
	s := standalone(t)
	client := newPulsarClient(t, s.URL)
	base := fmt.Sprintf("persistent://public/default/lastids-%d", time.Now().UnixNano())
	part := base + "-p"
	if code, body := adminCall(t, "PUT", strings.Replace(part, "persistent://", s.AdminURL+"/admin/v2/persistent/", 1)+"/partitions", 3); code/100 != 2 {
		t.Fatalf("create partitioned topic: %d %s", code, body)
	}

	// The last id the producer was given on each topic (partition).
	sendAll := func(topic string, n int) map[string]pulsar.MessageID {
		t.Helper()
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		last := map[string]pulsar.MessageID{}
		for i := range n {
			id, err := p.Send(context.Background(), &pulsar.ProducerMessage{Key: "k" + strconv.Itoa(i), Payload: []byte(strconv.Itoa(i))})
			if err != nil {
				t.Fatal(err)
			}
			name := topic
			if id.PartitionIdx() >= 0 && strings.HasSuffix(topic, "-p") {
				name = fmt.Sprintf("%s-partition-%d", topic, id.PartitionIdx())
			}
			last[name] = id
		}
		return last
	}
	wantLast := func(t *testing.T, c pulsar.Consumer, want map[string]pulsar.MessageID) {
		t.Helper()
		got, err := c.GetLastMessageIDs()
		if err != nil {
			t.Fatalf("GetLastMessageIDs: %v", err)
		}
		if len(got) != len(want) {
			t.Fatalf("GetLastMessageIDs: %d ids %v, want %d (%v)", len(got), got, len(want), want)
		}
		for _, id := range got {
			w, ok := want[id.Topic()]
			if !ok {
				t.Fatalf("GetLastMessageIDs: topic %q not subscribed (want %v)", id.Topic(), want)
			}
			if id.LedgerID() != w.LedgerID() || id.EntryID() != w.EntryID() {
				t.Fatalf("GetLastMessageIDs: %s at %d:%d, the producer's last is %d:%d", id.Topic(), id.LedgerID(), id.EntryID(), w.LedgerID(), w.EntryID())
			}
		}
	}

	lastPart := sendAll(part, 30)
	if len(lastPart) != 3 {
		t.Fatalf("30 keyed messages landed on %d partitions, want 3", len(lastPart))
	}
	lastA, lastB := sendAll(base+"-a", 5), sendAll(base+"-b", 7)
	lastAB := map[string]pulsar.MessageID{}
	for k, v := range lastA {
		lastAB[k] = v
	}
	for k, v := range lastB {
		lastAB[k] = v
	}

	t.Run("last-ids-partitioned", func(t *testing.T) {
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: part, SubscriptionName: "last"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wantLast(t, c, lastPart)
	})
	t.Run("last-ids-multi-topic", func(t *testing.T) {
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topics: []string{base + "-a", base + "-b"}, SubscriptionName: "last"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wantLast(t, c, lastAB)
	})
	t.Run("last-ids-regex", func(t *testing.T) {
		c, err := client.Subscribe(pulsar.ConsumerOptions{TopicsPattern: base + "-[ab]$", SubscriptionName: "last"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wantLast(t, c, lastAB)
	})

	t.Run("reader-partitioned", func(t *testing.T) {
		r, err := client.CreateReader(pulsar.ReaderOptions{Topic: part, StartMessageID: pulsar.EarliestMessageID()})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		seen := map[string]int{}
		for r.HasNext() {
			m, err := r.Next(ctx)
			if err != nil {
				t.Fatalf("after %d messages: %v", len(seen), err)
			}
			seen[string(m.Payload())]++
		}
		if len(seen) != 30 {
			t.Fatalf("a reader on a 3-partition topic read %d distinct messages before HasNext said no more, want 30", len(seen))
		}
		for p, n := range seen {
			if n != 1 {
				t.Fatalf("message %s read %d times", p, n)
			}
		}
	})

	t.Run("zero-queue-on-a-partition", func(t *testing.T) {
		topic := part + "-partition-1"
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "zq", EnableZeroQueueConsumer: true,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		want := lastPart[topic]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var prev pulsar.MessageID
		for n := 0; ; n++ {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatalf("after %d messages: %v", n, err)
			}
			if prev != nil && m.ID().EntryID() <= prev.EntryID() && m.ID().LedgerID() == prev.LedgerID() {
				t.Fatalf("zero-queue consumer got %v after %v", m.ID(), prev)
			}
			if err := c.Ack(m); err != nil {
				t.Fatal(err)
			}
			prev = m.ID()
			if m.ID().LedgerID() == want.LedgerID() && m.ID().EntryID() == want.EntryID() {
				break
			}
		}
		// Nothing else is queued for it: a zero-queue consumer asks for one
		// message at a time, and there is none left.
		short, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel2()
		if m, err := c.Receive(short); err == nil {
			t.Fatalf("a message past the partition's last: %v", m.ID())
		}
	})

	t.Run("ack-with-response-multi-topic", func(t *testing.T) {
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topics: []string{base + "-a", base + "-b"}, SubscriptionName: "awr",
			AckWithResponse: true, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, m := range receiveN(t, c, 12, false) {
			done := make(chan error, 1)
			go func() { done <- c.Ack(m) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("ack with response of %v: %v", m.ID(), err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("ack with response of %v on a multi-topic consumer still blocked after 10 s", m.ID())
			}
		}
	})

	t.Run("expired-send-context", func(t *testing.T) {
		topic := base + "-ctx"
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ctx"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("cancelled")}); !errors.Is(err, context.Canceled) {
			t.Fatalf("send with a cancelled context: %v, want context.Canceled", err)
		}
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
			t.Fatalf("send after a cancelled one: %v", err)
		}
		got := receiveN(t, c, 1, true)
		if string(got[0].Payload()) != "after" {
			t.Fatalf("first message %q, want the one sent after the cancelled send", got[0].Payload())
		}
	})
}

// SendTimeout as the client expects: a broker that stops answering (the
// standalone SIGSTOPped, so nothing resets the connection) fails pending
// sends with ErrSendTimeout after SendTimeout, and once it answers again
// the same producer sends; what was acknowledged before is delivered once.
func TestSendTimeoutAgainstAStoppedBroker(t *testing.T) {
	s := standalone(t)
	client := newPulsarClient(t, s.URL)
	topic := topicName(t)
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	s.Signal(syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			s.Signal(syscall.SIGCONT)
		}
	}()
	start := time.Now()
	_, err = p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("stopped")})
	took := time.Since(start)
	if !errors.Is(err, pulsar.ErrSendTimeout) {
		t.Fatalf("send to a stopped broker: %v after %s, want ErrSendTimeout", err, took)
	}
	if took > 10*time.Second {
		t.Fatalf("ErrSendTimeout after %s with SendTimeout 1s", took)
	}
	s.Signal(syscall.SIGCONT)
	stopped = false

	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the producer does not send a minute after the broker resumed: %v", err)
		}
	}
	// What the consumer gets: "before", then "after" (possibly more than
	// once if a send was retried after a timeout the client reported),
	// and "stopped" only if the broker persisted it before it stopped.
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for len(got) == 0 || got[len(got)-1] != "after" {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("received %v: %v", got, err)
		}
		got = append(got, string(m.Payload()))
	}
	count := map[string]int{}
	for _, g := range got {
		count[g]++
	}
	if got[0] != "before" || count["before"] != 1 || count["stopped"] > 1 || len(count) > 3 {
		t.Fatalf("received %v, want \"before\" once and first, then at most one \"stopped\" (a timed-out send's outcome is unknown to the client), then \"after\"", got)
	}
	t.Logf("received %v; ErrSendTimeout after %s", got, took)
}
