package bookie

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/meridian-mq/meridian/bookie/digest"
)

// Compaction (BookKeeper's minor compaction): after a garbage collection
// pass, an entry log file whose live bytes (the usage of the ledgers the
// index points into it) are below Config.CompactionThreshold of its size
// has its live entries written again at the end of the log, the current
// file, and is removed once no index entry points into it.
//
//   - The live entries of file F are found in the index (the ranges of the
//     ledgers F's usage names), read from F and checked against their
//     digest; a damaged entry leaves F as it is (it is never rewritten
//     from damaged bytes, nor dropped).
//   - They are written by the committer, in frames of their own, fsynced,
//     and each index entry is moved only if it still points where it was
//     read (a ledger deleted or an entry replaced meanwhile is left
//     alone). The moved records are in the log, so a crash replays them
//     into the index like any add.
//   - F is then checked again in the index (no entry of those ledgers left
//     in it: none can be added to an old file), its usage dropped, and it is
//     removed the way garbage collection removes a file: checkpoint first,
//     unlink after.

// compactCandidate is a file below the threshold, with the ledgers its
// usage names.
type compactCandidate struct {
	file    uint32
	live    int64
	size    int64
	ledgers []int64
}

// move is one live entry to write again.
type move struct {
	key  entryKey
	from logPos
	e    Entry
}

// compactMaxFrame bounds the payload of one frame of moved entries.
const compactMaxFrame = 4 << 20

// compact rewrites the live entries of the candidates and removes them.
// It returns the files removed, their bytes, and the bytes rewritten.
func (s *Store) compact(cands []compactCandidate) (files int, freed, moved int64, err error) {
	var errs []error
	for _, c := range cands {
		n, err := s.compactFile(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("bookie: compact entry log %s: %w", s.elog.path(c.file), err))
			continue
		}
		moved += n
	}
	if gcHookCompacted != nil {
		gcHookCompacted()
	}
	// The files left without entries go as garbage collection's do.
	co, err := s.collectIndex(nil)
	if err != nil {
		return 0, 0, moved, errors.Join(append(errs, err)...)
	}
	files, freed, err = s.removeLogFiles(co.files)
	return files, freed, moved, errors.Join(append(errs, err)...)
}

// compactFile moves the live entries of c.file and drops its usage.
func (s *Store) compactFile(c compactCandidate) (int64, error) {
	var moved int64
	var batch []move
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := s.submitGC(&collectOp{moves: batch})
		batch, size = nil, 0
		return err
	}
	for _, l := range c.ledgers {
		ms, err := s.liveEntriesIn(c.file, l, true)
		if err != nil {
			return moved, err
		}
		for _, m := range ms {
			batch = append(batch, m)
			size += len(m.e.Payload)
			moved += int64(recEntryHeaderLen + len(m.e.Payload))
			if size >= compactMaxFrame {
				if err := flush(); err != nil {
					return moved, err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return moved, err
	}
	// Nothing may point into the file any more (entries are never added
	// to an old file): check, then drop its usage.
	for _, l := range c.ledgers {
		ms, err := s.liveEntriesIn(c.file, l, false)
		if err != nil {
			return moved, err
		}
		if len(ms) > 0 {
			return moved, fmt.Errorf("ledger %d still has %d entries in it after compaction", l, len(ms))
		}
	}
	return moved, s.submitGC(&collectOp{dropFile: c.file})
}

// liveEntriesIn returns the entries of ledger l the index points into
// file; with read, their payloads too, each checked against its digest.
func (s *Store) liveEntriesIn(file uint32, l int64, read bool) ([]move, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	lo, hi := makeEntryKey(l, 0), makeEntryKey(l+1, 0)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo[:], UpperBound: hi[:]})
	if err != nil {
		return nil, markCorruption(err)
	}
	var out []move
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		var iv indexValue
		if err == nil {
			iv, err = decodeIndexValue(v)
		}
		if err != nil {
			_ = it.Close()
			return nil, markCorruption(err)
		}
		if iv.at.file != file {
			continue
		}
		var k entryKey
		copy(k[:], it.Key())
		id := int64(binary.BigEndian.Uint64(k[9:17]))
		if !read {
			out = append(out, move{key: k, from: iv.at})
			continue
		}
		p := make([]byte, iv.n)
		if err := s.elog.readAt(file, iv.at.off, p); err != nil {
			_ = it.Close()
			return nil, err
		}
		if d := digest.Entry(l, id, iv.lac, p); d != iv.digest {
			_ = it.Close()
			return nil, fmt.Errorf("%w: ledger %d entry %d fails its digest; the file is kept", ErrCorrupt, l, id)
		}
		out = append(out, move{key: k, from: iv.at, e: Entry{LedgerID: l, EntryID: id, LAC: iv.lac, Payload: p, Digest: iv.digest}})
	}
	if err := it.Close(); err != nil {
		return nil, markCorruption(err)
	}
	return out, nil
}

