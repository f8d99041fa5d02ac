package bookie

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/bookie/digest"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/proto/metapb"
)

// Errors returned by the Store (and mapped to bookiepb.Status by the
// Server). Each is wrapped with details; test with errors.Is.
var (
	// ErrNoSuchEntry: the store is authoritative that it never stored the
	// entry (the ledger is known here, the entry is not).
	ErrNoSuchEntry = errors.New("bookie: no such entry")
	// ErrNoSuchLedger: the store is authoritative that it holds nothing of
	// the ledger (no entry, no fence record), and the ledger is not in limbo.
	ErrNoSuchLedger = errors.New("bookie: no such ledger")
	// ErrFenced: a normal add to a fenced ledger. For the writer the outcome
	// of its add is unknown: the ledger is being recovered by someone else.
	ErrFenced = errors.New("bookie: ledger fenced")
	// ErrReadOnly: the store accepts no adds (disk usage over the threshold,
	// or a commit failed). Reads keep working.
	ErrReadOnly = errors.New("bookie: read-only")
	// ErrCorrupt: a stored entry failed its digest (or Pebble reported
	// corruption), or an add's payload did not match its digest. Never
	// reported as "no such entry" (BookKeeper #2908).
	ErrCorrupt = errors.New("bookie: entry corrupt")
	// ErrUnknown: the store cannot tell whether it held the entry: the
	// ledger is in limbo (this data directory was formatted after the ledger
	// was created, so data may have been lost), or the entry's add failed to
	// commit. Never treat as "absent".
	ErrUnknown = errors.New("bookie: entry state unknown")
	// ErrLimbo: a normal add to a ledger in limbo. The writer must treat this
	// bookie as failed and replace it; recovery adds are accepted.
	ErrLimbo = errors.New("bookie: ledger in limbo, normal adds refused")
	// ErrInvalid: a malformed request (negative ids, oversized payload) or an
	// add that would replace an entry with different content.
	ErrInvalid = errors.New("bookie: invalid request")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("bookie: store closed")
)

// Entry is one add: what the writer sent.
type Entry struct {
	LedgerID int64
	EntryID  int64
	// LAC is the writer's last-add-confirmed piggybacked on this entry; -1
	// when nothing is confirmed yet.
	LAC     int64
	Payload []byte
	// Digest is Digest(LedgerID, EntryID, LAC, Payload) as computed by the
	// writer; the store verifies it before accepting the add.
	Digest uint32
	// Recovery marks a recovery add: accepted on fenced and limbo ledgers.
	Recovery bool
}

// FenceResult is a ledger's state at the fence's position in the commit
// order: every add queued before the fence is included, none queued after.
type FenceResult struct {
	// LAC is the maximum LAC piggybacked on the ledger's stored adds, -1 if
	// none.
	LAC int64
	// LastEntryID is the highest entry id stored, -1 if none.
	LastEntryID int64
	// Limbo is set when the ledger is in limbo: LAC and LastEntryID are then
	// not authoritative (entries may have been lost with a wiped disk).
	Limbo bool
}

// Stats are cumulative counters of the committer.
type Stats struct {
	// GroupCommits is the number of synced entry log frames committed.
	GroupCommits uint64
	// EntriesCommitted is the number of adds written by those commits.
	EntriesCommitted uint64
	// BytesCommitted is the size of those frames (records and headers).
	BytesCommitted uint64
	// Checkpoints is the number of index checkpoints (synced Pebble writes).
	Checkpoints uint64
}

// CommitInfo describes one group commit, for metrics.
type CommitInfo struct {
	Entries  int
	Bytes    int
	Duration time.Duration
	// Err is non-nil when the commit failed (the store turned read-only).
	Err error
}

// StoreOptions configures OpenStore. Zero values take the defaults of the
// matching Config fields.
type StoreOptions struct {
	// FS is the filesystem; nil means vfs.Default.
	FS vfs.FS
	// MemTableSizeBytes: see Config.MemTableSizeBytes.
	MemTableSizeBytes int
	// GroupCommitMaxDelay: see Config.GroupCommitMaxDelay.
	GroupCommitMaxDelay time.Duration
	// GroupCommitMaxBytes: see Config.GroupCommitMaxBytes.
	GroupCommitMaxBytes int
	// Logger receives Pebble's logs and the store's warnings.
	Logger *slog.Logger
	// ZeroAheadBytes: how far ahead of its frames the entry log keeps
	// written zeros (zeroer.go). 0 takes the default, DefaultZeroAheadBytes,
	// on the real disk (FS nil or vfs.Default) and none on any other FS; < 0
	// disables.
	ZeroAheadBytes int64
	// DropSyncedPages > 0 drops the entry log's synced pages from the page
	// cache as it goes (entrylog.go, dropSynced). 0 takes the default: on
	// the real disk (FS nil or vfs.Default), not on any other FS; < 0
	// disables.
	DropSyncedPages int
	// OnCommit, if set, is called by the committer goroutine after every
	// group commit attempt, before the batch's adds are completed. It must be
	// quick and must not call into the Store.
	OnCommit func(CommitInfo)
}

