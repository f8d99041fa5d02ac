package main

import (
	"context"
	"fmt"
	"slices"
	"testing"

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
