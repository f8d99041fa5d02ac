package mledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/ratemeter"
	"github.com/meridian-mq/meridian/proto/mlpb"
)

// Errors of the managed ledger; match with errors.Is.
var (
	// ErrFenced: another owner took the managed ledger over (it recovered
	// this owner's ledger, or changed its records in etcd). Appends that
	// fail with it have an unknown outcome: the new owner may or may not
	// have kept them. The broker closes the topic; clients reconnect to the
	// new owner and resend (it deduplicates).
	ErrFenced = errors.New("mledger: fenced: another owner took over")
	// ErrClosed: the managed ledger was closed.
	ErrClosed = errors.New("mledger: closed")
	// ErrConcurrentOpen: Open lost the compare-and-swap of the ledger list
	// twice: another process is opening or writing the same managed ledger.
	ErrConcurrentOpen = errors.New("mledger: concurrent open")
	// ErrFailed: after its ledger failed, the managed ledger could not
	// establish which appends it holds (the ledger could not be recovered
	// within SwitchTimeout), or etcd left the outcome of a write of its
	// ledger list unknown past SwitchTimeout. Pending appends failed with
	// an unknown outcome; close it and Open it again (Open recovers the
	// ledger and settles the list from what etcd stores).
	ErrFailed = errors.New("mledger: failed")
	// ErrNoSuchCursor: DeleteCursor of a cursor that does not exist.
	ErrNoSuchCursor = errors.New("mledger: no such cursor")
	// ErrMissingLedger: Open found a ledger in the list whose metadata
	// does not exist and that may hold acknowledged entries (a durable
	// cursor acknowledged entries of it, or it is not the ledger that was
	// being written). Open refuses rather than drop it: dropping would make
	// the loss final, while the metadata may still be restored (from an
	// etcd backup). An operator restores the metadata or removes the
	// ledger from the list. See missingLedger.
	ErrMissingLedger = errors.New("mledger: a listed ledger has no metadata")
)

// Entry is one entry read back. Data is shared with the tail cache: the
// caller must not modify it.
type Entry struct {
	Pos  Position
	Data []byte
}

// LedgerInfo describes one ledger of the log.
type LedgerInfo struct {
	ID int64
	// Entries and SizeBytes: final once Closed; for the ledger being
	// written, what is confirmed so far. SizeBytes of a ledger recovered
	// from a dead owner is what the ledger metadata records (see the
	// package doc, "Sizes").
	Entries, SizeBytes int64
	CreatedAt          time.Time
	// ClosedAt: when the ledger was closed (retention by time counts from
	// it); zero while open.
	ClosedAt time.Time
	Closed   bool
}

// Stats are counters of one managed ledger since Open.
type Stats struct {
	Entries, SizeBytes int64
	Ledgers            int
	CurrentLedger      int64 // 0 while no ledger is writable
	LastConfirmed      Position
	AppendsOK          int64
	AppendsFailed      int64
	// AppendsResent: appends whose ledger failed before they were
	// confirmed and that recovery proved absent from it, re-sent to the
	// next ledger (no error reached the caller).
	AppendsResent int64
	// CacheHits: entries served from the tail cache; CacheMisses: entries
	// read from bookies.
	CacheHits, CacheMisses int64
	CacheEntries           int
	CacheSizeBytes         int64
	// Rollovers: ledger switches for size, entry count or age.
	Rollovers int64
	// LedgerFailures: ledgers abandoned after a writer failure (recovered,
	// then replaced by a new one).
	LedgerFailures int64
	TrimmedLedgers int64
	// MissingLedgers: ledgers the list referenced without metadata, never
	// written to, that Open dropped from the list (logged as errors; see
	// ErrMissingLedger).
	MissingLedgers int64
	CursorWrites   int64
	Fenced         bool
}

