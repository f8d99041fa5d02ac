package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// Concurrent recoveries of one ledger converge on one result, and a
// recovery that stopped halfway (metadata left IN_RECOVERY, some entries
// already re-replicated) is finished by the next one with the same end.
func TestRecoveriesConverge(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	c := newClient(t, r, "r1")
	ctx := ctxT(t, 2*time.Minute)
	w, err := c.Create(ctx, opts(3, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	rw := startWriting(w, 16)
	testutil.Eventually(t, 30*time.Second, "400 acks", func() bool { return rw.ackedCount() >= 400 })

	// Four recoverers at once, each with its own client.
	var wg sync.WaitGroup
	lasts := make([]int64, 4)
	errs := make([]error, 4)
	for i := range lasts {
		ci := newClient(t, r, "r2")
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd, err := ci.Recover(ctx, w.ID())
			if err != nil {
				errs[i] = err
				return
			}
			lasts[i] = rd.LastEntry()
		}()
	}
	wg.Wait()
	<-rw.done
	for i := range lasts {
		if errs[i] != nil {
			t.Fatalf("recoverer %d: %v", i, errs[i])
		}
		if lasts[i] != lasts[0] {
			t.Fatalf("recoveries disagree: %v", lasts)
		}
	}
	rd, err := c.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	checkRecovered(t, rd, rw.acked)
}

func TestRecoveryFinishesAHalfDoneRecovery(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	c := newClient(t, r, "r1")
	ctx := ctxT(t, 2*time.Minute)
	w, err := c.Create(ctx, opts(3, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	acked := map[int64]bool{}
	for i := int64(0); i < 100; i++ {
		e, err := w.Append(ctx, payloadOf(w.ID(), i))
		if err != nil {
			t.Fatal(err)
		}
		acked[e] = true
	}
	// A recoverer "crashed" right after moving the ledger to IN_RECOVERY.
	m, err := ledger.ReadMetadata(ctx, r.Store, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	half := proto.Clone(m.Meta).(*metapb.LedgerMetadata)
	half.State = metapb.LedgerState_IN_RECOVERY
	b, _ := proto.Marshal(half)
	if _, err := r.Store.CAS(context.Background(), fmt.Sprintf("/ledgers/%020d", w.ID()), b, m.Rev); err != nil {
		t.Fatal(err)
	}
	// The writer can no longer change the ensemble or close; the next
	// recovery finishes the job.
	rd, err := newClient(t, r, "r3").Recover(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if rd.LastEntry() != 99 {
		t.Fatalf("recovered to %d, want 99", rd.LastEntry())
	}
	checkRecovered(t, rd, acked)
	rd2, err := c.Recover(ctx, w.ID())
	if err != nil || rd2.LastEntry() != 99 {
		t.Fatalf("second recovery: %v, last %d", err, rd2.LastEntry())
	}
}
