package entry

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/meridian-mq/meridian/broker/codec"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// ErrNotRepublishable is a message Republish cannot re-address: a chunk
// of a chunked message (its chunks would need to travel as one).
var ErrNotRepublishable = errors.New("broker: message cannot be republished")

// Republish returns msg (a message part as stored: magic, checksum,
// metadata, payload) re-addressed to be appended again by the broker
// (an orphan of a failover put back in its topic, broker/replication/
// republish.go): producer name producer, sequence ids seq.. seq+n-1 for
// a batch of n, and the properties props(i, n) added to each message i
// (i = -1 for a message that is not a batch), replacing any of the same
// key. The payload, keys, event times and the client's publish time are
// kept. The properties go where the client reads them: a batch's single
// messages, unless the batch is compressed or encrypted (its messages
// cannot be rewritten without its keys or its codec), in which case they
// go on the outer metadata (props(-1, n); admin peek shows them, the Go
// client does not). The checksum is computed again. It also returns n.
// It does not alias msg.
func Republish(msg []byte, producer string, seq int64, props func(i, n int) map[string]string) ([]byte, int, error) {
	md, payload, err := codec.ParseMessage(msg)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrBadEntry, err)
	}
	if md.GetNumChunksFromMsg() > 1 {
		return nil, 0, fmt.Errorf("%w: chunk %d of a message of %d chunks", ErrNotRepublishable, md.GetChunkId(), md.GetNumChunksFromMsg())
	}
	if seq < 0 {
		return nil, 0, fmt.Errorf("%w: sequence id %d", ErrNotRepublishable, seq)
	}
	n := 1
	batch := md.NumMessagesInBatch != nil
	if batch {
		n = max(int(md.GetNumMessagesInBatch()), 1)
	}
	md.ProducerName = proto.String(producer)
	md.SequenceId = proto.Uint64(uint64(seq))
	md.HighestSequenceId = nil
	if n > 1 {
		md.HighestSequenceId = proto.Uint64(uint64(seq) + uint64(n) - 1)
	}
	md.ReplicatedFrom = nil
	rewritable := batch && md.GetCompression() == pb.CompressionType_NONE && len(md.EncryptionKeys) == 0
	if !rewritable {
		md.Properties = setProperties(md.Properties, props(-1, n))
		out, err := codec.EncodeMessage(md, payload)
		return out, n, err
	}
	msgs, err := codec.ParseBatch(payload, n)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrBadEntry, err)
	}
	var body []byte
	for i, m := range msgs {
		smm := proto.Clone(m.Meta).(*pb.SingleMessageMetadata)
		smm.Properties = setProperties(smm.Properties, props(i, n))
		if smm.SequenceId != nil {
			smm.SequenceId = proto.Uint64(uint64(seq) + uint64(i))
		}
		if body, err = codec.AppendBatchEntry(body, smm, m.Payload); err != nil {
			return nil, 0, err
		}
	}
	if md.UncompressedSize != nil {
		md.UncompressedSize = proto.Uint32(uint32(len(body)))
	}
	out, err := codec.EncodeMessage(md, body)
	return out, n, err
}

// setProperties returns kvs with set's keys set (replaced where present,
// else appended in key order).
func setProperties(kvs []*pb.KeyValue, set map[string]string) []*pb.KeyValue {
	out := make([]*pb.KeyValue, 0, len(kvs)+len(set))
	for _, kv := range kvs {
		if _, ok := set[kv.GetKey()]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		out = append(out, &pb.KeyValue{Key: proto.String(k), Value: proto.String(set[k])})
	}
	return out
}

// SameMessage reports whether two stored messages (Decoded.Msg) are one
// producer's one message sent twice: the same producer name, sequence ids,
// partition key and payload bytes (a client that sends a message again
// after a reconnect sends the same bytes). What a broker may set on its
// own (publish and event times stay the client's; the rest of the
// metadata) is not compared. Either unparsable: false.
func SameMessage(a, b []byte) bool {
	ma, pa, err := parseMessageMetadata(a)
	if err != nil {
		return false
	}
	mb, pb2, err := parseMessageMetadata(b)
	if err != nil {
		return false
	}
	return ma.GetProducerName() == mb.GetProducerName() &&
		ma.GetSequenceId() == mb.GetSequenceId() &&
		ma.GetHighestSequenceId() == mb.GetHighestSequenceId() &&
		ma.GetNumMessagesInBatch() == mb.GetNumMessagesInBatch() &&
		ma.GetPartitionKey() == mb.GetPartitionKey() &&
		bytes.Equal(pa, pb2)
}
