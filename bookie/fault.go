package bookie

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// FlipEntryByte is a fault injection for tests and drills: it opens the
// store of a stopped bookie in dataDir and inverts byte offset of the stored
// payload of (ledgerID, entryID), so the entry no longer matches its digest.
// A read of it must then answer CORRUPT, never NO_SUCH_ENTRY. It fails if the
// bookie is running (the store is locked), if the entry is absent, or if
// offset is outside the payload.
func FlipEntryByte(dataDir string, ledgerID, entryID int64, offset int) error {
	return flipEntryByte(vfs.Default, dataDir, ledgerID, entryID, offset)
}

func flipEntryByte(fs vfs.FS, dataDir string, ledgerID, entryID int64, offset int) (err error) {
	db, err := pebble.Open(dataDir, pebbleOptions(fs, 0, true, discardLogger()))
	if err != nil {
		return fmt.Errorf("bookie: fault: open store in %s (is the bookie stopped?): %w", dataDir, err)
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	v, closer, err := db.Get(keyFormatVersion)
	if err != nil {
		return fmt.Errorf("bookie: fault: %s is not a bookie store: %w", dataDir, err)
	}
	if len(v) != 4 || binary.BigEndian.Uint32(v) != FormatVersion {
		closer.Close()
		return fmt.Errorf("bookie: fault: %s has an unsupported format version", dataDir)
	}
	closer.Close()
	k := makeEntryKey(ledgerID, entryID)
	v, closer, err = db.Get(k[:])
	if err != nil {
		return fmt.Errorf("bookie: fault: ledger %d entry %d: %w", ledgerID, entryID, err)
	}
	val := bytes.Clone(v)
	closer.Close()
	if offset < 0 || entryHeaderLen+offset >= len(val) {
		return fmt.Errorf("bookie: fault: offset %d outside the %d-byte payload of ledger %d entry %d", offset, len(val)-entryHeaderLen, ledgerID, entryID)
	}
	val[entryHeaderLen+offset] ^= 0xff
	return db.Set(k[:], val, pebble.Sync)
}
