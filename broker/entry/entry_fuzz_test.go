package entry

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"

	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/mledger"
	"google.golang.org/protobuf/proto"
)

// FuzzParseEntryMeta feeds hostile stored entries to the entry decoders
// that dispatch and dedup replay run on every entry read: no panic; a
// refusal is errBadEntry; an accepted entry re-encodes to the same bytes.
func FuzzParseEntryMeta(f *testing.F) {
	encodeEntryV1 := func(publishMs int64, msg []byte) []byte {
		b := binary.BigEndian.AppendUint16(nil, entryTagV1)
		b = binary.BigEndian.AppendUint64(b, uint64(publishMs))
		return append(b, msg...)
	}
	msg := func(md *pb.MessageMetadata, payload []byte) []byte {
		b, err := codec.EncodeMessage(md, payload)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	base := func() *pb.MessageMetadata {
		return &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(7), PublishTime: proto.Uint64(1)}
	}
	f.Add(Encode(1700000000000, Origin{Seq: 1}, msg(base(), []byte("hello"))))
	f.Add(Encode(1700000000000, Origin{Region: "east", Seq: 9, ID: mledger.Position{Ledger: 12, Entry: 3}}, msg(base(), []byte("hello"))))
	f.Add(encodeEntryV1(1700000000000, msg(base(), []byte("hello"))))
	keyed := base()
	keyed.PartitionKey = proto.String("k")
	keyed.EventTime = proto.Uint64(5)
	f.Add(Encode(1, Origin{}, msg(keyed, nil)))
	var batch []byte
	for i := range 3 {
		var err error
		batch, err = codec.AppendBatchEntry(batch, &pb.SingleMessageMetadata{PartitionKey: proto.String("b"), SequenceId: proto.Uint64(uint64(i))}, []byte("x"))
		if err != nil {
			f.Fatal(err)
		}
	}
	bm := base()
	bm.NumMessagesInBatch = proto.Int32(3)
	bm.HighestSequenceId = proto.Uint64(9)
	f.Add(Encode(2, Origin{}, msg(bm, batch)))
	bm.NumMessagesInBatch = proto.Int32(-5)
	f.Add(Encode(2, Origin{}, msg(bm, batch)))
	f.Add([]byte{})
	f.Add([]byte{0x4d, 0x01})
	f.Add(append(Encode(3, Origin{}, nil), 0x0e, 0x01, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff))

	f.Fuzz(func(t *testing.T, b []byte) {
		d, derr := Decode(b)
		re := Encode(d.PublishMs, d.Origin, d.Msg)
		if derr == nil && binary.BigEndian.Uint16(b) == entryTagV1 {
			re = encodeEntryV1(d.PublishMs, d.Msg)
		}
		if derr == nil && !bytes.Equal(re, b) {
			t.Fatalf("entry %x does not re-encode", b)
		}
		m, err := ParseMeta(b)
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("parseEntryMeta: %v is not errBadEntry", err)
			}
			return
		}
		if derr != nil || m.PublishMs != d.PublishMs {
			t.Fatalf("parseEntryMeta accepted what decodeEntry refused (%v) or changed the publish time", derr)
		}
	})
}
