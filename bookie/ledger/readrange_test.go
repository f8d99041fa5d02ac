package ledger_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// ReadRange reads a run of a closed ledger with few requests (batch reads
// from the nearest replica), and, with that replica killed, still returns
// every entry intact from the others.
func TestReadRangeBatchesAndFallsBack(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	c := newClient(t, r, "r1")
	ctx := ctxT(t, 2*time.Minute)
	w, err := c.Create(ctx, opts(3, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := int64(0); i < n; i++ {
		if _, err := w.Append(ctx, payloadOf(w.ID(), i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	reader := newClient(t, r, "r1")
	rd, err := reader.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if !rd.CanReadRange() {
		t.Fatal("E=Qw=3: CanReadRange false")
	}
	var near string
	for _, b := range r.Bookies {
		if b.Rack == "r1" {
			near = b.ID
		}
	}
	readAll := func() (calls int, servedBy map[string]int) {
		t.Helper()
		servedBy = map[string]int{}
		for next := int64(0); next < n; {
			got, err := rd.ReadRange(ctx, next, n-1, 0)
			if err != nil {
				t.Fatalf("ReadRange from %d: %v", next, err)
			}
			calls++
			for _, e := range got {
				if e.EntryID != next || !bytes.Equal(e.Payload, payloadOf(w.ID(), next)) {
					t.Fatalf("ReadRange returned entry %d at %d, or wrong bytes", e.EntryID, next)
				}
				servedBy[e.Bookie]++
				next++
			}
		}
		return calls, servedBy
	}
	calls, servedBy := readAll()
	if calls > 3 {
		t.Fatalf("%d ReadRange calls for %d entries: not batched", calls, n)
	}
	if servedBy[near] != n {
		t.Fatalf("served by %v, want all %d from the same-rack replica %s", servedBy, n, near)
	}

	r.Bookie(near).Kill()
	_, servedBy = readAll()
	if servedBy[near] != 0 {
		t.Fatalf("the killed replica served %d entries", servedBy[near])
	}
}

func TestFragmentEnd(t *testing.T) {
	m := ledger.Metadata{Meta: &metapb.LedgerMetadata{Fragments: []*metapb.Fragment{{FirstEntryId: 0}, {FirstEntryId: 10}, {FirstEntryId: 25}}}}
	for e, want := range map[int64]int64{0: 9, 9: 9, 10: 24, 24: 24, 25: math.MaxInt64, 1000: math.MaxInt64} {
		if got := m.FragmentEnd(e); got != want {
			t.Errorf("FragmentEnd(%d) = %d, want %d", e, got, want)
		}
	}
}
