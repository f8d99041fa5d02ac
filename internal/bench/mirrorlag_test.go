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
