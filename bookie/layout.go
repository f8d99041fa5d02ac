package bookie

import (
	"encoding/binary"
	"fmt"
)

// FormatVersion is the on-disk format this code writes and reads. A data
// directory with any other version is refused at open: see OpenStore.
const FormatVersion uint32 = 1

// On-disk layout (format version 1). All integers are big-endian, so keys
// sort by (ledger, entry) and a ledger's entries are one contiguous range.
//
//	"m/format-version"                     -> uint32 FormatVersion
//	"m/cookie"                             -> metapb.Cookie (proto bytes)
//	'l' ledgerID(8)                        -> flags(1) maxLAC(8)
//	'e' ledgerID(8) entryID(8)             -> lac(8) digest(4) payload
//
// Ledger flags: bit 0 fenced, bit 1 limbo. maxLAC is the largest LAC
// piggybacked on any add of the ledger stored here (-1 if none). Every ledger
// with an entry also has a ledger record, written in the same batch as its
// first entry. Ledger and entry ids are >= 0, so the big-endian encoding of
// the int64 sorts like the number.
var (
	keyFormatVersion = []byte("m/format-version")
	keyCookie        = []byte("m/cookie")
)

const (
	prefixLedger = 'l'
	prefixEntry  = 'e'

	flagFenced = 1 << 0
	flagLimbo  = 1 << 1

	entryHeaderLen  = 12 // lac(8) digest(4)
	ledgerRecordLen = 9  // flags(1) maxLAC(8)

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

func encodeEntryValue(lac int64, digest uint32, payload []byte) []byte {
	v := make([]byte, entryHeaderLen+len(payload))
	binary.BigEndian.PutUint64(v[0:8], uint64(lac))
	binary.BigEndian.PutUint32(v[8:12], digest)
	copy(v[entryHeaderLen:], payload)
	return v
}

// decodeEntryValue splits a stored value; payload aliases v.
func decodeEntryValue(v []byte) (lac int64, digest uint32, payload []byte, err error) {
	if len(v) < entryHeaderLen {
		return 0, 0, nil, fmt.Errorf("%w: stored value is %d bytes, shorter than the %d-byte header", ErrCorrupt, len(v), entryHeaderLen)
	}
	return int64(binary.BigEndian.Uint64(v[0:8])), binary.BigEndian.Uint32(v[8:12]), v[entryHeaderLen:], nil
}
