package mledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/mlpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// Writes of the ledger list that etcd answers "request timed out" (a
// leadership move, a slow disk) may have been applied. A broker's write
// probe was left failing every second with "recover ledger 22: no such
// ledger": Open's list write had landed, its answer was lost, and Open
// deleted the ledger the list now referenced, so no later Open could
// recover it. These tests lose the answers on a real etcd (LostAnswers)
// and check what the list references always exists.

// infoKeyOf is the ledger list's key (the package doc's key layout).
func infoKeyOf(name string) string { return "/managed-ledgers/" + mledger.EscapeName(name) + "/info" }

// faultyStore is a store of the region whose answers f loses.
func faultyStore(t testing.TB, r *testutil.Region, f *testutil.LostAnswers) *cluster.Store {
	return testutil.StoreWith(t, r.EtcdURL, testutil.RegionPrefix(r.Name), f.DialOption())
}

// storedList returns the list as etcd holds it.
func storedList(t testing.TB, r *testutil.Region, name string) *mlpb.ManagedLedgerInfo {
	t.Helper()
	kv, err := r.Store.Get(context.Background(), infoKeyOf(name))
	if err != nil {
		t.Fatal(err)
	}
	m := &mlpb.ManagedLedgerInfo{}
	if err := proto.Unmarshal(kv.Value, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func storedIDs(t testing.TB, r *testutil.Region, name string) []int64 {
	t.Helper()
	var ids []int64
	for _, l := range storedList(t, r, name).Ledgers {
		ids = append(ids, l.LedgerId)
	}
	return ids
}

// bumpEpoch rewrites the list as another process taking the managed ledger
// over would claim it: same ledgers, owner epoch + 1.
func bumpEpoch(t testing.TB, r *testutil.Region, name string) {
	m := storedList(t, r, name)
	m.OwnerEpoch++
	b, err := proto.Marshal(m)
	if err != nil {
		t.Error(err)
		return
	}
	if _, err := r.Store.Put(context.Background(), infoKeyOf(name), b); err != nil {
		t.Error(err)
	}
}

func ledgerExists(t testing.TB, r *testutil.Region, id int64) bool {
	t.Helper()
	_, err := ledger.ReadMetadata(context.Background(), r.Store, id)
	if err != nil && !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatal(err)
	}
	return err == nil
}

// ledgersOf returns every ledger with metadata created for the managed
// ledger name: what the list references, plus any orphan.
func ledgersOf(t testing.TB, r *testutil.Region, name string) []int64 {
	t.Helper()
	ctx := context.Background()
	ids, err := ledger.ListLedgers(ctx, r.Store)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, id := range ids {
		m, err := ledger.ReadMetadata(ctx, r.Store, id)
		if err != nil {
			t.Fatal(err)
		}
		if m.Meta.Custom["managed-ledger"] == name {
			out = append(out, id)
		}
	}
	return out
}

// reopenAndRead opens name again on a store without faults and checks it
// holds the n entries appended (payloads 0..n-1).
func reopenAndRead(t *testing.T, r *testutil.Region, lc *ledger.Client, name string, n int) *mledger.ManagedLedger {
	t.Helper()
	ml := openML(t, r.Store, lc, name)
	es := readAll(t, ml, mledger.Earliest, 100)
	if len(es) != n {
		t.Fatalf("reopened with %d entries, want %d", len(es), n)
	}
	for i, e := range es {
		if string(e.Data) != string(payload(i)) {
			t.Fatalf("entry %s holds %q, want %q", e.Pos, e.Data, payload(i))
		}
	}
	return ml
}

// Open: the list write that records the new ledger (after the claim)
// loses its answer, applied or not. Open settles it — the list read back
// holds its write, or the write is sent again — and owns the managed
// ledger; the ledger exists, nothing is orphaned, and the log reopens.
// Before, Open failed and deleted the ledger (applied: the list then
// referenced a ledger without metadata, and every later Open failed).
func TestOpenWithLostListAnswer(t *testing.T) {
	r := startRegion(t)
	lc := newLedgerClient(t, r.Store)
	ctx := ctxT(t, 2*time.Minute)
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%t", applied), func(t *testing.T) {
			name := fmt.Sprintf("lost-open-%t", applied)
			f := &testutil.LostAnswers{Key: infoKeyOf(name), Skip: 1, Times: 1, Applied: applied}
			ml, err := mledger.Open(ctx, name, mledger.Config{Store: faultyStore(t, r, f), Ledgers: lc, RetentionTime: -1})
			if err != nil {
				t.Fatalf("open whose list write lost its answer (applied: %t): %v", applied, err)
			}
			if f.Calls() < 2 {
				t.Fatalf("%d list writes: the fault did not fire", f.Calls())
			}
			ls := ml.Ledgers()
			if len(ls) != 1 {
				t.Fatalf("ledgers %+v, want one", ls)
			}
			id := ls[0].ID
			if got := storedIDs(t, r, name); !slices.Equal(got, []int64{id}) {
				t.Fatalf("stored list %v, want [%d]", got, id)
			}
			if got := ledgersOf(t, r, name); !slices.Equal(got, []int64{id}) {
				t.Fatalf("ledgers with metadata %v, want only the listed %d", got, id)
			}
			appendN(t, ml, 0, 3)
			if err := ml.Close(ctx); err != nil {
				t.Fatal(err)
			}
			reopenAndRead(t, r, lc, name, 3)
		})
	}
}

