package fakeclock

import (
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/clock"
)

var t0 = time.Unix(1_700_000_000, 0)

// A timer fires when the clock reaches its deadline, not a nanosecond
// before; Reset and Stop drop what an earlier arming left unreceived.
func TestTimerFiresAtItsDeadline(t *testing.T) {
	c := New(t0)
	tm := c.NewTimer(time.Second)
	if n := c.Advance(time.Second - 1); n != 0 {
		t.Fatalf("%d timers fired before the deadline", n)
	}
	select {
	case <-tm.C():
		t.Fatal("fired early")
	default:
	}
	if n := c.Advance(1); n != 1 {
		t.Fatalf("%d timers fired at the deadline", n)
	}
	if got := <-tm.C(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("fired with %v", got)
	}
	tm.Reset(time.Second)
	c.Advance(time.Second) // fires; nobody receives
	tm.Reset(time.Minute)  // the old value is dropped
	select {
	case <-tm.C():
		t.Fatal("a value of the earlier arming after Reset")
	default:
	}
	if got := c.Armed(); len(got) != 1 || !got[0].Equal(t0.Add(2*time.Second+time.Minute)) {
		t.Fatalf("armed %v", got)
	}
	tm.Stop()
	if n := c.Advance(time.Hour); n != 0 || len(c.Armed()) != 0 {
		t.Fatalf("a stopped timer fired (%d) or is armed (%v)", n, c.Armed())
	}
}

// An alarm set to a time not after now rings at once; a zero time
// disarms it and gives a nil channel.
func TestAlarm(t *testing.T) {
	c := New(t0)
	a := clock.NewAlarm(c)
	if ch := a.Set(time.Time{}); ch != nil {
		t.Fatal("a disarmed alarm has a channel")
	}
	ch := a.Set(t0)
	select {
	case <-ch:
	default:
		t.Fatal("an alarm set to now did not ring")
	}
	ch = a.Set(t0.Add(time.Second))
	c.Advance(time.Second - 1)
	select {
	case <-ch:
		t.Fatal("rang early")
	default:
	}
	c.Advance(1)
	<-ch
	a.Set(t0.Add(time.Hour))
	if a.Set(time.Time{}) != nil || len(c.Armed()) != 0 {
		t.Fatalf("Set(zero) left %v armed", c.Armed())
	}
}