// ledgerState is the in-memory view of one ledger. The committer is its only
// writer; it is loaded from Pebble on first access.
type ledgerState struct {
	hasRecord bool // a ledger record is on disk (or in the batch being built)
	fenced    bool
	limbo     bool // the limbo flag is on disk; see Store.inLimbo
	// deleted: the ledger was deleted from cluster metadata and collected
	// (gc.go): no entry is left, the record is a fenced tombstone, and
	// every add is refused.
	deleted   bool
	lac       int64
	lastEntry int64
	// lastLAC is the LAC piggybacked on entry lastEntry, recLAC the one
	// the ledger record on disk holds. Loading a ledger takes the greater
	// of the two, so the record is rewritten only when lac exceeds both: a
	// batch that moves the LAC forward with its own entries writes no
	// record. (Rewriting the record in every batch put a key far from the
	// entries into every flushed table, so no two tables were disjoint and
	// Pebble had to compact every flush.)
	lastLAC, recLAC int64
}

// Store is a bookie's durable storage of ledger entries: an entry log
// (entrylog.go) that holds them, indexed in Pebble.
//
// All writes (adds, recovery adds, fences) go through one committer goroutine
// that applies them in queue order to the in-memory ledger state and to one
// entry log frame, writes and fdatasyncs the frame, applies the frame's index
// writes to Pebble, and only then completes them: concurrent adds share an
// fsync (group commit), and a fence is totally ordered with adds (an add
// queued before a fence is in the fence's result and durable before the
// fence is answered; an add queued after it is refused). Reads look the
// entry up in Pebble and read it from the log. A Store is safe for
// concurrent use.
type Store struct {
	db   *pebble.DB
	elog *entryLog
	fs   vfs.FS
	dir  string
	opts StoreOptions
	log  *slog.Logger

	// closeMu guards closed, sending on queue, and every use of db outside
	// the committer (readers hold it shared while they use db).
	closeMu       sync.RWMutex
	closed        bool
	queue         chan *op
	committerDone chan struct{}

	limboBelowOrAt atomic.Int64
	readOnly       atomic.Bool

	mu        sync.Mutex
	ledgers   map[int64]*ledgerState // only the committer replaces values
	cookie    *metapb.Cookie
	failErr   error                 // set once when a commit failed
	uncertain map[entryKey]struct{} // entries whose add failed to commit

	groupCommits     atomic.Uint64
	entriesCommitted atomic.Uint64
	bytesCommitted   atomic.Uint64
	checkpoints      atomic.Uint64

	// checkpointed is the log position of the last checkpoint (committer
	// only, and Close after it).
	checkpointed logPos

	// usage is, per entry log file, the record bytes of each ledger the
	// index points to in it (BookKeeper's EntryLogMetadata): built from the
	// index at open, added to by every commit, and taken from by garbage
	// collection (gc.go). Committer only (OpenStore before it starts).
	// An entry replaced by a recovery add stays counted in its old file,
	// which keeps that file until the ledger is deleted: never too little.
	usage map[uint32]map[int64]int64
	// usageErr: building usage at open failed (a damaged index); garbage
	// collection refuses to run (set before the committer starts).
	usageErr error
}

type opKind uint8

const (
	opAdd opKind = iota
	opFence
	opCollect // gc.go, compact.go: garbage collection's index and log work
)

type op struct {
	kind   opKind
	ledger int64
	e      Entry // opAdd; e.Payload is the caller's until done
	done   func(FenceResult, error)
	gc     *collectOp // opCollect

	// Set by the committer while building the batch.
	res     FenceResult
	err     error
	written bool // opAdd: the batch holds this op's write
}

// recordLen is the size of the op's entry log record (0 for a fence).
func (o *op) recordLen() int {
	if o.kind != opAdd {
		return 0
	}
	return recEntryHeaderLen + len(o.e.Payload)
}

