package bookie

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/meridian-mq/meridian/proto/metapb"
)

// Garbage collection (BookKeeper's GarbageCollectorThread with its
// ScanAndCompareGarbageCollector, and its EntryLogMetadata): every
// Config.GCInterval the bookie compares the ledgers it holds with the
// ledgers that exist in cluster metadata, deletes from its index every
// ledger that metadata no longer has, and removes the entry log files left
// with no ledger in them. Deleting a live ledger's data is the worst thing
// a bookie can do, so a pass deletes only what it is sure of:
//
//  1. It lists the ledgers held here first (records in the index not
//     already collected), then lists metadata. A ledger's metadata is
//     created before any of its entries is sent to a bookie (the ledger
//     client's create, recovery and re-replication all start from
//     metadata), so a ledger held before the listing began and absent from
//     a complete listing was deleted. A ledger created during the pass is
//     not in the first list, and waits for the next pass.
//  2. Metadata is listed twice, and a ledger present in either listing is
//     kept. A listing that fails is an error: the pass deletes nothing.
//     LedgerLister implementations return a listing only when it is
//     complete (every store that can hold the metadata of a ledger stored
//     on this bookie, each read at one revision, not truncated).
//  3. The metadata must still know this bookie: its cookie, with this
//     data directory's instance id, must be there. A wiped or replaced
//     metadata store (BookKeeper BP-31: deletion driven by absence deletes
//     everything when metadata is lost) lists no ledger and has no cookie;
//     the pass then deletes nothing.
//  4. Collecting a ledger keeps its record as a fenced tombstone (flag
//     deleted) and deletes its index entries: a writer that never saw the
//     ledger's fencing and deletion cannot have an add acknowledged here
//     afterwards (FENCED), and reads answer NO_SUCH_LEDGER. A ledger in
//     limbo keeps its limbo flag; reads of a limbo ledger still answer
//     UNKNOWN (contract 3).
//  5. Order for crash safety: the index is checkpointed (synced up to the
//     log's end, so the next open replays only frames written after it),
//     then the deletions are written with sync, and only then are log
//     files unlinked. A crash in between leaves files no index entry
//     points to; the next pass removes them. A file is removed only when
//     no index entry of any ledger points into it, when it is not the file
//     being written, and when it lies before the checkpoint (the open
//     replays nothing from it).
//
// A file holding some live entries is kept until compaction (compact.go)
// rewrites them, when they fill less than Config.CompactionThreshold of it.

// LedgerLister is an optional extension of Registry
// (cluster.BookieRegistry implements it): the ledgers that exist in cluster
// metadata, for garbage collection. A bookie whose Registry does not
// implement it collects nothing.
type LedgerLister interface {
	// ListLedgers returns the id of every ledger in metadata whose entries
	// may be stored on this bookie: of every metadata store that holds
	// such ledgers (a region's, and the global store's stretched ledgers).
	// It returns an error unless the listing is complete.
	ListLedgers(ctx context.Context) ([]int64, error)
}

// GCResult is what a garbage collection pass did.
type GCResult struct {
	// Held is the number of ledgers held here at the start of the pass.
	Held int
	// LedgersDeleted is the number of ledgers deleted from the index.
	LedgersDeleted int
	// FilesRemoved and BytesReclaimed count the entry log files removed
	// and their size.
	FilesRemoved   int
	BytesReclaimed int64
	// FilesCompacted counts the files below the compaction threshold
	// whose live entries were written again (and which were then
	// removed: counted in FilesRemoved too); BytesRewritten their size.
	FilesCompacted int
	BytesRewritten int64
	// Duration is the pass's duration.
	Duration time.Duration
}

// errGCNoMetadata: the bookie has no LedgerLister to compare with.
var errGCNoMetadata = errors.New("bookie: gc: no cluster metadata to compare with (the registry does not list ledgers)")

// Test hooks: gcHookListed runs after a pass's metadata listings;
// gcHookAfterIndex after its index deletions are synced and before any
// file is unlinked; gcHookCompacted after compaction moved the live
// entries and before the compacted files are unlinked.
var gcHookListed, gcHookAfterIndex, gcHookCompacted func()