// ManagedLedger is a topic's log: a list of ledgers, the last one written,
// plus durable cursors. Safe for concurrent use.
type ManagedLedger struct {
	name  string
	cfg   Config
	store *cluster.Store
	lc    *ledger.Client
	log   *slog.Logger

	// Lock order: cursor.persistMu → metaMu → submitMu → mu; cursor.mu →
	// mu. Writer callbacks take only mu; user callbacks run on the
	// delivery goroutine with no lock held.

	// metaMu serializes this owner's etcd writes (ledger list CAS, cursor
	// records) and guards infoRev and changes of ledgers.
	metaMu  sync.Mutex
	infoRev int64
	epoch   uint64 // owner epoch written by this owner's takeover

	// submitMu orders hand-overs to the writer: entry ids follow append
	// order.
	submitMu sync.Mutex

	mu   sync.Mutex
	cond *sync.Cond
	// appendCore (under mu): the append path's state — the current
	// ledger, pending and queued appends, the terminal error.
	appendCore
	ledgers       []LedgerInfo
	v             *view
	lastConfirmed Position
	entries       int64
	sizeBytes     int64
	notifyCh      chan struct{}
	cache         tailCache
	readers       map[int64]*ledger.Reader
	stats         Stats
	// addLatency: the confirmed appends' latencies (AddLatency); its own
	// lock.
	addLatency ratemeter.Latency

	cursorsMu sync.Mutex
	cursors   map[string]*Cursor
	trimMu    sync.Mutex // one trim (or cursor creation) at a time

	snapMu    sync.Mutex
	snapshots map[string]*Snapshot // opened by OpenSnapshot (snapshot.go)

	// props: the LedgerProperties record (properties.go); props.mu is
	// taken before metaMu.
	props ledgerProps

	flushMu      sync.Mutex
	flushTimer   *time.Timer
	flushPending bool
	flushStopped bool

	deliverStopped bool // under mu: callbacks run synchronously now
	// The deliverer goroutine runs only while there are callbacks to run
	// (signalDeliver starts it): an idle goroutine per managed ledger
	// cost 100,000 idle topics a few hundred MB of stacks.
	deliverMu     sync.Mutex
	delivering    bool // a deliverer runs
	deliverAgain  bool // signalled while it ran
	deliverClosed bool // stopBackground: none starts any more
	deliverWG     sync.WaitGroup
	deliverDone   chan struct{}
	bg            sync.WaitGroup
}