// OpenStore opens (or, for an absent or empty directory, creates) the store
// in dir. It refuses a directory that holds anything else than a bookie
// store, and a bookie store of a format version it does not know.
func OpenStore(dir string, opts StoreOptions) (*Store, error) {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.ZeroAheadBytes == 0 && opts.FS == vfs.Default {
		opts.ZeroAheadBytes = DefaultZeroAheadBytes
	}
	if opts.DropSyncedPages == 0 && opts.FS == vfs.Default {
		opts.DropSyncedPages = 1
	}
	if opts.MemTableSizeBytes == 0 {
		opts.MemTableSizeBytes = DefaultMemTableSizeBytes
	}
	if opts.GroupCommitMaxBytes == 0 {
		opts.GroupCommitMaxBytes = DefaultGroupCommitMaxBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	fs := opts.FS

	names, err := fs.List(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		names = nil
	case err != nil:
		return nil, fmt.Errorf("bookie: data dir %s: %w", dir, err)
	}
	fresh := len(names) == 0
	if !fresh && !looksLikePebble(names) {
		return nil, fmt.Errorf("bookie: data dir %s is not empty and does not hold a bookie store (found %s); refusing to use it",
			dir, strings.Join(firstN(names, 5), ", "))
	}
	if fresh {
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("bookie: create data dir %s: %w", dir, err)
		}
	}
	db, err := pebble.Open(dir, pebbleOptions(fs, opts.MemTableSizeBytes, !fresh, opts.Logger))
	if err != nil {
		return nil, fmt.Errorf("bookie: open pebble store in %s: %w", dir, err)
	}
	s := &Store{
		db:            db,
		fs:            fs,
		dir:           dir,
		opts:          opts,
		log:           opts.Logger,
		queue:         make(chan *op, queueLen),
		committerDone: make(chan struct{}),
		ledgers:       make(map[int64]*ledgerState),
		uncertain:     make(map[entryKey]struct{}),
		usage:         make(map[uint32]map[int64]int64),
	}
	if err := s.checkFormat(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.loadCookie(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.openEntryLog(); err != nil {
		if s.elog != nil {
			_ = s.elog.close()
		}
		_ = db.Close()
		return nil, err
	}
	go s.run()
	return s, nil
}

func looksLikePebble(names []string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, "MANIFEST-") || strings.HasPrefix(n, "marker.manifest.") {
			return true
		}
	}
	return false
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "...")
	}
	return s
}

// checkFormat verifies the format version key, writing it into a store that
// has no key at all (new, or a crash happened before the key was written).
func (s *Store) checkFormat() error {
	v, closer, err := s.db.Get(keyFormatVersion)
	switch {
	case err == nil:
		defer closer.Close()
		if len(v) != 4 {
			return fmt.Errorf("bookie: data dir %s: format version record is %d bytes, want 4; this bookie supports format version %d", s.dir, len(v), FormatVersion)
		}
		if got := binary.BigEndian.Uint32(v); got != FormatVersion {
			return fmt.Errorf("bookie: data dir %s has format version %d; this bookie supports format version %d only", s.dir, got, FormatVersion)
		}
		return nil
	case errors.Is(err, pebble.ErrNotFound):
		empty, err := s.isEmpty()
		if err != nil {
			return err
		}
		if !empty {
			return fmt.Errorf("bookie: data dir %s holds a Pebble store without a bookie format version (found none; this bookie supports format version %d): not a bookie store", s.dir, FormatVersion)
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], FormatVersion)
		if err := s.db.Set(keyFormatVersion, b[:], pebble.Sync); err != nil {
			return fmt.Errorf("bookie: write format version in %s: %w", s.dir, err)
		}
		return nil
	default:
		return fmt.Errorf("bookie: read format version in %s: %w", s.dir, markCorruption(err))
	}
}

func (s *Store) isEmpty() (bool, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return false, err
	}
	has := it.First()
	if err := it.Close(); err != nil {
		return false, markCorruption(err)
	}
	return !has, nil
}

func (s *Store) loadCookie() error {
	v, closer, err := s.db.Get(keyCookie)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bookie: read cookie in %s: %w", s.dir, markCorruption(err))
	}
	defer closer.Close()
	c := &metapb.Cookie{}
	if err := proto.Unmarshal(v, c); err != nil {
		return fmt.Errorf("bookie: data dir %s: cookie does not decode: %w", s.dir, errors.Join(ErrCorrupt, err))
	}
	s.cookie = c
	s.limboBelowOrAt.Store(c.GetLimboBelowOrAt())
	return nil
}

// Cookie returns a copy of the cookie stored in the data directory.
func (s *Store) Cookie() (*metapb.Cookie, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cookie == nil {
		return nil, false
	}
	return proto.Clone(s.cookie).(*metapb.Cookie), true
}

