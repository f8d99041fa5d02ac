package entry

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/mledger"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// Stored entry format (one managed-ledger entry per SEND or replicated
// entry), version 2:
//
//	[0x4d02 uint16][broker publish time, Unix ms, uint64]
//	[origin sequence number, uint64]
//	[origin message id: ledger int64, entry int64]
//	[origin region length uint8][origin region]
//	[message part from the 0x0e01 magic on, verbatim as the producer sent it]
//
// The header carries what brokers add: the publish time (seek-by-time,
// retention and TTL use it, never the client's clock) and the entry's
// identity across regions (replicator/doc.go): the region where a producer
// published it, the message id that region gave it and its place in that
// region's dense sequence of the topic's entries. A local entry has an
// empty origin region — its origin id is its own position, not known
// before the append — and its sequence number is the topic's next local
// one. An entry replicated from another region names that region and its
// id there. The message part goes back to consumers byte-identical.
// Version 1 ([0x4d01][publish ms][message]) is still read, as a local entry
// without a sequence number.
const (
	entryTagV1 uint16 = 0x4d01
	entryTagV2 uint16 = 0x4d02
)

const (
	entryHeaderV1    = 2 + 8
	entryHeaderV2Min = 2 + 8 + 8 + 16 + 1
)

var ErrBadEntry = errors.New("broker: stored entry has an unknown format")

// originInfo is an entry's identity across regions.
type Origin struct {
	Region string // "" for a local entry
	Seq    uint64 // dense per origin region and topic; 0 in version 1
	ID     mledger.Position
}

func Encode(publishMs int64, o Origin, msg []byte) []byte {
	b := make([]byte, 0, entryHeaderV2Min+len(o.Region)+len(msg))
	b = appendEntryHeader(b, publishMs, o)
	return append(b, msg...)
}

func appendEntryHeader(b []byte, publishMs int64, o Origin) []byte {
	b = binary.BigEndian.AppendUint16(b, entryTagV2)
	b = binary.BigEndian.AppendUint64(b, uint64(publishMs))
	b = binary.BigEndian.AppendUint64(b, o.Seq)
	b = binary.BigEndian.AppendUint64(b, uint64(o.ID.Ledger))
	b = binary.BigEndian.AppendUint64(b, uint64(o.ID.Entry))
	b = append(b, byte(len(o.Region)))
	return append(b, o.Region...)
}

// framedMsg is a message as its SEND frame brought it: the message is
// buf[off:], and the bytes before off may be overwritten
// (codec.Frame.PayloadRoom).
type Framed struct {
	Buf []byte
	Off int
}

func (m Framed) Msg() []byte { return m.Buf[m.Off:] }

// unframed is a message with no room in front of it.
func Unframed(msg []byte) Framed { return Framed{Buf: msg} }

// encodeFramedEntry returns what encodeEntry(publishMs, o, m.msg()) does,
// written in front of the message in its own buffer when the room there
// suffices: a published message is then not copied on its way to the
// bookies and the tail cache (at 50,000 msgs/s that copy was half of the
// broker's allocation).
func EncodeFramed(publishMs int64, o Origin, m Framed) []byte {
	h := entryHeaderV2Min + len(o.Region)
	if m.Off < h {
		return Encode(publishMs, o, m.Msg())
	}
	start := m.Off - h
	appendEntryHeader(m.Buf[start:start:m.Off], publishMs, o) // fills its capacity exactly
	return m.Buf[start:]
}

// decodedEntry is a stored entry split into its parts.
type Decoded struct {
	PublishMs int64
	Origin    Origin
	Msg       []byte // from the 0x0e01 magic on
}

func Decode(b []byte) (Decoded, error) {
	if len(b) < 2 {
		return Decoded{}, ErrBadEntry
	}
	switch binary.BigEndian.Uint16(b) {
	case entryTagV1:
		if len(b) < entryHeaderV1 {
			return Decoded{}, ErrBadEntry
		}
		return Decoded{PublishMs: int64(binary.BigEndian.Uint64(b[2:])), Msg: b[entryHeaderV1:]}, nil
	case entryTagV2:
		if len(b) < entryHeaderV2Min {
			return Decoded{}, ErrBadEntry
		}
		n := int(b[entryHeaderV2Min-1])
		if len(b) < entryHeaderV2Min+n {
			return Decoded{}, ErrBadEntry
		}
		return Decoded{
			PublishMs: int64(binary.BigEndian.Uint64(b[2:])),
			Origin: Origin{
				Seq:    binary.BigEndian.Uint64(b[10:]),
				ID:     mledger.Position{Ledger: int64(binary.BigEndian.Uint64(b[18:])), Entry: int64(binary.BigEndian.Uint64(b[26:]))},
				Region: string(b[entryHeaderV2Min : entryHeaderV2Min+n]),
			},
			Msg: b[entryHeaderV2Min+n:],
		}, nil
	}
	return Decoded{}, ErrBadEntry
}