// submitGC runs a collectOp on the committer.
func (s *Store) submitGC(c *collectOp) error {
	ch := make(chan error, 1)
	s.submit(&op{kind: opCollect, gc: c, done: func(_ FenceResult, err error) { ch <- err }})
	return <-ch
}

// moveLocked writes moved entries in one frame and points the index at
// them (committer).
func (s *Store) moveLocked(ms []move) error {
	if err := s.elog.begin(); err != nil {
		s.fail(nil, err)
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	type counted struct {
		from   uint32
		ledger int64
		n      int64
	}
	var moved []counted
	for i := range ms {
		m := &ms[i]
		v, closer, err := s.db.Get(m.key[:])
		if errors.Is(err, pebble.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return markCorruption(err)
		}
		iv, err := decodeIndexValue(v)
		closer.Close()
		if err != nil {
			return err
		}
		if iv.at != m.from {
			continue // replaced meanwhile
		}
		at := s.elog.appendEntry(&m.e)
		if err := b.Set(m.key[:], encodeIndexValue(m.e.LAC, m.e.Digest, at, len(m.e.Payload)), nil); err != nil {
			return fmt.Errorf("bookie: batch set: %w", err)
		}
		moved = append(moved, counted{from: m.from.file, ledger: m.e.LedgerID, n: int64(recEntryHeaderLen + len(m.e.Payload))})
	}
	if s.elog.empty() {
		return nil
	}
	n, err := s.elog.commitFrame()
	if err == nil {
		err = markCorruption(commitBatch(b, pebble.NoSync))
	}
	if err != nil {
		s.fail(nil, err)
		return err
	}
	s.bytesCommitted.Add(uint64(n))
	for _, c := range moved {
		s.addUsage(s.elog.curID, c.ledger, c.n)
		if u := s.usage[c.from]; u != nil {
			if u[c.ledger] -= c.n; u[c.ledger] <= 0 {
				delete(u, c.ledger)
			}
		}
	}
	if p := s.elog.pos(); p.file != s.checkpointed.file || p.off-s.checkpointed.off >= checkpointBytes {
		if err := s.checkpoint(); err != nil {
			s.fail(nil, err)
			return err
		}
	}
	return nil
}

// compactCandidates returns the files (before the checkpoint, not the
// current one) whose live bytes are below threshold of their size
// (committer).
//
// A read-only store (its disk at the usage threshold) compacts nothing:
// compaction writes before it frees, and a write that fails (ENOSPC)
// would leave the store failed until restart (BookKeeper suspends
// compaction on a full disk too). Whole files still go.
func (s *Store) compactCandidates(threshold float64) ([]compactCandidate, error) {
	if threshold <= 0 || s.readOnly.Load() {
		return nil, nil
	}
	var out []compactCandidate
	for f, m := range s.usage {
		if f >= s.checkpointed.file || f == s.elog.curID || len(m) == 0 {
			continue
		}
		fi, err := s.fs.Stat(s.elog.path(f))
		if err != nil {
			return nil, fmt.Errorf("bookie: stat entry log %s: %w", s.elog.path(f), err)
		}
		var live int64
		ls := make([]int64, 0, len(m))
		for l, n := range m {
			live += n
			ls = append(ls, l)
		}
		slices.Sort(ls)
		if fi.Size() > 0 && float64(live) < threshold*float64(fi.Size()) {
			out = append(out, compactCandidate{file: f, live: live, size: fi.Size(), ledgers: ls})
		}
	}
	return out, nil
}
