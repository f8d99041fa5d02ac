package ratemeter

import (
	"testing"
	"time"
)

// Issue 29: Pulsar's storage write latency buckets — a latency on a
// bound counts in that bound's bucket (le), above a second in the
// overflow; the counts are those of the last complete stats interval,
// not cumulative, with their count and their sum in microseconds; before
// the first interval ended, those so far. Time is an input: no sleeps.
func TestLatencyBuckets(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var l Latency
	if c := l.Counts(t0); c != (LatencyCounts{}) {
		t.Fatalf("empty: %+v", c)
	}
	for _, d := range []time.Duration{
		0, 500 * time.Microsecond, // le_0_5
		501 * time.Microsecond,                     // le_1
		3 * time.Millisecond, 5 * time.Millisecond, // le_5
		10 * time.Millisecond,                            // le_10
		15 * time.Millisecond,                            // le_20
		50 * time.Millisecond,                            // le_50
		100 * time.Millisecond,                           // le_100
		150 * time.Millisecond,                           // le_200
		time.Second,                                      // le_1000
		time.Second + time.Microsecond, 30 * time.Second, // overflow
		-time.Millisecond, // a clock that stepped back: 0
	} {
		l.Add(t0, d)
	}
	want := LatencyCounts{Buckets: [10]int64{3, 1, 2, 1, 1, 1, 1, 1, 1, 2}, Count: 14,
		SumMicros: 0 + 500 + 501 + 3000 + 5000 + 10000 + 15000 + 50000 + 100000 + 150000 + 1000000 + 1000001 + 30000000}
	if got := l.Counts(t0.Add(time.Second)); got != want {
		t.Fatalf("within the first interval:\n got %+v\nwant %+v", got, want)
	}
	// The first interval ended: its counts, though more arrived since.
	l.Add(t0.Add(statsInterval+time.Second), 2*time.Millisecond)
	if got := l.Counts(t0.Add(statsInterval + 2*time.Second)); got != want {
		t.Fatalf("after the first interval:\n got %+v\nwant %+v", got, want)
	}
	// The second interval holds the one latency of 2 ms.
	one := LatencyCounts{Count: 1, SumMicros: 2000}
	one.Buckets[2] = 1
	if got := l.Counts(t0.Add(2*statsInterval + time.Second)); got != one {
		t.Fatalf("after the second interval: %+v, want %+v", got, one)
	}
	// An interval without a latency: zeros, not the last counts again.
	if got := l.Counts(t0.Add(3*statsInterval + time.Second)); got != (LatencyCounts{}) {
		t.Fatalf("after an idle interval: %+v, want zeros", got)
	}
	// Long idle, then latencies again: the idle interval before them.
	l.Add(t0.Add(10*statsInterval), time.Millisecond)
	if got := l.Counts(t0.Add(10*statsInterval + time.Second)); got != (LatencyCounts{}) {
		t.Fatalf("a new interval reports the last complete one (idle): %+v", got)
	}
}