// CollectGarbage runs one garbage collection pass now (the GC loop runs
// one every Config.GCInterval). Passes do not overlap.
func (s *Server) CollectGarbage(ctx context.Context) (GCResult, error) {
	lister, ok := s.reg.(LedgerLister)
	if s.reg == nil || !ok {
		return GCResult{}, errGCNoMetadata
	}
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	res, err := collectGarbage(ctx, s.store, s.reg, lister, s.cookie, s.cfg.CompactionThreshold, s.log)
	s.m.onGC(res, err)
	return res, err
}

// gcLoop runs a pass every GCInterval until the server closes.
func (s *Server) gcLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		res, err := s.CollectGarbage(s.ctx)
		switch {
		case err != nil && s.ctx.Err() != nil:
			return
		case err != nil:
			s.log.Warn("bookie: garbage collection pass failed; nothing more deleted, retrying at the next interval", "err", err, "interval", s.cfg.GCInterval)
		case res.LedgersDeleted > 0 || res.FilesRemoved > 0:
			s.log.Info("bookie: garbage collection", "ledgers_held", res.Held, "ledgers_deleted", res.LedgersDeleted,
				"files_removed", res.FilesRemoved, "bytes_reclaimed", res.BytesReclaimed,
				"files_compacted", res.FilesCompacted, "bytes_rewritten", res.BytesRewritten, "took", res.Duration)
		}
	}
}

// collectGarbage is one pass (see the comment at the top of this file).
// cookie is the identity the bookie runs with; files below compactBelow
// of live bytes are compacted (compact.go; <= 0: none).
func collectGarbage(ctx context.Context, st *Store, reg Registry, lister LedgerLister, cookie *metapb.Cookie, compactBelow float64, log *slog.Logger) (GCResult, error) {
	start := time.Now()
	var res GCResult
	held, err := st.heldLedgers()
	if err != nil {
		return res, fmt.Errorf("bookie: gc: list the ledgers held here: %w", err)
	}
	res.Held = len(held)
	var gone []int64
	if len(held) > 0 {
		inMeta := make(map[int64]bool)
		for range 2 {
			ids, err := lister.ListLedgers(ctx)
			if err != nil {
				return res, fmt.Errorf("bookie: gc: list ledgers in metadata: %w", err)
			}
			for _, id := range ids {
				inMeta[id] = true
			}
		}
		if gcHookListed != nil {
			gcHookListed()
		}
		if err := checkGCIdentity(ctx, reg, cookie); err != nil {
			return res, err
		}
		for _, id := range held {
			if !inMeta[id] {
				gone = append(gone, id)
			}
		}
	}
	c, err := st.submitCollect(&collectOp{ledgers: gone, compactBelow: compactBelow})
	if err != nil {
		return res, fmt.Errorf("bookie: gc: delete ledgers from the index: %w", err)
	}
	res.LedgersDeleted = c.deleted
	if len(c.deletedIDs) > 0 {
		log.Info("bookie: gc: deleted ledgers absent from metadata", "ledgers", len(c.deletedIDs), "first", c.deletedIDs[0], "last", c.deletedIDs[len(c.deletedIDs)-1])
	}
	if gcHookAfterIndex != nil {
		gcHookAfterIndex()
	}
	res.FilesRemoved, res.BytesReclaimed, err = st.removeLogFiles(c.files)
	if err == nil && len(c.compact) > 0 {
		var files int
		var freed int64
		files, freed, res.BytesRewritten, err = st.compact(c.compact)
		res.FilesCompacted = len(c.compact)
		res.FilesRemoved += files
		res.BytesReclaimed += freed
		if err != nil {
			err = fmt.Errorf("bookie: gc: %w", err)
		}
	}
	res.Duration = time.Since(start)
	return res, err
}

