package dispatch

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// pickMerge takes the longest run (up to 4) of adjacent mergeable
// buckets, the cheapest of that length (fewest entries), then the one due
// first; with fewer buckets than 4 it still merges (Pulsar's #26241: a
// bound of 1 to 3 never merged).
func TestPickMergeChoosesTheLongestCheapestRun(t *testing.T) {
	c := func(left, at int64) mergeCand { return mergeCand{ok: true, left: left, nextAt: at} }
	no := mergeCand{}
	for _, tc := range []struct {
		name  string
		cands []mergeCand
		i, k  int
	}{
		{"none", nil, 0, 0},
		{"one bucket", []mergeCand{c(5, 1)}, 0, 0},
		{"two buckets (bound 1)", []mergeCand{c(5, 1), c(5, 2)}, 0, 2},
		{"three buckets (bound 2)", []mergeCand{c(5, 1), c(5, 2), c(9, 0)}, 0, 3},
		{"runs of four: the fewest entries", []mergeCand{c(9, 1), c(5, 1), c(5, 1), c(5, 1), c(5, 1)}, 1, 4},
		{"runs of four, equal entries: due first", []mergeCand{c(5, 7), c(5, 9), c(5, 9), c(5, 9), c(5, 3)}, 1, 4},
		{"an unmergeable bucket breaks runs", []mergeCand{c(1, 1), c(1, 1), no, c(9, 9), c(9, 9), c(9, 9)}, 3, 3},
		{"only isolated mergeable buckets", []mergeCand{c(1, 1), no, c(1, 1), no, c(1, 1)}, 0, 0},
		{"longer runs win over cheaper ones", []mergeCand{c(1, 1), c(1, 1), no, c(50, 9), c(50, 9), c(50, 9), c(50, 9)}, 3, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if i, k := pickMerge(tc.cands); k != tc.k || (k > 0 && i != tc.i) {
				t.Fatalf("pickMerge = [%d, +%d), want [%d, +%d)", i, k, tc.i, tc.k)
			}
		})
	}
}

// Beyond MaxBuckets sealed buckets, adjacent ones are merged: once the log
// is read the index has at most MaxBuckets, and every entry is still
// released once, none before its time, with no snapshot left at the end.
func TestDelayedMergesBucketsBeyondTheBound(t *testing.T) {
	for _, maxBuckets := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("max-%d", maxBuckets), func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 7))
			cfg := DelayedConfig{BucketMax: 100, SegmentMax: 10, LookaheadMs: 50, MaxBuckets: maxBuckets}
			s := newDelayedSim(t, cfg)
			s.publish(3000, 10_000, rng) // 30 buckets' worth
			s.step(0)
			if s.d.Buckets() > maxBuckets || s.merges == 0 {
				t.Fatalf("after reading 30 buckets' worth: %d buckets (bound %d), %d merges", s.d.Buckets(), maxBuckets, s.merges)
			}
			if int(s.d.Merges()) != s.merges {
				t.Fatalf("Merges() = %d, want %d", s.d.Merges(), s.merges)
			}
			if got := s.d.Len(); got != 3000 {
				t.Fatalf("Len = %d after merging, want 3000", got)
			}
			l, err := decodeList(s.list)
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Buckets) != s.d.Buckets() || len(s.store) != s.d.Buckets() {
				t.Fatalf("the list names %d buckets, %d are stored, the index has %d", len(l.Buckets), len(s.store), s.d.Buckets())
			}
			for now := int64(0); now <= 10_100; now += 7 + rng.Int64N(40) {
				s.step(now)
				if s.d.Buckets() > maxBuckets+1 {
					t.Fatalf("at %d: %d buckets, bound %d", now, s.d.Buckets(), maxBuckets)
				}
			}
			s.step(20_000)
			for _, it := range s.log {
				if s.delivered[it.pos] != 1 {
					t.Fatalf("%s dispatched %d times", it.pos, s.delivered[it.pos])
				}
				if s.late[it.pos] > 50 {
					t.Fatalf("%s dispatched %d ms late", it.pos, s.late[it.pos])
				}
			}
			if s.d.Len() != 0 || s.d.Buckets() != 0 || len(s.store) != 0 {
				t.Fatalf("after everything was due: Len %d, %d buckets, %d persisted", s.d.Len(), s.d.Buckets(), len(s.store))
			}
			t.Logf("%d merges, %d segment loads", s.merges, s.loads)
		})
	}
}

