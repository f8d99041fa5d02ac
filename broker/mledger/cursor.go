package mledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/cluster"
)

// Cursor is a position in the log with acknowledgements: a subscription's
// (durable: persisted in etcd, holds back trimming) or a reader's
// (non-durable). Safe for concurrent use.
type Cursor struct {
	ml      *ManagedLedger
	name    string
	durable bool

	persistMu sync.Mutex // one record write at a time

	mu    sync.Mutex
	core  cursorCore
	props map[string]int64
	gen   uint64 // bumped when the read position is set from outside
	dirty bool
	// rev: mod revision of the record; persisted: the mark-delete position
	// as last written (what trimming trusts).
	rev       int64
	persisted Position
	deleted   bool
	// released: the cursor does not hold back trimming (a replicator over
	// its backlog quota); kept in memory only.
	released bool
}

// SetHoldsRetention says whether the cursor holds back trimming, as every
// durable cursor does by default. A replicator whose region is gone past
// its backlog quota stops holding it, so retention decides what stays.
func (c *Cursor) SetHoldsRetention(hold bool) {
	c.mu.Lock()
	c.released = !hold
	c.mu.Unlock()
}

// Name returns the cursor's name ("" for a non-durable cursor).
func (c *Cursor) Name() string { return c.name }

// Durable reports whether the cursor is persisted.
func (c *Cursor) Durable() bool { return c.durable }

// MarkDeleted returns the mark-delete position: every entry at or before it
// is acknowledged.
func (c *Cursor) MarkDeleted() Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.markDelete
}

// ReadPosition returns the next entry ReadEntries would return (skipping
// acknowledged entries).
func (c *Cursor) ReadPosition() Position {
	v, _ := c.ml.snapshot()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.readPosition(v)
}

// SetReadPosition moves the read position (not the acknowledgements).
func (c *Cursor) SetReadPosition(p Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.core.readPos = p
	c.gen++
}

// ReadEntries reads up to maxEntries entries (about maxBytes; <= 0: no
// limit) from the read position, skipping individually acknowledged
// entries, and advances the read position past them. It returns no entry
// when the cursor has read everything up to LastConfirmed (then wait on
// the managed ledger's Notify(LastConfirmed())). If the read position is
// moved concurrently (SetReadPosition, Rewind, ResetTo), the entries are
// returned but the read position stays where it was moved.
func (c *Cursor) ReadEntries(ctx context.Context, maxEntries, maxBytes int) ([]Entry, error) {
	c.mu.Lock()
	p, gen := c.core.readPos, c.gen
	c.mu.Unlock()
	var out []Entry
	bytes := 0
	var err error
	for len(out) < maxEntries && (maxBytes <= 0 || bytes < maxBytes) {
		v, lc := c.ml.snapshot()
		c.mu.Lock()
		p = c.core.skipAcked(v, p)
		until, ok := c.core.nextAckedFrom(p)
		c.mu.Unlock()
		if lc.Less(p) {
			break
		}
		if !ok {
			until = Latest
		}
		budget := 0
		if maxBytes > 0 {
			budget = maxBytes - bytes
		}
		var es []Entry
		es, err = c.ml.read(ctx, p, until, maxEntries-len(out), budget)
		for _, e := range es {
			out = append(out, e)
			bytes += len(e.Data)
		}
		if len(es) > 0 {
			p = v.next(es[len(es)-1].Pos)
		}
		if err != nil || len(es) == 0 {
			break
		}
	}
	c.mu.Lock()
	if c.gen == gen && len(out) > 0 {
		c.core.readPos = p
	}
	c.mu.Unlock()
	if err != nil && len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// Ack acknowledges individual entries; mark-delete advances over
// contiguous acknowledged entries (across ledger boundaries). Positions
// that are not stored entries, or already acknowledged, are ignored.
func (c *Cursor) Ack(ps ...Position) {
	v, lc := c.ml.snapshot()
	c.mu.Lock()
	changed := false
	for _, p := range ps {
		if c.core.ack(v, lc, p) {
			changed = true
		}
	}
	c.changedLocked(changed)
	c.mu.Unlock()
	if changed {
		c.ml.scheduleFlush(c)
	}
}

// AckCumulative acknowledges every entry at or before p (bounded by
// LastConfirmed).
func (c *Cursor) AckCumulative(p Position) {
	v, lc := c.ml.snapshot()
	c.mu.Lock()
	changed := c.core.ackCumulative(v, lc, p)
	c.changedLocked(changed)
	c.mu.Unlock()
	if changed {
		c.ml.scheduleFlush(c)
	}
}

// AckCumulativeWith acknowledges every entry at or before p (as
// AckCumulative; Earliest acknowledges nothing) and sets props, in one
// change: a persisted record never holds the new position with the old
// properties or the reverse (a replicator's cursor keeps the sequence
// number of the entry at its position as a property).
func (c *Cursor) AckCumulativeWith(p Position, props map[string]int64) {
	v, lc := c.ml.snapshot()
	c.mu.Lock()
	changed := false
	if p != Earliest {
		changed = c.core.ackCumulative(v, lc, p)
	}
	if c.props == nil {
		c.props = map[string]int64{}
	}
	for k, val := range props {
		if old, ok := c.props[k]; !ok || old != val {
			c.props[k] = val
			changed = true
		}
	}
	c.changedLocked(changed)
	c.mu.Unlock()
	if changed {
		c.ml.scheduleFlush(c)
	}
}

func (c *Cursor) changedLocked(changed bool) {
	if changed && c.durable {
		c.dirty = true
	}
}

// SetBatchAck records which messages of the batch in entry p are still
// unacknowledged (unacked: a bit SET for each such batch index, as the
// protocol's ack_set; empty forgets them), persisted with the cursor, so
// a consumer after a restart is sent only those (Pulsar's
// batchDeletedIndexes). The entry itself stays unacknowledged; an
// acknowledged or unstored entry is ignored, and acknowledging the entry
// forgets its batch state.
func (c *Cursor) SetBatchAck(p Position, unacked []int64) {
	v, lc := c.ml.snapshot()
	c.mu.Lock()
	changed := c.core.setBatch(v, lc, p, unacked)
	c.changedLocked(changed)
	c.mu.Unlock()
	if changed {
		c.ml.scheduleFlush(c)
	}
}

// BatchAcks returns the partly acknowledged batches, in position order.
func (c *Cursor) BatchAcks() []BatchAck {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.batches(len(c.core.batch))
}

// IsAcked reports whether the entry at p is acknowledged.
func (c *Cursor) IsAcked(p Position) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.isAcked(p)
}

