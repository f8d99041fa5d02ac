package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/broker/codec"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// chunkMaxMessageSize is the standalone's max message size in these tests
// (issue 35: "a broker whose max message size is set to 1 MiB").
const chunkMaxMessageSize = 1 << 20

// Issue 35, chunking (PIP-37), with the unmodified Go client against one
// `meridian standalone --max-message-size 1048576`: the broker announces
// the limit in CONNECTED; a producer with EnableChunking splits a 5 MiB
// message into chunks of at most 1 MiB, each stored as an entry of its own
// (they share the message's sequence id: only the last is a deduplication
// point), and the consumer reassembles them byte for byte — after an ack
// and a reconnect, a nack, a seek to the chunked message's id, on a
// multi-topic consumer, and across a kill -9 between two chunks.
func TestChunking(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir(), "--max-message-size", "1048576")
	client := newPulsarClient(t, s.URL)

	// CONNECTED carries max_message_size; the client holds its producers
	// to it: a 2 MiB message without chunking is refused by the client
	// itself (it never reaches the broker).
	t.Run("announced", func(t *testing.T) {
		c := connectRaw(t, s.URL)
		if got := c.GetMaxMessageSize(); got != chunkMaxMessageSize {
			t.Fatalf("CONNECTED max_message_size %d, want %d", got, chunkMaxMessageSize)
		}
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topicName(t), DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		_, err = p.Send(context.Background(), &pulsar.ProducerMessage{Payload: make([]byte, 2<<20)})
		if !errors.Is(err, pulsar.ErrMessageTooLarge) {
			t.Fatalf("a 2 MiB message without chunking under a 1 MiB limit: %v, want ErrMessageTooLarge", err)
		}
	})

	// A 5 MiB message between two small ones: received whole,
	// byte-identical, in order; its id spans its first and last chunk
	// (6 entries: 1 MiB less the metadata per chunk); the ids the
	// producer and the consumer see agree.
	t.Run("whole", func(t *testing.T) {
		topic := topicName(t)
		cons := subscribeEarliest(t, client, topic, "s")
		p := chunkingProducer(t, client, topic)
		big := randomPayload(1, 5<<20)
		sendAll(t, p, []byte("before"), big, []byte("after"))
		got := receiveN(t, cons, 3, true)
		if string(got[0].Payload()) != "before" || string(got[2].Payload()) != "after" {
			t.Fatalf("around the chunked message: %q, %q", got[0].Payload(), got[2].Payload())
		}
		wantWhole(t, got[1], big)
		first, last := chunkSpan(t, got[1].ID())
		if last.EntryID()-first.EntryID() != 5 {
			t.Fatalf("chunked message id %s: %d entries, want 6 chunks of at most 1 MiB", got[1].ID(), last.EntryID()-first.EntryID()+1)
		}
	})

	// Acknowledging the chunked message acknowledges every chunk: after a
	// reconnect nothing of it comes back (the next message is the one
	// after it) and, once that one is acknowledged, the backlog is empty.
	t.Run("ack", func(t *testing.T) {
		topic := topicName(t)
		opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, AckWithResponse: true}
		cons, err := client.Subscribe(opts)
		if err != nil {
			t.Fatal(err)
		}
		p := chunkingProducer(t, client, topic)
		big := randomPayload(2, 5<<20)
		sendAll(t, p, big, []byte("next"))
		m := receiveN(t, cons, 1, false)[0]
		wantWhole(t, m, big)
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
		cons.Close()
		cons, err = client.Subscribe(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		next := receiveN(t, cons, 1, true)[0]
		if string(next.Payload()) != "next" {
			t.Fatalf("after acking the chunked message and reconnecting: got %d bytes (%s), want \"next\"", len(next.Payload()), next.ID())
		}
		testutil.Eventually(t, 30*time.Second, "an empty backlog", func() bool {
			return topicStats(t, s.AdminURL, topic).Subscriptions["s"].MsgBacklog == 0
		})
	})

	// A nack redelivers the chunked message whole.
	t.Run("nack", func(t *testing.T) {
		topic := topicName(t)
		cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
			NackRedeliveryDelay: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		p := chunkingProducer(t, client, topic)
		big := randomPayload(3, 5<<20)
		sendAll(t, p, big)
		m := receiveN(t, cons, 1, false)[0]
		wantWhole(t, m, big)
		cons.Nack(m)
		again := receiveN(t, cons, 1, true)[0]
		wantWhole(t, again, big)
		if again.ID().String() != m.ID().String() {
			t.Fatalf("redelivered as %s, first delivered as %s", again.ID(), m.ID())
		}
	})

	// A seek to a chunked message's id (the consumer's chunk message id,
	// which the client turns into its first chunk's) delivers it again
	// whole, and what followed it.
	t.Run("seek", func(t *testing.T) {
		topic := topicName(t)
		cons := subscribeEarliest(t, client, topic, "s")
		p := chunkingProducer(t, client, topic)
		a, b := randomPayload(4, 3<<20), randomPayload(5, 3<<20)
		sendAll(t, p, a, b, []byte("small"))
		got := receiveN(t, cons, 3, true)
		wantWhole(t, got[1], b)
		if err := cons.Seek(got[1].ID()); err != nil {
			t.Fatal(err)
		}
		again := receiveN(t, cons, 2, true)
		wantWhole(t, again[0], b)
		if string(again[1].Payload()) != "small" {
			t.Fatalf("after the sought chunked message: %d bytes, want \"small\"", len(again[1].Payload()))
		}
	})

	// A multi-topic consumer reassembles the chunked messages of each
	// topic (its chunks come from one topic's partition consumer).
	// Acknowledging them is the client's limitation (below).
	t.Run("multi-topic", func(t *testing.T) {
		topics := []string{topicName(t) + "-a", topicName(t) + "-b"}
		cons, err := client.Subscribe(pulsar.ConsumerOptions{Topics: topics, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		want := map[string][]byte{}
		for i, topic := range topics {
			want[topic] = randomPayload(int64(10+i), 3<<20)
			sendAll(t, chunkingProducer(t, client, topic), want[topic])
		}
		for _, m := range receiveN(t, cons, 2, false) {
			w, ok := want[m.Topic()]
			if !ok {
				t.Fatalf("a message of %s: %d bytes, already received or not sent", m.Topic(), len(m.Payload()))
			}
			wantWhole(t, m, w)
			delete(want, m.Topic())
			// The Go client v0.19.0 cannot acknowledge a chunked message
			// on a multi-topic consumer: its AckID turns the chunk
			// message id into a tracking id without the partition
			// consumer ("unable to ack message because consumer is nil"),
			// before anything reaches the broker.
			if err := cons.Ack(m); err != nil {
				t.Logf("multi-topic ack of a chunked message (a client limitation): %v", err)
			}
		}
	})

	// A partitioned topic: each partition's producer chunks its messages
	// and the partitioned consumer reassembles and acknowledges them
	// (its ack, unlike the multi-topic consumer's, finds the partition).
	t.Run("partitioned", func(t *testing.T) {
		topic := topicName(t)
		if code, b := adminCall(t, "PUT", s.AdminURL+"/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/partitions", 2); code/100 != 2 {
			t.Fatalf("create partitioned topic: %d %s", code, b)
		}
		cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, AckWithResponse: true})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		p := chunkingProducer(t, client, topic)
		want := map[string]bool{}
		var sent [][]byte
		for i := range 4 {
			b := randomPayload(int64(20+i), 2<<20)
			want[string(b)] = true
			sent = append(sent, b)
		}
		sendAll(t, p, sent...)
		partitions := map[string]bool{}
		for _, m := range receiveN(t, cons, len(sent), true) {
			if !want[string(m.Payload())] {
				t.Fatalf("message %s of %s: %d bytes, not one sent whole (or received twice)", m.ID(), m.Topic(), len(m.Payload()))
			}
			delete(want, string(m.Payload()))
			partitions[m.Topic()] = true
		}
		if len(partitions) != 2 {
			t.Logf("the chunked messages went to %d of 2 partitions", len(partitions))
		}
	})

	// Deduplication at the last chunk only, also when the dedup state is
	// rebuilt from the log after a kill -9: chunks 0 and 1 of a message
	// are stored, the standalone dies, the producer comes back under its
	// name and sends the last chunk — stored (its own position), not
	// taken for a resend of the first chunks, whose sequence id it
	// shares; a consumer reassembles the three. A resend of the last
	// chunk is then a duplicate, answered with its position.
	t.Run("dedup-across-restart", func(t *testing.T) {
		topic := topicName(t)
		whole := randomPayload(6, 3000)
		parts := [][]byte{whole[:1000], whole[1000:2000], whole[2000:]}
		r := dialRaw(t, s.URL)
		rawNamedProducer(t, r, topic, 1, "chunky")
		var before []*pb.MessageIdData
		for i := range 2 {
			r.write(chunkFrame(t, 1, "chunky", 0, i, len(parts), len(whole), parts[i]))
			before = append(before, wantReceipt(t, r))
		}
		if before[0].GetEntryId() == before[1].GetEntryId() {
			t.Fatalf("chunks 0 and 1 answered with one position %v: the second taken for a resend", before[0])
		}
		s.Restart()
		r = dialRaw(t, s.URL)
		rawNamedProducer(t, r, topic, 1, "chunky")
		r.write(chunkFrame(t, 1, "chunky", 0, 2, len(parts), len(whole), parts[2]))
		last := wantReceipt(t, r)
		for _, b := range before {
			if last.GetLedgerId() == b.GetLedgerId() && last.GetEntryId() == b.GetEntryId() {
				t.Fatalf("the last chunk after the restart answered with an earlier chunk's position %v: deduplicated against it, not stored", b)
			}
		}
		r.write(chunkFrame(t, 1, "chunky", 0, 2, len(parts), len(whole), parts[2]))
		if dup := wantReceipt(t, r); dup.GetLedgerId() != last.GetLedgerId() || dup.GetEntryId() != last.GetEntryId() {
			t.Fatalf("a resend of the last chunk answered with %v, want its position %v", dup, last)
		}
		client := newPulsarClient(t, s.URL)
		wantWhole(t, receiveN(t, subscribeEarliest(t, client, topic, "s"), 1, true)[0], whole)
	})
}