// A crash after any one of the I/O operations of a run that merges
// (seals, list writes, deletes, loads, merge reads) loses nothing and
// releases nothing early: the list names the merged bucket or the buckets
// it replaces, never neither, and the other is garbage deleted at load.
func TestDelayedMergeCrashAtEveryStepLosesNothing(t *testing.T) {
	cfg := DelayedConfig{BucketMax: 20, SegmentMax: 5, LookaheadMs: 30, MaxBuckets: 2}
	// run crashes after crashAfter operations (-1: never), restarts, and
	// goes on to the end; it reports whether the crash happened.
	run := func(crashAfter int) bool {
		rng := rand.New(rand.NewPCG(11, 12))
		s := newDelayedSim(t, cfg)
		s.publish(140, 1_000, rng) // 7 buckets
		s.opsLeft = crashAfter
		crashed := false
		for now := int64(0); now <= 1_100; now += 10 {
			s.step(now)
			if s.halted {
				crashed = true
				s.crash()
				s.step(now)
			}
		}
		s.step(2_000)
		for _, it := range s.log {
			if s.delivered[it.pos] != 1 {
				t.Fatalf("crash after op %d: %s (due %d) dispatched %d times", crashAfter, it.pos, it.at, s.delivered[it.pos])
			}
			if s.late[it.pos] > 10 {
				t.Fatalf("crash after op %d: %s dispatched %d ms late", crashAfter, it.pos, s.late[it.pos])
			}
		}
		if len(s.store) != 0 {
			t.Fatalf("crash after op %d: %d snapshots left", crashAfter, len(s.store))
		}
		if crashAfter < 0 && s.merges < 2 {
			t.Fatalf("the run merged %d times, want several", s.merges)
		}
		return crashed
	}
	run(-1)
	n := 0
	for n < 10_000 && run(n) {
		n++
	}
	if n < 20 {
		t.Fatalf("only %d crash points", n)
	}
	t.Logf("crashed after each of the first %d operations", n)
}

// While a merge's reads are out, its buckets go on releasing and loading;
// the merged bucket holds what they hold when the reads come back: no
// entry released twice, none left out.
func TestDelayedMergeTakesWhatItsBucketsStillHold(t *testing.T) {
	cfg := DelayedConfig{BucketMax: 10, SegmentMax: 2, LookaheadMs: 5, MaxBuckets: 1}
	s := newDelayedSim(t, cfg)
	// Entry i due at 100+10i; the buckets split the log in halves, so
	// both hold entries due early and late.
	for i := range 20 {
		at := int64(100 + 10*((i%2)*10+i/2))
		s.log = append(s.log, delayedItem{at: at, pos: Position{Ledger: 3, Entry: int64(i)}})
	}
	s.holdMerge = true
	s.step(0)
	if s.held == nil || s.d.Buckets() != 2 {
		t.Fatalf("want a merge of 2 buckets out, got %d buckets, held %v", s.d.Buckets(), s.held != nil)
	}
	s.step(125) // releases 100..120 and loads segments meanwhile
	released := len(s.delivered)
	if released == 0 || s.d.Len() != 20-int64(released) {
		t.Fatalf("during the merge: %d released, Len %d", released, s.d.Len())
	}
	s.finishMerge()
	if s.d.Buckets() != 1 || s.d.Merges() != 1 || s.d.Len() != 20-int64(released) {
		t.Fatalf("after the merge: %d buckets, %d merges, Len %d (want %d)", s.d.Buckets(), s.d.Merges(), s.d.Len(), 20-released)
	}
	for _, it := range s.log {
		if got, want := s.d.Contains(it.pos), s.delivered[it.pos] == 0; got != want {
			t.Fatalf("%s (due %d): Contains = %v, want %v", it.pos, it.at, got, want)
		}
	}
	s.holdMerge = false
	s.step(125)
	if len(s.store) != 1 {
		t.Fatalf("%d snapshots once the merged bucket is persisted, want 1 (the sources deleted)", len(s.store))
	}
	s.step(1_000)
	for _, it := range s.log {
		if s.delivered[it.pos] != 1 {
			t.Fatalf("%s dispatched %d times", it.pos, s.delivered[it.pos])
		}
	}
}