// Open: the list write loses its answer and, before Open looks again,
// another process claims the list (OnLost). Not applied: the write can
// never land, so the ledger is deleted, as before, and Open takes over
// again from the new list. Applied: the list the other process claimed
// references the ledger, so it is kept (closed, empty) and the next
// takeover recovers and drops it — it never sees a listed ledger without
// metadata.
func TestOpenListWriteRacedAfterLostAnswer(t *testing.T) {
	r := startRegion(t)
	lc := newLedgerClient(t, r.Store)
	ctx := ctxT(t, 2*time.Minute)
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%t", applied), func(t *testing.T) {
			name := fmt.Sprintf("lost-open-raced-%t", applied)
			f := &testutil.LostAnswers{Key: infoKeyOf(name), Skip: 1, Times: 1, Applied: applied}
			var first []int64
			f.OnLost = func() {
				first = storedIDs(t, r, name)
				bumpEpoch(t, r, name)
			}
			ml, err := mledger.Open(ctx, name, mledger.Config{Store: faultyStore(t, r, f), Ledgers: lc, RetentionTime: -1})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer ml.Close(ctx)
			ls := ml.Ledgers()
			if len(ls) != 1 {
				t.Fatalf("ledgers %+v, want one", ls)
			}
			if applied != (len(first) == 1) {
				t.Fatalf("the list held %v when the answer was lost (applied: %t)", first, applied)
			}
			if s := ml.Stats(); s.MissingLedgers != 0 {
				t.Errorf("%d listed ledgers had no metadata at the second takeover, want 0 (the first ledger was deleted while listed)", s.MissingLedgers)
			}
			if got := ledgersOf(t, r, name); !slices.Equal(got, []int64{ls[0].ID}) {
				t.Fatalf("ledgers with metadata %v, want only the listed %d", got, ls[0].ID)
			}
			appendN(t, ml, 0, 2)
		})
	}
}

