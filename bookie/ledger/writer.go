package ledger

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/bookie/digest"

	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
)

// Writer appends entries to one ledger. It is the ledger's only writer.
// Safe for concurrent use.
//
// Ordering contract: an add completes (its callback runs with a nil error)
// only after AckQuorum bookies of its write set acknowledged it as durable
// AND every earlier entry completed; callbacks run in entry order. While an
// ensemble change is in flight no add completes, so an entry is never
// reported through an ensemble that is not yet in metadata (BookKeeper
// #1591, #3005).
type Writer struct {
	c          *Client
	id         int64
	e, qw, qa  int
	policy     rack.Policy
	addTimeout time.Duration

	mu         sync.Mutex
	cond       *sync.Cond
	meta       Metadata
	lastPushed int64
	lac        int64
	length     int64
	pending    []*pendingAdd // entries lac+1 .. lastPushed, in order
	failed     map[int]bool  // ensemble positions waiting to be replaced
	bad        map[string]time.Time
	unavail    map[string]unavailSince // members seen unregistered or read-only (idle replacement)
	swept      []string                // the bookie ids it is filed under in Client.byBookie (under Client.wmu)
	changing   bool
	sendSeq    uint64
	err        error // terminal: every later add fails with it
	closing    bool

	compQ      []completion
	delivering bool
	stopScan   chan struct{}
	stopOnce   sync.Once
	// scanning: the timeout scanner runs (only while adds are pending).
	scanning bool
}

type pendingAdd struct {
	entry   int64
	lac     int64
	payload []byte
	digest  uint32
	acked   []bool      // by write-set slot
	seq     []uint64    // send sequence per slot; 0 = nothing outstanding
	sentAt  []time.Time // when the outstanding send went out
	nacked  int
	cb      func(int64, error)
	// after: refusals of adds made after this one, reported right after
	// its own callback (so callbacks run in call order).
	after []completion
}

type completion struct {
	cb    func(int64, error)
	entry int64
	err   error
}

type send struct {
	entry int64
	slot  int
	seq   uint64
	ref   *metapb.BookieRef
	req   *bookiepb.AddRequest
}

func newWriter(c *Client, m Metadata) *Writer {
	w := &Writer{
		c:          c,
		id:         m.Meta.LedgerId,
		e:          int(m.Meta.EnsembleSize),
		qw:         int(m.Meta.WriteQuorum),
		qa:         int(m.Meta.AckQuorum),
		policy:     policyFromProto(m.Meta.Placement),
		addTimeout: c.cfg.AddTimeout,
		meta:       m,
		lastPushed: -1,
		lac:        -1,
		failed:     map[int]bool{},
		bad:        map[string]time.Time{},
		unavail:    map[string]unavailSince{},
		stopScan:   make(chan struct{}),
	}
	w.cond = sync.NewCond(&w.mu)
	c.addWriter(w)
	return w
}

// addWriter registers an open writer for the idle sweep, under the
// members of its current ensemble.
func (c *Client) addWriter(w *Writer) {
	if c.cfg.IdleReplaceAfter < 0 {
		return
	}
	c.wmu.Lock()
	c.indexLocked(w, w.meta.LastFragment().Ensemble)
	c.wmu.Unlock()
	c.sweepOnce.Do(func() { go c.sweepIdle() })
}

// reindexWriter files w under its new ensemble (after an ensemble change;
// w.mu held: the lock order is w.mu, then c.wmu).
func (c *Client) reindexWriter(w *Writer, ens []*metapb.BookieRef) {
	if c.cfg.IdleReplaceAfter < 0 {
		return
	}
	c.wmu.Lock()
	if len(w.swept) > 0 { // not removed (closed or failed) meanwhile
		c.unindexLocked(w)
		c.indexLocked(w, ens)
	}
	c.wmu.Unlock()
}

func (c *Client) removeWriter(w *Writer) {
	c.wmu.Lock()
	c.unindexLocked(w)
	c.wmu.Unlock()
}

