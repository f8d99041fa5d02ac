package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/bookie/digest"

	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
	"google.golang.org/grpc"
)

// Writer appends entries to one ledger. It is the ledger's only writer.
// Safe for concurrent use.
//
// Ordering contract: an add completes (its callback runs with a nil error)
// only after AckQuorum bookies of its write set, in the ensemble committed
// to metadata, acknowledged it as durable AND every earlier entry
// completed; callbacks run in entry order. While an ensemble change's
// compare-and-swap is in flight no add completes, so an entry is never
// reported through an ensemble that is not yet in metadata (BookKeeper
// #1591, #3005); while the change looks for a replacement, adds that
// reach Qa on the current ensemble's live bookies complete (see
// ensembleChange).
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
	bad        map[string]badMark
	unavail    map[string]unavailSince // members seen unregistered or read-only (idle replacement)
	swept      []string                // the bookie ids it is filed under in Client.byBookie (under Client.wmu)
	// changing: the ensemble change loop runs. committing: its
	// compare-and-swap is in flight; completions wait for it.
	changing   bool
	committing bool
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

// badMark: when a bookie last failed for this writer, and whether it went
// away (its stream broke, a dial or send failed, or it left the registry)
// rather than answering with an error or not answering in time. A bookie
// that went away and answers again (it was restarted) may be chosen again
// before its minute is up; a slow or refusing one may not.
type badMark struct {
	at   time.Time
	gone bool
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
		bad:        map[string]badMark{},
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
	if len(w.failed) > 0 && !w.changing {
		// A position still waits for a replacement: the change loop left
		// while the writer was idle; it looks again now.
		w.changing = true
		go w.ensembleChange()
	}
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
		w.markFailedLocked(p, reason, err != nil)
	}
	w.mu.Unlock()
	w.deliver()
}