// Rollover: the list write that records the next ledger loses its answer
// after it applied, and so does every write of the list after it. The
// read-back finds it landed: the append that started the rollover succeeds
// on the new ledger. Before, the retries saw only timeouts until
// SwitchTimeout, the new ledger was deleted though listed, and the append
// failed; the next Open failed on the missing ledger.
func TestRolloverWithLostListAnswer(t *testing.T) {
	r := startRegion(t)
	lc := newLedgerClient(t, r.Store)
	ctx := ctxT(t, 2*time.Minute)
	cfg := func(s *cluster.Store) mledger.Config {
		return mledger.Config{Store: s, Ledgers: lc, MaxEntriesPerLedger: 3, RetentionTime: -1, SwitchTimeout: 3 * time.Second}
	}
	// Open's claim and its list write pass; the rollover's is the third.
	const name = "lost-rollover"
	f := &testutil.LostAnswers{Key: infoKeyOf(name), Skip: 2, Times: 1000, Applied: true}
	ml, err := mledger.Open(ctx, name, cfg(faultyStore(t, r, f)))
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, ml, 0, 3)
	p, err := ml.Append(ctx, payload(3))
	if err != nil {
		t.Fatalf("append that rolled over onto a list write whose answer was lost: %v", err)
	}
	if p.Ledger == ps[0].Ledger || p.Entry != 0 {
		t.Fatalf("appended at %s, want entry 0 of a new ledger after %d", p, ps[0].Ledger)
	}
	if f.Calls() < 3 {
		t.Fatalf("%d list writes: the fault did not fire", f.Calls())
	}
	if got := storedIDs(t, r, name); !slices.Equal(got, []int64{ps[0].Ledger, p.Ledger}) {
		t.Fatalf("stored list %v, want [%d %d]", got, ps[0].Ledger, p.Ledger)
	}
	if !ledgerExists(t, r, p.Ledger) {
		t.Fatalf("ledger %d is listed and was written to, and has no metadata", p.Ledger)
	}
	if err := ml.Close(ctx); err != nil {
		t.Fatalf("close (its list write lost its answer too): %v", err)
	}
	ml2 := reopenAndRead(t, r, lc, name, 4)
	if s := ml2.Stats(); s.MissingLedgers != 0 {
		t.Errorf("reopened with %d missing ledgers", s.MissingLedgers)
	}
}

// Rollover: the list write loses its answer and, before the managed ledger
// looks again, the list moves on (another owner's claim, OnLost). The
// managed ledger is fenced either way. Not applied: the new ledger is
// deleted, as before. Applied: the list references it, so it is kept, and
// the next owner recovers it.
func TestRolloverListWriteRacedAfterLostAnswer(t *testing.T) {
	r := startRegion(t)
	lc := newLedgerClient(t, r.Store)
	ctx := ctxT(t, 2*time.Minute)
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%t", applied), func(t *testing.T) {
			name := fmt.Sprintf("lost-rollover-raced-%t", applied)
			f := &testutil.LostAnswers{Key: infoKeyOf(name), Skip: 2, Times: 1, Applied: applied}
			var listed []int64
			f.OnLost = func() {
				listed = storedIDs(t, r, name)
				bumpEpoch(t, r, name)
			}
			ml, err := mledger.Open(ctx, name, mledger.Config{Store: faultyStore(t, r, f), Ledgers: lc, MaxEntriesPerLedger: 3, RetentionTime: -1, SwitchTimeout: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ps := appendN(t, ml, 0, 3)
			if _, err := ml.Append(ctx, payload(3)); !errors.Is(err, mledger.ErrFenced) {
				t.Fatalf("append after the list moved on: %v, want ErrFenced", err)
			}
			_ = ml.Close(ctx)
			if applied != (len(listed) == 2) {
				t.Fatalf("the list held %v when the answer was lost (applied: %t)", listed, applied)
			}
			if applied {
				if !ledgerExists(t, r, listed[1]) {
					t.Fatalf("ledger %d is listed and was deleted", listed[1])
				}
			} else if got := ledgersOf(t, r, name); !slices.Equal(got, []int64{ps[0].Ledger}) {
				t.Fatalf("ledgers with metadata %v, want only %d: the unrecorded ledger is deleted", got, ps[0].Ledger)
			}
			ml2 := reopenAndRead(t, r, lc, name, 3)
			if s := ml2.Stats(); s.MissingLedgers != 0 {
				t.Errorf("reopened with %d missing ledgers", s.MissingLedgers)
			}
		})
	}
}