// SetCookie durably stores the cookie. Its limbo_below_or_at takes effect at
// once. It is meant for startup, before the store serves requests.
func (s *Store) SetCookie(c *metapb.Cookie) error {
	b, err := proto.Marshal(c)
	if err != nil {
		return fmt.Errorf("bookie: encode cookie: %w", err)
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.db.Set(keyCookie, b, pebble.Sync); err != nil {
		return fmt.Errorf("bookie: write cookie in %s: %w", s.dir, err)
	}
	s.mu.Lock()
	s.cookie = proto.Clone(c).(*metapb.Cookie)
	s.mu.Unlock()
	s.limboBelowOrAt.Store(c.GetLimboBelowOrAt())
	return nil
}

// LimboBelowOrAt is the limbo bound of the cookie: ledgers with an id at or
// below it may have lost data here.
func (s *Store) LimboBelowOrAt() int64 { return s.limboBelowOrAt.Load() }

// hasLedgerData reports whether any ledger record or entry is stored.
func (s *Store) hasLedgerData() (bool, error) {
	for _, p := range []byte{prefixEntry, prefixLedger} {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{p}, UpperBound: []byte{p + 1}})
		if err != nil {
			return false, err
		}
		has := it.First()
		if err := it.Close(); err != nil {
			return false, markCorruption(err)
		}
		if has {
			return true, nil
		}
	}
	return false, nil
}

// SetReadOnly turns the store read-only (adds fail with ErrReadOnly) or
// writable again. A store whose commit failed stays read-only.
func (s *Store) SetReadOnly(ro bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failErr != nil {
		return
	}
	s.readOnly.Store(ro)
}

// ReadOnly reports whether adds are refused.
func (s *Store) ReadOnly() bool { return s.readOnly.Load() }

// Failed returns the commit error that turned the store read-only for good,
// or nil.
func (s *Store) Failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failErr
}

// Stats returns the committer's counters.
func (s *Store) Stats() Stats {
	return Stats{
		GroupCommits:     s.groupCommits.Load(),
		EntriesCommitted: s.entriesCommitted.Load(),
		BytesCommitted:   s.bytesCommitted.Load(),
		Checkpoints:      s.checkpoints.Load(),
	}
}

// validateEntry checks an add before it is queued.
func validateEntry(e *Entry) error {
	if e.LedgerID < 0 || e.LedgerID == math.MaxInt64 {
		return fmt.Errorf("%w: ledger id %d out of range", ErrInvalid, e.LedgerID)
	}
	if e.EntryID < 0 || e.EntryID == math.MaxInt64 {
		return fmt.Errorf("%w: entry id %d out of range", ErrInvalid, e.EntryID)
	}
	if e.LAC < -1 || e.LAC >= e.EntryID {
		return fmt.Errorf("%w: lac %d of entry %d must be in [-1, %d)", ErrInvalid, e.LAC, e.EntryID, e.EntryID)
	}
	if d := digest.Entry(e.LedgerID, e.EntryID, e.LAC, e.Payload); d != e.Digest {
		return fmt.Errorf("%w: add of ledger %d entry %d: digest %08x does not match payload (computed %08x)", ErrCorrupt, e.LedgerID, e.EntryID, e.Digest, d)
	}
	return nil
}

// AddAsync queues an add and calls done exactly once with its outcome: nil
// only after the entry is durable. done is called from the committer
// goroutine (or from AddAsync itself when the add is refused before being
// queued); it must not block. The store reads e.Payload until done is
// called (the committer copies it into the entry log's frame), so the caller
// must not modify it before then; it keeps no reference afterwards.
func (s *Store) AddAsync(e Entry, done func(error)) {
	if err := validateEntry(&e); err != nil {
		done(err)
		return
	}
	if s.readOnly.Load() {
		done(s.readOnlyErr())
		return
	}
	o := &op{
		kind:   opAdd,
		ledger: e.LedgerID,
		e:      e,
		done:   func(_ FenceResult, err error) { done(err) },
	}
	s.submit(o)
}

// Add adds an entry and returns once it is durable (nil) or refused.
func (s *Store) Add(e Entry) error {
	ch := make(chan error, 1)
	s.AddAsync(e, func(err error) { ch <- err })
	return <-ch
}

// Fence durably marks the ledger fenced: once Fence returns nil, no normal
// add to the ledger succeeds here, now or after a restart. Fencing is
// idempotent and never undone. The result is the ledger's state at the
// fence's position in the commit order.
func (s *Store) Fence(ledgerID int64) (FenceResult, error) {
	if ledgerID < 0 || ledgerID == math.MaxInt64 {
		return FenceResult{}, fmt.Errorf("%w: ledger id %d out of range", ErrInvalid, ledgerID)
	}
	type result struct {
		r   FenceResult
		err error
	}
	ch := make(chan result, 1)
	s.submit(&op{kind: opFence, ledger: ledgerID, done: func(r FenceResult, err error) { ch <- result{r, err} }})
	r := <-ch
	return r.r, r.err
}

func (s *Store) submit(o *op) {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		o.done(FenceResult{}, ErrClosed)
		return
	}
	s.queue <- o
	s.closeMu.RUnlock()
}

