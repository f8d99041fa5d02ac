package ledger_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Test 1 of the storage issue: E=3 Qw=3 Qa=2 over 4 bookie processes on 2
// racks; a writer adds continuously; one ensemble bookie is kill -9'd
// mid-stream. The writer sees no error, the metadata shows a new fragment
// (first entry, replacement bookie), and every acknowledged entry after the
// change is read back from each replica of its write set directly.
func TestEnsembleChangeOnBookieKill(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r1", "r2", "r2")
	c := newClient(t, r, "r1")
	ctx := ctxT(t, 2*time.Minute)
	w, err := c.Create(ctx, opts(3, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	id := w.ID()
	first := w.Metadata().LastFragment()
	victimID := first.Ensemble[1].Id
	victim := r.Bookie(victimID)

	var mu sync.Mutex
	acked := map[int64]bool{}
	var addErr error
	const total = 3000
	killAt := int64(1000)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := 0; i < total; i++ {
		sem <- struct{}{}
		wg.Add(1)
		e := int64(i)
		w.AppendAsync(payloadOf(id, e), func(got int64, err error) {
			defer wg.Done()
			defer func() { <-sem }()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if addErr == nil {
					addErr = err
				}
				return
			}
			if got != e {
				t.Errorf("add %d completed as entry %d", e, got)
			}
			acked[got] = true
		})
		if e == killAt {
			victim.Kill() // kill -9 while adds are in flight
		}
	}
	wg.Wait()
	if addErr != nil {
		t.Fatalf("writer saw an error after a bookie kill (a replacement existed): %v", addErr)
	}
	if len(acked) != total {
		t.Fatalf("acked %d of %d", len(acked), total)
	}

	m := w.Metadata()
	if n := len(m.Meta.Fragments); n < 2 {
		t.Fatalf("metadata has %d fragment(s); want a new fragment after the kill", n)
	}
	last := m.LastFragment()
	if last.FirstEntryId <= 0 || last.FirstEntryId > killAt+64 {
		t.Fatalf("new fragment starts at entry %d; want just after entry %d", last.FirstEntryId, killAt)
	}
	replaced := false
	for p, b := range last.Ensemble {
		if b.Id == victimID {
			t.Fatalf("killed bookie %s still in the new ensemble", victimID)
		}
		if b.Id != first.Ensemble[p].Id {
			replaced = true
			if p != 1 {
				t.Fatalf("position %d changed; only the killed bookie's position 1 should", p)
			}
		}
	}
	if !replaced {
		t.Fatal("no replacement bookie in the new fragment")
	}
	t.Logf("fragments: %v", m.Meta.Fragments)

	// Every acknowledged entry of the new fragment, read from each replica
	// of its write set directly.
	addrs := map[string]string{}
	for _, b := range r.Bookies {
		addrs[b.ID] = b.Addr
	}
	for e := last.FirstEntryId; e < total; e++ {
		for _, p := range writeSet(e, 3, 3) {
			b := last.Ensemble[p]
			// The copy beyond Qa may still be on its way.
			waitDirect(t, addrs[b.Id], b.Id, id, e)
			resp := readDirect(t, addrs[b.Id], id, e)
			if resp.Status != bookiepb.Status_OK || !bytes.Equal(resp.Payload, payloadOf(id, e)) {
				t.Fatalf("entry %d on replica %s: status %v", e, b.Id, resp.Status)
			}
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// And through the client, every entry of the ledger.
	rd, err := c.Open(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rd.LastEntry() != total-1 {
		t.Fatalf("closed at %d, want %d", rd.LastEntry(), total-1)
	}
	for e := int64(0); e < total; e++ {
		en, err := rd.Read(ctx, e)
		if err != nil || !bytes.Equal(en.Payload, payloadOf(id, e)) {
			t.Fatalf("read %d: %v", e, err)
		}
	}
}
