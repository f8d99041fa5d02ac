package codec

// Interop with the real pulsar-client-go v0.19.0: a minimal fake broker on
// a loopback port, built only from this package, answers the client's
// handshake, lookup, producer and consumer commands. The client's frames
// are the ground truth for the decoder; the client's acceptance of our
// frames (CONNECTED, SEND_RECEIPT, MESSAGE with CRC and broker-entry
// metadata) is the ground truth for the encoder.

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"google.golang.org/protobuf/proto"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

var updateCorpus = flag.Bool("update-corpus", false,
	"rewrite testdata/fuzz/FuzzDecode/client-* with frames captured from pulsar-client-go")

const interopTopic = "persistent://public/default/codec-interop"

// fakeBroker serves one topic on a loopback port. Each connection is
// handled by one goroutine that decodes a frame and answers it.
type fakeBroker struct {
	t    *testing.T
	ln   net.Listener
	url  string
	wg   sync.WaitGroup
	acks chan *pb.CommandAck

	// deliver is sent to a consumer on its first FLOW, as entries
	// (1, 0), (1, 1), ...
	deliver [][]byte
	// bem is attached to deliveries when the client supports it.
	bem *pb.BrokerEntryMetadata

	mu        sync.Mutex
	conns     []net.Conn
	captured  [][]byte // every connection's raw inbound stream
	sends     []Frame
	connects  []*pb.CommandConnect
	nextEntry uint64
	delivered bool
}

func newFakeBroker(t *testing.T) *fakeBroker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{t: t, ln: ln, url: "pulsar://" + ln.Addr().String(), acks: make(chan *pb.CommandAck, 100)}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.stop)
	return b
}

func (b *fakeBroker) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.conns = append(b.conns, c)
		idx := len(b.captured)
		b.captured = append(b.captured, nil)
		b.mu.Unlock()
		b.wg.Add(1)
		go b.serve(c, idx)
	}
}

func (b *fakeBroker) stop() {
	b.ln.Close()
	b.mu.Lock()
	for _, c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// captureWriter appends a connection's inbound bytes to b.captured[idx].
type captureWriter struct {
	b   *fakeBroker
	idx int
}

func (w captureWriter) Write(p []byte) (int, error) {
	w.b.mu.Lock()
	w.b.captured[w.idx] = append(w.b.captured[w.idx], p...)
	w.b.mu.Unlock()
	return len(p), nil
}

func (b *fakeBroker) serve(c net.Conn, idx int) {
	defer b.wg.Done()
	defer c.Close()
	dec := NewDecoder(io.TeeReader(c, captureWriter{b, idx}), DefaultMaxFrameSize)
	supportsBEM := false
	write := func(cmd *pb.BaseCommand, payload []byte) bool {
		var out []byte
		var err error
		if payload == nil {
			out, err = AppendCommand(nil, cmd)
		} else {
			bem := b.bem
			if !supportsBEM {
				bem = nil
			}
			out, err = AppendPayloadCommand(nil, cmd, bem, payload)
		}
		if err != nil {
			b.t.Errorf("encode %v: %v", cmd.GetType(), err)
			return false
		}
		_, err = c.Write(out)
		return err == nil
	}
	for {
		f, err := dec.Next()
		if err != nil {
			if err != io.EOF && !isClosedConn(err) {
				b.t.Errorf("decode client frame: %v", err)
			}
			return
		}
		cmd := f.Cmd
		var reply *pb.BaseCommand
		switch cmd.GetType() {
		case pb.BaseCommand_CONNECT:
			b.mu.Lock()
			b.connects = append(b.connects, cmd.GetConnect())
			b.mu.Unlock()
			supportsBEM = cmd.GetConnect().GetFeatureFlags().GetSupportsBrokerEntryMetadata()
			reply = Connected("meridian-codec-test", 20, DefaultMaxMessageSize, true)
		case pb.BaseCommand_PARTITIONED_METADATA:
			reply = PartitionedMetadata(cmd.GetPartitionMetadata().GetRequestId(), 0)
		case pb.BaseCommand_LOOKUP:
			reply = LookupConnect(cmd.GetLookupTopic().GetRequestId(), b.url, "", false)
		case pb.BaseCommand_PRODUCER:
			reply = ProducerSuccess(cmd.GetProducer().GetRequestId(), "p-1", -1, nil)
		case pb.BaseCommand_SEND:
			s := cmd.GetSend()
			if err := VerifyChecksum(f.Payload); err != nil {
				b.t.Errorf("SEND %d: %v", s.GetSequenceId(), err)
			}
			b.mu.Lock()
			b.sends = append(b.sends, f)
			entry := b.nextEntry
			b.nextEntry++
			b.mu.Unlock()
			highest := max(s.GetHighestSequenceId(), s.GetSequenceId()+uint64(s.GetNumMessages())-1)
			reply = SendReceipt(s.GetProducerId(), s.GetSequenceId(), highest, 1, entry)
		case pb.BaseCommand_SUBSCRIBE:
			reply = Success(cmd.GetSubscribe().GetRequestId())
		case pb.BaseCommand_FLOW:
			b.mu.Lock()
			first := !b.delivered
			b.delivered = true
			b.mu.Unlock()
			if first {
				for i, m := range b.deliver {
					if !write(Message(cmd.GetFlow().GetConsumerId(), MessageID(1, uint64(i)), 0, nil), m) {
						return
					}
				}
			}
		case pb.BaseCommand_ACK:
			b.acks <- cmd.GetAck()
		case pb.BaseCommand_CLOSE_PRODUCER:
			reply = Success(cmd.GetCloseProducer().GetRequestId())
		case pb.BaseCommand_CLOSE_CONSUMER:
			reply = Success(cmd.GetCloseConsumer().GetRequestId())
		case pb.BaseCommand_PING:
			reply = Pong()
		case pb.BaseCommand_PONG:
		default:
			b.t.Errorf("unexpected command from the client: %v", cmd)
		}
		if reply != nil && !write(reply, nil) {
			return
		}
	}
}

func isClosedConn(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "use of closed network connection") ||
		strings.Contains(err.Error(), "connection reset by peer"))
}

