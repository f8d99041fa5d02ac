package mledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/internal/ratemeter"
)

// AppendAsync appends payload as the next entry. cb runs exactly once, with
// the entry's position or an error, on the managed ledger's delivery
// goroutine, in append order; it must not block for long (later callbacks
// wait behind it) and may call back into the managed ledger. The caller
// must not modify payload afterwards (it is kept in the tail cache).
//
// Failure handling:
//   - ErrFenced (another owner recovered the ledger): this append and every
//     later one fail with it; the outcome of the pending ones is unknown.
//   - any other failure of the ledger writer: the managed ledger recovers
//     the failed ledger (fence + close at the last entry a replica holds),
//     then completes each pending append by that result: appends the
//     ledger holds succeed with their position; the others are certainly
//     not in the log and are re-sent, in order, to a new ledger (at most
//     maxTries ledgers). So no append is reported failed while stored, nor
//     stored twice. If the ledger cannot be recovered within
//     SwitchTimeout, pending appends fail with ErrFailed (outcome unknown)
//     and the managed ledger stops accepting appends.
//   - a payload larger than the ledger client's MaxEntryBytes fails alone
//     with ledger.ErrTooLarge.
func (ml *ManagedLedger) AppendAsync(payload []byte, cb func(Position, error)) {
	op := &appendOp{payload: payload, cb: cb, entry: -1, start: time.Now()}
	ml.submitMu.Lock()
	defer ml.submitMu.Unlock()
	ml.mu.Lock()
	if err := ml.refusal(); err != nil && ml.deliverStopped {
		ml.refusedAtOnce()
		ml.mu.Unlock()
		cb(Earliest, err)
		return
	}
	p := ml.add(op, ml.now())
	ml.actLocked(p)
	ml.mu.Unlock()
	if p.hand {
		ml.handOver(op)
	}
}

// AddLatency returns the storage write latencies of the appends
// confirmed over the last stats interval, in Pulsar's buckets
// (ratemeter.Latency; Pulsar's pulsar_storage_write_latency_le_*): from
// AppendAsync to the ack quorum's confirmation, a wait behind a ledger
// switch or a recovery included, as Pulsar's managed ledger times an add
// from the op's creation. now is the time of the read.
func (ml *ManagedLedger) AddLatency(now time.Time) ratemeter.LatencyCounts {
	return ml.addLatency.Counts(now)
}

// actLocked carries out a placement's requests other than the hand-over.
func (ml *ManagedLedger) actLocked(p placement) {
	if p.settled {
		ml.signalDeliver()
	}
	if p.sw != nil {
		ml.startSwitchLocked(p.sw)
	}
}

// RollNext makes the next append start a new ledger, whose id the
// allocator hands out after every id issued before: a region that becomes
// active gives its new entries ids that sort above everything acknowledged
// elsewhere (the Go client drops a message at or below its last cumulative
// ack as a duplicate).
func (ml *ManagedLedger) RollNext() {
	ml.mu.Lock()
	ml.rollNext = true
	ml.mu.Unlock()
}

// Append appends payload and waits for the outcome. If ctx ends first the
// outcome is unknown (the append may still complete).
func (ml *ManagedLedger) Append(ctx context.Context, payload []byte) (Position, error) {
	type res struct {
		p   Position
		err error
	}
	ch := make(chan res, 1)
	ml.AppendAsync(payload, func(p Position, err error) { ch <- res{p, err} })
	select {
	case r := <-ch:
		return r.p, r.err
	case <-ctx.Done():
		return Earliest, ctx.Err()
	}
}

// handOver gives op to its writer. Called with submitMu held (so entry ids
// follow append order), without mu (the writer may call back at once).
func (ml *ManagedLedger) handOver(op *appendOp) {
	w := op.cur.w
	op.carried = w.LAC()
	w.AppendAsync(op.payload, func(id int64, err error) { ml.onWriterResult(op, id, err) })
}

// onWriterResult handles the writer's callback for op.
func (ml *ManagedLedger) onWriterResult(op *appendOp, id int64, err error) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	cur := op.cur
	v := ml.writerResult(op, id, err)
	if v.drained {
		ml.cond.Broadcast()
	}
	if v.stale {
		return // settled already (fenced, closed)
	}
	if v.wrongID {
		ml.log.Error("writer assigned an unexpected entry id", "ledger", cur.id, "want", op.entry, "got", id)
	}
	if v.confirmed {
		ml.recordLocked(op)
	}
	if v.lateTooLarge {
		ml.log.Error("entry refused as too large after later entries were handed over", "ledger", cur.id, "entry", op.entry)
	}
	if v.fence != nil {
		ml.fenceLocked(v.fence)
	}
	if v.firstFailure != nil {
		ml.log.Warn("ledger writer failed; recovering the ledger to settle pending appends", "ledger", cur.id, "err", v.firstFailure)
	}
	if v.sw != nil {
		ml.startSwitchLocked(v.sw)
	}
	ml.signalDeliver()
}

