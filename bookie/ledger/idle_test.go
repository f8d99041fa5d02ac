package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// An idle writer replaces a member of its ensemble that turned read-only
// (here: a bookie being decommissioned, which the bookie process follows
// from its etcd record) by itself, without an add failing: the entries so
// far stay in a completed fragment (for auto-recovery to copy), the ledger
// stays open and the next add goes to the new ensemble. Cancelling the
// decommission makes the bookie writable again.
func TestIdleWriterReplacesAReadOnlyMember(t *testing.T) {
	r := testutil.StartRegion(t, "idle", "r1", "r2", "r3", "r1")
	c := newClient(t, r, "r1")
	ctx := ctxT(t, 2*time.Minute)
	w, err := c.Create(ctx, opts(3, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	for j := int64(0); j < 5; j++ {
		if _, err := w.Append(ctx, payloadOf(w.ID(), j)); err != nil {
			t.Fatal(err)
		}
	}
	m := w.Metadata().Meta
	if m.WriterLease == 0 || m.Writer == "" {
		t.Fatalf("no writer lease recorded: %v", m)
	}
	victim := m.Fragments[0].Ensemble[1].Id
	if _, err := cluster.StartDecommission(ctx, r.Store, victim, 1); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, victim+" registered read-only", func() bool {
		_, err := r.Store.Get(context.Background(), "/bookies/readonly/"+victim)
		return err == nil
	})
	var now *metapb.LedgerMetadata
	testutil.Eventually(t, 30*time.Second, "the idle writer replaced "+victim, func() bool {
		now, err = readMeta(ctx, r, w.ID())
		if err != nil {
			t.Fatal(err)
		}
		return len(now.Fragments) == 2
	})
	if now.State != metapb.LedgerState_OPEN || now.Fragments[1].FirstEntryId != 5 {
		t.Fatalf("after the idle replacement: %v", now)
	}
	for _, b := range now.Fragments[1].Ensemble {
		if b.Id == victim {
			t.Fatalf("new fragment still has %s: %v", victim, now.Fragments[1])
		}
	}
	id, err := w.Append(ctx, payloadOf(w.ID(), 5))
	if err != nil || id != 5 {
		t.Fatalf("append after the replacement: %d %v", id, err)
	}
	if err := cluster.CancelDecommission(ctx, r.Store, victim); err != nil {
		t.Fatal(err)
	}
	r.WaitRegistered(victim)
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