// frames splits the captured inbound streams into raw frames.
func (b *fakeBroker) frames(t *testing.T) [][]byte {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out [][]byte
	for _, s := range b.captured {
		for len(s) > 0 {
			if len(s) < 4 {
				t.Fatalf("captured stream ends with %d stray bytes", len(s))
			}
			n := 4 + int(binary.BigEndian.Uint32(s))
			if n > len(s) {
				// The client may have been closed mid-frame; ignore the tail.
				break
			}
			out = append(out, s[:n:n])
			s = s[n:]
		}
	}
	return out
}

func newClient(t *testing.T, url string) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               url,
		ConnectionTimeout: 2 * time.Second,
		OperationTimeout:  3 * time.Second,
		Logger:            plog.DefaultNopLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkCaptured re-parses every raw frame the client sent with ParseFrame,
// and saves them as fuzz seeds when -update-corpus is given.
func checkCaptured(t *testing.T, b *fakeBroker, name string) {
	t.Helper()
	frames := b.frames(t)
	if len(frames) == 0 {
		t.Fatal("captured no frames")
	}
	seen := map[string]int{}
	for _, raw := range frames {
		f, err := ParseFrame(raw)
		if err != nil {
			t.Fatalf("captured frame rejected by ParseFrame: %v\n% x", err, raw)
		}
		typ := f.Cmd.GetType().String()
		seen[typ]++
		if *updateCorpus && seen[typ] <= 2 {
			dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, fmt.Sprintf("client-%s-%s-%d", name, typ, seen[typ]))
			if err := os.WriteFile(file, []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", raw)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestInteropProducer drives the real client's producer against the fake
// broker: the client's CONNECT, PARTITIONED_METADATA, LOOKUP, PRODUCER and
// SEND frames decode; its message parts pass the CRC32C check and carry the
// key and payload sent; and the client accepts our SEND_RECEIPT, returning
// MessageID (ledger 1, entry 0) — ids of 0 survive the wire.
func TestInteropProducer(t *testing.T) {
	for _, batching := range []bool{false, true} {
		name := map[bool]string{false: "single", true: "batch"}[batching]
		t.Run(name, func(t *testing.T) {
			b := newFakeBroker(t)
			client := newClient(t, b.url)
			defer client.Close()
			opts := pulsar.ProducerOptions{Topic: interopTopic, DisableBatching: !batching}
			const n = 5
			if batching {
				opts.BatchingMaxMessages = n
				opts.BatchingMaxPublishDelay = time.Minute
			}
			producer, err := client.CreateProducer(opts)
			if err != nil {
				t.Fatalf("CreateProducer: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			if !batching {
				for i := range 2 {
					id, err := producer.Send(ctx, &pulsar.ProducerMessage{
						Payload:    []byte(fmt.Sprintf("hello-%d", i)),
						Key:        fmt.Sprintf("k%d", i),
						Properties: map[string]string{"i": fmt.Sprint(i)},
					})
					if err != nil {
						t.Fatalf("Send %d: %v", i, err)
					}
					if id.LedgerID() != 1 || id.EntryID() != int64(i) {
						t.Fatalf("Send %d returned %v, want ledger 1 entry %d", i, id, i)
					}
				}
			} else {
				ids := make(chan pulsar.MessageID, n)
				for i := range n {
					producer.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%d", i)), Key: "k"},
						func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
							if err != nil {
								t.Errorf("SendAsync: %v", err)
							}
							ids <- id
						})
				}
				if err := producer.FlushWithCtx(ctx); err != nil {
					t.Fatalf("Flush: %v", err)
				}
				for range n {
					select {
					case id := <-ids:
						if id == nil || id.LedgerID() != 1 || id.EntryID() != 0 || id.BatchSize() != n {
							t.Fatalf("batched id %v, want ledger 1 entry 0 in a batch of %d", id, n)
						}
					case <-ctx.Done():
						t.Fatal("SendAsync callbacks did not all run")
					}
				}
			}
			producer.Close()
			client.Close()
			b.stop()

			b.mu.Lock()
			sends, connects := b.sends, b.connects
			b.mu.Unlock()
			if len(connects) == 0 || !strings.HasPrefix(connects[0].GetClientVersion(), "Pulsar-Go-") || connects[0].GetProtocolVersion() != 20 {
				t.Fatalf("CONNECT %v", connects)
			}
			checkSends(t, sends, batching, n)
			checkCaptured(t, b, name)
		})
	}
}

func checkSends(t *testing.T, sends []Frame, batching bool, n int) {
	t.Helper()
	if !batching {
		if len(sends) != 2 {
			t.Fatalf("%d SEND frames, want 2", len(sends))
		}
		for i, f := range sends {
			meta, payload, err := ParseMessage(f.Payload)
			if err != nil {
				t.Fatalf("SEND %d: %v", i, err)
			}
			if f.Cmd.GetSend().GetSequenceId() != uint64(i) || meta.GetSequenceId() != uint64(i) ||
				meta.GetProducerName() != "p-1" || meta.GetPartitionKey() != fmt.Sprintf("k%d", i) ||
				string(payload) != fmt.Sprintf("hello-%d", i) || meta.NumMessagesInBatch != nil {
				t.Fatalf("SEND %d: cmd %v meta %v payload %q", i, f.Cmd.GetSend(), meta, payload)
			}
		}
		return
	}
	if len(sends) != 1 {
		t.Fatalf("%d SEND frames, want 1 batch", len(sends))
	}
	meta, payload, err := ParseMessage(sends[0].Payload)
	if err != nil {
		t.Fatal(err)
	}
	if sends[0].Cmd.GetSend().GetNumMessages() != int32(n) || meta.GetNumMessagesInBatch() != int32(n) {
		t.Fatalf("batch SEND %v, meta %v", sends[0].Cmd.GetSend(), meta)
	}
	msgs, err := ParseBatch(payload, int(meta.GetNumMessagesInBatch()))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		if string(m.Payload) != fmt.Sprintf("m-%d", i) || m.Meta.GetSequenceId() != uint64(i) || m.Meta.GetPartitionKey() != "k" {
			t.Fatalf("batch message %d: %v %q", i, m.Meta, m.Payload)
		}
	}
}

// TestInteropConsumer drives the real client's consumer: after SUBSCRIBE
// and FLOW the fake broker delivers MESSAGE frames built by this package —
// one single message and one batch of three, with broker-entry metadata —
// and the client must accept their checksums, decode them and report ids
// (1, 0) and (1, 1); its ACK then decodes with the acknowledged id.
func TestInteropConsumer(t *testing.T) {
	b := newFakeBroker(t)
	now := uint64(time.Now().UnixMilli())
	single := mustMessage(t, &pb.MessageMetadata{
		ProducerName: proto.String("p-1"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(now),
		PartitionKey: proto.String("k0"),
		Properties:   []*pb.KeyValue{{Key: proto.String("a"), Value: proto.String("b")}},
	}, []byte("first"))
	var batch []byte
	for i := range 3 {
		var err error
		batch, err = AppendBatchEntry(batch, &pb.SingleMessageMetadata{SequenceId: proto.Uint64(uint64(1 + i)), PartitionKey: proto.String("kb")}, []byte(fmt.Sprintf("b-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
	}
	batched := mustMessage(t, &pb.MessageMetadata{
		ProducerName: proto.String("p-1"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(now),
		NumMessagesInBatch: proto.Int32(3), HighestSequenceId: proto.Uint64(3),
	}, batch)
	b.deliver = [][]byte{single, batched}
	b.bem = &pb.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(now), Index: proto.Uint64(0)}

	client := newClient(t, b.url)
	defer client.Close()
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{
		Topic: interopTopic, SubscriptionName: "sub", Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := []struct {
		entry   int64
		payload string
		key     string
	}{{0, "first", "k0"}, {1, "b-0", "kb"}, {1, "b-1", "kb"}, {1, "b-2", "kb"}}
	for i, w := range want {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive %d: %v", i, err)
		}
		id := msg.ID()
		if id.LedgerID() != 1 || id.EntryID() != w.entry || string(msg.Payload()) != w.payload || msg.Key() != w.key {
			t.Fatalf("message %d: id %v payload %q key %q; want entry %d %q %q", i, id, msg.Payload(), msg.Key(), w.entry, w.payload, w.key)
		}
		if idx := msg.Index(); idx == nil {
			t.Fatalf("message %d: broker-entry metadata not seen by the client", i)
		}
		if i == 0 {
			if msg.Properties()["a"] != "b" {
				t.Fatalf("message 0 properties %v", msg.Properties())
			}
			if err := consumer.Ack(msg); err != nil {
				t.Fatalf("Ack: %v", err)
			}
		}
	}
	select {
	case ack := <-b.acks:
		if len(ack.GetMessageId()) != 1 || ack.GetMessageId()[0].GetLedgerId() != 1 || ack.GetMessageId()[0].GetEntryId() != 0 {
			t.Fatalf("ACK %v, want (1, 0)", ack)
		}
	case <-ctx.Done():
		t.Fatal("no ACK from the client")
	}
	consumer.Close()
	client.Close()
	b.stop()
	checkCaptured(t, b, "consumer")
}