// entryMeta is what dispatch and dedup need from an entry's metadata.
type Meta struct {
	PublishMs    int64
	NumMessages  int
	Key          string
	ProducerName string
	SequenceID   int64 // first sequence id of the entry
	HighestSeqID int64 // last sequence id of the entry
	EventTimeMs  int64
	// DeliverAtMs is the message's deliver_at_time (Unix ms; 0: none):
	// the producer's DeliverAfter or DeliverAt, in the outer metadata of a
	// batch (the Go client never batches a delayed message).
	DeliverAtMs int64
	// ChunkID and NumChunks place the entry in a chunked message (PIP-37:
	// a producer with chunking on splits a message larger than the
	// broker's max_message_size into NumChunks entries, chunk ids 0 to
	// NumChunks-1, all with the message's sequence id and uuid). NumChunks
	// is 0 for an entry that is a whole message.
	ChunkID, NumChunks int
}

// Completes reports whether the entry completes a message: it is a whole
// message (or batch) or the last chunk of a chunked one. Only such an
// entry is a deduplication point — its sequence id is the producer's
// last persisted one; the chunks before it share that sequence id and
// must neither be taken for resends of one another nor move it (Pulsar's
// MessageDeduplication checks and records the last chunk only).
func (m Meta) Completes() bool { return completes(m.ChunkID, m.NumChunks) }

func completes(chunkID, numChunks int) bool { return numChunks <= 1 || chunkID >= numChunks-1 }

// CompletesMessage is Meta.Completes for a message as its producer sent
// it (a Decoded's Msg), parsing only its metadata. A message whose
// metadata does not parse completes (it is deduplicated as a whole
// message, as before chunking).
func CompletesMessage(msg []byte) bool {
	md, _, err := parseMessageMetadata(msg)
	if err != nil {
		return true
	}
	return completes(int(md.GetChunkId()), int(md.GetNumChunksFromMsg()))
}

// parseEntryMeta parses the message metadata (not the payload) of a stored
// entry. Batches are keyed by their first message's key (Pulsar's sticky
// key); producers that need per-key routing of batches use key-based
// batching.
func ParseMeta(b []byte) (Meta, error) {
	d, err := Decode(b)
	if err != nil {
		return Meta{}, err
	}
	md, payload, err := parseMessageMetadata(d.Msg)
	if err != nil {
		return Meta{}, err
	}
	m := Meta{
		PublishMs:    d.PublishMs,
		NumMessages:  1,
		ProducerName: md.GetProducerName(),
		SequenceID:   int64(md.GetSequenceId()),
		EventTimeMs:  int64(md.GetEventTime()),
		DeliverAtMs:  md.GetDeliverAtTime(),
		ChunkID:      int(md.GetChunkId()),
		NumChunks:    int(md.GetNumChunksFromMsg()),
	}
	if md.NumMessagesInBatch != nil {
		m.NumMessages = int(md.GetNumMessagesInBatch())
	}
	m.HighestSeqID = m.SequenceID + int64(m.NumMessages) - 1
	if md.HighestSequenceId != nil && int64(md.GetHighestSequenceId()) > m.HighestSeqID {
		m.HighestSeqID = int64(md.GetHighestSequenceId())
	}
	switch {
	case md.OrderingKey != nil:
		m.Key = string(md.OrderingKey)
	case md.PartitionKey != nil:
		m.Key = md.GetPartitionKey()
	case md.NumMessagesInBatch != nil && md.GetCompression() == pb.CompressionType_NONE:
		if msgs, err := codec.ParseBatch(payload, 1); err == nil && len(msgs) > 0 {
			if msgs[0].Meta.OrderingKey != nil {
				m.Key = string(msgs[0].Meta.OrderingKey)
			} else {
				m.Key = msgs[0].Meta.GetPartitionKey()
			}
		}
	}
	return m, nil
}

// parseMessageMetadata reads the metadata of a message part without
// verifying its checksum (it was verified when the producer sent it).
func parseMessageMetadata(msg []byte) (*pb.MessageMetadata, []byte, error) {
	if len(msg) < 10 || binary.BigEndian.Uint16(msg) != codec.MagicCRC32C {
		return nil, nil, fmt.Errorf("%w: no message header", ErrBadEntry)
	}
	n := binary.BigEndian.Uint32(msg[6:])
	if uint64(n) > uint64(len(msg)-10) {
		return nil, nil, fmt.Errorf("%w: metadata size %d", ErrBadEntry, n)
	}
	md := &pb.MessageMetadata{}
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(msg[10:10+n], md); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadEntry, err)
	}
	return md, msg[10+n:], nil
}

// MessageParts returns a stored message's metadata and payload (a
// Decoded's Msg), as the admin API's peek answers them.
func MessageParts(msg []byte) (*pb.MessageMetadata, []byte, error) { return parseMessageMetadata(msg) }
