package replication

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"slices"
	"strings"

	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/entry"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

// The digest of a stored entry, for verification (replicator/verify.go).
//
// It covers what means the same message in every region, and nothing a
// region sets for itself (the entry's local ledger and entry id, the
// broker's publish time, the replication header's layout): the origin
// region, the origin sequence number, the origin id, the number of
// messages, and for each message its partition key, ordering key,
// properties (sorted by key, then value), event time and payload. Each
// field is length-prefixed, so no two different messages encode alike.
//
// Per entry, not per message: an entry is what replication numbers and
// moves (one origin sequence number; a batch travels whole), so a digest
// per entry is the finest unit a region can hold or lack. A batch's
// messages are each covered by their own fields inside it. A compressed
// or encrypted batch is covered as one message: its outer metadata's
// fields, its compression, uncompressed size and encryption algorithm,
// and its payload as stored (the bytes every region stores alike) — it
// is not decompressed.
//
// The value is the first 8 bytes of SHA-256 of that encoding, big
// endian: a run's digest is a sum of them (replicator.HeldRun), so an
// altered entry changes its run's sum except with probability 2^-64.

const digestVersion = "meridian-verify-v1"

// entryDigest returns the digest of a decoded entry whose origin is
// origin, with origin sequence number seq and origin id (ledger, entry).
func entryDigest(origin string, seq uint64, idLedger, idEntry int64, d entry.Decoded) uint64 {
	h := sha256.New()
	var buf [8]byte
	u64 := func(v uint64) {
		binary.BigEndian.PutUint64(buf[:], v)
		h.Write(buf[:])
	}
	field := func(b []byte) {
		u64(uint64(len(b)))
		h.Write(b)
	}
	field([]byte(digestVersion))
	field([]byte(origin))
	u64(seq)
	u64(uint64(idLedger))
	u64(uint64(idEntry))
	md, payload, err := entry.MessageParts(d.Msg)
	if err != nil {
		// Not a message the broker can parse: its bytes as stored.
		u64(0)
		field(d.Msg)
		return sum64(h)
	}
	plain := md.GetCompression() == pb.CompressionType_NONE && len(md.GetEncryptionKeys()) == 0 && md.EncryptionAlgo == nil
	if md.NumMessagesInBatch != nil && plain {
		if msgs, err := codec.ParseBatch(payload, int(md.GetNumMessagesInBatch())); err == nil {
			u64(uint64(len(msgs)))
			for _, m := range msgs {
				messageFields(u64, field, m.Meta.GetPartitionKey(), m.Meta.GetOrderingKey(), m.Meta.GetProperties(), m.Meta.GetEventTime(), m.Payload)
			}
			return sum64(h)
		}
	}
	u64(1)
	messageFields(u64, field, md.GetPartitionKey(), md.GetOrderingKey(), md.GetProperties(), md.GetEventTime(), payload)
	if !plain || md.NumMessagesInBatch != nil {
		u64(uint64(md.GetCompression()))
		u64(uint64(md.GetUncompressedSize()))
		u64(uint64(md.GetNumMessagesInBatch()))
		field([]byte(md.GetEncryptionAlgo()))
	}
	return sum64(h)
}

func messageFields(u64 func(uint64), field func([]byte), key string, orderingKey []byte, props []*pb.KeyValue, eventTime uint64, payload []byte) {
	field([]byte(key))
	field(orderingKey)
	kv := slices.Clone(props)
	slices.SortFunc(kv, func(a, b *pb.KeyValue) int {
		if c := strings.Compare(a.GetKey(), b.GetKey()); c != 0 {
			return c
		}
		return strings.Compare(a.GetValue(), b.GetValue())
	})
	u64(uint64(len(kv)))
	for _, p := range kv {
		field([]byte(p.GetKey()))
		field([]byte(p.GetValue()))
	}
	u64(eventTime)
	field(payload)
}

func sum64(h hash.Hash) uint64 {
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}
