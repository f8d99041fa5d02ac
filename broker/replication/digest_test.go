package replication

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/mledger"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

func message(t *testing.T, md *pb.MessageMetadata, payload []byte) []byte {
	t.Helper()
	b, err := codec.EncodeMessage(md, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func kv(k, v string) *pb.KeyValue { return &pb.KeyValue{Key: proto.String(k), Value: proto.String(v)} }

func batch(t *testing.T, payloads ...string) []byte {
	t.Helper()
	var body []byte
	for i, p := range payloads {
		var err error
		body, err = codec.AppendBatchEntry(body, &pb.SingleMessageMetadata{PartitionKey: proto.String("k"), EventTime: proto.Uint64(uint64(i)),
			Properties: []*pb.KeyValue{kv("a", "1")}}, []byte(p))
		if err != nil {
			t.Fatal(err)
		}
	}
	return message(t, &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5),
		NumMessagesInBatch: proto.Int32(int32(len(payloads)))}, body)
}

// digestOf digests msg stored as the entry of origin east, seq 7, origin
// id 40:3, published at publishMs in the holding region.
func digestOf(msg []byte, publishMs int64) uint64 {
	d, err := entry.Decode(entry.Encode(publishMs, entry.Origin{Region: "east", Seq: 7, ID: mledger.Position{Ledger: 40, Entry: 3}}, msg))
	if err != nil {
		panic(err)
	}
	return entryDigest("east", 7, 40, 3, d)
}

// The digest means the same message in every region: equal whatever the
// region sets for itself, different when a field of a message differs.
func TestEntryDigestCoversTheMessageNotItsLocalPlace(t *testing.T) {
	md := func(props ...*pb.KeyValue) *pb.MessageMetadata {
		return &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5),
			PartitionKey: proto.String("k"), EventTime: proto.Uint64(99), Properties: props}
	}
	base := digestOf(message(t, md(kv("a", "1"), kv("b", "2")), []byte("hello")), 1000)
	if got := digestOf(message(t, md(kv("a", "1"), kv("b", "2")), []byte("hello")), 2000); got != base {
		t.Fatal("the holding region's publish time changed the digest")
	}
	if got := digestOf(message(t, md(kv("b", "2"), kv("a", "1")), []byte("hello")), 1000); got != base {
		t.Fatal("the order of the properties changed the digest")
	}
	d, _ := entry.Decode(entry.Encode(1000, entry.Origin{}, message(t, md(kv("a", "1"), kv("b", "2")), []byte("hello"))))
	if entryDigest("east", 7, 40, 3, d) != base {
		t.Fatal("the entry's header (local in the origin, replicated elsewhere) changed the digest")
	}
	for name, other := range map[string]uint64{
		"payload":    digestOf(message(t, md(kv("a", "1"), kv("b", "2")), []byte("hellp")), 1000),
		"property":   digestOf(message(t, md(kv("a", "1"), kv("b", "3")), []byte("hello")), 1000),
		"key":        digestOf(message(t, &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5), PartitionKey: proto.String("j"), EventTime: proto.Uint64(99), Properties: []*pb.KeyValue{kv("a", "1"), kv("b", "2")}}, []byte("hello")), 1000),
		"event time": digestOf(message(t, &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5), PartitionKey: proto.String("k"), EventTime: proto.Uint64(98), Properties: []*pb.KeyValue{kv("a", "1"), kv("b", "2")}}, []byte("hello")), 1000),
		"origin id":  entryDigest("east", 7, 40, 4, d),
		"seq":        entryDigest("east", 8, 40, 3, d),
	} {
		if other == base {
			t.Errorf("a different %s, the same digest", name)
		}
	}
	if digestOf(batch(t, "x", "y"), 1) == digestOf(batch(t, "x", "z"), 1) {
		t.Error("a batch whose second message differs: the same digest")
	}
	if digestOf(batch(t, "x", "y"), 1) != digestOf(batch(t, "x", "y"), 2) {
		t.Error("the same batch, different digests")
	}
}
