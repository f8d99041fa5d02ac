// Package digest is the checksum of a ledger entry, shared by the writer
// that computes it (bookie/ledger), the bookie that verifies it on every
// add and read (bookie) and anyone who checks what a bookie returned. It
// is pure and imports only the standard library, so the ledger client
// does not link the bookie server (and Pebble) for it.
package digest

import (
	"encoding/binary"
	"hash/crc32"
)

// castagnoli is the CRC32C table; crc32 uses the SSE4.2/ARMv8 instruction
// when the CPU has it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Entry returns the CRC32C (Castagnoli) of an entry: ledgerID, entryID and
// lac, each as 8 big-endian bytes, followed by payload. The writer computes it
// when it creates the entry; the bookie verifies it when it receives the add
// (a mismatch is CORRUPT) and again on every read of the stored entry.
//
// The LAC is covered so a bit flip in the piggybacked LAC cannot make a
// recovering reader skip entries.
func Entry(ledgerID, entryID, lac int64, payload []byte) uint32 {
	var hdr [24]byte
	binary.BigEndian.PutUint64(hdr[0:8], uint64(ledgerID))
	binary.BigEndian.PutUint64(hdr[8:16], uint64(entryID))
	binary.BigEndian.PutUint64(hdr[16:24], uint64(lac))
	crc := crc32.Update(0, castagnoli, hdr[:])
	return crc32.Update(crc, castagnoli, payload)
}