// AckedRanges returns the individually acknowledged ranges above
// mark-delete, ascending.
func (c *Cursor) AckedRanges() []Range {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.ackedRanges()
}

// Backlog counts the entries after mark-delete, up to LastConfirmed, that
// are not individually acknowledged.
func (c *Cursor) Backlog() int64 {
	v, lc := c.ml.snapshot()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.backlog(v, lc)
}

// Rewind sets the read position to the first unacknowledged entry after
// mark-delete, so ReadEntries redelivers every unacknowledged entry (after
// a consumer reconnects).
func (c *Cursor) Rewind() {
	v, _ := c.ml.snapshot()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.core.rewind(v)
	c.gen++
}

// ResetTo moves mark-delete to just before p and the read position to p,
// clearing individual acknowledgements (seek, reset cursor); Earliest and
// Latest mean the first stored entry and the position after LastConfirmed.
// A durable cursor is persisted before ResetTo returns.
func (c *Cursor) ResetTo(ctx context.Context, p Position) error {
	if c.durable {
		// Serialized with trimming, so a trim computed before the reset
		// cannot delete the ledgers the cursor moves back into.
		c.ml.trimMu.Lock()
		defer c.ml.trimMu.Unlock()
	}
	v, lc := c.ml.snapshot()
	c.mu.Lock()
	c.core.resetTo(v, lc, p)
	c.gen++
	c.changedLocked(true)
	c.mu.Unlock()
	return c.Flush(ctx)
}

// Properties returns a copy of the cursor's properties.
func (c *Cursor) Properties() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.props)
}

// SetProperty sets one property, persisted with the cursor (at the next
// flush).
func (c *Cursor) SetProperty(name string, value int64) {
	c.mu.Lock()
	if c.props == nil {
		c.props = map[string]int64{}
	}
	changed := c.props[name] != value
	if _, ok := c.props[name]; !ok {
		changed = true
	}
	c.props[name] = value
	c.changedLocked(changed)
	c.mu.Unlock()
	if changed {
		c.ml.scheduleFlush(c)
	}
}

// Flush persists a durable cursor now (no-op when nothing changed since the
// last write, or for a non-durable cursor). A failure means the
// acknowledgements since the last write are not durable yet; ErrFenced
// means another owner has the managed ledger.
func (c *Cursor) Flush(ctx context.Context) error {
	if !c.durable {
		return nil
	}
	return c.persist(ctx)
}

// recordLocked returns the state to persist, with at most limit acked
// ranges (the lowest).
func (c *Cursor) recordLocked(limit int) cursorRecord {
	r := cursorRecord{markDelete: c.core.markDelete, props: maps.Clone(c.props)}
	r.acked = c.core.acked
	if len(r.acked) > limit {
		r.dropped = int64(len(r.acked) - limit)
		r.acked = r.acked[:limit]
	}
	r.acked = append([]Range(nil), r.acked...)
	r.batches = c.core.batches(limit)
	return r
}

