package broker_test

import (
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/broker/codec"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// rawConn is a hand-driven protocol connection for hostile input.
type rawConn struct {
	t   *testing.T
	c   net.Conn
	dec *codec.Decoder
}

func dialRaw(t *testing.T, url string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "pulsar://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := &rawConn{t: t, c: c, dec: codec.NewDecoder(c, 64<<20)}
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{ClientVersion: proto.String("raw-test"), ProtocolVersion: proto.Int32(20)}})
	if f := r.next(); f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("want CONNECTED, got %v", f.Cmd.GetType())
	}
	return r
}

func (r *rawConn) send(cmd *pb.BaseCommand) {
	r.t.Helper()
	b, err := codec.AppendCommand(nil, cmd)
	if err != nil {
		r.t.Fatal(err)
	}
	r.write(b)
}

func (r *rawConn) write(b []byte) {
	r.t.Helper()
	r.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) next() codec.Frame {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := r.dec.Next()
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	return f
}

// closedByBroker reports whether the broker closed the connection.
func (r *rawConn) closedByBroker() bool {
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, err := r.dec.Next()
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

func (r *rawConn) ping() {
	r.t.Helper()
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	for {
		if f := r.next(); f.Cmd.GetType() == pb.BaseCommand_PONG {
			return
		}
	}
}

func (r *rawConn) producer(topic string, id uint64) *pb.BaseCommand {
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(100 + id)}})
	return r.next().Cmd
}

func sendFrame(t *testing.T, producerID, seq uint64, payload []byte) []byte {
	msg, err := codec.EncodeMessage(&pb.MessageMetadata{ProducerName: proto.String("raw"), SequenceId: proto.Uint64(seq), PublishTime: proto.Uint64(1)}, payload)
	if err != nil {
		t.Fatal(err)
	}
	b, err := codec.AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(producerID), SequenceId: proto.Uint64(seq), NumMessages: proto.Int32(1)}}, nil, msg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Broker issue test 5: bad input gets a clear error or a closed
// connection, the broker keeps serving every other client, and nothing
// acknowledged is lost.
func TestBadInput(t *testing.T) {
	s := standalone(t)
	good := newPulsarClient(t, s.URL)
	topic := topicName(t)
	prod, err := good.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	before := produce(t, prod, 100, nil)

	t.Run("garbage", func(t *testing.T) {
		r := dialRaw(t, s.URL)
		r.write([]byte{0, 0, 0, 12, 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		if !r.closedByBroker() {
			t.Fatal("malformed frame did not close the connection")
		}
	})
	t.Run("bad-checksum", func(t *testing.T) {
		r := dialRaw(t, s.URL)
		if c := r.producer(topic, 1); c.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
			t.Fatalf("producer: %v %v", c.GetType(), c.GetError())
		}
		f := sendFrame(t, 1, 0, []byte("hello"))
		f[len(f)-1] ^= 0xff // corrupt the payload after the checksum was computed
		r.write(f)
		if !r.closedByBroker() {
			t.Fatal("a message with a bad checksum did not close the connection")
		}
	})
	t.Run("unknown-command", func(t *testing.T) {
		r := dialRaw(t, s.URL)
		// BaseCommand{type: 999} by hand: field 1 varint.
		body := protoVarintField(1, 999)
		f := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
		f = binary.BigEndian.AppendUint32(f, uint32(len(body)))
		r.write(append(f, body...))
		r.ping() // the connection still serves
	})
	t.Run("invalid-topic-name", func(t *testing.T) {
		r := dialRaw(t, s.URL)
		c := r.producer("persistent://public/../x", 2)
		if c.GetType() != pb.BaseCommand_ERROR || c.GetError().GetError() != pb.ServerError_TopicNotFound {
			t.Fatalf("bad name: got %v %v", c.GetType(), c.GetError())
		}
		c = r.producer("persistent://nosuchtenant/nosuchns/x", 3)
		if c.GetType() != pb.BaseCommand_ERROR || !strings.Contains(c.GetError().GetMessage(), "does not exist") {
			t.Fatalf("missing namespace: got %v %v", c.GetType(), c.GetError())
		}
		r.ping()
	})
	t.Run("oversize", func(t *testing.T) {
		r := dialRaw(t, s.URL)
		if c := r.producer(topic, 4); c.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
			t.Fatalf("producer: %v", c.GetError())
		}
		r.write(sendFrame(t, 4, 1000, make([]byte, 6<<20)))
		// Skipped without a SEND_ERROR (which would make a client resend in a
		// loop); the connection and its producer keep working.
		r.write(sendFrame(t, 4, 1001, []byte("small")))
		for {
			f := r.next()
			if f.Cmd.GetType() == pb.BaseCommand_SEND_RECEIPT {
				if f.Cmd.GetSendReceipt().GetSequenceId() != 1001 {
					t.Fatalf("receipt for %d", f.Cmd.GetSendReceipt().GetSequenceId())
				}
				break
			}
		}
	})

	// The good client still works and nothing acknowledged was lost.
	after := produce(t, prod, 10, nil)
	c, err := good.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := receiveN(t, c, 111, true) // 100 + 1 raw "small" + 10
	ids := map[string]bool{}
	for _, m := range got {
		ids[m.ID().String()] = true
	}
	for _, id := range append(before, after...) {
		if !ids[id.String()] {
			t.Fatalf("acknowledged message %v missing", id)
		}
	}
}

func protoVarintField(num int, v uint64) []byte {
	b := []byte{byte(num<<3 | 0)}
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}