// Open opens the managed ledger name, creating it if it does not exist, and
// takes it over from any previous owner (see the package doc, "Takeover"):
//
//  1. read the ledger list, and claim it: rewrite it by compare-and-swap
//     with the owner epoch incremented. From then on every write of a
//     previous owner (a rollover, a trim, a cursor record) fails, so it
//     can no longer extend the list;
//  2. recover every ledger not recorded as closed (normally the last one):
//     fence it and close it at its last entry, so a previous owner still
//     alive can no longer append;
//  3. create a new ledger;
//  4. compare-and-swap the list (recovered ledgers' counts, empty ones
//     dropped, the new one appended);
//  5. only then serve: appends go to the new ledger.
//
// If a compare-and-swap loses (the previous owner changed the list before
// the claim, or another process claimed it since), the new ledger is
// deleted and Open starts again once from fresh metadata, so it takes over
// from whoever won; a second loss returns ErrConcurrentOpen. A write whose
// answer etcd lost is settled by reading the list back, and the new ledger
// is kept whenever the list references it or may yet (see the package
// doc, "Writes whose outcome etcd left unknown").
func Open(ctx context.Context, name string, cfg Config) (*ManagedLedger, error) {
	if name == "" {
		return nil, errors.New("mledger: empty name")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ml := &ManagedLedger{
		name:        name,
		cfg:         cfg,
		store:       cfg.Store,
		lc:          cfg.Ledgers,
		log:         cfg.Logger.With("ml", name),
		readers:     map[int64]*ledger.Reader{},
		cursors:     map[string]*Cursor{},
		deliverDone: make(chan struct{}),
	}
	ml.cond = sync.NewCond(&ml.mu)
	ml.appendCore = appendCore{ledgerName: name, rollCfg: &ml.cfg}
	ml.cache.max = cfg.CacheSizeBytes
	for attempt := 0; ; attempt++ {
		err = ml.takeOver(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, errLostRace) {
			return nil, err
		}
		if attempt == 1 {
			return nil, fmt.Errorf("%w: %s: %v", ErrConcurrentOpen, name, err)
		}
		ml.log.Info("lost the ledger-list CAS at open; retrying from fresh metadata", "err", err)
	}
	if err := ml.loadCursors(ctx); err != nil {
		ml.abandon()
		return nil, err
	}
	return ml, nil
}

var errLostRace = errors.New("ledger list changed concurrently")

const mlpbActive = mlpb.ManagedLedgerState_ML_ACTIVE

func isFenced(err error) bool { return errors.Is(err, ErrFenced) }

func (ml *ManagedLedger) now() time.Time { return ml.cfg.Clock() }

func (ml *ManagedLedger) createOptions() ledger.CreateOptions {
	o := ledger.CreateOptions{
		EnsembleSize: ml.cfg.EnsembleSize, WriteQuorum: ml.cfg.WriteQuorum, AckQuorum: ml.cfg.AckQuorum,
		Placement: ml.cfg.Placement,
		Custom:    map[string]string{"managed-ledger": ml.name},
	}
	if ml.cfg.Adjust != nil {
		o = ml.cfg.Adjust(o)
	}
	return o
}

// takeOver runs steps 1-4 of Open once.
func (ml *ManagedLedger) takeOver(ctx context.Context) error {
	key := infoKey(ml.name)
	var rec infoRecord
	var rev int64
	kv, err := ml.store.Get(ctx, key)
	switch {
	case errors.Is(err, cluster.ErrNotFound):
	case err != nil:
		return fmt.Errorf("mledger: %s: read ledger list: %w", ml.name, err)
	default:
		if rec, err = decodeInfo(key, kv.Value); err != nil {
			return err
		}
		rev = kv.ModRevision
		if rec.state == mlpb.ManagedLedgerState_ML_DELETING {
			ml.log.Info("finishing an interrupted delete before re-creating")
			if err := ml.deleteAll(ctx, rec.ledgers); err != nil {
				return err
			}
			rec, rev = infoRecord{epoch: rec.epoch}, 0
		}
	}

	// 1. Claim: bump the owner epoch by compare-and-swap.
	rec.state = mlpb.ManagedLedgerState_ML_ACTIVE
	rec.epoch++
	b, err := encodeInfo(rec)
	if err != nil {
		return err
	}
	if rev == 0 {
		rev, err = ml.store.Create(ctx, key, b)
	} else {
		rev, err = ml.casInfo(ctx, b, rev)
	}
	if err != nil {
		if errors.Is(err, cluster.ErrExists) || errors.Is(err, errListMoved) {
			return fmt.Errorf("%w: claim: %v", errLostRace, err)
		}
		return fmt.Errorf("mledger: %s: claim ledger list: %w", ml.name, err)
	}

	// 2. Recover (fence + close) every ledger the list does not record as
	// closed: a previous owner may still be writing it.
	ls := rec.ledgers
	missing := int64(0)
	for i := range ls {
		if ls[i].Closed {
			continue
		}
		rd, err := ml.lc.Recover(ctx, ls[i].ID)
		if errors.Is(err, ledger.ErrNoSuchLedger) {
			if err := ml.missingLedger(ctx, ls, i); err != nil {
				return err
			}
			ls[i].Entries, ls[i].SizeBytes, ls[i].Closed, ls[i].ClosedAt = 0, 0, true, ml.now()
			missing++
			continue // dropped below, as an empty ledger
		}
		if err != nil {
			return fmt.Errorf("mledger: %s: recover ledger %d: %w", ml.name, ls[i].ID, err)
		}
		ls[i].Entries = rd.LastEntry() + 1
		ls[i].SizeBytes = rd.Metadata().Meta.Length
		ls[i].Closed = true
		ls[i].ClosedAt = ml.now()
		ml.log.Info("recovered ledger at takeover", "ledger", ls[i].ID, "entries", ls[i].Entries)
	}
	keep := make([]LedgerInfo, 0, len(ls)+1)
	var drop []int64
	for _, l := range ls {
		if l.Entries == 0 {
			drop = append(drop, l.ID)
			continue
		}
		keep = append(keep, l)
	}

	// 3. Create the next ledger. If no ledger can be placed now (a
	// stretched ledger's other region is gone) the log still opens, for
	// reads: the first append retries the creation.
	w, err := ml.lc.Create(ctx, ml.createOptions())
	if err != nil && len(keep) == 0 {
		return fmt.Errorf("mledger: %s: create ledger: %w", ml.name, err)
	}
	now := ml.now()
	list := keep
	if err != nil {
		ml.log.Warn("opened without a ledger to write: creation failed; appends retry it", "err", err)
	} else {
		list = append(keep, LedgerInfo{ID: w.ID(), CreatedAt: now})
	}
	// 4. Record it.
	rec.ledgers = list
	if b, err = encodeInfo(rec); err != nil {
		if w != nil {
			ml.discardLedger(w)
		}
		return err
	}
	newRev, err := ml.casInfo(ctx, b, rev)
	if err != nil {
		// The list may reference w after all (a write whose answer was
		// lost may have landed, or land later): w is deleted only when it
		// certainly does not and never will.
		if w != nil {
			ml.releaseUnrecorded(w, rev)
		}
		if errors.Is(err, errListMoved) {
			return fmt.Errorf("%w: %v", errLostRace, err)
		}
		return fmt.Errorf("mledger: %s: write ledger list: %w", ml.name, err)
	}
	// Committed: this process owns the managed ledger.
	for _, id := range drop {
		if err := ledger.DeleteLedger(ctx, ml.store, id); err != nil {
			ml.log.Warn("delete empty ledger", "ledger", id, "err", err)
		}
	}
	ml.infoRev, ml.epoch = newRev, rec.epoch
	ml.stats.MissingLedgers += missing
	ml.ledgers = list
	ml.state = stNoLedger
	if w != nil {
		ml.cur = &curLedger{id: w.ID(), w: w, createdAt: now, readableLAC: -1}
		ml.state = stWriting
	}
	ml.lastConfirmed = Position{list[0].ID, -1}
	for _, l := range keep {
		ml.entries += l.Entries
		ml.sizeBytes += l.SizeBytes
		ml.lastConfirmed = Position{l.ID, l.Entries - 1}
	}
	ml.rebuildViewLocked()
	writing := int64(-1)
	if w != nil {
		writing = w.ID()
	}
	ml.log.Info("opened", "epoch", rec.epoch, "ledgers", len(list), "entries", ml.entries, "writing", writing, "last_confirmed", ml.lastConfirmed)
	return nil
}

// discardLedger closes and deletes a ledger this owner created and never
// sent to etcd in a list.
func (ml *ManagedLedger) discardLedger(w *ledger.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = w.Close(ctx)
	if err := ledger.DeleteLedger(ctx, ml.store, w.ID()); err != nil {
		ml.log.Warn("delete unused ledger", "ledger", w.ID(), "err", err)
	}
}

// releaseUnrecorded closes w, a ledger this owner created and tried to
// record by a compare-and-swap of the list at casRev that did not succeed
// as far as it knows, and deletes it only if the list certainly does not
// reference it and never will: it is read back, and w is kept when
//   - the list references w: a write whose answer was lost landed (and
//     another owner may have moved the list on since: it recovers w; and
//     if it is this process's next Open, it recovers w too). Deleting it
//     left a list no Open could recover ("recover ledger N: no such
//     ledger", every time);
//   - the list is still at casRev: the write may yet land (etcd can
//     commit a proposal after answering "request timed out"), or
//   - the list cannot be read.
//
// A kept ledger that the list never comes to reference is an orphan: its
// metadata (closed, empty) stays in etcd, logged here with its id. That
// costs a key; the other mistake cost the topic.
func (ml *ManagedLedger) releaseUnrecorded(w *ledger.Writer, casRev int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = w.Close(ctx) // closed empty: a later Open recovers it at once, and drops it
	id := w.ID()
	kv, err := ml.store.Get(ctx, infoKey(ml.name))
	var rec infoRecord
	if err == nil {
		rec, err = decodeInfo(kv.Key, kv.Value)
	}
	switch {
	case errors.Is(err, cluster.ErrNotFound):
		// Gone (deleted): a compare-and-swap at casRev cannot land.
	case err != nil:
		ml.log.Warn("kept a ledger the list may reference: cannot read the list", "ledger", id, "err", err)
		return
	case slices.ContainsFunc(rec.ledgers, func(l LedgerInfo) bool { return l.ID == id }):
		ml.log.Warn("kept a ledger whose list write was reported failed: the list references it (the write landed)", "ledger", id, "epoch", rec.epoch)
		return
	case kv.ModRevision == casRev:
		ml.log.Warn("kept a ledger whose list write has an unknown outcome: it may yet land; if it never does, the ledger's metadata is an orphan", "ledger", id)
		return
	}
	if err := ledger.DeleteLedger(ctx, ml.store, id); err != nil {
		ml.log.Warn("delete unused ledger", "ledger", id, "err", err)
	}
}

// missingLedger decides about ls[i], a ledger the list does not record as
// closed and whose metadata does not exist (Recover: ErrNoSuchLedger).
// nil: it was never written to, and Open drops it from the list (logged
// as an error, counted in Stats.MissingLedgers); ErrMissingLedger: it may
// hold acknowledged entries, and Open fails.
//
// The reasoning. Without its metadata a ledger's entries cannot be found
// (the metadata holds its ensembles), so the questions are whether
// anything acknowledged is lost, and whether refusing to open could still
// save it. This package deletes a ledger's metadata only (1) after the
// list stopped referencing it (trimming, dropping empty ledgers, Delete),
// or (2) for a ledger it created for the list and never handed an append
// (its list write did not succeed). Until releaseUnrecorded, (2) also
// deleted ledgers whose list write had in fact landed: the list then
// referenced a ledger no metadata describes — the last ledger of the
// list, never written to, since its owner did not serve it. That is the
// one way this state arises from this package's own writes, and such a
// ledger is dropped (Pulsar's ManagedLedgerImpl drops a missing last
// ledger too). Anything else means someone else deleted the metadata (an
// operator, a tool): the ledger may hold acknowledged entries, and
// dropping it would make their loss final where restoring the metadata
// (from an etcd backup) could still save them. Open refuses when there is
// a sign of that:
//   - the ledger is not the last of the list: only the last one can have
//     been the subject of a list write taken for failed;
//   - a durable cursor's record holds a position inside it or after it:
//     a consumer acknowledged entries there.
//
// Without such a sign, a last ledger whose metadata someone else deleted
// is dropped as well: logged as an error and counted, not silently. The
// bookies are not asked: without the metadata the ensemble is unknown,
// and once bookies collect the entries of ledgers without metadata (as
// BookKeeper's garbage collection does) their silence proves nothing.
func (ml *ManagedLedger) missingLedger(ctx context.Context, ls []LedgerInfo, i int) error {
	id := ls[i].ID
	if i != len(ls)-1 {
		ml.log.Error("a ledger in the list has no metadata and is not the last one: refusing to open", "ledger", id)
		return fmt.Errorf("%w: %s: ledger %d (not the last of the list)", ErrMissingLedger, ml.name, id)
	}
	dir := cursorsDir(ml.name)
	kvs, _, err := ml.store.List(ctx, dir)
	if err != nil {
		return fmt.Errorf("mledger: %s: ledger %d has no metadata; list cursors: %w", ml.name, id, err)
	}
	inOrAfter := func(p Position) bool { return p.Ledger > id || (p.Ledger == id && p.Entry >= 0) }
	for _, kv := range kvs {
		rec, err := decodeCursor(kv.Key, kv.Value)
		if err != nil {
			return err
		}
		held := inOrAfter(rec.markDelete)
		for _, r := range rec.acked {
			held = held || inOrAfter(r.From) || inOrAfter(r.To)
		}
		if held {
			cursor, _ := UnescapeName(strings.TrimPrefix(kv.Key, dir))
			ml.log.Error("a ledger in the list has no metadata and a cursor acknowledged entries in it: refusing to open", "ledger", id, "cursor", cursor, "mark_delete", rec.markDelete)
			return fmt.Errorf("%w: %s: ledger %d (cursor %s acknowledged entries in it)", ErrMissingLedger, ml.name, id, cursor)
		}
	}
	ml.log.Error("dropping a ledger from the list: it has no metadata, is the last, and no cursor acknowledged anything in it (a ledger whose list write was taken for failed, deleted before it was written to)", "ledger", id)
	return nil
}

// abandon releases an ML whose Open failed after the takeover.
func (ml *ManagedLedger) abandon() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ml.cur != nil {
		_ = ml.cur.w.Close(ctx)
	}
}