// recordLocked records op, which the core confirmed, as stored at op.pos.
func (ml *ManagedLedger) recordLocked(op *appendOp) {
	if !op.start.IsZero() {
		now := time.Now()
		ml.addLatency.Add(now, now.Sub(op.start))
	}
	pos := op.pos
	if ml.lastConfirmed.Less(pos) {
		ml.lastConfirmed = pos
	}
	ml.entries++
	ml.sizeBytes += int64(len(op.payload))
	ml.cache.put(pos, op.payload)
	ml.cache.evict(ml.pinFromLocked())
	ml.wakeLocked()
}

// pinFromLocked is the first position the tail cache must keep: entries of
// the open ledger above the LAC the bookies know cannot be read from them.
func (ml *ManagedLedger) pinFromLocked() Position {
	if c := ml.cur; c != nil && !c.finished {
		return Position{c.id, c.readableLAC + 1}
	}
	return Latest
}

func (ml *ManagedLedger) signalDeliver() {
	ml.deliverMu.Lock()
	defer ml.deliverMu.Unlock()
	switch {
	case ml.delivering:
		ml.deliverAgain = true
	case ml.deliverClosed:
		// stopBackground delivers what is left itself.
	default:
		ml.delivering = true
		ml.deliverWG.Add(1)
		go ml.deliverer()
	}
}

// deliverer runs user callbacks in append order, with no lock held, until
// none is ready and no signal came meanwhile. One runs at a time.
func (ml *ManagedLedger) deliverer() {
	defer ml.deliverWG.Done()
	for {
		ml.deliverReady()
		ml.deliverMu.Lock()
		if !ml.deliverAgain {
			ml.delivering = false
			ml.deliverMu.Unlock()
			return
		}
		ml.deliverAgain = false
		ml.deliverMu.Unlock()
	}
}

func (ml *ManagedLedger) deliverReady() {
	for {
		ml.mu.Lock()
		batch, empty := ml.takeDelivered()
		if empty {
			ml.cond.Broadcast()
		}
		ml.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		for _, op := range batch {
			if op.err != nil {
				op.cb(Earliest, op.err)
			} else {
				op.cb(op.pos, nil)
			}
		}
	}
}

// startSwitchLocked starts the switch the core asked for.
func (ml *ManagedLedger) startSwitchLocked(sw *switchReq) {
	ml.bg.Add(1)
	go ml.switchLedger(sw.old, sw.reason)
}

