package ledger_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// A metadata compare-and-swap that etcd answers "request timed out" may
// have been applied. The update loop reads the metadata back: a write
// that landed is taken as done, one that did not is sent again. Before,
// the error went back to the caller: a close that had landed was reported
// failed (the managed ledger then took a healthy ledger for a failed one
// and recovered it), and every step of a recovery failed the same way (an
// Open of the managed ledger failed). On a real etcd, the answers lost by
// a client interceptor.
func TestMetadataWritesWithLostAnswers(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	ctx := ctxT(t, 2*time.Minute)
	faulty := func(f *testutil.LostAnswers) func(*ledger.Config) {
		return func(c *ledger.Config) {
			c.Store = testutil.StoreWith(t, r.EtcdURL, testutil.RegionPrefix(r.Name), f.DialOption())
		}
	}
	write := func(t *testing.T, w *ledger.Writer, n int) {
		for i := range n {
			if _, err := w.Append(ctx, payloadOf(w.ID(), int64(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkClosed := func(t *testing.T, id, last int64) {
		t.Helper()
		m, err := readMeta(ctx, r, id)
		if err != nil {
			t.Fatal(err)
		}
		if m.State != metapb.LedgerState_CLOSED || m.LastEntryId != last {
			t.Fatalf("ledger %d: %s at %d, want CLOSED at %d", id, m.State, m.LastEntryId, last)
		}
	}

	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("close/applied=%t", applied), func(t *testing.T) {
			// The create passes; the close's compare-and-swap loses its
			// answer.
			f := &testutil.LostAnswers{Key: "/ledgers/", Skip: 1, Times: 1, Applied: applied}
			c := newClient(t, r, "r1", faulty(f))
			w, err := c.Create(ctx, opts(3, 3, 2))
			if err != nil {
				t.Fatal(err)
			}
			write(t, w, 5)
			if err := w.Close(ctx); err != nil {
				t.Fatalf("close whose metadata write lost its answer (applied: %t): %v", applied, err)
			}
			// Applied: the read-back settles it (create, lost close).
			// Not applied: sent again (create, lost close, close).
			if want := map[bool]int{true: 2, false: 3}[applied]; f.Calls() != want {
				t.Errorf("%d metadata writes, want %d", f.Calls(), want)
			}
			checkClosed(t, w.ID(), 4)
		})

		t.Run(fmt.Sprintf("recover/applied=%t", applied), func(t *testing.T) {
			w, err := newClient(t, r, "r1").Create(ctx, opts(3, 3, 2))
			if err != nil {
				t.Fatal(err)
			}
			write(t, w, 7)
			// Both of the recovery's writes (OPEN → IN_RECOVERY, then
			// CLOSED) lose their answers.
			f := &testutil.LostAnswers{Key: fmt.Sprintf("/ledgers/%020d", w.ID()), Times: 2, Applied: applied}
			rd, err := newClient(t, r, "r2", faulty(f)).Recover(ctx, w.ID())
			if err != nil {
				t.Fatalf("recovery whose metadata writes lost their answers (applied: %t): %v", applied, err)
			}
			if rd.LastEntry() != 6 {
				t.Fatalf("recovered at %d, want 6", rd.LastEntry())
			}
			checkClosed(t, w.ID(), 6)
			if _, err := w.Append(ctx, []byte("late")); err == nil {
				t.Fatal("the fenced writer still appends")
			}
		})
	}
}