// Rollover: every answer is lost and nothing is applied, past
// SwitchTimeout. The list is still at the revision compared, so the write
// may yet land: the new ledger is not deleted, and the managed ledger
// fails (ErrFailed) rather than go on with a list it no longer knows. A
// new Open settles it from etcd.
func TestRolloverListWriteNeverSettles(t *testing.T) {
	r := startRegion(t)
	lc := newLedgerClient(t, r.Store)
	ctx := ctxT(t, 2*time.Minute)
	const name = "lost-rollover-unsettled"
	f := &testutil.LostAnswers{Key: infoKeyOf(name), Skip: 2, Times: 1000}
	ml, err := mledger.Open(ctx, name, mledger.Config{Store: faultyStore(t, r, f), Ledgers: lc, MaxEntriesPerLedger: 3, RetentionTime: -1, SwitchTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, ml, 0, 3)
	if _, err := ml.Append(ctx, payload(3)); !errors.Is(err, mledger.ErrFailed) {
		t.Fatalf("append behind a list write that never settled: %v, want ErrFailed", err)
	}
	_ = ml.Close(ctx)
	if got := storedIDs(t, r, name); !slices.Equal(got, []int64{ps[0].Ledger}) {
		t.Fatalf("stored list %v, want [%d] (nothing applied)", got, ps[0].Ledger)
	}
	all := ledgersOf(t, r, name)
	if len(all) != 2 || all[0] != ps[0].Ledger {
		t.Fatalf("ledgers with metadata %v, want %d and the unrecorded one, kept", all, ps[0].Ledger)
	}
	reopenAndRead(t, r, lc, name, 3)
}

// A list that references a ledger without metadata — what the bug above
// left behind. Open drops it when it was never written to (the last
// ledger, no cursor acknowledged anything in it), and refuses
// (ErrMissingLedger) when a cursor shows acknowledged entries in it.
func TestOpenWithAListedLedgerWithoutMetadata(t *testing.T) {
	r := startRegion(t)
	lc := newLedgerClient(t, r.Store)
	ctx := ctxT(t, 2*time.Minute)

	t.Run("never written", func(t *testing.T) {
		const name = "missing-unwritten"
		ml := openML(t, r.Store, lc, name)
		appendN(t, ml, 0, 3)
		if err := ml.Close(ctx); err != nil {
			t.Fatal(err)
		}
		// The next owner lists a new ledger, then (the old bug) deletes it.
		ml2 := openML(t, r.Store, lc, name)
		ls := ml2.Ledgers()
		gone := ls[len(ls)-1].ID
		if err := ledger.DeleteLedger(ctx, r.Store, gone); err != nil {
			t.Fatal(err)
		}
		ml3 := reopenAndRead(t, r, lc, name, 3)
		if s := ml3.Stats(); s.MissingLedgers != 1 {
			t.Errorf("%d missing ledgers dropped, want 1", s.MissingLedgers)
		}
		if got := storedIDs(t, r, name); slices.Contains(got, gone) {
			t.Fatalf("stored list %v still references %d", got, gone)
		}
		if _, err := ml3.Append(ctx, payload(3)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("acknowledged entries", func(t *testing.T) {
		const name = "missing-acked"
		ml := openML(t, r.Store, lc, name)
		ps := appendN(t, ml, 0, 3)
		c, err := ml.OpenCursor(ctx, "sub", mledger.Earliest)
		if err != nil {
			t.Fatal(err)
		}
		c.AckCumulative(ps[1])
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		// Someone deletes the metadata of the ledger being written.
		if err := ledger.DeleteLedger(ctx, r.Store, ps[0].Ledger); err != nil {
			t.Fatal(err)
		}
		_, err = mledger.Open(ctx, name, mledger.Config{Store: r.Store, Ledgers: lc})
		if !errors.Is(err, mledger.ErrMissingLedger) {
			t.Fatalf("open with a listed ledger without metadata, holding acknowledged entries: %v, want ErrMissingLedger", err)
		}
		if got := storedIDs(t, r, name); !slices.Contains(got, ps[0].Ledger) {
			t.Fatalf("stored list %v dropped %d", got, ps[0].Ledger)
		}
	})
}
