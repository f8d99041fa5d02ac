package bench

import (
	"testing"
	"time"
)

// The source's time for a mirror's sequence is interpolated between the
// polls around it, not dated to the poll that first saw it (which made
// the lag up to a poll period short).
func TestSourceTimeOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	hist := []seqSample{{t0, 100}, {t0.Add(2 * time.Millisecond), 140}, {t0.Add(4 * time.Millisecond), 180}}
	for _, c := range []struct {
		m    uint64
		want time.Duration // after t0
		ok   bool
	}{
		{50, 0, true},                        // before the first poll: its time (the best bound)
		{100, 0, true},                       // exactly a poll's sequence
		{120, time.Millisecond, true},        // half way between two polls
		{130, 1500 * time.Microsecond, true}, // three quarters
		{180, 4 * time.Millisecond, true},
		{181, 0, false}, // the source was never seen holding it
	} {
		got, ok := sourceTimeOf(hist, c.m)
		if ok != c.ok || (ok && got.Sub(t0) != c.want) {
			t.Errorf("sourceTimeOf(%d) = %v, %v; want %v, %v", c.m, got.Sub(t0), ok, c.want, c.ok)
		}
	}
}

// A mirror sample ahead of every source poll so far is dated once a later
// source poll covers it, not dropped (a mirror that keeps up within a poll
// left no sample at all).
func TestMirrorLagsWaitForTheNextSourcePoll(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	var l mirrorLags
	l.source(at(0), 100)
	l.mirror(at(100), 90)  // behind: the source reached 90 at or before t0
	l.mirror(at(300), 110) // ahead of every source poll: waits
	if len(l.lags) != 1 || l.lags[0] != 100*time.Microsecond {
		t.Fatalf("lags after the first polls: %v, want [100µs]", l.lags)
	}
	l.source(at(2000), 120) // 110 reached half way, at 1000 µs: after the mirror had it
	l.mirror(at(2100), 115) // 115 reached at 1500 µs
	l.source(at(4000), 120) // not newer: ignored
	want := []time.Duration{100 * time.Microsecond, 0, 600 * time.Microsecond}
	if len(l.lags) != len(want) {
		t.Fatalf("lags %v, want %v", l.lags, want)
	}
	for i := range want {
		if l.lags[i] != want[i] {
			t.Errorf("lag %d = %v, want %v", i, l.lags[i], want[i])
		}
	}
	if len(l.waiting) != 0 {
		t.Errorf("%d mirror samples still waiting", len(l.waiting))
	}
}
