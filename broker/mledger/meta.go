package mledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/mlpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Every etcd write of an owner is conditional on the ledger list still
// being the one it wrote last (its mod revision, infoRev): the list by
// compare-and-swap, cursor records by a transaction that compares both
// the list's and the record's mod revisions. A new owner's Open changes the
// list, so from that moment every write of the previous owner fails and
// the previous owner is fenced — for cursors as for appends.

const etcdAttemptTimeout = 5 * time.Second

// Errors of a ledger-list write (casInfo).
var (
	// errListMoved: the list is past the revision the compare-and-swap
	// compared and holds something else, so the write can never land any
	// more. After an unknown outcome it may have landed before the list
	// moved on: what the list references now is what counts (see
	// releaseUnrecorded).
	errListMoved = errors.New("mledger: the ledger list moved on")
	// errListUnknown: etcd left the write's outcome unknown until the
	// caller's deadline, and the list is still at the revision compared
	// (the write may yet land: etcd can commit a proposal after answering
	// "request timed out") or could not be read.
	errListUnknown = errors.New("mledger: the outcome of a ledger-list write is unknown")
)

// casInfo writes val to the ledger list by compare-and-swap on rev, and
// returns the list's new mod revision. Errors other than a lost race are
// retried with backoff until ctx ends (SwitchTimeout when ctx has no
// deadline). A write whose answer was lost (cluster.OutcomeUnknown) may
// have been applied: after each such answer, and when a later attempt
// finds the list moved, the list is read back, and if it holds exactly
// val the write landed (val is this process's own: it carries this
// owner's epoch, or a ledger id only this process was given). When ctx
// ends unsettled, the list is read back once more. Errors: errListMoved
// (wrapping cluster.ErrVersionMismatch or ErrNotFound), errListUnknown.
func (ml *ManagedLedger) casInfo(ctx context.Context, val []byte, rev int64) (int64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ml.cfg.SwitchTimeout)
		defer cancel()
	}
	key := infoKey(ml.name)
	ambiguous := false
	backoff := 50 * time.Millisecond
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, etcdAttemptTimeout)
		newRev, err := ml.store.CAS(actx, key, val, rev)
		cancel()
		if err == nil {
			return newRev, nil
		}
		moved := errors.Is(err, cluster.ErrVersionMismatch) || errors.Is(err, cluster.ErrNotFound)
		if moved && !ambiguous {
			return 0, fmt.Errorf("%w: %w", errListMoved, err)
		}
		// Not applied for sure only when etcd says so; anything else may
		// have been (a cancelled request, an unknown outcome).
		ambiguous = true
		last = err
		if landedRev, done, err := ml.settleCAS(ctx, key, val, rev, err); done {
			return landedRev, err
		}
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
			continue
		case <-ctx.Done():
		}
		// The caller's time is up: one last look, on time of our own.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), etcdAttemptTimeout)
		defer cancel()
		if landedRev, done, err := ml.settleCAS(sctx, key, val, rev, last); done {
			return landedRev, err
		}
		return 0, fmt.Errorf("%w: %s: %w", errListUnknown, ml.name, last)
	}
}

// settleCAS reads the list back after a write of val at rev whose outcome
// was unknown (cause): done when the list holds val (it landed) or moved
// on to something else (errListMoved).
func (ml *ManagedLedger) settleCAS(ctx context.Context, key string, val []byte, rev int64, cause error) (int64, bool, error) {
	switch landedRev, st := ml.readBack(ctx, key, val, rev); st {
	case listHoldsVal:
		ml.log.Info("a ledger-list write whose answer was lost had landed", "rev", landedRev, "err", cause)
		return landedRev, true, nil
	case listElsewhere:
		return 0, true, fmt.Errorf("%w: after an unknown outcome (%v)", errListMoved, cause)
	}
	return 0, false, nil
}

// What readBack found.
type listState int

const (
	listUnread    listState = iota // could not read it
	listAtRev                      // still at the revision compared
	listHoldsVal                   // holds the value written
	listElsewhere                  // moved on to another value, or gone
)

func (ml *ManagedLedger) readBack(ctx context.Context, key string, val []byte, rev int64) (int64, listState) {
	actx, cancel := context.WithTimeout(ctx, etcdAttemptTimeout)
	defer cancel()
	kv, err := ml.store.Get(actx, key)
	switch {
	case errors.Is(err, cluster.ErrNotFound):
		return 0, listElsewhere
	case err != nil:
		return 0, listUnread
	case bytes.Equal(kv.Value, val):
		return kv.ModRevision, listHoldsVal
	case kv.ModRevision == rev:
		return 0, listAtRev
	}
	return 0, listElsewhere
}