func (c *Client) indexLocked(w *Writer, ens []*metapb.BookieRef) {
	if c.byBookie == nil {
		c.byBookie = map[string]map[*Writer]struct{}{}
	}
	for _, b := range ens {
		ws := c.byBookie[b.Id]
		if ws == nil {
			ws = map[*Writer]struct{}{}
			c.byBookie[b.Id] = ws
		}
		ws[w] = struct{}{}
		w.swept = append(w.swept, b.Id)
	}
}

func (c *Client) unindexLocked(w *Writer) {
	for _, id := range w.swept {
		if ws := c.byBookie[id]; ws != nil {
			delete(ws, w)
			if len(ws) == 0 {
				delete(c.byBookie, id)
			}
		}
	}
	w.swept = w.swept[:0]
}

// sweepEvery is the idle sweep's period: half IdleReplaceAfter.
func (c *Client) sweepEvery() time.Duration {
	return max(c.cfg.IdleReplaceAfter/2, 50*time.Millisecond)
}

// sweepIdle looks, every half IdleReplaceAfter, at the open writers with
// a member that went unregistered or read-only (idleReplaceLocked). One
// goroutine for all of the client's writers: a broker holds a writer per
// topic, and a ticker each for 100,000 idle topics cost the scheduler a
// core; a writer with adds in flight finds a failed member through them
// instead.
func (c *Client) sweepIdle() {
	tk := time.NewTicker(c.sweepEvery())
	defer tk.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case now := <-tk.C:
			c.sweep(now)
		}
	}
}

// sweep is one pass of the idle sweep: each bookie any writer's ensemble
// holds is looked up once, and only the writers of a bookie that is not
// writable now are visited. A broker holding 100,000 idle topics visited
// every writer and looked up each of its members every pass (~29 % of
// its idle CPU); a healthy region costs a lookup per bookie now.
func (c *Client) sweep(now time.Time) {
	c.wmu.Lock()
	ids := make([]string, 0, len(c.byBookie))
	for id := range c.byBookie {
		ids = append(ids, id)
	}
	c.wmu.Unlock()
	var visit map[*Writer]struct{}
	for _, id := range ids {
		if reg, ok := c.cfg.Bookies.Lookup(id); ok && reg != nil && !reg.ReadOnly {
			continue
		}
		c.wmu.Lock()
		if visit == nil {
			visit = map[*Writer]struct{}{}
		}
		for w := range c.byBookie[id] {
			visit[w] = struct{}{}
		}
		c.wmu.Unlock()
	}
	for w := range visit {
		w.mu.Lock()
		w.idleReplaceLocked(now)
		w.mu.Unlock()
	}
}

// ID returns the ledger id.
func (w *Writer) ID() int64 { return w.id }

// LAC returns the last add confirmed: the highest entry completed in order.
func (w *Writer) LAC() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lac
}

// Length returns the bytes of completed entries.
func (w *Writer) Length() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.length
}

// Metadata returns the writer's current view of the ledger metadata.
func (w *Writer) Metadata() Metadata {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.meta
}

// Err returns the writer's terminal error, if any.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// AppendAsync appends payload as the next entry; cb runs exactly once, with
// the entry id or an error. The writer keeps payload until cb: the caller
// must not modify it. cb must not block for long: completions of later
// entries wait behind it.
func (w *Writer) AppendAsync(payload []byte, cb func(entryID int64, err error)) {
	w.mu.Lock()
	if len(payload) > w.c.cfg.MaxEntryBytes || w.err != nil || w.closing {
		// Refused without an entry id; the callback still runs after those
		// of every earlier add (through the same ordered queue).
		err := w.err
		switch {
		case len(payload) > w.c.cfg.MaxEntryBytes:
			err = fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(payload), w.c.cfg.MaxEntryBytes)
		case err == nil:
			err = ErrClosed
		}
		refusal := completion{cb: cb, entry: -1, err: err}
		if n := len(w.pending); n > 0 {
			w.pending[n-1].after = append(w.pending[n-1].after, refusal)
			w.mu.Unlock()
			return
		}
		w.compQ = append(w.compQ, refusal)
		w.mu.Unlock()
		w.deliver()
		return
	}
	w.lastPushed++
	pa := &pendingAdd{
		entry:   w.lastPushed,
		lac:     w.lac,
		payload: payload,
		acked:   make([]bool, w.qw),
		seq:     make([]uint64, w.qw),
		sentAt:  make([]time.Time, w.qw),
		cb:      cb,
	}
	pa.digest = digest.Entry(w.id, pa.entry, pa.lac, payload)
	w.pending = append(w.pending, pa)
	w.startScanLocked()
	sends := w.prepareSendsLocked(pa, nil)
	w.mu.Unlock()
	w.doSends(sends)
}