func (s *Store) readOnlyErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failErr != nil {
		return fmt.Errorf("%w: a commit failed, restart required: %v", ErrReadOnly, s.failErr)
	}
	return ErrReadOnly
}

// Close completes the queued operations, stops the committer and closes
// Pebble. Later calls fail with ErrClosed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	close(s.queue)
	s.closeMu.Unlock()
	<-s.committerDone
	var errs []error
	if s.Failed() == nil && s.checkpointed != s.elog.pos() {
		// A clean close replays nothing at the next open.
		errs = append(errs, s.checkpoint())
	}
	errs = append(errs, s.elog.close())
	if err := s.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("bookie: close pebble store in %s: %w", s.dir, err))
	}
	return errors.Join(errs...)
}

// run is the committer goroutine.
func (s *Store) run() {
	defer close(s.committerDone)
	var timer *time.Timer
	batch := make([]*op, 0, 256)
	for {
		first, ok := <-s.queue
		if !ok {
			return
		}
		if first.kind == opCollect {
			s.collect(first)
			continue
		}
		batch = append(batch[:0], first)
		size := first.recordLen()
		open := true
		var deadline <-chan time.Time
		var collect *op // an opCollect met while gathering: it runs after the batch
		if s.opts.GroupCommitMaxDelay > 0 {
			if timer == nil {
				timer = time.NewTimer(s.opts.GroupCommitMaxDelay)
			} else {
				timer.Reset(s.opts.GroupCommitMaxDelay)
			}
			deadline = timer.C
		}
	gather:
		for size < s.opts.GroupCommitMaxBytes && len(batch) < maxOpsPerBatch {
			var o *op
			select {
			case o, ok = <-s.queue:
			default:
				if deadline == nil {
					break gather
				}
				select {
				case o, ok = <-s.queue:
				case <-deadline:
					deadline = nil
					break gather
				}
			}
			if !ok {
				open = false
				break gather
			}
			if o.kind == opCollect {
				collect = o
				break gather
			}
			batch = append(batch, o)
			size += o.recordLen()
		}
		if timer != nil && deadline != nil {
			timer.Stop()
		}
		s.commit(batch)
		clear(batch)
		if collect != nil {
			s.collect(collect)
		}
		if !open {
			return
		}
	}
}

// pendingEntry is an entry written by the frame being built.
type pendingEntry struct {
	lac     int64
	digest  uint32
	payload []byte
}