func (c *Cursor) persist(ctx context.Context) error {
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	c.mu.Lock()
	if !c.dirty || c.deleted {
		c.mu.Unlock()
		return nil
	}
	rec := c.recordLocked(c.ml.cfg.MaxPersistedAckRanges)
	rev := c.rev
	c.dirty = false
	c.mu.Unlock()
	b, err := encodeCursor(rec, c.ml.now())
	if err == nil {
		rev, err = c.ml.writeRecord(ctx, cursorKey(c.ml.name, c.name), rev, b, false)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.dirty = true
		return err
	}
	c.rev = rev
	c.persisted = rec.markDelete
	if rec.dropped > 0 {
		c.ml.log.Warn("cursor has more acked ranges than are persisted; the rest would be redelivered after a restart", "cursor", c.name, "ranges", len(c.core.acked), "persisted", len(rec.acked))
	}
	return nil
}

// writeRecord is fencedWriteLocked under metaMu; a fenced result fences the
// managed ledger.
func (ml *ManagedLedger) writeRecord(ctx context.Context, key string, rev int64, val []byte, del bool) (int64, error) {
	ml.metaMu.Lock()
	newRev, err := ml.fencedWriteLocked(ctx, key, rev, val, del)
	if errors.Is(err, errRecordMoved) && rev != 0 {
		// An update or delete of ours landed unseen: write over it at the
		// record's revision now (ours is the newer value). A create (rev 0)
		// of a record that exists goes back to its caller.
		if kv, gerr := ml.store.Get(ctx, key); gerr == nil {
			newRev, err = ml.fencedWriteLocked(ctx, key, kv.ModRevision, val, del)
		} else if errors.Is(gerr, cluster.ErrNotFound) && del {
			newRev, err = 0, nil // the delete itself landed
		}
	}
	ml.metaMu.Unlock()
	if err != nil {
		if errors.Is(err, ErrFenced) {
			ml.fence(err)
		}
		return 0, err
	}
	ml.mu.Lock()
	ml.stats.CursorWrites++
	ml.mu.Unlock()
	return newRev, nil
}

// OpenCursor returns the durable cursor name, creating (and persisting) it
// at initial if it does not exist: Earliest → before the first stored
// entry; Latest → after LastConfirmed; another position → mark-delete just
// before it.
func (ml *ManagedLedger) OpenCursor(ctx context.Context, name string, initial Position) (*Cursor, error) {
	if name == "" {
		return nil, errors.New("mledger: empty cursor name")
	}
	// Serialized with trimming: the new cursor's position must hold back
	// the ledgers it starts in.
	ml.trimMu.Lock()
	defer ml.trimMu.Unlock()
	ml.cursorsMu.Lock()
	defer ml.cursorsMu.Unlock()
	if c, ok := ml.cursors[name]; ok {
		return c, nil
	}
	ml.mu.Lock()
	err := ml.err
	ml.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c := &Cursor{ml: ml, name: name, durable: true}
	v, lc := ml.snapshot()
	c.core.resetTo(v, lc, initial)
	if initial == Latest {
		c.core.markDelete = lc
	}
	b, err := encodeCursor(c.recordLocked(ml.cfg.MaxPersistedAckRanges), ml.now())
	if err != nil {
		return nil, err
	}
	rev, err := ml.writeRecord(ctx, cursorKey(ml.name, name), 0, b, false)
	if errors.Is(err, errRecordMoved) {
		// An earlier create of this cursor landed while its answer was
		// lost (the caller's context ended): that record is the cursor.
		ac, aerr := ml.adoptCursor(ctx, name)
		if aerr == nil {
			ml.log.Info("cursor adopted: an earlier create had landed", "cursor", name, "mark_delete", ac.persisted)
			return ac, nil
		}
		err = errors.Join(err, aerr)
	}
	if err != nil {
		return nil, fmt.Errorf("mledger: %s: create cursor %s: %w", ml.name, name, err)
	}
	c.rev, c.persisted = rev, c.core.markDelete
	ml.cursors[name] = c
	ml.log.Info("cursor created", "cursor", name, "mark_delete", c.core.markDelete)
	return c, nil
}

// DeleteCursor deletes the durable cursor name and its record; the ledgers
// it held back may be trimmed.
func (ml *ManagedLedger) DeleteCursor(ctx context.Context, name string) error {
	ml.cursorsMu.Lock()
	c, ok := ml.cursors[name]
	ml.cursorsMu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s in %s", ErrNoSuchCursor, name, ml.name)
	}
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	c.mu.Lock()
	rev := c.rev
	c.mu.Unlock()
	if _, err := ml.writeRecord(ctx, cursorKey(ml.name, name), rev, nil, true); err != nil {
		return fmt.Errorf("mledger: %s: delete cursor %s: %w", ml.name, name, err)
	}
	c.mu.Lock()
	c.deleted = true
	c.mu.Unlock()
	ml.cursorsMu.Lock()
	delete(ml.cursors, name)
	ml.cursorsMu.Unlock()
	ml.trimAsync()
	return nil
}

