package bookie

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FlipEntryByte is a fault injection for tests and drills: it opens the
// store of a stopped bookie in dataDir and inverts byte offset of the stored
// payload of (ledgerID, entryID) in the entry log, so the entry no longer
// matches its digest.
// A read of it must then answer CORRUPT, never NO_SUCH_ENTRY. It fails if the
// bookie is running (the store is locked), if the entry is absent, or if
// offset is outside the payload.
func FlipEntryByte(dataDir string, ledgerID, entryID int64, offset int) error {
	return flipEntryByte(vfs.Default, dataDir, ledgerID, entryID, offset)
}

func flipEntryByte(fs vfs.FS, dataDir string, ledgerID, entryID int64, offset int) (err error) {
	if names, err := fs.List(dataDir); err != nil || !looksLikePebble(names) {
		return fmt.Errorf("bookie: fault: %s holds no bookie store (%v)", dataDir, err)
	}
	// Open the store, as a restart would (replaying the log after a kill),
	// so the index says where the entry is.
	s, err := OpenStore(dataDir, StoreOptions{FS: fs, Logger: discardLogger()})
	if err != nil {
		return fmt.Errorf("bookie: fault: open store in %s (is the bookie stopped?): %w", dataDir, err)
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	k := makeEntryKey(ledgerID, entryID)
	v, closer, err := s.db.Get(k[:])
	if err != nil {
		return fmt.Errorf("bookie: fault: ledger %d entry %d: %w", ledgerID, entryID, err)
	}
	iv, err := decodeIndexValue(v)
	closer.Close()
	if err != nil {
		return fmt.Errorf("bookie: fault: ledger %d entry %d: %w", ledgerID, entryID, err)
	}
	if offset < 0 || offset >= int(iv.n) {
		return fmt.Errorf("bookie: fault: offset %d outside the %d-byte payload of ledger %d entry %d", offset, iv.n, ledgerID, entryID)
	}
	path := s.elog.path(iv.at.file)
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("bookie: fault: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	b := make([]byte, 1)
	at := iv.at.off + int64(offset)
	if _, err := f.ReadAt(b, at); err != nil {
		return fmt.Errorf("bookie: fault: read %s: %w", path, err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		return fmt.Errorf("bookie: fault: write %s: %w", path, err)
	}
	return f.Sync()
}