// commit applies ops in order to the ledger states and one entry log frame,
// writes and syncs the frame, applies its index writes to Pebble, then
// completes the ops.
func (s *Store) commit(ops []*op) {
	b := s.db.NewBatch()
	defer b.Close()
	work := make(map[int64]*ledgerState)
	dirty := make(map[int64]bool)
	pending := make(map[entryKey]pendingEntry)
	limbo := s.limboBelowOrAt.Load()

	s.mu.Lock()
	failErr := s.failErr
	s.mu.Unlock()
	if failErr == nil {
		if err := s.elog.begin(); err != nil {
			s.fail(ops, err)
			return
		}
	}

	entries := 0
	for _, o := range ops {
		if failErr != nil {
			o.err = fmt.Errorf("%w: a commit failed, restart required: %v", ErrReadOnly, failErr)
			continue
		}
		st, ok := work[o.ledger]
		if !ok {
			base, err := s.ledger(o.ledger)
			if err != nil {
				o.err = err
				continue
			}
			st = &base
			work[o.ledger] = st
		}
		inLimbo := st.limbo || o.ledger <= limbo
		switch o.kind {
		case opFence:
			if !st.fenced || !st.hasRecord || inLimbo && !st.limbo {
				st.fenced, st.hasRecord, st.limbo = true, true, inLimbo
				dirty[o.ledger] = true
			}
			o.res = FenceResult{LAC: st.lac, LastEntryID: st.lastEntry, Limbo: inLimbo}
		case opAdd:
			e := &o.e
			switch {
			case s.readOnly.Load():
				o.err = ErrReadOnly
				continue
			case st.deleted:
				o.err = fmt.Errorf("%w: ledger %d was deleted from metadata and collected here; add of entry %d refused", ErrFenced, o.ledger, e.EntryID)
				continue
			case inLimbo && !e.Recovery:
				o.err = fmt.Errorf("%w: ledger %d (limbo covers ledgers <= %d)", ErrLimbo, o.ledger, limbo)
				continue
			case st.fenced && !e.Recovery:
				o.err = fmt.Errorf("%w: ledger %d, add of entry %d refused", ErrFenced, o.ledger, e.EntryID)
				continue
			}
			k := makeEntryKey(o.ledger, e.EntryID)
			write := true
			if e.EntryID <= st.lastEntry {
				existing, found, err := s.existing(pending, k, o.ledger, e.EntryID)
				switch {
				case err != nil && !errors.Is(err, ErrCorrupt):
					o.err = err
					continue
				case found || err != nil:
					write, o.err = s.compareExisting(o, existing, err)
					if o.err != nil {
						continue
					}
				}
			}
			if write {
				payload := e.Payload
				at := s.elog.appendEntry(e)
				if err := b.Set(k[:], encodeIndexValue(e.LAC, e.Digest, at, len(payload)), nil); err != nil {
					s.fail(ops, fmt.Errorf("bookie: batch set: %w", err))
					return
				}
				pending[k] = pendingEntry{lac: e.LAC, digest: e.Digest, payload: payload}
				s.addUsage(at.file, o.ledger, int64(o.recordLen()))
				o.written = true
				entries++
			}
			if !st.hasRecord || inLimbo && !st.limbo {
				st.hasRecord, st.limbo = true, inLimbo
				dirty[o.ledger] = true
			}
			st.lac = max(st.lac, e.LAC) // the record follows if needed (below)
			if e.EntryID > st.lastEntry {
				// Entries above lastEntry are always written (above), so
				// this entry and its LAC are in the frame.
				st.lastEntry, st.lastLAC = e.EntryID, e.LAC
			}
		}
	}
	for id, st := range work {
		if st.lac > max(st.recLAC, st.lastLAC) {
			dirty[id] = true // neither the record nor the last entry would restore lac
		}
	}
	for id := range dirty {
		st := work[id]
		st.recLAC = st.lac
		v := encodeLedgerRecord(st)
		s.elog.appendLedger(id, v)
		if err := b.Set(ledgerKey(id), v, nil); err != nil {
			// Cannot happen for an in-memory batch; fail everything to be safe.
			s.fail(ops, fmt.Errorf("bookie: batch set: %w", err))
			return
		}
	}

	if failErr == nil && !s.elog.empty() {
		start := time.Now()
		n, err := s.elog.commitFrame()
		if err == nil {
			// The frame is durable: the index may lag it (replayed at open).
			err = markCorruption(commitBatch(b, pebble.NoSync))
			if err != nil {
				err = fmt.Errorf("bookie: index commit: %w", err)
			}
		}
		info := CommitInfo{Entries: entries, Bytes: n, Duration: time.Since(start), Err: err}
		if err != nil {
			if s.opts.OnCommit != nil {
				s.opts.OnCommit(info)
			}
			s.fail(ops, err)
			return
		}
		s.groupCommits.Add(1)
		s.entriesCommitted.Add(uint64(entries))
		s.bytesCommitted.Add(uint64(n))
		if s.opts.OnCommit != nil {
			s.opts.OnCommit(info)
		}
	}

	s.mu.Lock()
	for id, st := range work {
		*s.ledgers[id] = *st
	}
	s.mu.Unlock()
	for _, o := range ops {
		o.done(o.res, o.err)
	}

	if p := s.elog.pos(); failErr == nil && (p.file != s.checkpointed.file || p.off-s.checkpointed.off >= checkpointBytes) {
		if err := s.checkpoint(); err != nil {
			s.fail(nil, err)
		}
	}
}

// checkpoint makes the index durable up to the log's current position and
// records that position, so the replay at the next open starts there.
func (s *Store) checkpoint() error {
	p := s.elog.pos()
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(keyCheckpoint, encodeCheckpoint(p), nil); err != nil {
		return fmt.Errorf("bookie: index checkpoint: %w", err)
	}
	if err := commitBatch(b, pebble.Sync); err != nil {
		return fmt.Errorf("bookie: index checkpoint: %w", err)
	}
	s.checkpointed = p
	s.checkpoints.Add(1)
	return nil
}

// fail handles a failed commit: the store turns read-only for good, the
// batch's entries become "unknown" (the log may or may not hold them), and
// every op that was to succeed fails.
func (s *Store) fail(ops []*op, cause error) {
	s.mu.Lock()
	if s.failErr == nil {
		s.failErr = cause
	}
	for _, o := range ops {
		if o.written {
			s.uncertain[makeEntryKey(o.ledger, o.e.EntryID)] = struct{}{}
		}
	}
	s.readOnly.Store(true)
	s.mu.Unlock()
	s.log.Error("bookie: group commit failed; the store is read-only until restart", "dir", s.dir, "ops", len(ops), "err", cause)
	for _, o := range ops {
		if o.err == nil {
			o.err = fmt.Errorf("%w: commit failed, the write may or may not be durable: %v", ErrReadOnly, cause)
		}
		o.done(FenceResult{}, o.err)
	}
}