// checkGCIdentity refuses a pass unless metadata holds this bookie's
// cookie with the instance id it runs with.
func checkGCIdentity(ctx context.Context, reg Registry, cookie *metapb.Cookie) error {
	if cookie == nil {
		return errors.New("bookie: gc: the bookie has no cookie")
	}
	c, found, err := reg.GetCookie(ctx, cookie.GetBookieId())
	switch {
	case err != nil:
		return fmt.Errorf("bookie: gc: read this bookie's cookie from metadata: %w", err)
	case !found:
		return fmt.Errorf("bookie: gc: metadata has no cookie for bookie %q: a wiped or different metadata store; deleting nothing", cookie.GetBookieId())
	case c.GetInstanceId() != cookie.GetInstanceId():
		return fmt.Errorf("bookie: gc: metadata's cookie of bookie %q has instance %s, this data dir %s; deleting nothing",
			cookie.GetBookieId(), c.GetInstanceId(), cookie.GetInstanceId())
	}
	return nil
}

// heldLedgers returns the ledgers with a record in the index that are not
// collected yet, ascending. Every ledger with an entry has a record.
func (s *Store) heldLedgers() ([]int64, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLedger}, UpperBound: []byte{prefixLedger + 1}})
	if err != nil {
		return nil, markCorruption(err)
	}
	var ids []int64
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, markCorruption(err)
		}
		if len(k) != 9 || len(v) != ledgerRecordLen {
			_ = it.Close()
			return nil, fmt.Errorf("%w: ledger record key %x value %d bytes", ErrCorrupt, k, len(v))
		}
		if v[0]&flagDeleted == 0 {
			ids = append(ids, int64(binary.BigEndian.Uint64(k[1:9])))
		}
	}
	if err := it.Close(); err != nil {
		return nil, markCorruption(err)
	}
	return ids, nil
}

// loadUsage builds the per-file ledger usage from the index (OpenStore,
// after the replay).
func (s *Store) loadUsage() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEntry}, UpperBound: []byte{prefixEntry + 1}})
	if err != nil {
		return fmt.Errorf("bookie: read index: %w", markCorruption(err))
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		v, err := it.ValueAndErr()
		if err == nil && len(k) != len(entryKey{}) {
			err = fmt.Errorf("%w: index key %x", ErrCorrupt, k)
		}
		var iv indexValue
		if err == nil {
			iv, err = decodeIndexValue(v)
		}
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("bookie: read index: %w", markCorruption(err))
		}
		s.addUsage(iv.at.file, int64(binary.BigEndian.Uint64(k[1:9])), recEntryHeaderLen+int64(iv.n))
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("bookie: read index: %w", markCorruption(err))
	}
	return nil
}

// addUsage counts n record bytes of ledger in file (committer only).
func (s *Store) addUsage(file uint32, ledger, n int64) {
	m := s.usage[file]
	if m == nil {
		m = make(map[int64]int64)
		s.usage[file] = m
	}
	m[ledger] += n
}

// collectOp is an opCollect's request and result: a collection
// (ledgers, compactBelow), or compaction's moves or dropFile.
type collectOp struct {
	ledgers      []int64 // to delete
	compactBelow float64 // also return the files to compact
	moves        []move  // compaction: entries to write again
	dropFile     uint32  // compaction: the file no index entry points into any more
	// Results.
	deleted    int
	deletedIDs []int64
	files      []uint32 // entry log files no index entry points into any more
	compact    []compactCandidate
}

// collectIndex deletes ledgers from the index (through the committer, so
// it is ordered with adds and fences) and returns the log files left
// without any entry.
func (s *Store) collectIndex(ledgers []int64) (*collectOp, error) {
	return s.submitCollect(&collectOp{ledgers: ledgers})
}

func (s *Store) submitCollect(c *collectOp) (*collectOp, error) {
	if err := s.submitGC(c); err != nil {
		return nil, err
	}
	return c, nil
}

// collect runs an opCollect on the committer.
func (s *Store) collect(o *op) {
	s.mu.Lock()
	failErr := s.failErr
	s.mu.Unlock()
	if failErr != nil {
		o.done(FenceResult{}, fmt.Errorf("%w: a commit failed, restart required: %v", ErrReadOnly, failErr))
		return
	}
	c := o.gc
	var err error
	switch {
	case c.moves != nil:
		err = s.moveLocked(c.moves)
	case c.dropFile != 0:
		delete(s.usage, c.dropFile)
	default:
		err = s.collectLocked(c)
	}
	o.done(FenceResult{}, err)
}