// rebuildViewLocked recomputes the immutable view from the ledger list.
func (ml *ManagedLedger) rebuildViewLocked() {
	v := &view{spans: make([]span, len(ml.ledgers))}
	for i, l := range ml.ledgers {
		v.spans[i] = span{id: l.ID, entries: l.Entries}
	}
	v.open = ml.cur != nil && !ml.cur.finished && len(ml.ledgers) > 0 && ml.ledgers[len(ml.ledgers)-1].ID == ml.cur.id
	ml.v = v
}

// snapshot returns the view and the last confirmed position.
func (ml *ManagedLedger) snapshot() (*view, Position) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.v, ml.lastConfirmed
}

// Name returns the managed ledger's name.
func (ml *ManagedLedger) Name() string { return ml.name }

// LastConfirmed returns the position of the last entry appended; when the
// log holds no entry, {first ledger, -1}.
func (ml *ManagedLedger) LastConfirmed() Position {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.lastConfirmed
}

// FirstPosition returns the first entry still stored, or the position the
// next append will get when none is.
func (ml *ManagedLedger) FirstPosition() Position {
	v, _ := ml.snapshot()
	return v.normalize(Earliest)
}

// Next returns the position after p: the next stored entry, moving across
// ledgers and skipping empty and deleted ones, or the position of the next
// append when p is the last entry.
func (ml *ManagedLedger) Next(p Position) Position {
	v, _ := ml.snapshot()
	return v.next(p)
}

