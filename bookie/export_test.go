package bookie

import (
	"context"
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/meridian-mq/meridian/proto/metapb"
)

// Internals for the tests of package bookie_test (gc_test.go), which use
// bookie/ledger (it imports this package).

// SetEntryLogFileBytes makes log files rotate at n bytes until restore.
func SetEntryLogFileBytes(n int64) (restore func()) {
	old := entryLogFileBytes
	entryLogFileBytes = n
	return func() { entryLogFileBytes = old }
}

// SetGCHooks sets the GC test hooks (nil: none) until restore.
func SetGCHooks(listed, afterIndex func()) (restore func()) {
	ol, oa := gcHookListed, gcHookAfterIndex
	gcHookListed, gcHookAfterIndex = listed, afterIndex
	return func() { gcHookListed, gcHookAfterIndex = ol, oa }
}

// SetCompactedHook sets the hook run after compaction's moves until
// restore.
func SetCompactedHook(f func()) (restore func()) {
	old := gcHookCompacted
	gcHookCompacted = f
	return func() { gcHookCompacted = old }
}

// CollectGarbageWith runs a GC pass on st against reg and lister.
func CollectGarbageWith(ctx context.Context, st *Store, reg Registry, lister LedgerLister, cookie *metapb.Cookie) (GCResult, error) {
	return collectGarbage(ctx, st, reg, lister, cookie, 0, discardLogger())
}

// CompactWith is CollectGarbageWith compacting files below threshold.
func CompactWith(ctx context.Context, st *Store, reg Registry, lister LedgerLister, cookie *metapb.Cookie, threshold float64) (GCResult, error) {
	return collectGarbage(ctx, st, reg, lister, cookie, threshold, discardLogger())
}

// FileLedgers returns, per entry log file, the ledgers the index points
// into it, read from the index.
func FileLedgers(st *Store) (map[uint32]map[int64]bool, error) {
	st.closeMu.RLock()
	defer st.closeMu.RUnlock()
	it, err := st.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEntry}, UpperBound: []byte{prefixEntry + 1}})
	if err != nil {
		return nil, err
	}
	out := map[uint32]map[int64]bool{}
	for ok := it.First(); ok; ok = it.Next() {
		iv, err := decodeIndexValue(it.Value())
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		if out[iv.at.file] == nil {
			out[iv.at.file] = map[int64]bool{}
		}
		out[iv.at.file][int64(binary.BigEndian.Uint64(it.Key()[1:9]))] = true
	}
	return out, it.Close()
}

// EntryLogDir is the store's entry log directory.
func EntryLogDir(st *Store) string { return st.elog.dir }

// EntryLogPath is the path of log file id.
func EntryLogPath(st *Store, id uint32) string { return st.elog.path(id) }

// CurrentLogFile is the file being written: the last one (read from the
// directory, not from the committer's state).
func CurrentLogFile(st *Store) (uint32, error) {
	ids, err := entryLogFiles(st.fs, st.elog.dir)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return ids[len(ids)-1], nil
}

// NewPowerLossStoreFS is a PowerLossFS for StoreOptions.FS.
func NewPowerLossStoreFS() vfs.FS { return NewPowerLossFS() }

// EntryForTest builds a valid add.
func EntryForTest(ledger, id, lac int64, payload []byte) Entry {
	return entry(ledger, id, lac, payload)
}
