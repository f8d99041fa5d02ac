package codec

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"google.golang.org/protobuf/proto"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendMessage appends a message part to dst: the 0x0e01 magic, the
// CRC32C of what follows it, the metadata size, meta and payload (already
// compressed, or a batch built with AppendBatchEntry). It fails, returning
// dst unchanged, if meta misses a required field (producer_name,
// sequence_id, publish_time).
func AppendMessage(dst []byte, meta *pb.MessageMetadata, payload []byte) ([]byte, error) {
	n := proto.Size(meta)
	if uint64(n)+uint64(len(payload))+messageHeaderSize > math.MaxUint32 {
		return dst, fmt.Errorf("codec: message of %d + %d bytes is too large", n, len(payload))
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, MagicCRC32C)
	dst = binary.BigEndian.AppendUint32(dst, 0) // checksum, filled below
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst, err := marshalSized(dst, meta, n)
	if err != nil {
		return dst[:start], err
	}
	dst = append(dst, payload...)
	binary.BigEndian.PutUint32(dst[start+2:], crc32.Checksum(dst[start+6:], castagnoli))
	return dst, nil
}

// EncodeMessage returns a new message part for meta and payload; see
// AppendMessage.
func EncodeMessage(meta *pb.MessageMetadata, payload []byte) ([]byte, error) {
	return AppendMessage(make([]byte, 0, messageHeaderSize+proto.Size(meta)+len(payload)), meta, payload)
}

// VerifyChecksum checks a message part's header sizes (ErrMalformed) and its
// CRC32C (ErrBadChecksum) without decoding the metadata: what a broker does
// to a SEND before storing it.
func VerifyChecksum(b []byte) error {
	if err := checkMessageHeader(b); err != nil {
		return err
	}
	want := binary.BigEndian.Uint32(b[2:])
	if got := crc32.Checksum(b[6:], castagnoli); got != want {
		return fmt.Errorf("%w: header says %#08x, bytes give %#08x", ErrBadChecksum, want, got)
	}
	return nil
}

// ParseMessage verifies a message part (see VerifyChecksum) and decodes its
// metadata, whose required fields must be present. payload aliases b: for a
// batch it is the (possibly compressed) batch, for a single message the
// message itself.
func ParseMessage(b []byte) (meta *pb.MessageMetadata, payload []byte, err error) {
	if err := VerifyChecksum(b); err != nil {
		return nil, nil, err
	}
	n := binary.BigEndian.Uint32(b[6:])
	end := messageHeaderSize + int(n)
	meta = &pb.MessageMetadata{}
	if err := proto.Unmarshal(b[messageHeaderSize:end], meta); err != nil {
		return nil, nil, fmt.Errorf("%w: message metadata: %v", ErrMalformed, err)
	}
	return meta, b[end:], nil
}

// SingleMessage is one message of a batch. Payload aliases the batch.
type SingleMessage struct {
	Meta    *pb.SingleMessageMetadata
	Payload []byte
}

// ParseBatch splits an uncompressed batch payload into its first n
// messages (n = MessageMetadata.num_messages_in_batch for all of them).
// Each record is [u32 size][SingleMessageMetadata][payload_size bytes]; a
// record cut short or undecodable is ErrMalformed. Bytes after the n-th
// record are ignored, as pulsar-client-go's reader ignores them, so
// ParseBatch(p, 1) peeks at the first message. Payloads alias payload.
func ParseBatch(payload []byte, n int) ([]SingleMessage, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: batch of %d messages", ErrMalformed, n)
	}
	// n comes from the wire: size the slice by what the bytes can hold
	// (a record is at least 4 bytes of size + 2 of payload_size).
	out := make([]SingleMessage, 0, min(n, len(payload)/6))
	b := payload
	for i := 0; i < n; i++ {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: batch message %d of %d: %d bytes left, no size", ErrMalformed, i, n, len(b))
		}
		size := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(size) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: batch message %d: metadata size %d exceeds the %d bytes left", ErrMalformed, i, size, len(b))
		}
		smm := &pb.SingleMessageMetadata{}
		if err := proto.Unmarshal(b[:size], smm); err != nil {
			return nil, fmt.Errorf("%w: batch message %d metadata: %v", ErrMalformed, i, err)
		}
		b = b[size:]
		ps := smm.GetPayloadSize()
		if ps < 0 || int64(ps) > int64(len(b)) {
			return nil, fmt.Errorf("%w: batch message %d: payload size %d, %d bytes left", ErrMalformed, i, ps, len(b))
		}
		out = append(out, SingleMessage{Meta: smm, Payload: b[:ps:ps]})
		b = b[ps:]
	}
	return out, nil
}

// AppendBatchEntry appends one batch record ([u32 size][smm][payload]) to
// dst. It sets smm.PayloadSize to len(payload). It fails, returning dst
// unchanged, if smm misses a required field (inside its properties).
func AppendBatchEntry(dst []byte, smm *pb.SingleMessageMetadata, payload []byte) ([]byte, error) {
	if len(payload) > math.MaxInt32 {
		return dst, fmt.Errorf("codec: batch message of %d bytes is too large", len(payload))
	}
	smm.PayloadSize = proto.Int32(int32(len(payload)))
	n := proto.Size(smm)
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst, err := marshalSized(dst, smm, n)
	if err != nil {
		return dst[:start], err
	}
	return append(dst, payload...), nil
}
