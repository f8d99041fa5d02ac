package bookie

import (
	"encoding/binary"
	"fmt"
)

// FormatVersion is the on-disk format this code writes and reads. A data
// directory with any other version is refused at open: see OpenStore.
// Version 2 keeps entries in the entry log (entrylog.go) and only an index
// in Pebble; version 1 kept them in Pebble.
const FormatVersion uint32 = 2

// Pebble's keys (format version 2). All integers are big-endian, so keys
// sort by (ledger, entry) and a ledger's entries are one contiguous range.
//
//	"m/format-version"                     -> uint32 FormatVersion
//	"m/cookie"                             -> metapb.Cookie (proto bytes)
//	"m/checkpoint"                         -> file(4) offset(8)
//	'l' ledgerID(8)                        -> flags(1) maxLAC(8)
//	'e' ledgerID(8) entryID(8)             -> lac(8) digest(4) file(4) offset(8) len(4)
//
// An entry's value says where its payload is in the entry log. Ledger flags:
// bit 0 fenced, bit 1 limbo, bit 2 deleted (the ledger was deleted from
// cluster metadata and its entries collected: gc.go; the record stays, as
// a fenced tombstone, and the ledger has no 'e' key). maxLAC is the largest LAC piggybacked on any
// add of the ledger stored here (-1 if none). Every ledger with an entry
// also has a ledger record, written in the same frame as its first entry.
// Ledger and entry ids are >= 0, so the big-endian encoding of the int64
// sorts like the number. Every 'e' and 'l' write is also in the entry log,
// which is synced first; Pebble is written without sync, and the checkpoint
// (written with sync) is the log position before which Pebble has them all.
var (
	keyFormatVersion = []byte("m/format-version")
	keyCookie        = []byte("m/cookie")
	keyCheckpoint    = []byte("m/checkpoint")
)

const (
	prefixLedger = 'l'
	prefixEntry  = 'e'

	flagFenced  = 1 << 0
	flagLimbo   = 1 << 1
	flagDeleted = 1 << 2

	entryHeaderLen  = 12                  // lac(8) digest(4)
	indexValueLen   = entryHeaderLen + 16 // lac(8) digest(4) file(4) offset(8) len(4)
	ledgerRecordLen = 9                   // flags(1) maxLAC(8)
	checkpointLen   = 12                  // file(4) offset(8)

	// maxOpsPerBatch bounds one group commit (fences carry no bytes).
	maxOpsPerBatch = 16384
	// queueLen is the committer's queue; submitters block when it is full.
	queueLen = 4096
)

type entryKey [17]byte

func makeEntryKey(ledgerID, entryID int64) entryKey {
	var k entryKey
	k[0] = prefixEntry
	binary.BigEndian.PutUint64(k[1:9], uint64(ledgerID))
	binary.BigEndian.PutUint64(k[9:17], uint64(entryID))
	return k
}

func ledgerKey(ledgerID int64) []byte {
	k := make([]byte, 9)
	k[0] = prefixLedger
	binary.BigEndian.PutUint64(k[1:], uint64(ledgerID))
	return k
}

// indexValue is a decoded 'e' value.
type indexValue struct {
	lac    int64
	digest uint32
	at     logPos // where the payload is
	n      uint32 // payload length
}

func encodeIndexValue(lac int64, digest uint32, at logPos, n int) []byte {
	v := make([]byte, indexValueLen)
	binary.BigEndian.PutUint64(v[0:8], uint64(lac))
	binary.BigEndian.PutUint32(v[8:12], digest)
	binary.BigEndian.PutUint32(v[12:16], at.file)
	binary.BigEndian.PutUint64(v[16:24], uint64(at.off))
	binary.BigEndian.PutUint32(v[24:28], uint32(n))
	return v
}

func decodeIndexValue(v []byte) (indexValue, error) {
	if len(v) != indexValueLen {
		return indexValue{}, fmt.Errorf("%w: index value is %d bytes, want %d", ErrCorrupt, len(v), indexValueLen)
	}
	return indexValue{
		lac:    int64(binary.BigEndian.Uint64(v[0:8])),
		digest: binary.BigEndian.Uint32(v[8:12]),
		at:     logPos{file: binary.BigEndian.Uint32(v[12:16]), off: int64(binary.BigEndian.Uint64(v[16:24]))},
		n:      binary.BigEndian.Uint32(v[24:28]),
	}, nil
}

func encodeCheckpoint(p logPos) []byte {
	v := make([]byte, checkpointLen)
	binary.BigEndian.PutUint32(v[0:4], p.file)
	binary.BigEndian.PutUint64(v[4:12], uint64(p.off))
	return v
}

func decodeCheckpoint(v []byte) (logPos, error) {
	if len(v) != checkpointLen {
		return logPos{}, fmt.Errorf("%w: checkpoint is %d bytes, want %d", ErrCorrupt, len(v), checkpointLen)
	}
	return logPos{file: binary.BigEndian.Uint32(v[0:4]), off: int64(binary.BigEndian.Uint64(v[4:12]))}, nil
}
