// Package clock is the time source a shell sleeps on, injected so that
// tests drive it (package fakeclock) instead of sleeping: a shell steps
// its core with Now, and sleeps until the core's wake-up time on a Timer
// (an Alarm) or until an input arrives.
package clock

import "time"

// Clock tells the time and makes timers. Safe for concurrent use.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once after d (at once when
	// d <= 0).
	NewTimer(d time.Duration) Timer
}

// Timer is a time.Timer behind an interface: its channel receives the
// time once when it fires. After Reset or Stop returns, no value of an
// earlier arming is received (Go 1.23's timers).
type Timer interface {
	C() <-chan time.Time
	// Reset arms the timer to fire after d, replacing any arming.
	Reset(d time.Duration)
	// Stop disarms it.
	Stop()
}

// Real is the wall clock and the runtime's timers.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }

// Alarm is a timer set to absolute times, for a goroutine that sleeps
// until its core's next wake-up time or an input. Not safe for concurrent
// use: the goroutine that selects on it owns it.
type Alarm struct {
	c Clock
	t Timer
}

// NewAlarm returns a disarmed alarm on c.
func NewAlarm(c Clock) *Alarm { return &Alarm{c: c} }

// Set arms the alarm for at (at once when at is not after now) and
// returns the channel that receives when it rings; a zero at disarms it
// and returns nil, so a select on the result waits for the other inputs
// only.
func (a *Alarm) Set(at time.Time) <-chan time.Time {
	if at.IsZero() {
		a.Stop()
		return nil
	}
	d := at.Sub(a.c.Now())
	if a.t == nil {
		a.t = a.c.NewTimer(d)
	} else {
		a.t.Reset(d)
	}
	return a.t.C()
}

// Stop disarms the alarm.
func (a *Alarm) Stop() {
	if a.t != nil {
		a.t.Stop()
	}
}
