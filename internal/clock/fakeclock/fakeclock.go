// Package fakeclock is a clock.Clock for tests: time moves only when the
// test advances it, and a timer fires exactly when the clock reaches its
// deadline, never before — so a test can tell a shell that sleeps until
// its core's wake-up time from one that polls, without sleeping.
package fakeclock

import (
	"slices"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/internal/clock"
)

// Clock is a manual clock. Safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer // every timer made, armed or not
}

// New returns a clock that reads now until advanced.
func New(now time.Time) *Clock { return &Clock{now: now} }

// Now implements clock.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements clock.Clock.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	t.armLocked(d)
	c.mu.Unlock()
	return t
}

// Advance moves the clock forward by d and fires, in deadline order,
// every armed timer whose deadline it reached. It returns how many fired.
func (c *Clock) Advance(d time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.fireLocked()
}

// Armed returns the deadlines of the armed timers, earliest first.
func (c *Clock) Armed() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Time
	for _, t := range c.timers {
		if t.armed {
			out = append(out, t.at)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

func (c *Clock) fireLocked() int {
	var due []*timer
	for _, t := range c.timers {
		if t.armed && !t.at.After(c.now) {
			due = append(due, t)
		}
	}
	slices.SortStableFunc(due, func(a, b *timer) int { return a.at.Compare(b.at) })
	for _, t := range due {
		t.armed = false
		select {
		case t.ch <- c.now:
		default:
		}
	}
	return len(due)
}

type timer struct {
	c     *Clock
	ch    chan time.Time
	at    time.Time
	armed bool
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Reset(d time.Duration) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.armLocked(d)
}

func (t *timer) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.armed = false
	t.drainLocked()
}

// armLocked arms t for now+d, dropping a value of an earlier arming not
// received yet; a deadline already reached fires at once.
func (t *timer) armLocked(d time.Duration) {
	t.drainLocked()
	t.at, t.armed = t.c.now.Add(d), true
	if d <= 0 {
		t.c.fireLocked()
	}
}

func (t *timer) drainLocked() {
	select {
	case <-t.ch:
	default:
	}
}
