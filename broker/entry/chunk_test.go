package entry

import (
	"testing"

	"github.com/meridian-mq/meridian/broker/codec"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// TestChunkCompletesMessage: of a chunked message (PIP-37: every chunk
// carries the message's sequence id and uuid, chunk_id and
// num_chunks_from_msg) only the last chunk completes it, and so is the
// deduplication point; a whole message, a one-chunk message and a message
// whose metadata does not parse complete themselves. ParseMeta and
// CompletesMessage agree.
func TestChunkCompletesMessage(t *testing.T) {
	msg := func(chunkID, numChunks *int32) []byte {
		md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(7), PublishTime: proto.Uint64(1),
			ChunkId: chunkID, NumChunksFromMsg: numChunks}
		if numChunks != nil {
			md.Uuid = proto.String("p-7")
			md.TotalChunkMsgSize = proto.Int32(3 << 20)
		}
		b, err := codec.EncodeMessage(md, []byte("chunk bytes"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		name               string
		chunkID, numChunks *int32
		completes          bool
	}{
		{"whole message", nil, nil, true},
		{"first of 3", proto.Int32(0), proto.Int32(3), false},
		{"middle of 3", proto.Int32(1), proto.Int32(3), false},
		{"last of 3", proto.Int32(2), proto.Int32(3), true},
		{"the only chunk", proto.Int32(0), proto.Int32(1), true},
	} {
		b := msg(c.chunkID, c.numChunks)
		if got := CompletesMessage(b); got != c.completes {
			t.Errorf("%s: CompletesMessage %v, want %v", c.name, got, c.completes)
		}
		m, err := ParseMeta(Encode(1, Origin{Seq: 1}, b))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if m.Completes() != c.completes || m.SequenceID != 7 {
			t.Errorf("%s: ParseMeta %+v: Completes %v, want %v", c.name, m, m.Completes(), c.completes)
		}
	}
	if !CompletesMessage([]byte("no metadata")) {
		t.Error("a message without metadata does not complete: it would escape deduplication")
	}
}