// Cursors returns the durable cursors, sorted by name.
func (ml *ManagedLedger) Cursors() []*Cursor {
	ml.cursorsMu.Lock()
	defer ml.cursorsMu.Unlock()
	out := make([]*Cursor, 0, len(ml.cursors))
	for _, c := range ml.cursors {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// NewNonDurableCursor returns a cursor for a reader, starting at start
// (Earliest: the first stored entry; Latest: after LastConfirmed). It is
// not persisted and does not hold back trimming: if its ledgers are
// trimmed, it continues at the first stored entry after them.
func (ml *ManagedLedger) NewNonDurableCursor(start Position) *Cursor {
	c := &Cursor{ml: ml}
	v, lc := ml.snapshot()
	c.core.resetTo(v, lc, start)
	if start == Latest {
		c.core.markDelete = lc
	}
	return c
}

// loadCursors reads every cursor record of the managed ledger (at Open):
// all durable cursors hold back trimming, opened by a subscription yet or
// not.
// adoptCursor loads the stored record of cursor name into ml.cursors, as
// loadCursors does at open. Called with cursorsMu held.
func (ml *ManagedLedger) adoptCursor(ctx context.Context, name string) (*Cursor, error) {
	kv, err := ml.store.Get(ctx, cursorKey(ml.name, name))
	if err != nil {
		return nil, err
	}
	v, _ := ml.snapshot()
	return ml.addStoredCursor(name, kv, v)
}

// addStoredCursor decodes a stored cursor record into ml.cursors.
func (ml *ManagedLedger) addStoredCursor(name string, kv cluster.KV, v *view) (*Cursor, error) {
	rec, err := decodeCursor(kv.Key, kv.Value)
	if err != nil {
		return nil, err
	}
	c := &Cursor{ml: ml, name: name, durable: true, props: rec.props, rev: kv.ModRevision, persisted: rec.markDelete}
	c.core.markDelete = rec.markDelete
	c.core.acked = rec.acked
	for _, b := range rec.batches {
		if c.core.batch == nil {
			c.core.batch = map[Position][]int64{}
		}
		c.core.batch[b.Pos] = b.Unacked
	}
	c.core.advance(v)
	c.core.dropBatchAcked()
	c.core.rewind(v)
	ml.cursors[name] = c
	return c, nil
}

func (ml *ManagedLedger) loadCursors(ctx context.Context) error {
	dir := cursorsDir(ml.name)
	kvs, _, err := ml.store.List(ctx, dir)
	if err != nil {
		return fmt.Errorf("mledger: %s: list cursors: %w", ml.name, err)
	}
	v, _ := ml.snapshot()
	for _, kv := range kvs {
		name, err := UnescapeName(strings.TrimPrefix(kv.Key, dir))
		if err != nil {
			return err
		}
		if _, err := ml.addStoredCursor(name, kv, v); err != nil {
			return err
		}
	}
	return nil
}

// scheduleFlush arranges for the dirty durable cursors to be written within
// CursorPersistInterval (one timer per managed ledger batches them).
func (ml *ManagedLedger) scheduleFlush(c *Cursor) {
	if c.durable {
		ml.armFlush()
	}
}

func (ml *ManagedLedger) armFlush() {
	ml.flushMu.Lock()
	defer ml.flushMu.Unlock()
	if ml.flushPending || ml.flushStopped {
		return
	}
	ml.flushPending = true
	ml.bg.Add(1)
	ml.flushTimer = time.AfterFunc(ml.cfg.CursorPersistInterval, func() {
		defer ml.bg.Done()
		ml.flushMu.Lock()
		ml.flushPending = false
		ml.flushMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), ml.cfg.SwitchTimeout)
		defer cancel()
		if err := ml.flushCursors(ctx); err != nil {
			ml.log.Warn("cursor flush failed", "err", err)
			if !errors.Is(err, ErrFenced) {
				ml.armFlush() // try again at the next interval
			}
			return
		}
		ml.trimAsync()
	})
}

// flushCursors persists every dirty durable cursor.
func (ml *ManagedLedger) flushCursors(ctx context.Context) error {
	var errs []error
	for _, c := range ml.Cursors() {
		if err := c.persist(ctx); err != nil {
			errs = append(errs, err)
			if errors.Is(err, ErrFenced) {
				break
			}
		}
	}
	return errors.Join(errs...)
}