// Append appends payload and waits for its completion. If ctx ends first
// the outcome is unknown.
func (w *Writer) Append(ctx context.Context, payload []byte) (int64, error) {
	type res struct {
		id  int64
		err error
	}
	ch := make(chan res, 1)
	w.AppendAsync(payload, func(id int64, err error) { ch <- res{id, err} })
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

func (w *Writer) position(entry int64, slot int) int {
	return int((entry + int64(slot)) % int64(w.e))
}

// prepareSendsLocked builds the sends of pa to the slots whose position is
// healthy; with only != nil, to those positions alone (after a replacement).
func (w *Writer) prepareSendsLocked(pa *pendingAdd, only map[int]bool) []send {
	ens := w.meta.LastFragment().Ensemble
	var out []send
	for slot := range w.qw {
		p := w.position(pa.entry, slot)
		if w.failed[p] && (only == nil || !only[p]) {
			continue
		}
		if only != nil && !only[p] {
			continue
		}
		w.sendSeq++
		pa.seq[slot] = w.sendSeq
		pa.sentAt[slot] = time.Now()
		out = append(out, send{
			entry: pa.entry, slot: slot, seq: w.sendSeq, ref: ens[p],
			req: &bookiepb.AddRequest{LedgerId: w.id, EntryId: pa.entry, Lac: pa.lac, Payload: pa.payload, Digest: pa.digest},
		})
	}
	return out
}

// doSends runs outside w.mu: a send that fails at once calls onResult
// synchronously.
func (w *Writer) doSends(sends []send) {
	for _, s := range sends {
		conn, err := w.c.conn(s.ref)
		if err != nil {
			w.onResult(s.entry, s.slot, s.seq, nil, err)
			continue
		}
		conn.add(s.req, func(resp *bookiepb.AddResponse, err error) {
			w.onResult(s.entry, s.slot, s.seq, resp, err)
		})
	}
}

func (w *Writer) findLocked(entry int64) *pendingAdd {
	i := entry - (w.lac + 1)
	if i < 0 || i >= int64(len(w.pending)) {
		return nil
	}
	return w.pending[i]
}

// onResult handles a bookie's answer to one add (or the error instead).
func (w *Writer) onResult(entry int64, slot int, seq uint64, resp *bookiepb.AddResponse, err error) {
	w.mu.Lock()
	pa := w.findLocked(entry)
	if pa == nil || pa.seq[slot] != seq || w.err != nil {
		w.mu.Unlock() // stale: completed, failed, or re-sent elsewhere since
		return
	}
	pa.seq[slot] = 0
	p := w.position(entry, slot)
	switch {
	case err == nil && resp.Status == bookiepb.Status_OK:
		if !pa.acked[slot] {
			pa.acked[slot] = true
			pa.nacked++
		}
		w.completeLocked()
	case err == nil && resp.Status == bookiepb.Status_FENCED:
		w.failLocked(fmt.Errorf("%w: ledger %d fenced on bookie %s", ErrFenced, w.id, w.meta.LastFragment().Ensemble[p].Id))
	default:
		reason := err
		if reason == nil {
			reason = fmt.Errorf("%s: %s", resp.Status, resp.Message)
		}
		w.markFailedLocked(p, reason)
	}
	w.mu.Unlock()
	w.deliver()
}

// completeLocked completes, in order, every head entry that has its ack
// quorum, unless an ensemble change is in flight.
func (w *Writer) completeLocked() {
	if w.changing {
		return
	}
	n := 0
	for n < len(w.pending) && w.pending[n].nacked >= w.qa {
		pa := w.pending[n]
		w.lac = pa.entry
		w.length += int64(len(pa.payload))
		w.compQ = append(w.compQ, completion{cb: pa.cb, entry: pa.entry})
		w.compQ = append(w.compQ, pa.after...)
		n++
	}
	if n > 0 {
		clear(w.pending[:n])
		w.pending = w.pending[n:]
		w.cond.Broadcast()
	}
}

func (w *Writer) failLocked(err error) {
	if w.err != nil {
		return
	}
	w.err = err
	for _, pa := range w.pending {
		w.compQ = append(w.compQ, completion{cb: pa.cb, entry: -1, err: err})
		w.compQ = append(w.compQ, pa.after...)
	}
	w.pending = nil
	w.cond.Broadcast()
	w.stopScanning()
	w.c.cfg.Logger.Warn("ledger writer failed", "ledger", w.id, "err", err)
}

// stopScanning ends the timeout scanner (on close or failure).
func (w *Writer) stopScanning() {
	w.stopOnce.Do(func() {
		close(w.stopScan)
		w.c.removeWriter(w)
	})
}

func (w *Writer) markFailedLocked(p int, reason error) {
	if w.failed[p] {
		return
	}
	ref := w.meta.LastFragment().Ensemble[p]
	w.failed[p] = true
	w.bad[ref.Id] = time.Now()
	w.c.cfg.Logger.Warn("bookie failed for ledger", "ledger", w.id, "bookie", ref.Id, "position", p, "err", reason)
	if !w.changing {
		w.changing = true
		go w.ensembleChange()
	}
}

// deliver runs queued completions in order. Whoever finds the queue
// non-empty and nobody delivering delivers; callbacks may re-enter the
// writer.
func (w *Writer) deliver() {
	w.mu.Lock()
	if w.delivering {
		w.mu.Unlock()
		return
	}
	w.delivering = true
	for {
		q := w.compQ
		w.compQ = nil
		if len(q) == 0 {
			w.delivering = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		for _, c := range q {
			c.cb(c.entry, c.err)
		}
		w.mu.Lock()
	}
}

// ensembleChange replaces every failed position: a new fragment starting at
// the first unconfirmed entry (LAC+1), committed to metadata by
// compare-and-swap BEFORE any pending entry is re-sent to a replacement or
// completed.
func (w *Writer) ensembleChange() {
	deadline := time.Now().Add(w.c.cfg.EnsembleChangeTimeout)
	backoff := 50 * time.Millisecond
	for {
		w.mu.Lock()
		if w.err != nil {
			w.changing = false
			w.mu.Unlock()
			w.deliver()
			return
		}
		toReplace := make(map[int]bool, len(w.failed))
		for p := range w.failed {
			toReplace[p] = true
		}
		cur := w.meta
		start := w.lac + 1
		exclude := map[string]bool{}
		for id, at := range w.bad {
			if time.Since(at) < time.Minute {
				exclude[id] = true
			}
		}
		w.mu.Unlock()

		newEns, err := w.chooseReplacements(cur.LastFragment().Ensemble, toReplace, exclude)
		var next Metadata
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			next, err = updateMeta(ctx, w.c.cfg.Store, cur, func(m *metapb.LedgerMetadata) (*metapb.LedgerMetadata, error) {
				switch m.State {
				case metapb.LedgerState_OPEN:
				case metapb.LedgerState_CLOSED:
					return nil, fmt.Errorf("%w: ledger %d closed by another process", ErrClosed, w.id)
				default:
					return nil, fmt.Errorf("%w: ledger %d is being recovered", ErrFenced, w.id)
				}
				last := m.Fragments[len(m.Fragments)-1]
				if last.FirstEntryId == start {
					last.Ensemble = newEns
				} else {
					m.Fragments = append(m.Fragments, &metapb.Fragment{FirstEntryId: start, Ensemble: newEns})
				}
				return m, nil
			})
			cancel()
		}
		if err != nil {
			if errors.Is(err, ErrFenced) || errors.Is(err, ErrClosed) || errors.Is(err, ErrNoSuchLedger) || time.Now().After(deadline) {
				w.mu.Lock()
				w.failLocked(fmt.Errorf("ledger %d: ensemble change: %w", w.id, err))
				w.changing = false
				w.mu.Unlock()
				w.deliver()
				return
			}
			w.c.cfg.Logger.Warn("ensemble change retry", "ledger", w.id, "err", err)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}

		w.mu.Lock()
		w.meta = next
		w.c.reindexWriter(w, next.LastFragment().Ensemble)
		w.c.cfg.Logger.Info("ensemble changed", "ledger", w.id, "first_entry", start, "ensemble", ensembleString(newEns))
		var sends []send
		for _, pa := range w.pending {
			for slot := range w.qw {
				if toReplace[w.position(pa.entry, slot)] {
					if pa.acked[slot] {
						pa.acked[slot] = false
						pa.nacked--
					}
				}
			}
			sends = append(sends, w.prepareSendsLocked(pa, toReplace)...)
		}
		for p := range toReplace {
			delete(w.failed, p)
		}
		done := len(w.failed) == 0 || w.err != nil
		if done {
			w.changing = false
			w.completeLocked()
		}
		w.mu.Unlock()
		w.doSends(sends)
		w.deliver()
		if done {
			return
		}
	}
}

// chooseReplacements returns a copy of ens with each position in toReplace
// filled by rack.Replace under the ledger's placement policy.
func (w *Writer) chooseReplacements(ens []*metapb.BookieRef, toReplace map[int]bool, exclude map[string]bool) ([]*metapb.BookieRef, error) {
	cands, byID := w.c.candidates()
	out := make([]*metapb.BookieRef, len(ens))
	copy(out, ens)
	positions := make([]int, 0, len(toReplace))
	for p := range toReplace {
		positions = append(positions, p)
		exclude[ens[p].Id] = true
	}
	sort.Ints(positions)
	rng := w.c.rand()
	for _, p := range positions {
		cur := make([]rack.Bookie, len(out))
		for i, r := range out {
			cur[i] = toRack(r)
		}
		b, _, err := rack.Replace(cands, w.policy, rack.Request{E: w.e, Qw: w.qw, Qa: w.qa, Exclude: exclude, LocalRegion: w.c.cfg.Region, LocalRack: w.c.cfg.Rack}, cur, p, rng)
		if err != nil {
			return nil, fmt.Errorf("%w: replace %s: %v", ErrNotEnoughBookies, ens[p].Id, err)
		}
		r := byID[b.ID]
		out[p] = &metapb.BookieRef{Id: r.Id, Addr: r.Addr, Region: r.Region, Rack: r.Rack}
		exclude[b.ID] = true
	}
	return out, nil
}

// startScanLocked starts the timeout scanner unless it runs or the writer
// stopped. The scanner runs only while adds are pending: a broker holds a
// writer per topic, and an idle goroutine per writer cost 100,000 idle
// topics 800 MB of stacks (ticking ones, a core).
func (w *Writer) startScanLocked() {
	if w.scanning {
		return
	}
	select {
	case <-w.stopScan:
		return
	default:
	}
	w.scanning = true
	go w.scanTimeouts()
}

// scanTimeouts treats a bookie that has not answered an add within
// AddTimeout as failed (a paused or partitioned bookie sends no reset). It
// returns once no add is pending (the next add starts it again).
func (w *Writer) scanTimeouts() {
	tick := time.NewTicker(max(w.addTimeout/5, 20*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-w.stopScan:
			w.mu.Lock()
			w.scanning = false
			w.mu.Unlock()
			return
		case now := <-tick.C:
			w.mu.Lock()
			for _, pa := range w.pending {
				for slot := range w.qw {
					if pa.seq[slot] != 0 && now.Sub(pa.sentAt[slot]) > w.addTimeout {
						pa.seq[slot] = 0
						w.markFailedLocked(w.position(pa.entry, slot), fmt.Errorf("no answer within %s", w.addTimeout))
					}
				}
			}
			if len(w.pending) == 0 {
				w.scanning = false
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
		}
	}
}

// unavailSince: a member first seen unregistered or read-only at since,
// and last at seen.
type unavailSince struct{ since, seen time.Time }

// idleReplaceLocked starts an ensemble change for members of the current
// ensemble that have been unregistered or read-only for IdleReplaceAfter
// while the writer is idle (no add in flight: an add would find them
// itself), provided a replacement satisfying the placement rule exists now.
// The sweep visits a writer only while a member is unavailable, so a
// member it has not seen unavailable for three sweeps (it came back, or
// the writer was busy) starts its wait afresh.
func (w *Writer) idleReplaceLocked(now time.Time) {
	after := w.c.cfg.IdleReplaceAfter
	if after < 0 || w.err != nil || w.closing || w.changing || len(w.pending) > 0 {
		return
	}
	ens := w.meta.LastFragment().Ensemble
	stale := 3 * w.c.sweepEvery()
	var due map[int]bool // allocated only when a member is due
	for p, b := range ens {
		reg, ok := w.c.cfg.Bookies.Lookup(b.Id)
		if ok && reg != nil && !reg.ReadOnly {
			delete(w.unavail, b.Id)
			continue
		}
		u, seen := w.unavail[b.Id]
		if !seen || now.Sub(u.seen) > stale {
			w.unavail[b.Id] = unavailSince{since: now, seen: now}
			continue
		}
		u.seen = now
		w.unavail[b.Id] = u
		if now.Sub(u.since) >= after {
			if due == nil {
				due = map[int]bool{}
			}
			due[p] = true
		}
	}
	if len(due) == 0 {
		return
	}
	exclude := map[string]bool{}
	for id, at := range w.bad {
		if now.Sub(at) < time.Minute {
			exclude[id] = true
		}
	}
	if _, err := w.chooseReplacements(ens, due, exclude); err != nil {
		return // nowhere to go yet; the writer keeps its ensemble and looks again
	}
	for p := range due {
		w.c.cfg.Logger.Info("replacing an unavailable bookie of an idle ledger", "ledger", w.id, "bookie", ens[p].Id, "position", p)
		w.failed[p] = true
		w.bad[ens[p].Id] = now
		delete(w.unavail, ens[p].Id)
	}
	w.changing = true
	go w.ensembleChange()
}

// Close waits for pending adds, then closes the ledger in metadata at its
// LAC. After Close no add is accepted. If the ledger was fenced meanwhile,
// Close returns ErrFenced and the recovery's result stands.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return nil
	}
	w.closing = true
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop()
	for len(w.pending) > 0 && w.err == nil && ctx.Err() == nil {
		w.cond.Wait()
	}
	if ctx.Err() != nil && len(w.pending) > 0 {
		w.failLocked(fmt.Errorf("%w: close interrupted", ErrClosed))
	}
	err := w.err
	cur, lac, length := w.meta, w.lac, w.length
	w.mu.Unlock()
	w.deliver()
	w.stopScanning()
	if err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	_, err = updateMeta(ctx, w.c.cfg.Store, cur, func(m *metapb.LedgerMetadata) (*metapb.LedgerMetadata, error) {
		switch m.State {
		case metapb.LedgerState_OPEN:
			m.State = metapb.LedgerState_CLOSED
			m.LastEntryId = lac
			m.Length = length
			return m, nil
		case metapb.LedgerState_CLOSED:
			if m.LastEntryId == lac {
				return nil, nil
			}
			return nil, fmt.Errorf("%w: ledger %d was closed by recovery at %d (writer LAC %d)", ErrFenced, w.id, m.LastEntryId, lac)
		default:
			return nil, fmt.Errorf("%w: ledger %d is being recovered", ErrFenced, w.id)
		}
	})
	return err
}