// existing returns the entry stored (or pending in this frame) under k. A
// stored entry that fails its digest is returned with an ErrCorrupt error.
func (s *Store) existing(pending map[entryKey]pendingEntry, k entryKey, ledgerID, entryID int64) (pendingEntry, bool, error) {
	if v, ok := pending[k]; ok {
		return v, true, nil
	}
	lac, payload, digest, found, err := s.readStored(ledgerID, entryID)
	return pendingEntry{lac: lac, digest: digest, payload: payload}, found, err
}

// compareExisting decides an add of an entry id already stored: identical
// content is an idempotent retry (no write), different content is refused,
// except that a recovery add may replace a stored copy that fails its digest
// (readErr is then the ErrCorrupt of reading it).
func (s *Store) compareExisting(o *op, existing pendingEntry, readErr error) (write bool, err error) {
	e := &o.e
	newPayload := e.Payload
	intact := readErr == nil
	switch {
	case intact && bytes.Equal(existing.payload, newPayload):
		return false, nil
	case !intact && e.Recovery:
		s.log.Warn("bookie: recovery add replaces a corrupt stored entry", "ledger", o.ledger, "entry", e.EntryID, "err", readErr)
		return true, nil
	case !intact:
		return false, fmt.Errorf("%w: ledger %d entry %d is stored corrupt; only a recovery add may replace it", ErrCorrupt, o.ledger, e.EntryID)
	default:
		return false, fmt.Errorf("%w: ledger %d entry %d is already stored with different content (%d bytes, digest %08x; this add: %d bytes, digest %08x); acknowledged data is never replaced",
			ErrInvalid, o.ledger, e.EntryID, len(existing.payload), existing.digest, len(newPayload), e.Digest)
	}
}

// ledger returns the cached state of a ledger, loading it from Pebble on
// first access. Callers other than the committer must hold closeMu shared.
func (s *Store) ledger(id int64) (ledgerState, error) {
	s.mu.Lock()
	if st, ok := s.ledgers[id]; ok {
		s.mu.Unlock()
		return *st, nil
	}
	s.mu.Unlock()
	loaded, err := s.loadLedger(id)
	if err != nil {
		return ledgerState{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Another goroutine (maybe the committer) may have installed it
	// meanwhile; its copy is at least as new as ours.
	if st, ok := s.ledgers[id]; ok {
		return *st, nil
	}
	s.ledgers[id] = &loaded
	return loaded, nil
}

func (s *Store) loadLedger(id int64) (ledgerState, error) {
	st := ledgerState{lac: -1, lastEntry: -1, lastLAC: -1, recLAC: -1}
	v, closer, err := s.db.Get(ledgerKey(id))
	switch {
	case err == nil:
		if len(v) != ledgerRecordLen {
			closer.Close()
			return st, fmt.Errorf("%w: ledger %d record is %d bytes, want %d", ErrCorrupt, id, len(v), ledgerRecordLen)
		}
		st.hasRecord = true
		st.fenced = v[0]&flagFenced != 0
		st.limbo = v[0]&flagLimbo != 0
		st.deleted = v[0]&flagDeleted != 0
		st.lac = int64(binary.BigEndian.Uint64(v[1:]))
		st.recLAC = st.lac
		closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		return st, fmt.Errorf("bookie: read ledger %d record: %w", id, markCorruption(err))
	}
	lo, hi := makeEntryKey(id, 0), makeEntryKey(id+1, 0)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo[:], UpperBound: hi[:]})
	if err != nil {
		return st, fmt.Errorf("bookie: load ledger %d: %w", id, markCorruption(err))
	}
	if it.Last() {
		k := it.Key()
		st.lastEntry = int64(binary.BigEndian.Uint64(k[9:17]))
		val, verr := it.ValueAndErr()
		if verr == nil {
			var iv indexValue
			iv, verr = decodeIndexValue(val)
			if verr == nil {
				st.lastLAC = iv.lac
				st.lac = max(st.lac, iv.lac)
			}
		}
		if verr != nil {
			_ = it.Close()
			return st, fmt.Errorf("bookie: load ledger %d last entry %d: %w", id, st.lastEntry, markCorruption(verr))
		}
		if !st.hasRecord {
			// Every ledger with entries has a record (written with its first
			// entry); its absence means the store was damaged.
			_ = it.Close()
			return st, fmt.Errorf("%w: ledger %d has entries but no ledger record", ErrCorrupt, id)
		}
	}
	if err := it.Close(); err != nil {
		return st, fmt.Errorf("bookie: load ledger %d: %w", id, markCorruption(err))
	}
	return st, nil
}

// inLimbo reports whether the ledger's entries may have been lost here.
func (s *Store) inLimbo(id int64, st ledgerState) bool {
	return st.limbo || id <= s.limboBelowOrAt.Load()
}

