package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// Chunking (issue 35): the Go client with EnableChunking splits a message
// larger than ChunkMaxMessageSize into chunks that share the message's
// sequence id; the broker stores every chunk (it must not take chunks 1..
// N-1 for resends of chunk 0, which it did: the producer was told 3 MiB
// were stored at chunk 0's position and the consumer never got the
// message), so the consumer reassembles each message whole, interleaved
// with small ones; an acknowledged chunked message is not delivered again
// after a resubscribe; a nacked one is redelivered whole.
func TestChunkedMessagesAreStoredAndReassembled(t *testing.T) {
	s := standalone(t)
	client := newPulsarClient(t, s.URL)
	topic := topicName(t)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, NackRedeliveryDelay: 200 * time.Millisecond}
	cons, err := client.Subscribe(opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, EnableChunking: true,
		ChunkMaxMessageSize: 1 << 20, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	want := map[string][]byte{}
	for i := range 6 {
		size := 100
		if i%2 == 0 {
			size = 3<<20 + rng.Intn(1<<20) // 4 chunks
		}
		payload := make([]byte, size)
		rng.Read(payload)
		key := fmt.Sprintf("m%d", i)
		want[key] = payload
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Key: key, Payload: payload}); err != nil {
			t.Fatalf("send %s (%d bytes): %v", key, size, err)
		}
	}
	receive := func(c pulsar.Consumer) pulsar.Message {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if w, ok := want[m.Key()]; !ok || !bytes.Equal(m.Payload(), w) {
			t.Fatalf("message %q: %d bytes, want %d byte-identical", m.Key(), len(m.Payload()), len(w))
		}
		return m
	}
	got := map[string]bool{}
	var nacked string
	for len(got) < len(want) {
		m := receive(cons)
		if got[m.Key()] && m.Key() != nacked {
			t.Fatalf("%s delivered twice", m.Key())
		}
		if m.Key() == "m2" && nacked == "" {
			nacked = "m2"
			cons.Nack(m)
			continue
		}
		got[m.Key()] = true
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	if nacked != "m2" {
		t.Fatal("the chunked message m2 was never nacked")
	}
	time.Sleep(300 * time.Millisecond) // grouped acks flush every 100 ms
	cons.Close()
	again, err := client.Subscribe(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if m, err := again.Receive(ctx); err == nil {
		t.Fatalf("after every message was acknowledged, %q (%d bytes) came again", m.Key(), len(m.Payload()))
	}
}
