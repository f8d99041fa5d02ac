package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// A multi-region bookie's garbage collection lists the ledgers of the
// region's store and of the global store (stretched ledgers' metadata),
// and no listing at all until the global store is connected: a listing
// of the region alone would take every stretched ledger for deleted.
func TestBookieLedgerListingCoversTheGlobalStore(t *testing.T) {
	url := testutil.StartEtcd(t)
	region := testutil.Store(t, url, regionPrefix("", "east"))
	global := testutil.Store(t, url, globalPrefix(""))
	ctx := context.Background()
	for s, ids := range map[*cluster.Store][]int64{region: {3, 9}, global: {5}} {
		for _, id := range ids {
			if _, err := s.Put(ctx, fmt.Sprintf("/ledgers/%020d", id), []byte("m")); err != nil {
				t.Fatal(err)
			}
		}
	}
	reg := &bookieLedgers{BookieRegistry: cluster.NewBookieRegistry(region, 0), region: "east", wantGlobal: true}
	if ids, err := reg.ListLedgers(ctx); err == nil {
		t.Fatalf("listed %v before the global store was connected", ids)
	}
	reg.global.Store(global)
	ids, err := reg.ListLedgers(ctx)
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []int64{3, 5, 9}) {
		t.Fatalf("ListLedgers = %v, %v; want [3 5 9]", ids, err)
	}
	// Without --global-etcd (single region) the region's store alone.
	single := &bookieLedgers{BookieRegistry: cluster.NewBookieRegistry(region, 0), region: "east"}
	if ids, err := single.ListLedgers(ctx); err != nil || !slices.Equal(ids, []int64{3, 9}) {
		t.Fatalf("single-region ListLedgers = %v, %v; want [3 9]", ids, err)
	}
}

// Issue 28: a multi-region bookie's ledger id high water (a wiped disk's
// limbo bound) covers the ids brokers allocate from the global store (an
// etcd of its own, ahead of the region's), and while the global store is
// not connected it fails naming it rather than answer the region's bound.
func TestBookieLedgerIDHighWaterCoversTheGlobalStore(t *testing.T) {
	region := testutil.Store(t, testutil.StartEtcd(t), regionPrefix("", "east"))
	global := testutil.Store(t, testutil.StartEtcd(t), globalPrefix(""))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last int64
	for range 20 {
		id, err := cluster.NewIDAllocator(global).Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	reg := newBookieLedgers(region, "east", true)
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	hw, err := reg.LedgerIDHighWater(short)
	cancelShort()
	if err == nil || !strings.Contains(err.Error(), "global store") {
		t.Fatalf("LedgerIDHighWater before the global store is connected = %d, %v; want an error naming it", hw, err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		reg.global.Store(global)
	}()
	hw, err = reg.LedgerIDHighWater(ctx) // waits for the connection
	if err != nil || hw < last {
		t.Fatalf("LedgerIDHighWater = %d, %v; want at least %d, the last id allocated from the global store", hw, err, last)
	}
	// Single region: the region's store alone, whose ids are its revisions.
	single := newBookieLedgers(region, "east", false)
	rhw, err := cluster.NewIDAllocator(region).HighWater(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if hw, err := single.LedgerIDHighWater(ctx); err != nil || hw < rhw {
		t.Fatalf("single-region LedgerIDHighWater = %d, %v; want at least %d", hw, err, rhw)
	}
}