// casListLocked writes the ledger list (state, ls) by compare-and-swap on
// infoRev (casInfo). A list that moved on is ErrFenced: only another
// owner writes it. A write whose outcome stays unknown fails the managed
// ledger (ErrFailed): it no longer knows what its list holds nor at which
// revision, so every later write would be judged wrongly; a new Open
// settles it from what is stored. Called with metaMu held.
func (ml *ManagedLedger) casListLocked(ctx context.Context, state mlpb.ManagedLedgerState, ls []LedgerInfo) error {
	b, err := encodeInfo(infoRecord{state: state, epoch: ml.epoch, ledgers: ls})
	if err != nil {
		return err
	}
	rev, err := ml.casInfo(ctx, b, ml.infoRev)
	switch {
	case err == nil:
		ml.infoRev = rev
		return nil
	case errors.Is(err, errListMoved):
		return fmt.Errorf("%w: %s: ledger list changed by another process: %w", ErrFenced, ml.name, err)
	}
	e := fmt.Errorf("%w: %s: write ledger list: %w", ErrFailed, ml.name, err)
	ml.mu.Lock()
	if ml.err == nil {
		ml.log.Error("failing: a ledger-list write's outcome could not be established; Open again to settle it from etcd", "err", err)
	}
	ml.terminateLocked(stFailed, e)
	ml.mu.Unlock()
	return e
}

// commitNewLedger appends ledger id to the list (dropping the finished
// empty ledgers) by compare-and-swap. It returns the list revision the
// compare-and-swap compared (for releaseUnrecorded when it fails).
func (ml *ManagedLedger) commitNewLedger(ctx context.Context, id int64, createdAt time.Time) (int64, error) {
	ml.metaMu.Lock()
	casRev := ml.infoRev
	ml.mu.Lock()
	var list []LedgerInfo
	var drop []int64
	for _, l := range ml.ledgers {
		if l.Closed && l.Entries == 0 {
			drop = append(drop, l.ID)
			continue
		}
		list = append(list, l)
	}
	list = append(list, LedgerInfo{ID: id, CreatedAt: createdAt})
	ml.mu.Unlock()
	err := ml.casListLocked(ctx, mlpb.ManagedLedgerState_ML_ACTIVE, list)
	if err == nil {
		ml.mu.Lock()
		ml.ledgers = list
		ml.rebuildViewLocked()
		ml.mu.Unlock()
	}
	ml.metaMu.Unlock()
	if err != nil {
		return casRev, err
	}
	for _, d := range drop {
		if err := ledger.DeleteLedger(ctx, ml.store, d); err != nil {
			ml.log.Warn("delete empty ledger", "ledger", d, "err", err)
		}
	}
	return casRev, nil
}

// errRecordMoved: a record this owner writes is not at the revision it
// last knew (fencedWriteLocked).
var errRecordMoved = errors.New("mledger: the record is not at the revision this owner wrote last (an earlier write whose answer was lost landed)")

// fencedWriteLocked puts val at key (del: deletes key) if key's mod revision is
// still rev (0: absent) and the ledger list is still at infoRev. It returns
// the new mod revision. A changed ledger list is ErrFenced; a key not at
// rev under an unchanged list is errRecordMoved. Called with metaMu held.
func (ml *ManagedLedger) fencedWriteLocked(ctx context.Context, key string, rev int64, val []byte, del bool) (int64, error) {
	cli := ml.store.Client()
	ik := ml.store.Prefix() + infoKey(ml.name)
	k := ml.store.Prefix() + key
	op := clientv3.OpPut(k, string(val))
	if del {
		op = clientv3.OpDelete(k)
	}
	actx, cancel := context.WithTimeout(ctx, etcdAttemptTimeout)
	defer cancel()
	resp, err := cli.Txn(actx).
		If(clientv3.Compare(clientv3.ModRevision(ik), "=", ml.infoRev),
			clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
		Then(op).
		Else(clientv3.OpGet(ik, clientv3.WithKeysOnly()), clientv3.OpGet(k, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("mledger: %s: write %s: %w", ml.name, key, err)
	}
	if !resp.Succeeded {
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].ModRevision != ml.infoRev {
			return 0, fmt.Errorf("%w: %s: write %s: the ledger list changed (another owner)", ErrFenced, ml.name, key)
		}
		// The ledger list is still this owner's, so no other owner came:
		// only this owner writes these records, and the one at key moved
		// past rev by a write of its own whose answer was lost (a request
		// cancelled or timed out after etcd applied it). Not a fence.
		return 0, fmt.Errorf("%w: %s: write %s", errRecordMoved, ml.name, key)
	}
	return resp.Header.Revision, nil
}

// deletePrefix deletes every key under dir (relative, ends with '/').
func (ml *ManagedLedger) deletePrefix(ctx context.Context, dir string) error {
	actx, cancel := context.WithTimeout(ctx, etcdAttemptTimeout)
	defer cancel()
	_, err := ml.store.Client().Delete(actx, ml.store.Prefix()+dir, clientv3.WithPrefix())
	return err
}