// NumberOfEntries returns the entries stored (after trimming).
func (ml *ManagedLedger) NumberOfEntries() int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.entries
}

// TotalSizeBytes returns the payload bytes stored (after trimming).
func (ml *ManagedLedger) TotalSizeBytes() int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.sizeBytes
}

// Ledgers returns the ledger list, the ledger being written last.
func (ml *ManagedLedger) Ledgers() []LedgerInfo {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.ledgersLocked()
}

func (ml *ManagedLedger) ledgersLocked() []LedgerInfo {
	out := append([]LedgerInfo(nil), ml.ledgers...)
	if c := ml.cur; c != nil && !c.finished && len(out) > 0 && out[len(out)-1].ID == c.id {
		out[len(out)-1].Entries = c.confirmed
		out[len(out)-1].SizeBytes = c.confirmedBytes
	}
	return out
}

// Stats returns the counters.
func (ml *ManagedLedger) Stats() Stats {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	s := ml.stats
	s.Entries, s.SizeBytes, s.Ledgers = ml.entries, ml.sizeBytes, len(ml.ledgers)
	s.AppendsOK, s.AppendsFailed, s.AppendsResent = ml.counts.ok, ml.counts.failed, ml.counts.resent
	s.Rollovers, s.LedgerFailures = ml.counts.rollovers, ml.counts.ledgerFailures
	s.LastConfirmed = ml.lastConfirmed
	if ml.cur != nil && !ml.cur.finished {
		s.CurrentLedger = ml.cur.id
	}
	s.CacheEntries, s.CacheSizeBytes = ml.cache.len(), ml.cache.size
	s.Fenced = ml.state == stFenced
	return s
}

