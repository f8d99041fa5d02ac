package broker_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// Broker issue test 2: negative-ack redelivery, cumulative ack, readers
// from earliest and from a message id, seek by id and by time,
// HasNext/GetLastMessageID — on one standalone.
func TestConsumerAndReaderFeatures(t *testing.T) {
	s := standalone(t)
	client := newPulsarClient(t, s.URL)

	t.Run("nack-redelivery", func(t *testing.T) {
		topic := topicName(t)
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, NackRedeliveryDelay: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p, _ := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		produce(t, p, 10, nil)
		msgs := receiveN(t, c, 10, false)
		for _, m := range msgs {
			if m.Payload()[0] == '3' || m.Payload()[0] == '7' {
				c.Nack(m)
			} else {
				c.Ack(m)
			}
		}
		again := receiveN(t, c, 2, true)
		got := map[string]bool{string(again[0].Payload()): true, string(again[1].Payload()): true}
		if !got["3"] || !got["7"] {
			t.Fatalf("redelivered %v, want 3 and 7", got)
		}
		if again[0].RedeliveryCount() == 0 {
			t.Fatal("redelivery count not set")
		}
	})

	t.Run("cumulative-ack", func(t *testing.T) {
		topic := topicName(t)
		opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "cum", Type: pulsar.Exclusive, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest}
		c, err := client.Subscribe(opts)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		produce(t, p, 20, nil)
		msgs := receiveN(t, c, 20, false)
		if err := c.AckCumulative(msgs[11]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // the client flushes grouped acks every 100 ms
		c.Close()
		c, err = client.Subscribe(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		m := receiveN(t, c, 1, false)[0]
		if string(m.Payload()) != "12" {
			t.Fatalf("after cumulative ack of 11 and a resubscribe, got %q first, want 12", m.Payload())
		}
	})

	t.Run("exclusive-producer-and-unsubscribe", func(t *testing.T) {
		topic := topicName(t)
		p1, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
		if err != nil {
			t.Fatal(err)
		}
		if p2, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil {
			p2.Close()
			t.Fatal("a second producer joined a topic with an exclusive producer")
		} else if !strings.Contains(err.Error(), "ProducerBusy") {
			t.Fatalf("second producer: %v, want ProducerBusy", err)
		}
		p1.Close()
		p2, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatalf("after the exclusive producer left: %v", err)
		}
		p2.Close()

		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "gone"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
		code, body := adminCall(t, "GET", s.AdminURL+"/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/subscriptions", nil)
		if code != 200 || strings.Contains(string(body), "gone") {
			t.Fatalf("subscriptions after unsubscribe: %d %s", code, body)
		}
	})

	t.Run("readers-seek-hasnext", func(t *testing.T) {
		topic := topicName(t)
		p, _ := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		ids := produce(t, p, 50, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		r, err := client.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 50; i++ {
			if !r.HasNext() {
				t.Fatalf("HasNext false at %d", i)
			}
			m, err := r.Next(ctx)
			if err != nil || string(m.Payload()) != strconv.Itoa(i) {
				t.Fatalf("reader from earliest at %d: %v %q", i, err, m.Payload())
			}
		}
		if r.HasNext() {
			t.Fatal("HasNext true at the end of the topic")
		}
		r.Close()

		r, err = client.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: ids[20]})
		if err != nil {
			t.Fatal(err)
		}
		m, err := r.Next(ctx)
		if err != nil || string(m.Payload()) != "21" {
			t.Fatalf("reader from id of 20 (exclusive): %v %q", err, m.Payload())
		}
		r.Close()
		r, err = client.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: ids[20], StartMessageIDInclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		m, err = r.Next(ctx)
		if err != nil || string(m.Payload()) != "20" {
			t.Fatalf("reader from id of 20 (inclusive): %v %q", err, m.Payload())
		}
		r.Close()

		// Inclusive, as the Go client's own TestConsumerSeek: without it the
		// client itself discards the message at the seek id.
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "seeker", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, StartMessageIDInclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		receiveN(t, c, 50, true)
		if err := c.Seek(ids[10]); err != nil {
			t.Fatal(err)
		}
		m = receiveN(t, c, 1, true)[0]
		if string(m.Payload()) != "10" {
			t.Fatalf("after seek to id of 10: %q", m.Payload())
		}
		// Seek by time: everything was published before now, nothing after.
		mid := time.Now()
		time.Sleep(20 * time.Millisecond)
		produce(t, p, 5, func(int) string { return "" })
		if err := c.SeekByTime(mid); err != nil {
			t.Fatal(err)
		}
		m = receiveN(t, c, 1, true)[0]
		if string(m.Payload()) != "0" || m.PublishTime().Before(mid) {
			t.Fatalf("after seek by time: %q published %v (mid %v)", m.Payload(), m.PublishTime(), mid)
		}
	})
}
