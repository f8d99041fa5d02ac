package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Issue 28: multi-region brokers allocate ledger ids from the global store
// (its own etcd, whose revisions run ahead of the region's), so a wiped
// bookie's limbo bound, LedgerIDHighWater, must cover the ids allocated
// there, not only the region store's revision.
func TestLedgerIDHighWaterCoversTheGlobalStoresIDs(t *testing.T) {
	region := testutil.Store(t, testutil.StartEtcd(t), testutil.RegionPrefix("east"))
	global := testutil.Store(t, testutil.StartEtcd(t), "/meridian/global")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The global store has seen more writes than the region's (every
	// region's brokers allocate there).
	ids := cluster.NewIDAllocator(global)
	var last int64
	for range 50 {
		id, err := ids.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	regionHW, err := cluster.NewIDAllocator(region).HighWater(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if regionHW >= last {
		t.Fatalf("precondition: the region's revision %d is not below the global ids (last %d)", regionHW, last)
	}

	reg := cluster.NewBookieRegistry(region, 0, cluster.AllocatorStore{Name: "global store",
		Get: func(context.Context) (*cluster.Store, error) { return global, nil }})
	hw, err := reg.LedgerIDHighWater(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if hw < last {
		t.Fatalf("LedgerIDHighWater = %d, below ledger id %d allocated from the global store (region revision %d): a wiped bookie would answer NO_SUCH_* for it", hw, last, regionHW)
	}
}

// A wiped start must not guess low: while an allocator's store cannot be
// read, LedgerIDHighWater retries until its deadline and then fails naming
// the store, never answers with the other stores' bound.
func TestLedgerIDHighWaterFailsNamingAnUnreachableStore(t *testing.T) {
	region := testutil.Store(t, testutil.StartEtcd(t), testutil.RegionPrefix("east"))
	calls := 0
	reg := cluster.NewBookieRegistry(region, 0, cluster.AllocatorStore{Name: "global store (--global-etcd)",
		Get: func(context.Context) (*cluster.Store, error) {
			calls++
			return nil, errors.New("not connected")
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	hw, err := reg.LedgerIDHighWater(ctx)
	if err == nil {
		t.Fatalf("LedgerIDHighWater = %d with the global store unreachable; want an error", hw)
	}
	if !strings.Contains(err.Error(), "global store (--global-etcd)") {
		t.Fatalf("error does not name the store: %v", err)
	}
	if calls < 2 || time.Since(start) < time.Second {
		t.Fatalf("gave up after %d attempts in %v; want retries until the deadline", calls, time.Since(start))
	}
	t.Logf("error: %v (%d attempts)", err, calls)
}
