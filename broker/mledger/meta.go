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

// casListLocked writes the ledger list (state, ls) by compare-and-swap on
// infoRev, retrying transient errors until ctx ends. A lost CAS is
// ErrFenced — unless an earlier attempt's outcome was unknown and the
// record now holds exactly what we wrote. Called with metaMu held.
func (ml *ManagedLedger) casListLocked(ctx context.Context, state mlpb.ManagedLedgerState, ls []LedgerInfo) error {
	key := infoKey(ml.name)
	b, err := encodeInfo(infoRecord{state: state, epoch: ml.epoch, ledgers: ls})
	if err != nil {
		return err
	}
	ambiguous := false
	backoff := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, etcdAttemptTimeout)
		rev, err := ml.store.CAS(actx, key, b, ml.infoRev)
		cancel()
		if err == nil {
			ml.infoRev = rev
			return nil
		}
		if errors.Is(err, cluster.ErrVersionMismatch) || errors.Is(err, cluster.ErrNotFound) {
			if ambiguous {
				if kv, gerr := ml.store.Get(ctx, key); gerr == nil && bytes.Equal(kv.Value, b) {
					ml.infoRev = kv.ModRevision
					return nil
				}
			}
			return fmt.Errorf("%w: %s: ledger list changed by another process: %w", ErrFenced, ml.name, err)
		}
		ambiguous = true
		select {
		case <-ctx.Done():
			return fmt.Errorf("mledger: %s: write ledger list: %w", ml.name, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// commitNewLedger appends ledger id to the list (dropping the finished
// empty ledgers) by compare-and-swap.
func (ml *ManagedLedger) commitNewLedger(ctx context.Context, id int64, createdAt time.Time) error {
	ml.metaMu.Lock()
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
		return err
	}
	for _, d := range drop {
		if err := ledger.DeleteLedger(ctx, ml.store, d); err != nil {
			ml.log.Warn("delete empty ledger", "ledger", d, "err", err)
		}
	}
	return nil
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
