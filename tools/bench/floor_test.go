package bench

import (
	"testing"
	"time"
)

// Requirement: QuorumFloor writes every entry, times each from its arrival
// to its qa-th sync, and refuses parameters it cannot run.
func TestQuorumFloor(t *testing.T) {
	r, err := QuorumFloor(t.TempDir(), 3, 2, 500, 4096, 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ops != 200 || len(r.Lat) != 200 || r.Entries != 200 || r.Bytes != 200*4096 {
		t.Fatalf("ops %d, latencies %d, entries %d, bytes %d; want 200 entries of 4 KiB", r.Ops, len(r.Lat), r.Entries, r.Bytes)
	}
	for i, l := range r.Lat {
		if l <= 0 {
			t.Fatalf("entry %d: latency %v; an entry is synced after it arrives", i, l)
		}
	}
	// Group commit: at most one sync per entry and writer, at least one per writer.
	if r.Fsyncs < 3 || r.Fsyncs > 600 || r.FsyncedOps != 600 {
		t.Fatalf("fsyncs %d for %d entry copies", r.Fsyncs, r.FsyncedOps)
	}
	if r.Elapsed < 350*time.Millisecond {
		t.Fatalf("elapsed %v: 200 entries at 500/s take at least 398 ms to arrive", r.Elapsed)
	}
	for _, bad := range [][2]int{{3, 4}, {0, 0}, {3, 0}} {
		if _, err := QuorumFloor(t.TempDir(), bad[0], bad[1], 100, 1, time.Millisecond); err == nil {
			t.Errorf("%d writers, qa %d: no error", bad[0], bad[1])
		}
	}
}

// Requirement: p99Range gives the smallest and largest per-round p99.
func TestP99Range(t *testing.T) {
	round := func(ms ...int) Result {
		var r Result
		for _, m := range ms {
			r.Lat = append(r.Lat, time.Duration(m)*time.Millisecond)
		}
		return r
	}
	if got := p99Range([]Result{round(1, 2, 30), round(5, 380), round(12)}); got != "12–380 ms" {
		t.Fatalf("p99Range = %q, want 12–380 ms", got)
	}
	if got := p99Range(nil); got != "-" {
		t.Fatalf("p99Range(nil) = %q", got)
	}
}
