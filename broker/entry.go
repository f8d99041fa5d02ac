package broker

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/meridian-mq/meridian/broker/codec"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// Stored entry format (one managed-ledger entry per SEND):
//
//	[0x4d01 uint16][broker publish time, Unix ms, uint64]
//	[message part from the 0x0e01 magic on, verbatim as the producer sent it]
//
// The header carries what the broker adds (its own publish time: seek-by-
// time, retention and TTL use it, never the client's clock); the message
// part goes back to consumers byte-identical. The geo-replication issue
// adds a header version with the origin region and id.
const entryTagV1 uint16 = 0x4d01

const entryHeaderV1 = 2 + 8

var errBadEntry = errors.New("broker: stored entry has an unknown format")

func encodeEntry(publishMs int64, msg []byte) []byte {
	b := make([]byte, 0, entryHeaderV1+len(msg))
	b = binary.BigEndian.AppendUint16(b, entryTagV1)
	b = binary.BigEndian.AppendUint64(b, uint64(publishMs))
	return append(b, msg...)
}

// decodedEntry is a stored entry split into its parts.
type decodedEntry struct {
	PublishMs int64
	Msg       []byte // from the 0x0e01 magic on
}

func decodeEntry(b []byte) (decodedEntry, error) {
	if len(b) < entryHeaderV1 || binary.BigEndian.Uint16(b) != entryTagV1 {
		return decodedEntry{}, errBadEntry
	}
	return decodedEntry{PublishMs: int64(binary.BigEndian.Uint64(b[2:])), Msg: b[entryHeaderV1:]}, nil
}

// entryMeta is what dispatch and dedup need from an entry's metadata.
type entryMeta struct {
	PublishMs    int64
	NumMessages  int
	Key          string
	ProducerName string
	SequenceID   int64 // first sequence id of the entry
	HighestSeqID int64 // last sequence id of the entry
	EventTimeMs  int64
}

// parseEntryMeta parses the message metadata (not the payload) of a stored
// entry. Batches are keyed by their first message's key (Pulsar's sticky
// key); producers that need per-key routing of batches use key-based
// batching.
func parseEntryMeta(b []byte) (entryMeta, error) {
	d, err := decodeEntry(b)
	if err != nil {
		return entryMeta{}, err
	}
	md, payload, err := parseMessageMetadata(d.Msg)
	if err != nil {
		return entryMeta{}, err
	}
	m := entryMeta{
		PublishMs:    d.PublishMs,
		NumMessages:  1,
		ProducerName: md.GetProducerName(),
		SequenceID:   int64(md.GetSequenceId()),
		EventTimeMs:  int64(md.GetEventTime()),
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
		return nil, nil, fmt.Errorf("%w: no message header", errBadEntry)
	}
	n := binary.BigEndian.Uint32(msg[6:])
	if uint64(n) > uint64(len(msg)-10) {
		return nil, nil, fmt.Errorf("%w: metadata size %d", errBadEntry, n)
	}
	md := &pb.MessageMetadata{}
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(msg[10:10+n], md); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errBadEntry, err)
	}
	return md, msg[10+n:], nil
}
