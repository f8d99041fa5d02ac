package cluster

import (
	"context"
	"fmt"
)

// IDAllocator hands out ledger ids. An id is the etcd revision of a write to
// one counter key, so ids are unique and strictly increasing across every
// process that allocates from the same etcd cluster, with one round trip and
// no compare-and-swap retries under contention. Pointed at the global store
// (the geo-replication issue), they are unique and increasing across
// regions, which message ids built from them need (DESIGN.md, "Message ids
// mean the same thing everywhere").
type IDAllocator struct{ s *Store }

// NewIDAllocator returns an allocator on s.
func NewIDAllocator(s *Store) *IDAllocator { return &IDAllocator{s: s} }

// Next returns a new id, greater than every id returned before by any
// allocator on the same etcd cluster.
func (a *IDAllocator) Next(ctx context.Context) (int64, error) {
	rev, err := a.s.Put(ctx, ledgerIDKey, nil)
	if err != nil {
		return 0, fmt.Errorf("cluster: allocate ledger id: %w", err)
	}
	return rev, nil
}

// HighWater returns a value at or above every id allocated so far: the
// store's current revision.
func (a *IDAllocator) HighWater(ctx context.Context) (int64, error) {
	ctx, cancel := a.s.ctx(ctx)
	defer cancel()
	resp, err := a.s.cli.Get(ctx, a.s.abs(ledgerIDKey))
	if err != nil {
		return 0, fmt.Errorf("cluster: ledger id high water: %w", err)
	}
	return resp.Header.Revision, nil
}