// Notify returns a channel closed when an entry after `after` is appended,
// or when the managed ledger closes or fails.
func (ml *ManagedLedger) Notify(after Position) <-chan struct{} {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if after.Less(ml.lastConfirmed) || ml.err != nil {
		return closedCh
	}
	if ml.notifyCh == nil {
		ml.notifyCh = make(chan struct{})
	}
	return ml.notifyCh
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (ml *ManagedLedger) wakeLocked() {
	if ml.notifyCh != nil {
		close(ml.notifyCh)
		ml.notifyCh = nil
	}
}

// terminateLocked moves to a terminal state: every undelivered append
// fails with err, waiters wake up.
func (ml *ManagedLedger) terminateLocked(st mlState, err error) {
	c, ok := ml.terminate(st, err)
	if !ok {
		return
	}
	ml.wakeLocked()
	ml.cond.Broadcast()
	ml.signalDeliver()
	if c != nil {
		ml.bg.Add(1)
		go func() {
			defer ml.bg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.w.Close(ctx) // releases the writer; its error is already known
		}()
	}
}

func (ml *ManagedLedger) fenceLocked(cause error) {
	if ml.err == nil {
		ml.log.Warn("fenced: another owner took over", "err", cause)
	}
	ml.terminateLocked(stFenced, fmt.Errorf("%w: %s: %w", ErrFenced, ml.name, cause))
}

// fence is fenceLocked for callers without mu.
func (ml *ManagedLedger) fence(cause error) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	ml.fenceLocked(cause)
}