// completeLocked completes, in order, every head entry that has its ack
// quorum, unless an ensemble change's compare-and-swap is in flight.
func (w *Writer) completeLocked() {
	if w.committing {
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

// markFailedLocked stops sending to position p and starts the ensemble
// change; gone: the bookie went away (a transport error), see badMark.
func (w *Writer) markFailedLocked(p int, reason error, gone bool) {
	if w.failed[p] {
		return
	}
	ref := w.meta.LastFragment().Ensemble[p]
	w.failed[p] = true
	w.bad[ref.Id] = badMark{at: time.Now(), gone: gone}
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

// ensembleChange replaces the failed positions: a new fragment starting at
// the first unconfirmed entry (LAC+1), committed to metadata by
// compare-and-swap BEFORE any pending entry is re-sent to a replacement or
// completed through it.
//
// Completions are held only while the compare-and-swap is in flight (one
// etcd round trip), not while a replacement is searched for: a rolling
// restart of bookies, where the only spare is often the bookie restarted
// just before, held every add of the writer for seconds. Meanwhile an add
// completes once Qa bookies of its write set in the committed ensemble
// acknowledged it, the failed position left out (BookKeeper's
// delayEnsembleChange). When no replacement exists at all the writer goes
// on like that and the change keeps retrying; it fails only when some
// pending add cannot reach Qa on the live members for
// EnsembleChangeTimeout.
//
// The known cost: an entry acknowledged while a position waits has fewer
// than Qw copies (the failed position's is missing), and nothing writes
// it there when the bookie returns. The hole runs to the end of its
// fragment (the position gets no entry until a new fragment replaces it),
// so the auto-recovery scrub, which reads the last entry each member of a
// completed fragment stores (autorecovery.SampleEntries), finds it once
// the fragment is completed and queues the copy; while the fragment is the
// open ledger's last one, nothing copies it.
func (w *Writer) ensembleChange() {
	backoff := 50 * time.Millisecond
	var blockedSince, lastCommit time.Time
	var lastErr error
	for {
		w.mu.Lock()
		if w.err != nil || len(w.failed) == 0 || w.closing && len(w.pending) == 0 {
			w.changing = false
			w.mu.Unlock()
			w.deliver()
			return
		}
		toReplace := maps.Clone(w.failed)
		cur := w.meta
		now := time.Now()
		for id, m := range w.bad {
			if now.Sub(m.at) >= time.Minute {
				delete(w.bad, id)
			}
		}
		bad := maps.Clone(w.bad)
		w.mu.Unlock()

		newEns, replaced, breaking, err := w.chooseReplacements(cur.LastFragment().Ensemble, toReplace, bad, true)
		if err != nil {
			lastErr = err
		}
		committed := false
		// Commits follow each other no faster than the backoff: a
		// replacement that fails again at once must not cost a metadata
		// write per round trip.
		if len(replaced) > 0 && (lastCommit.IsZero() || time.Since(lastCommit) >= backoff) {
			if err := w.commitChange(cur, newEns, replaced, breaking); err != nil {
				lastErr = err
				w.c.cfg.Logger.Warn("ensemble change retry", "ledger", w.id, "err", err)
			} else {
				committed, lastCommit = true, time.Now()
			}
		}

		w.mu.Lock()
		if w.err != nil || len(w.failed) == 0 {
			w.mu.Unlock()
			continue
		}
		now = time.Now()
		if w.blockedLocked() {
			if blockedSince.IsZero() {
				blockedSince = now
			}
			if now.Sub(blockedSince) >= w.c.cfg.EnsembleChangeTimeout {
				if lastErr == nil {
					lastErr = ErrNotEnoughBookies
				}
				w.failLocked(fmt.Errorf("ledger %d: ensemble change: %w", w.id, lastErr))
				w.changing = false
				w.mu.Unlock()
				w.deliver()
				return
			}
		} else {
			blockedSince = time.Time{}
			if len(w.pending) == 0 && !committed {
				// Idle: the next add (or the idle sweep) looks again.
				w.changing = false
				w.mu.Unlock()
				return
			}
		}
		w.mu.Unlock()
		if committed {
			continue // the positions left, at once
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// blockedLocked reports whether a pending add cannot reach its ack quorum
// on the current ensemble: fewer than Qa of its write set acknowledged it
// or sit at a position that is not failed.
func (w *Writer) blockedLocked() bool {
	for _, pa := range w.pending {
		n := 0
		for slot := range w.qw {
			if pa.acked[slot] || !w.failed[w.position(pa.entry, slot)] {
				n++
			}
		}
		if n < w.qa {
			return true
		}
	}
	return false
}

// commitChange commits newEns (cur's last ensemble with the positions of
// replaced filled) as the fragment starting at LAC+1, holding completions
// for the compare-and-swap only, then drops the acks the replaced
// positions gave for pending entries and re-sends those entries to the
// replacements. breaking: positions whose replacement breaks the
// placement rule (logged and counted once committed).
func (w *Writer) commitChange(cur Metadata, newEns []*metapb.BookieRef, replaced map[int]bool, breaking map[int]string) error {
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return w.err
	}
	w.committing = true
	start := w.lac + 1
	w.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	next, err := updateMeta(ctx, w.c.cfg.Store, cur, func(m *metapb.LedgerMetadata) (*metapb.LedgerMetadata, error) {
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

	w.mu.Lock()
	w.committing = false
	if err != nil {
		if errors.Is(err, ErrFenced) || errors.Is(err, ErrClosed) || errors.Is(err, ErrNoSuchLedger) {
			w.failLocked(fmt.Errorf("ledger %d: ensemble change: %w", w.id, err))
		} else {
			w.completeLocked() // what reached Qa on the committed ensemble meanwhile
		}
		w.mu.Unlock()
		w.deliver()
		return err
	}
	w.meta = next
	w.c.reindexWriter(w, next.LastFragment().Ensemble)
	w.c.cfg.Logger.Info("ensemble changed", "ledger", w.id, "first_entry", start, "ensemble", ensembleString(newEns))
	old := cur.LastFragment().Ensemble
	for p, why := range breaking {
		w.c.breaking.Add(1)
		w.c.cfg.Logger.Warn("ensemble change breaks the placement rule: no bookie keeps it", "ledger", w.id, "position", p,
			"failed", old[p].Id, "replacement", newEns[p].Id, "policy", w.policy.String(), "why", why)
	}
	var sends []send
	for _, pa := range w.pending {
		for slot := range w.qw {
			if replaced[w.position(pa.entry, slot)] && pa.acked[slot] {
				pa.acked[slot] = false
				pa.nacked--
			}
		}
		sends = append(sends, w.prepareSendsLocked(pa, replaced)...)
	}
	for p := range replaced {
		delete(w.failed, p)
	}
	w.completeLocked()
	w.mu.Unlock()
	w.doSends(sends)
	w.deliver()
	return nil
}

// backProbeTimeout bounds the Info call that tells whether a bookie that
// failed is back.
const backProbeTimeout = 500 * time.Millisecond

// chooseReplacements returns a copy of ens with positions of toReplace
// filled under the ledger's placement policy, the positions it filled,
// those of them whose replacement breaks the policy's rule (with why), and
// an error saying why the others found none. For each position, in order
// (fallback false: the first only, as the idle sweep wants):
//  1. rack.Replace among the writable bookies that did not fail within
//     the last minute (bad);
//  2. the same, with the bookies of bad that went away and answer again
//     (restarted: in a rolling restart the only spare is often the bookie
//     restarted just before);
//  3. the failed member itself, when it went away and answers again (a
//     new fragment with it in its place: the placement is unchanged);
//  4. under an enforced policy, a bookie that breaks the rack rule (the
//     best rack.Replace finds without Enforce; for a region-aware policy
//     only one that keeps the region rule), logged and counted
//     (Stats.ReplacementsBreakingPlacement) once committed.
//
// A position none of these fills stays failed: the writer goes on without
// it while its adds can reach Qa.
func (w *Writer) chooseReplacements(ens []*metapb.BookieRef, toReplace map[int]bool, bad map[string]badMark, fallback bool) ([]*metapb.BookieRef, map[int]bool, map[int]string, error) {
	cands, byID, readOnly := w.c.candidates()
	out := slices.Clone(ens)
	positions := slices.Sorted(maps.Keys(toReplace))
	replaced := map[int]bool{}
	var breaking map[int]string
	var errs []error
	rng := w.c.rand()
	req := rack.Request{E: w.e, Qw: w.qw, Qa: w.qa, LocalRegion: w.c.cfg.Region, LocalRack: w.c.cfg.Rack, ReadOnly: readOnly}
	// back: which bookies of bad that went away answer now, asked once
	// per call, all at a time, and only when a position needs it.
	var back map[string]bool
	probe := func() {
		if back != nil {
			return
		}
		back = map[string]bool{}
		var ids []string
		for id, m := range bad {
			if m.gone {
				ids = append(ids, id)
			}
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, id := range ids {
			ref := byID[id]
			if ref == nil {
				continue // not registered writable
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if w.c.answersShared(&metapb.BookieRef{Id: ref.Id, Addr: ref.Addr}) {
					mu.Lock()
					back[id] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	chosen := map[string]bool{}
	exclude := func(withBack bool) map[string]bool {
		ex := maps.Clone(chosen)
		for id := range bad {
			if !withBack || !back[id] {
				ex[id] = true
			}
		}
		return ex
	}
	take := func(p int, id string) {
		r := byID[id]
		out[p] = &metapb.BookieRef{Id: r.Id, Addr: r.Addr, Region: r.Region, Rack: r.Rack}
		replaced[p] = true
		chosen[id] = true
	}
	for _, p := range positions {
		cur := make([]rack.Bookie, len(out))
		for i, r := range out {
			cur[i] = toRack(r)
		}
		req.Exclude = exclude(false)
		b, _, err := rack.Replace(cands, w.policy, req, cur, p, rng)
		if err == nil {
			take(p, b.ID)
			continue
		}
		if !fallback {
			errs = append(errs, fmt.Errorf("replace %s: %v", ens[p].Id, err))
			continue
		}
		probe()
		req.Exclude = exclude(true)
		if b, _, err2 := rack.Replace(cands, w.policy, req, cur, p, rng); err2 == nil {
			w.c.cfg.Logger.Info("replacing with a bookie that failed within the last minute and is back", "ledger", w.id, "position", p, "failed", ens[p].Id, "replacement", b.ID)
			take(p, b.ID)
			continue
		}
		if self := ens[p].Id; back[self] && !chosen[self] {
			w.c.cfg.Logger.Info("a failed bookie is back: it takes its position again in a new fragment", "ledger", w.id, "position", p, "bookie", self)
			take(p, self)
			continue
		}
		if w.policy.Enforce {
			relaxed := w.policy
			relaxed.Enforce = false
			labelled := slices.DeleteFunc(slices.Clone(cands), func(b rack.Bookie) bool { return b.Rack == "" })
			b, a, err2 := rack.Replace(labelled, relaxed, req, cur, p, rng)
			if err2 == nil && (w.policy.Kind != rack.RegionAware || a >= rack.AdherenceSoft) {
				take(p, b.ID)
				if breaking == nil {
					breaking = map[int]string{}
				}
				breaking[p] = err.Error()
				continue
			}
		}
		errs = append(errs, fmt.Errorf("replace %s: %v", ens[p].Id, err))
	}
	if len(errs) > 0 {
		return out, replaced, breaking, fmt.Errorf("%w: %w", ErrNotEnoughBookies, errors.Join(errs...))
	}
	return out, replaced, breaking, nil
}

// backProbe is one Info probe of a bookie, shared by the client's
// writers (answersShared).
type backProbe struct {
	done chan struct{} // closed once ok and at are set
	ok   bool
	at   time.Time
}

// backProbeFresh: how long a probe's answer serves every writer of the
// client. A broker holds a writer per topic: when a bookie dies, each
// writer whose change finds no spare asks whether it is back, every
// round of its retry (up to 1 s apart); one probe a second per bookie
// answers them all.
const backProbeFresh = time.Second

// answersShared is answers, asked at most once per backProbeFresh per
// bookie for all of the client's writers (callers during a probe wait
// for it).
func (c *Client) answersShared(b *metapb.BookieRef) bool {
	c.bmu.Lock()
	if c.probes == nil {
		c.probes = map[string]*backProbe{}
	}
	if p := c.probes[b.Id]; p != nil {
		select {
		case <-p.done:
			if time.Since(p.at) < backProbeFresh {
				c.bmu.Unlock()
				return p.ok
			}
		default:
			c.bmu.Unlock()
			<-p.done
			return p.ok
		}
	}
	p := &backProbe{done: make(chan struct{})}
	c.probes[b.Id] = p
	c.bmu.Unlock()
	p.ok = c.answers(b)
	p.at = time.Now()
	close(p.done)
	return p.ok
}

// answers reports whether bookie b answers an Info call within
// backProbeTimeout, as itself and writable: a bookie that went away and
// is back.
func (c *Client) answers(b *metapb.BookieRef) bool {
	conn, err := c.conn(b)
	if err != nil {
		return false
	}
	conn.cc.ResetConnectBackoff() // a restarted bookie: not after the reconnect backoff
	ctx, cancel := context.WithTimeout(c.ctx, backProbeTimeout)
	defer cancel()
	info, err := conn.client.Info(ctx, &bookiepb.InfoRequest{}, grpc.WaitForReady(true))
	return err == nil && info.BookieId == b.Id && !info.ReadOnly
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
						w.markFailedLocked(w.position(pa.entry, slot), fmt.Errorf("no answer within %s", w.addTimeout), false)
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
	bad := map[string]badMark{}
	for id, m := range w.bad {
		if now.Sub(m.at) < time.Minute {
			bad[id] = m
		}
	}
	_, replaced, _, _ := w.chooseReplacements(ens, due, bad, false)
	if len(replaced) == 0 {
		return // nowhere to go yet; the writer keeps its ensemble and looks again
	}
	for p := range replaced {
		w.c.cfg.Logger.Info("replacing an unavailable bookie of an idle ledger", "ledger", w.id, "bookie", ens[p].Id, "position", p)
		w.failed[p] = true
		w.bad[ens[p].Id] = badMark{at: now, gone: true}
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