// connectRaw dials url, sends CONNECT and returns the CONNECTED.
func connectRaw(t *testing.T, url string) *pb.CommandConnected {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "pulsar://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := &rawConn{t: t, c: c, dec: codec.NewDecoder(c, 64<<20)}
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{ClientVersion: proto.String("raw-test"), ProtocolVersion: proto.Int32(20)}})
	f := r.next()
	if f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("want CONNECTED, got %v", f.Cmd)
	}
	return f.Cmd.GetConnected()
}

func subscribeEarliest(t *testing.T, client pulsar.Client, topic, sub string) pulsar.Consumer {
	t.Helper()
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// chunkingProducer splits what exceeds the broker's announced max message
// size (chunking needs batching off).
func chunkingProducer(t *testing.T, client pulsar.Client, topic string) pulsar.Producer {
	t.Helper()
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, EnableChunking: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func sendAll(t *testing.T, p pulsar.Producer, payloads ...[]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, b := range payloads {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: b}); err != nil {
			t.Fatalf("send %d bytes: %v", len(b), err)
		}
	}
}

func randomPayload(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// wantWhole fails unless m is the chunked message want, byte for byte.
func wantWhole(t *testing.T, m pulsar.Message, want []byte) {
	t.Helper()
	if got := m.Payload(); !bytes.Equal(got, want) {
		t.Fatalf("message %s: %d bytes, want the %d sent (equal prefix %d)", m.ID(), len(got), len(want), commonPrefix(got, want))
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// chunkSpan is a chunked message's first and last chunk's ids (the Go
// client's chunk message id prints as FIRST;LAST).
func chunkSpan(t *testing.T, id pulsar.MessageID) (first, last pulsar.MessageID) {
	t.Helper()
	f, l, ok := strings.Cut(id.String(), ";")
	if !ok {
		t.Fatalf("message id %s is no chunk message id", id)
	}
	parse := func(s string) pulsar.MessageID {
		var ledger, entry, partition int64
		if _, err := fmt.Sscanf(s, "%d:%d:%d", &ledger, &entry, &partition); err != nil {
			t.Fatalf("chunk id %q: %v", s, err)
		}
		return pulsar.NewMessageID(ledger, entry, -1, int32(partition))
	}
	return parse(f), parse(l)
}

// rawNamedProducer creates producer id on r under name (the broker keys
// deduplication by it).
func rawNamedProducer(t *testing.T, r *rawConn, topic string, id uint64, name string) {
	t.Helper()
	cmd := rawProducerCmd(topic, id, pb.ProducerAccessMode_Shared, nil)
	cmd.Producer.ProducerName = proto.String(name)
	r.send(cmd)
	if f := r.next(); f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer %s: %v", name, f.Cmd)
	}
}

// chunkFrame is the SEND of chunk chunkID of numChunks of the message
// seq of producer name, as the Go client writes it (is_chunk, the uuid
// NAME-SEQ, the whole message's size as total_chunk_msg_size and as
// uncompressed_size: the Go consumer reads the reassembled payload only
// when uncompressed_size is set).
func chunkFrame(t *testing.T, producerID uint64, name string, seq uint64, chunkID, numChunks, totalSize int, part []byte) []byte {
	t.Helper()
	md := &pb.MessageMetadata{ProducerName: proto.String(name), SequenceId: proto.Uint64(seq), PublishTime: proto.Uint64(1),
		Uuid: proto.String(name + "-0"), ChunkId: proto.Int32(int32(chunkID)), NumChunksFromMsg: proto.Int32(int32(numChunks)),
		TotalChunkMsgSize: proto.Int32(int32(totalSize)), UncompressedSize: proto.Uint32(uint32(totalSize))}
	msg, err := codec.EncodeMessage(md, part)
	if err != nil {
		t.Fatal(err)
	}
	b, err := codec.AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(producerID), SequenceId: proto.Uint64(seq), NumMessages: proto.Int32(1), IsChunk: proto.Bool(true)}}, nil, msg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wantReceipt(t *testing.T, r *rawConn) *pb.MessageIdData {
	t.Helper()
	f := r.next()
	if f.Cmd.GetType() != pb.BaseCommand_SEND_RECEIPT {
		t.Fatalf("want SEND_RECEIPT, got %v", f.Cmd)
	}
	return f.Cmd.GetSendReceipt().GetMessageId()
}

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