// switchLedger replaces the current ledger (old, nil when there is none):
//
//  1. wait until every append handed to old is with its writer;
//  2. finish old: close it (rollover), or, if its writer failed, recover it
//     and settle the held appends (finishOld);
//  3. create the next ledger;
//  4. compare-and-swap the list (old closed with its final size, the new
//     one appended); a lost CAS means another owner: fenced;
//  5. only then hand the queued appends, in order, to the new ledger.
func (ml *ManagedLedger) switchLedger(old *curLedger, reason string) {
	defer ml.bg.Done()
	// 1. Appends placed before the switch started are handed over under
	// submitMu: once we hold it, they are all with the writer.
	//lint:ignore SA2001 a barrier, not a critical section
	ml.submitMu.Lock()
	ml.submitMu.Unlock()

	// Each step (closing the old ledger, recovering it, creating and
	// recording the next) has its own SwitchTimeout.
	if old != nil {
		if err := ml.finishOld(old, reason); err != nil {
			ml.mu.Lock()
			ml.switchAborted()
			ml.cond.Broadcast()
			ml.mu.Unlock()
			return
		}
	}

	ml.mu.Lock()
	if !ml.readyForNext() {
		ml.cond.Broadcast()
		ml.mu.Unlock()
		return
	}
	ml.mu.Unlock()

	// 3. Create the next ledger.
	ctx, cancel := context.WithTimeout(context.Background(), ml.cfg.SwitchTimeout)
	defer cancel()
	w, err := retry(ctx, func(ctx context.Context) (*ledger.Writer, error) { return ml.lc.Create(ctx, ml.createOptions()) })
	if err != nil {
		ml.switchFailed(fmt.Errorf("mledger: %s: create ledger: %w", ml.name, err))
		return
	}
	createdAt := ml.now()
	// 4. Record it.
	if casRev, err := ml.commitNewLedger(ctx, w.ID(), createdAt); err != nil {
		ml.mu.Lock()
		if errors.Is(err, ErrFenced) {
			ml.terminateLocked(stFenced, err)
		}
		terminated := ml.err != nil // fenced, or failed: the list's state is unknown
		ml.mu.Unlock()
		// The list may reference w after all (a write whose answer was
		// lost): w is deleted only when it certainly does not.
		ml.releaseUnrecorded(w, casRev)
		if terminated {
			ml.mu.Lock()
			ml.switchAborted()
			ml.cond.Broadcast()
			ml.mu.Unlock()
			return
		}
		ml.switchFailed(err)
		return
	}
	// 5. Serve.
	ml.submitMu.Lock()
	defer ml.submitMu.Unlock()
	ml.mu.Lock()
	next := &curLedger{id: w.ID(), w: w, createdAt: createdAt, readableLAC: -1}
	q, ok := ml.switched(next, old != nil, reason)
	ml.cond.Broadcast()
	if !ok {
		ml.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Close(ctx)
		return
	}
	ml.rebuildViewLocked()
	ml.log.Info("ledger switched", "reason", reason, "ledger", w.ID(), "queued", len(q))
	ml.mu.Unlock()
	for i, op := range q {
		ml.mu.Lock()
		hand, stop, sw := ml.requeue(q, i, ml.now())
		if sw != nil {
			ml.startSwitchLocked(sw)
		}
		ml.mu.Unlock()
		if stop {
			break
		}
		if hand {
			ml.handOver(op)
		}
	}
	ml.trimAsync()
}

// finishOld closes old (a rollover) or, if its writer failed, recovers it
// and settles the appends held by the failure. On a fatal error it
// terminates the managed ledger and returns the error.
func (ml *ManagedLedger) finishOld(old *curLedger, reason string) error {
	ctx, cancel := context.WithTimeout(context.Background(), ml.cfg.SwitchTimeout)
	err := old.w.Close(ctx)
	cancel()
	last := int64(-1)
	switch {
	case err == nil:
		last = old.w.LAC()
	case errors.Is(err, ledger.ErrFenced):
		ml.fence(err)
		return err
	default:
		cause := err
		ml.log.Warn("recovering failed ledger", "ledger", old.id, "err", cause)
		ctx, cancel := context.WithTimeout(context.Background(), ml.cfg.SwitchTimeout)
		defer cancel()
		rd, err := retry(ctx, func(ctx context.Context) (*ledger.Reader, error) { return ml.lc.Recover(ctx, old.id) })
		if err != nil {
			ml.mu.Lock()
			defer ml.mu.Unlock()
			e := fmt.Errorf("%w: %s: ledger %d failed (%v) and could not be recovered: %w", ErrFailed, ml.name, old.id, cause, err)
			ml.terminateLocked(stFailed, e)
			return e
		}
		last = rd.LastEntry()
	}

	ml.mu.Lock()
	defer ml.mu.Unlock()
	// Every callback of old's writer has run once inflight is 0 (a closed
	// or failed writer completes or fails all its adds).
	for old.inflight > 0 && ml.err == nil {
		ml.cond.Wait()
	}
	if ml.err != nil {
		return ml.err
	}
	confirmed, e := ml.settle(old, last, reason)
	if e != nil {
		ml.log.Error("acknowledged entries missing from a closed ledger", "err", e)
		ml.terminateLocked(stFailed, e)
		return e
	}
	for _, op := range confirmed {
		ml.recordLocked(op)
	}
	ml.finishLedgerLocked(old)
	ml.signalDeliver()
	return nil
}

// switchFailed fails the queued appends with err; the next append starts
// another switch.
func (ml *ManagedLedger) switchFailed(err error) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	ml.log.Warn("ledger switch failed; queued appends fail", "queued", len(ml.queued), "err", err)
	ml.appendCore.switchFailed(err)
	ml.signalDeliver()
	ml.cond.Broadcast()
}

// retry calls f with backoff until it succeeds or ctx ends.
func retry[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	backoff := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := f(actx)
		cancel()
		if err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}