func (s *Store) collectLocked(c *collectOp) error {
	if s.usageErr != nil {
		return fmt.Errorf("bookie: gc: the index was not read whole at open (%v); nothing is collected until a restart reads it", s.usageErr)
	}
	// The index is synced up to the log's end first: the next open replays
	// only frames written after this point, so no replay brings back an
	// entry deleted below, and every file before it is in the index whole.
	if err := s.checkpoint(); err != nil {
		s.fail(nil, err)
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	tombs := make(map[int64]ledgerState)
	for _, id := range c.ledgers {
		st, err := s.ledger(id)
		if err != nil {
			return err
		}
		if st.deleted {
			continue
		}
		ts := ledgerState{hasRecord: true, fenced: true, limbo: st.limbo, deleted: true, lac: -1, lastEntry: -1, lastLAC: -1, recLAC: -1}
		lo, hi := makeEntryKey(id, 0), makeEntryKey(id+1, 0)
		if err := b.DeleteRange(lo[:], hi[:], nil); err != nil {
			return fmt.Errorf("bookie: batch delete: %w", err)
		}
		if err := b.Set(ledgerKey(id), encodeLedgerRecord(&ts), nil); err != nil {
			return fmt.Errorf("bookie: batch set: %w", err)
		}
		tombs[id] = ts
	}
	if !b.Empty() {
		if err := commitBatch(b, pebble.Sync); err != nil {
			err = fmt.Errorf("bookie: gc index commit: %w", markCorruption(err))
			s.fail(nil, err)
			return err
		}
	}
	s.mu.Lock()
	for id, ts := range tombs {
		if p, ok := s.ledgers[id]; ok {
			*p = ts
		} else {
			t := ts
			s.ledgers[id] = &t
		}
	}
	s.mu.Unlock()
	for id := range tombs {
		for _, m := range s.usage {
			delete(m, id)
		}
		c.deletedIDs = append(c.deletedIDs, id)
	}
	slices.Sort(c.deletedIDs)
	c.deleted = len(tombs)
	files, err := entryLogFiles(s.fs, s.elog.dir)
	if err != nil {
		return fmt.Errorf("bookie: list entry log dir %s: %w", s.elog.dir, err)
	}
	for _, id := range files {
		if id >= s.checkpointed.file || id == s.elog.curID || len(s.usage[id]) > 0 {
			continue
		}
		delete(s.usage, id)
		c.files = append(c.files, id)
	}
	c.compact, err = s.compactCandidates(c.compactBelow)
	return err
}

// removeLogFiles unlinks entry log files no index entry points into. Reads
// are held off while their open handles are closed, so none is reading
// them; the index no longer sends any read there.
func (s *Store) removeLogFiles(ids []uint32) (n int, bytes int64, err error) {
	if len(ids) == 0 {
		return 0, 0, nil
	}
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return 0, 0, ErrClosed
	}
	s.elog.mu.Lock()
	for _, id := range ids {
		if f, ok := s.elog.readers[id]; ok {
			_ = f.Close()
			delete(s.elog.readers, id)
		}
	}
	s.elog.mu.Unlock()
	s.closeMu.Unlock()
	var errs []error
	for _, id := range ids {
		p := s.elog.path(id)
		var size int64
		if fi, err := s.fs.Stat(p); err == nil {
			size = fi.Size()
		}
		if err := s.fs.Remove(p); err != nil {
			// The next pass finds it again (no ledger in it).
			errs = append(errs, fmt.Errorf("bookie: gc: remove entry log %s: %w", p, err))
			continue
		}
		n++
		bytes += size
	}
	if n > 0 {
		errs = append(errs, syncDir(s.fs, s.elog.dir))
	}
	return n, bytes, errors.Join(errs...)
}

// encodeLedgerRecord is a ledger's 'l' value (layout.go).
func encodeLedgerRecord(st *ledgerState) []byte {
	v := make([]byte, ledgerRecordLen)
	if st.fenced {
		v[0] |= flagFenced
	}
	if st.limbo {
		v[0] |= flagLimbo
	}
	if st.deleted {
		v[0] |= flagDeleted
	}
	binary.BigEndian.PutUint64(v[1:], uint64(st.lac))
	return v
}