// Read returns a stored entry after verifying its digest. It returns
// ErrCorrupt when the stored bytes are damaged, ErrUnknown when the ledger is
// in limbo and the entry is not here (or the entry's add failed to commit),
// ErrNoSuchLedger / ErrNoSuchEntry only when the store is authoritative.
// The returned payload is owned by the caller.
//
// Read sees an add only once its frame is synced (the index is written
// after the sync), so everything it returns is durable here; it is not
// necessarily acknowledged by the writer's quorum: readers that need that
// read up to the LAC, or fence first.
func (s *Store) Read(ledgerID, entryID int64) (lac int64, payload []byte, digest uint32, err error) {
	if ledgerID < 0 || entryID < 0 {
		return 0, nil, 0, fmt.Errorf("%w: ledger %d entry %d: negative id", ErrInvalid, ledgerID, entryID)
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return 0, nil, 0, ErrClosed
	}
	k := makeEntryKey(ledgerID, entryID)
	s.mu.Lock()
	_, uncertain := s.uncertain[k]
	s.mu.Unlock()
	if uncertain {
		return 0, nil, 0, fmt.Errorf("%w: ledger %d entry %d: its add failed to commit", ErrUnknown, ledgerID, entryID)
	}
	lac, payload, digest, found, err := s.readStored(ledgerID, entryID)
	if err != nil {
		return 0, nil, 0, err
	}
	if found {
		return lac, payload, digest, nil
	}
	st, err := s.ledger(ledgerID)
	if err != nil {
		return 0, nil, 0, err
	}
	switch {
	case s.inLimbo(ledgerID, st):
		return 0, nil, 0, fmt.Errorf("%w: ledger %d is in limbo and entry %d is not here", ErrUnknown, ledgerID, entryID)
	case st.deleted:
		return 0, nil, 0, fmt.Errorf("%w: ledger %d was deleted from metadata and collected here", ErrNoSuchLedger, ledgerID)
	case !st.hasRecord:
		return 0, nil, 0, fmt.Errorf("%w: ledger %d", ErrNoSuchLedger, ledgerID)
	default:
		return 0, nil, 0, fmt.Errorf("%w: ledger %d entry %d", ErrNoSuchEntry, ledgerID, entryID)
	}
}

// readStored looks an entry up in the index and reads it from the log,
// verifying its digest. found is false when the index has no such entry.
// The payload is owned by the caller.
func (s *Store) readStored(ledgerID, entryID int64) (lac int64, payload []byte, sum uint32, found bool, err error) {
	k := makeEntryKey(ledgerID, entryID)
	v, closer, err := s.db.Get(k[:])
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil, 0, false, nil
	}
	if err != nil {
		return 0, nil, 0, false, fmt.Errorf("bookie: read ledger %d entry %d: %w", ledgerID, entryID, markCorruption(err))
	}
	iv, err := decodeIndexValue(v)
	closer.Close()
	if err != nil {
		return 0, nil, 0, true, fmt.Errorf("ledger %d entry %d: %w", ledgerID, entryID, err)
	}
	p := make([]byte, iv.n)
	if err := s.elog.readAt(iv.at.file, iv.at.off, p); err != nil {
		return 0, nil, 0, true, fmt.Errorf("ledger %d entry %d: %w", ledgerID, entryID, err)
	}
	if d := digest.Entry(ledgerID, entryID, iv.lac, p); d != iv.digest {
		return 0, nil, 0, true, fmt.Errorf("%w: ledger %d entry %d: stored digest %08x, computed %08x", ErrCorrupt, ledgerID, entryID, iv.digest, d)
	}
	return iv.lac, p, iv.digest, true, nil
}

// ReadLac returns the maximum LAC piggybacked on the ledger's stored adds and
// its highest stored entry id (-1 when none), and whether it is fenced. For a
// ledger in limbo it returns ErrUnknown (with the values it has, which are
// only lower bounds).
func (s *Store) ReadLac(ledgerID int64) (lac, lastEntryID int64, fenced bool, err error) {
	if ledgerID < 0 {
		return -1, -1, false, fmt.Errorf("%w: ledger %d: negative id", ErrInvalid, ledgerID)
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return -1, -1, false, ErrClosed
	}
	st, err := s.ledger(ledgerID)
	if err != nil {
		return -1, -1, false, err
	}
	switch {
	case s.inLimbo(ledgerID, st):
		return st.lac, st.lastEntry, st.fenced, fmt.Errorf("%w: ledger %d is in limbo", ErrUnknown, ledgerID)
	case st.deleted:
		return -1, -1, false, fmt.Errorf("%w: ledger %d was deleted from metadata and collected here", ErrNoSuchLedger, ledgerID)
	case !st.hasRecord:
		return -1, -1, false, fmt.Errorf("%w: ledger %d", ErrNoSuchLedger, ledgerID)
	}
	return st.lac, st.lastEntry, st.fenced, nil
}

var _ io.Closer = (*Store)(nil)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