// Close waits for pending appends (including a ledger switch in progress),
// closes the current ledger, records it as closed in the list and flushes
// the durable cursors. Appends after Close fail with ErrClosed. If ctx ends
// first, appends still pending fail with ErrClosed (outcome unknown). A
// fenced managed ledger closes without writing anything and Close returns
// its ErrFenced error.
func (ml *ManagedLedger) Close(ctx context.Context) error {
	ml.mu.Lock()
	if ml.closing {
		ml.mu.Unlock()
		select {
		case <-ml.deliverDone:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("mledger: %s: close: a concurrent close has not finished: %w", ml.name, ctx.Err())
		}
	}
	ml.closing = true
	stop := context.AfterFunc(ctx, func() {
		ml.mu.Lock()
		ml.cond.Broadcast()
		ml.mu.Unlock()
	})
	for !ml.idle() && ctx.Err() == nil {
		ml.cond.Wait()
	}
	stop()
	termErr := ml.err
	cur := ml.cur
	if termErr == nil {
		ml.terminateLocked(stClosed, fmt.Errorf("%w: %s", ErrClosed, ml.name))
	}
	ml.mu.Unlock()

	var errs []error
	if termErr == nil {
		if cur != nil && !cur.finished {
			if err := ml.closeCurrent(ctx, cur); err != nil {
				errs = append(errs, err)
			}
		} else if err := ml.writeList(ctx); err != nil {
			errs = append(errs, err)
		}
		if err := ml.flushCursors(ctx); err != nil {
			errs = append(errs, err)
		}
	} else if errors.Is(termErr, ErrFenced) || errors.Is(termErr, ErrFailed) {
		errs = append(errs, termErr)
	}
	if err := ml.stopBackground(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// closeCurrent closes the ledger being written and records it as closed
// (or drops it when empty).
func (ml *ManagedLedger) closeCurrent(ctx context.Context, cur *curLedger) error {
	err := cur.w.Close(ctx)
	ml.mu.Lock()
	cur.finished = true
	if err != nil {
		ml.mu.Unlock()
		if errors.Is(err, ledger.ErrFenced) {
			ml.fence(err)
			return fmt.Errorf("%w: %s: close ledger %d: %w", ErrFenced, ml.name, cur.id, err)
		}
		return fmt.Errorf("mledger: %s: close ledger %d: %w", ml.name, cur.id, err)
	}
	ml.finishLedgerLocked(cur)
	ml.mu.Unlock()
	return ml.writeList(ctx)
}

// finishLedgerLocked records cur as closed at its confirmed end.
func (ml *ManagedLedger) finishLedgerLocked(cur *curLedger) {
	cur.finished = true
	for i := range ml.ledgers {
		if ml.ledgers[i].ID == cur.id {
			ml.ledgers[i].Entries = cur.confirmed
			ml.ledgers[i].SizeBytes = cur.confirmedBytes
			ml.ledgers[i].Closed = true
			ml.ledgers[i].ClosedAt = ml.now()
		}
	}
	ml.cache.unpinAll()
	delete(ml.readers, cur.id) // opened while it was open: stale end
	ml.rebuildViewLocked()
}

// writeList CASes the in-memory ledger list into etcd, dropping empty
// closed ledgers, and deletes the dropped ledgers' metadata.
func (ml *ManagedLedger) writeList(ctx context.Context) error {
	ml.metaMu.Lock()
	ml.mu.Lock()
	var keep []LedgerInfo
	var drop []int64
	for i, l := range ml.ledgers {
		// Empty closed ledgers hold nothing; one ledger always stays so the
		// list (and LastConfirmed's ledger) is never empty.
		lastChance := i == len(ml.ledgers)-1 && len(keep) == 0
		if l.Closed && l.Entries == 0 && !lastChance {
			drop = append(drop, l.ID)
			continue
		}
		keep = append(keep, l)
	}
	ml.mu.Unlock()
	err := ml.casListLocked(ctx, mlpb.ManagedLedgerState_ML_ACTIVE, keep)
	if err == nil {
		ml.mu.Lock()
		ml.ledgers = keep
		ml.rebuildViewLocked()
		ml.mu.Unlock()
	}
	ml.metaMu.Unlock()
	if err != nil {
		return err
	}
	for _, id := range drop {
		if err := ledger.DeleteLedger(ctx, ml.store, id); err != nil {
			ml.log.Warn("delete empty ledger", "ledger", id, "err", err)
		}
	}
	return nil
}

// stopBackground stops the flush timer, waits for background work (a
// ledger switch, a trim, a flush: each bounded by SwitchTimeout) and the
// delivery goroutine, then delivers what is left. It waits no longer than
// ctx: the rest then finishes on its own goroutine (deliverDone closes
// when it has) and the error says so.
func (ml *ManagedLedger) stopBackground(ctx context.Context) error {
	ml.flushMu.Lock()
	ml.flushStopped = true
	if ml.flushTimer != nil && ml.flushTimer.Stop() {
		ml.flushPending = false
		ml.bg.Done()
	}
	ml.flushMu.Unlock()
	go func() {
		ml.bg.Wait()
		ml.mu.Lock()
		ml.deliverStopped = true
		ml.mu.Unlock()
		ml.deliverMu.Lock()
		ml.deliverClosed = true
		ml.deliverMu.Unlock()
		ml.deliverWG.Wait()
		ml.deliverReady()
		close(ml.deliverDone)
	}()
	select {
	case <-ml.deliverDone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mledger: %s: close: background work or callbacks still running: %w", ml.name, ctx.Err())
	}
}

// Delete removes the managed ledger: it closes it, marks the list
// DELETING (so no owner appends again and a later Open finishes the job),
// deletes every ledger's metadata, then the list and cursor records.
func (ml *ManagedLedger) Delete(ctx context.Context) error {
	if err := ml.Close(ctx); err != nil {
		return err
	}
	ml.metaMu.Lock()
	ml.mu.Lock()
	ls := append([]LedgerInfo(nil), ml.ledgers...)
	ml.mu.Unlock()
	err := ml.casListLocked(ctx, mlpb.ManagedLedgerState_ML_DELETING, ls)
	ml.metaMu.Unlock()
	if err != nil {
		return err
	}
	return ml.deleteAll(ctx, ls)
}

// deleteAll deletes the ledgers' metadata (the log's and its snapshots'),
// then every record of the managed ledger.
func (ml *ManagedLedger) deleteAll(ctx context.Context, ls []LedgerInfo) error {
	for _, l := range ls {
		if err := ledger.DeleteLedger(ctx, ml.store, l.ID); err != nil {
			return fmt.Errorf("mledger: %s: delete ledger %d: %w", ml.name, l.ID, err)
		}
	}
	if err := ml.deleteSnapshotLedgers(ctx); err != nil {
		return err
	}
	if err := ml.deletePrefix(ctx, mlDir(ml.name)); err != nil {
		return fmt.Errorf("mledger: %s: delete records: %w", ml.name, err)
	}
	ml.log.Info("deleted", "ledgers", len(ls))
	return nil
}
