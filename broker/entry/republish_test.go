package entry

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/meridian-mq/meridian/broker/codec"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

func kv(k, v string) *pb.KeyValue { return &pb.KeyValue{Key: proto.String(k), Value: proto.String(v)} }

func props(kvs []*pb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, p := range kvs {
		m[p.GetKey()] = p.GetValue()
	}
	return m
}

func originProps(i, n int) map[string]string {
	return map[string]string{"meridian-origin-id": fmt.Sprintf("%d/%d", i, n), "app": "replaced"}
}

// TestRepublishSingleMessage: a message that is not a batch gets the new
// producer name and sequence id, and the properties on its metadata
// (props(-1, 1)), replacing one of the same key and keeping the others;
// its payload, key and publish time are the producer's; the checksum is
// valid again.
func TestRepublishSingleMessage(t *testing.T) {
	md := &pb.MessageMetadata{ProducerName: proto.String("orig"), SequenceId: proto.Uint64(41), PublishTime: proto.Uint64(1700000000000),
		PartitionKey: proto.String("k"), Properties: []*pb.KeyValue{kv("app", "x"), kv("keep", "y")}, ReplicatedFrom: proto.String("east")}
	msg, err := codec.EncodeMessage(md, []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	orig := bytes.Clone(msg)
	out, n, err := Republish(msg, "meridian-republish-east", 7<<20, originProps)
	if err != nil || n != 1 {
		t.Fatalf("Republish: n %d, %v", n, err)
	}
	if !bytes.Equal(msg, orig) {
		t.Fatal("the input changed")
	}
	got, payload, err := codec.ParseMessage(out) // checks the checksum
	if err != nil {
		t.Fatal(err)
	}
	if got.GetProducerName() != "meridian-republish-east" || got.GetSequenceId() != 7<<20 || got.HighestSequenceId != nil || got.ReplicatedFrom != nil {
		t.Fatalf("metadata %v", got)
	}
	if got.GetPublishTime() != 1700000000000 || got.GetPartitionKey() != "k" || string(payload) != "payload" {
		t.Fatalf("the message changed: %v %q", got, payload)
	}
	if p := props(got.Properties); len(p) != 3 || p["meridian-origin-id"] != "-1/1" || p["app"] != "replaced" || p["keep"] != "y" {
		t.Fatalf("properties %v", p)
	}
}

// TestRepublishBatch: in an uncompressed batch every single message gets
// the properties (props(i, n)) and its sequence id, the entry seq ..
// seq+n-1 (highest_sequence_id), and the payloads stay; a compressed
// batch (which cannot be rewritten without its codec) gets them on the
// outer metadata, its payload byte for byte.
func TestRepublishBatch(t *testing.T) {
	var body []byte
	for i := range 3 {
		var err error
		body, err = codec.AppendBatchEntry(body, &pb.SingleMessageMetadata{SequenceId: proto.Uint64(uint64(10 + i)), Properties: []*pb.KeyValue{kv("i", fmt.Sprint(i))}}, fmt.Appendf(nil, "m%d", i))
		if err != nil {
			t.Fatal(err)
		}
	}
	md := &pb.MessageMetadata{ProducerName: proto.String("orig"), SequenceId: proto.Uint64(10), PublishTime: proto.Uint64(1), NumMessagesInBatch: proto.Int32(3), HighestSequenceId: proto.Uint64(12)}
	msg, err := codec.EncodeMessage(md, body)
	if err != nil {
		t.Fatal(err)
	}
	out, n, err := Republish(msg, "r", 5<<20, originProps)
	if err != nil || n != 3 {
		t.Fatalf("Republish: n %d, %v", n, err)
	}
	got, payload, err := codec.ParseMessage(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetSequenceId() != 5<<20 || got.GetHighestSequenceId() != 5<<20+2 || len(got.Properties) != 0 {
		t.Fatalf("metadata %v", got)
	}
	msgs, err := codec.ParseBatch(payload, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		p := props(m.Meta.Properties)
		if p["meridian-origin-id"] != fmt.Sprintf("%d/3", i) || p["i"] != fmt.Sprint(i) || m.Meta.GetSequenceId() != uint64(5<<20+i) || string(m.Payload) != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d: %v %q", i, m.Meta, m.Payload)
		}
	}

	md.Compression = pb.CompressionType_LZ4.Enum()
	msg, err = codec.EncodeMessage(md, []byte("compressed bytes"))
	if err != nil {
		t.Fatal(err)
	}
	out, n, err = Republish(msg, "r", 5<<20, originProps)
	if err != nil || n != 3 {
		t.Fatalf("Republish compressed: n %d, %v", n, err)
	}
	got, payload, err = codec.ParseMessage(out)
	if err != nil {
		t.Fatal(err)
	}
	if p := props(got.Properties); p["meridian-origin-id"] != "-1/3" || string(payload) != "compressed bytes" {
		t.Fatalf("compressed batch: properties %v, payload %q", p, payload)
	}
}

// TestRepublishRefusesChunksAndBadInput: a chunk of a chunked message is
// ErrNotRepublishable, bytes that are no message part ErrBadEntry.
func TestRepublishRefusesChunksAndBadInput(t *testing.T) {
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1), NumChunksFromMsg: proto.Int32(3), ChunkId: proto.Int32(1), Uuid: proto.String("u")}
	msg, err := codec.EncodeMessage(md, []byte("chunk"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Republish(msg, "r", 1<<20, originProps); !errors.Is(err, ErrNotRepublishable) {
		t.Fatalf("a chunk: %v, want ErrNotRepublishable", err)
	}
	if _, _, err := Republish([]byte("not a message"), "r", 1<<20, originProps); !errors.Is(err, ErrBadEntry) {
		t.Fatalf("garbage: %v, want ErrBadEntry", err)
	}
}

// TestSameMessageTellsAResendFromAnotherMessage: a message sent again by
// its producer (the same bytes; or the same message with metadata a
// broker set, here ReplicatedFrom) is the same; another payload, key,
// sequence id or producer under the same sequence id is not; garbage is
// never the same.
func TestSameMessageTellsAResendFromAnotherMessage(t *testing.T) {
	enc := func(producer string, seq uint64, key, payload string, mod func(*pb.MessageMetadata)) []byte {
		md := &pb.MessageMetadata{ProducerName: proto.String(producer), SequenceId: proto.Uint64(seq), PublishTime: proto.Uint64(1700000000000), PartitionKey: proto.String(key)}
		if mod != nil {
			mod(md)
		}
		b, err := codec.EncodeMessage(md, []byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	orig := enc("p", 5, "k", "hello", nil)
	for _, c := range []struct {
		name string
		b    []byte
		same bool
	}{
		{"the same bytes", bytes.Clone(orig), true},
		{"replicated from east", enc("p", 5, "k", "hello", func(md *pb.MessageMetadata) { md.ReplicatedFrom = proto.String("east") }), true},
		{"another payload", enc("p", 5, "k", "hellp", nil), false},
		{"another key", enc("p", 5, "j", "hello", nil), false},
		{"another sequence id", enc("p", 6, "k", "hello", nil), false},
		{"another producer", enc("q", 5, "k", "hello", nil), false},
		{"a batch of two", enc("p", 5, "k", "hello", func(md *pb.MessageMetadata) {
			md.NumMessagesInBatch = proto.Int32(2)
			md.HighestSequenceId = proto.Uint64(6)
		}), false},
		{"garbage", []byte{0x0e, 0x01, 1, 2, 3}, false},
	} {
		if got := SameMessage(orig, c.b); got != c.same {
			t.Errorf("%s: SameMessage %v, want %v", c.name, got, c.same)
		}
		if got := SameMessage(c.b, orig); got != c.same {
			t.Errorf("%s (swapped): SameMessage %v, want %v", c.name, got, c.same)
		}
	}
}
