package ratemeter

import (
	"sync"
	"time"
)

// LatencyBounds are the upper bounds, inclusive, of Pulsar's storage
// write latency buckets (ManagedLedgerMBeanImpl.ENTRY_LATENCY_BUCKETS_USEC,
// exported as pulsar_storage_write_latency_le_0_5 … _le_1000): 0.5, 1, 5,
// 10, 20, 50, 100, 200 and 1000 ms. A last bucket holds what is above
// 1 s (pulsar_storage_write_latency_overflow).
var LatencyBounds = [...]time.Duration{
	500 * time.Microsecond, time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, time.Second,
}

// LatencyCounts is what a Latency meter counted over one interval.
type LatencyCounts struct {
	// Buckets[i] counts the latencies in (LatencyBounds[i-1],
	// LatencyBounds[i]]; the last one those above a second. Not
	// cumulative, as Pulsar's StatsBuckets.
	Buckets [len(LatencyBounds) + 1]int64
	// Count is the sum of Buckets; SumMicros the latencies' sum in
	// microseconds (Pulsar's unit for pulsar_storage_write_latency_sum).
	Count, SumMicros int64
}

// Latency counts latencies into Pulsar's buckets and answers them as
// Pulsar's broker does (StatsBuckets, refreshed every stats period): the
// counts of the last complete stats interval (statsInterval, 10 s, as
// Meter's rates; Pulsar's period is 60 s), or, before the first interval
// ended, those since the first latency. Lazy like Meter: the interval
// rolls over when it is read or added to. Safe for concurrent use.
type Latency struct {
	mu       sync.Mutex
	curStart time.Time
	cur      LatencyCounts
	prev     LatencyCounts
	hasPrev  bool
}

// bucketOf is the index of the bucket of d: the first bound d does not
// exceed, as Pulsar's binary search of the bounds.
func bucketOf(d time.Duration) int {
	for i, b := range LatencyBounds {
		if d <= b {
			return i
		}
	}
	return len(LatencyBounds)
}

// Add counts a latency d observed at now (a negative one as 0).
func (l *Latency) Add(now time.Time, d time.Duration) {
	d = max(d, 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rollLocked(now)
	if l.curStart.IsZero() {
		l.curStart = now
	}
	l.cur.Buckets[bucketOf(d)]++
	l.cur.Count++
	l.cur.SumMicros += d.Microseconds()
}

// rollLocked closes the intervals that ended before now.
func (l *Latency) rollLocked(now time.Time) {
	if l.curStart.IsZero() {
		return
	}
	elapsed := now.Sub(l.curStart)
	if elapsed < statsInterval {
		return
	}
	if elapsed < 2*statsInterval {
		l.prev = l.cur
	} else {
		l.prev = LatencyCounts{} // a whole interval went by without a latency
	}
	l.hasPrev = true
	l.cur = LatencyCounts{}
	l.curStart = l.curStart.Add(elapsed / statsInterval * statsInterval)
}

// Counts returns the counts as of now: the last complete interval's, or
// the current one's before one completed.
func (l *Latency) Counts(now time.Time) LatencyCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rollLocked(now)
	if l.hasPrev {
		return l.prev
	}
	return l.cur
}
