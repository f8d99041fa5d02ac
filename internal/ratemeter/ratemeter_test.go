package ratemeter

import (
	"testing"
	"time"
)

// The rates stats report: per second over the last complete interval,
// or since the first message before one completed; zero once a whole
// interval passed without messages. Time is an input: no sleeps.
func TestRateMeter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var m Meter
	if r, b := m.Rate(t0); r != 0 || b != 0 {
		t.Fatalf("empty meter: %v %v", r, b)
	}
	// 25 messages a second of 100 bytes for 4 s: the first interval has
	// not ended, so the rate is since the first message.
	for i := 0; i < 100; i++ {
		m.Add(t0.Add(time.Duration(i)*40*time.Millisecond), 1, 100)
	}
	at := t0.Add(4 * time.Second)
	if r, b := m.Rate(at); r != 25 || b != 2500 {
		t.Fatalf("after 4 s at 25/s: %v msgs/s %v B/s", r, b)
	}
	// A first message alone is not a burst.
	var one Meter
	one.Add(t0, 1, 10)
	if r, _ := one.Rate(t0); r != 1 {
		t.Fatalf("one message: %v/s, want 1 (over at least a second)", r)
	}
	// Once the interval ended: its average, 100 messages over 10 s.
	if r, b := m.Rate(t0.Add(statsInterval + time.Second)); r != 10 || b != 1000 {
		t.Fatalf("after the first interval: %v %v, want 10 1000", r, b)
	}
	// The next interval had nothing: 0.
	if r, _ := m.Rate(t0.Add(2*statsInterval + time.Second)); r != 0 {
		t.Fatalf("after an idle interval: %v, want 0", r)
	}
	// Long idle, then traffic again: the idle interval before it is 0.
	m.Add(t0.Add(10*statsInterval), 5, 50)
	if r, _ := m.Rate(t0.Add(10*statsInterval + time.Second)); r != 0 {
		t.Fatalf("a new interval reports the last complete one (idle): %v", r)
	}
	if r, _ := m.Rate(t0.Add(11*statsInterval + time.Second)); r != 0.5 {
		t.Fatalf("5 messages in the last interval: %v/s, want 0.5", r)
	}
	if n, b := m.Totals(); n != 105 || b != 10050 {
		t.Fatalf("totals %d %d", n, b)
	}
}
