package ledger_test

import (
	"testing"
	"time"

	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// Scale-out without rebalance (self-healing issue, test 5): a bookie added
// to a region under load receives new ensembles at once, and nothing that
// exists moves.
func TestAddedBookieTakesNewLedgersOnly(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	c := newClient(t, r, "r1")
	ctx := ctxT(t, 2*time.Minute)

	var before []*metapb.LedgerMetadata
	for i := 0; i < 3; i++ {
		w, err := c.Create(ctx, opts(3, 3, 2))
		if err != nil {
			t.Fatal(err)
		}
		for j := int64(0); j < 20; j++ {
			if _, err := w.Append(ctx, payloadOf(w.ID(), j)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		before = append(before, w.Metadata().Meta)
	}

	added := r.AddBookie("east-bookie-new", "r1")
	r.WaitRegistered(added.ID)
	testutil.Eventually(t, 30*time.Second, "the client sees the new bookie", func() bool {
		w, err := c.Create(ctx, opts(3, 3, 2))
		if err != nil {
			return false
		}
		defer w.Close(ctx)
		if _, err := w.Append(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		for _, b := range w.Metadata().LastFragment().Ensemble {
			if b.Id == added.ID {
				return true
			}
		}
		return false
	})
	for _, m := range before {
		now, err := readMeta(ctx, r, m.LedgerId)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(now.Fragments[0], m.Fragments[0]) || len(now.Fragments) != len(m.Fragments) {
			t.Fatalf("ledger %d moved: %v → %v", m.LedgerId, m.Fragments, now.Fragments)
		}
	}
}
