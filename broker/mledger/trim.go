package mledger

import (
	"context"
	"fmt"

	"github.com/meridian-mq/meridian/bookie/ledger"
)

// Trim deletes the ledgers that every durable cursor has fully consumed and
// that fall outside retention (see ledgersToTrim for the exact rule):
//
//  1. the slowest mark-delete position is taken from the cursor records as
//     persisted, so a crash never leaves a cursor pointing into a deleted
//     ledger;
//  2. the shortened list is written by compare-and-swap (a lost CAS means
//     another owner: fenced);
//  3. only then are the ledgers' metadata deleted (their entries become
//     garbage on the bookies). A crash between 2 and 3 leaves orphaned
//     ledger metadata, never a listed ledger without metadata.
//
// The managed ledger calls it after cursor flushes that may have released
// a ledger and after rollovers; retention by time of an idle topic needs a
// periodic call by the owner.
func (ml *ManagedLedger) Trim(ctx context.Context) error {
	ml.trimMu.Lock()
	defer ml.trimMu.Unlock()
	return ml.trim(ctx)
}

func (ml *ManagedLedger) trim(ctx context.Context) error {
	// The last ledger of the list always stays: with one, there is nothing
	// to look at (most of a broker's idle topics, every policy pass).
	ml.mu.Lock()
	err, one := ml.err, len(ml.ledgers) <= 1
	ml.mu.Unlock()
	if err != nil {
		return err
	}
	if one {
		return nil
	}
	in := trimInput{
		now:            ml.now(),
		retentionTime:  ml.cfg.RetentionTime,
		retentionBytes: ml.cfg.RetentionSizeBytes,
	}
	for _, c := range ml.Cursors() {
		c.mu.Lock()
		if !c.deleted && !c.released {
			if !in.hasDurable || c.persisted.Less(in.slowest) {
				in.slowest = c.persisted
			}
			in.hasDurable = true
		}
		c.mu.Unlock()
	}

	ml.metaMu.Lock()
	ml.mu.Lock()
	if ml.err != nil {
		err := ml.err
		ml.mu.Unlock()
		ml.metaMu.Unlock()
		return err
	}
	in.ledgers = ml.ledgersLocked()
	if c := ml.cur; c != nil && !c.finished {
		in.current = c.id
	}
	del := ledgersToTrim(in)
	if len(del) == 0 {
		ml.mu.Unlock()
		ml.metaMu.Unlock()
		return nil
	}
	keep := append([]LedgerInfo(nil), ml.ledgers[len(del):]...)
	ml.mu.Unlock()

	err = ml.casListLocked(ctx, mlpbActive, keep)
	if err == nil {
		ml.mu.Lock()
		var entries, size int64
		for _, l := range ml.ledgers[:len(del)] {
			entries += l.Entries
			size += l.SizeBytes
			delete(ml.readers, l.ID)
		}
		ml.ledgers = append([]LedgerInfo(nil), ml.ledgers[len(del):]...)
		ml.entries -= entries
		ml.sizeBytes -= size
		ml.cache.dropBefore(ml.ledgers[0].ID)
		ml.stats.TrimmedLedgers += int64(len(del))
		ml.rebuildViewLocked()
		ml.mu.Unlock()
	}
	ml.metaMu.Unlock()
	if err != nil {
		if isFenced(err) {
			ml.fence(err)
		}
		return err
	}
	ml.log.Info("trimmed ledgers", "ledgers", del, "slowest_cursor", in.slowest)
	for _, id := range del {
		if err := ledger.DeleteLedger(ctx, ml.store, id); err != nil {
			return fmt.Errorf("mledger: %s: delete trimmed ledger %d: %w", ml.name, id, err)
		}
	}
	return nil
}

// trimAsync runs a trim in the background unless one is running.
func (ml *ManagedLedger) trimAsync() {
	ml.goBackground(func() {
		if !ml.trimMu.TryLock() {
			return
		}
		defer ml.trimMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), ml.cfg.SwitchTimeout)
		defer cancel()
		if err := ml.trim(ctx); err != nil {
			ml.log.Warn("trim failed", "err", err)
		}
	})
}

// goBackground runs f on a goroutine Close waits for, unless Close has
// begun stopping background work.
func (ml *ManagedLedger) goBackground(f func()) {
	ml.flushMu.Lock()
	defer ml.flushMu.Unlock()
	if ml.flushStopped {
		return
	}
	ml.bg.Add(1)
	go func() {
		defer ml.bg.Done()
		f()
	}()
}
