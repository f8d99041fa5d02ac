package ledger

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/proto/metapb"
)

// countingBookies is a BookieSource that counts lookups by id and answers
// every bookie as registered, read-only where told.
type countingBookies struct {
	mu       sync.Mutex
	lookups  map[string]int
	readOnly map[string]bool
}

func (s *countingBookies) Writable() []*metapb.BookieRegistration { return nil }

func (s *countingBookies) Lookup(id string) (*metapb.BookieRegistration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookups[id]++
	return &metapb.BookieRegistration{Id: id, ReadOnly: s.readOnly[id]}, true
}

func (s *countingBookies) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.lookups {
		n += v
	}
	clear(s.lookups)
	return n
}

func ensembleOf(ids ...string) []*metapb.BookieRef {
	out := make([]*metapb.BookieRef, len(ids))
	for i, id := range ids {
		out[i] = &metapb.BookieRef{Id: id}
	}
	return out
}

func hasMember(w *Writer, id string) bool {
	for _, b := range w.meta.LastFragment().Ensemble {
		if b.Id == id {
			return true
		}
	}
	return false
}

// The idle sweep looks each bookie up once per pass and visits only the
// writers of a bookie that is not writable: a broker holding 100,000 idle
// topics visited all of them, three lookups each, every 2.5 s. A member
// that stays read-only keeps the time it was first seen so; writers
// re-filed by an ensemble change or removed are swept accordingly.
func TestIdleSweepVisitsOnlyWritersOfUnavailableBookies(t *testing.T) {
	src := &countingBookies{lookups: map[string]int{}, readOnly: map[string]bool{}}
	c := &Client{cfg: Config{Bookies: src, IdleReplaceAfter: 10 * time.Second}}
	c.sweepOnce.Do(func() {}) // no background sweep: the test drives c.sweep
	const bookies, writers = 6, 600
	ids := make([]string, bookies)
	for i := range ids {
		ids[i] = fmt.Sprintf("b%d", i)
	}
	var ws []*Writer
	for i := range writers {
		ens := ensembleOf(ids[i%bookies], ids[(i+1)%bookies], ids[(i+2)%bookies])
		ws = append(ws, newWriter(c, Metadata{Meta: &metapb.LedgerMetadata{LedgerId: int64(i), EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2,
			Fragments: []*metapb.Fragment{{FirstEntryId: 0, Ensemble: ens}}}}))
	}

	t0 := time.Now()
	c.sweep(t0)
	if n := src.total(); n != bookies {
		t.Fatalf("a pass over %d healthy writers made %d lookups; want %d (one per bookie)", writers, n, bookies)
	}

	src.readOnly["b2"] = true
	c.sweep(t0.Add(time.Second))
	withB2 := 0
	for _, w := range ws {
		u, marked := w.unavail["b2"]
		switch {
		case hasMember(w, "b2") && !marked:
			t.Fatalf("writer %d has read-only b2 and was not visited", w.id)
		case !hasMember(w, "b2") && len(w.unavail) > 0:
			t.Fatalf("writer %d does not have b2 and was visited: %v", w.id, w.unavail)
		case marked && !u.since.Equal(t0.Add(time.Second)):
			t.Fatalf("writer %d: b2 unavailable since %v", w.id, u.since)
		}
		if marked {
			withB2++
		}
	}
	if n, want := src.total(), bookies+3*withB2; n != want {
		t.Fatalf("a pass with b2 read-only made %d lookups; want %d (one per bookie, then the members of b2's %d writers)", n, want, withB2)
	}

	// Still read-only one pass later: the wait keeps its start.
	c.sweep(t0.Add(2 * time.Second))
	for _, w := range ws {
		if u, ok := w.unavail["b2"]; hasMember(w, "b2") && (!ok || !u.since.Equal(t0.Add(time.Second)) || !u.seen.Equal(t0.Add(2*time.Second))) {
			t.Fatalf("writer %d after a second pass: %+v", w.id, u)
		}
	}

	// An ensemble change files the writer under its new members; a
	// removed writer is swept no more, even if an ensemble change ends
	// after its removal.
	moved, gone := ws[0], ws[1]
	if !hasMember(moved, "b2") || !hasMember(gone, "b2") {
		t.Fatal("test setup: writers 0 and 1 should have b2")
	}
	moved.mu.Lock()
	moved.meta = Metadata{Meta: &metapb.LedgerMetadata{LedgerId: 0, Fragments: []*metapb.Fragment{{Ensemble: ensembleOf("b0", "b1", "b3")}}}}
	c.reindexWriter(moved, moved.meta.LastFragment().Ensemble)
	moved.mu.Unlock()
	c.removeWriter(gone)
	c.reindexWriter(gone, ensembleOf("b2", "b4", "b5"))
	c.wmu.Lock()
	_, movedStill := c.byBookie["b2"][moved]
	_, movedNew := c.byBookie["b3"][moved]
	goneAnywhere := false
	for _, set := range c.byBookie {
		if _, ok := set[gone]; ok {
			goneAnywhere = true
		}
	}
	c.wmu.Unlock()
	if movedStill || !movedNew {
		t.Fatalf("after its ensemble change: filed under b2 %v, under b3 %v", movedStill, movedNew)
	}
	if goneAnywhere {
		t.Fatal("a removed writer is still filed for the sweep")
	}

	// Writable again: nothing is visited, and a later unavailability
	// starts its wait afresh (the old mark is stale).
	src.total() // forget the lookups of the second pass
	src.readOnly["b2"] = false
	c.sweep(t0.Add(3 * time.Second))
	if n := src.total(); n != len(c.byBookie) {
		t.Fatalf("a healthy pass made %d lookups; want %d", n, len(c.byBookie))
	}
	src.readOnly["b2"] = true
	later := t0.Add(30 * time.Second) // past 3 passes (15 s) since b2 was last seen read-only
	c.sweep(later)
	for _, w := range ws[2:] {
		if u, ok := w.unavail["b2"]; hasMember(w, "b2") && (!ok || !u.since.Equal(later)) {
			t.Fatalf("writer %d: b2 unavailable again at %v, recorded since %v", w.id, later, u.since)
		}
	}
}
