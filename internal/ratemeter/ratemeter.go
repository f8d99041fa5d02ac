// Package ratemeter meters messages and bytes as the admin API's stats
// report them (the broker's topics, producers, subscriptions and
// consumers; the replication senders).
package ratemeter

import (
	"sync"
	"time"
)

// Meter counts messages and bytes and answers their rates as
// Pulsar's stats do: per second over the last complete stats interval
// (Pulsar: statsUpdateFrequencyInSecs, 60 s; here statsInterval, 10 s),
// or, before the first interval ended, since the first message. Lazy: no
// goroutine or timer, the interval rolls over when it is read or added
// to. Safe for concurrent use.
type Meter struct {
	mu sync.Mutex
	// cur counts since curStart; prev is the last complete interval.
	curStart            time.Time
	curMsgs, curBytes   int64
	prevMsgs, prevBytes int64
	hasPrev             bool
	// Totals since the meter was made (Pulsar's counters).
	msgs, bytes int64
}

// statsInterval is the interval rates are averaged over. 10 s: an
// operator sees a change within 10 to 20 s, and a burst of a few
// messages does not swing the rate (Pulsar's 60 s lags a minute).
const statsInterval = 10 * time.Second

// minRateSpan bounds the span a first interval's rate divides by, so a
// first message alone is not a burst of thousands a second.
const minRateSpan = time.Second

// Add counts msgs messages of bytes bytes at now.
func (m *Meter) Add(now time.Time, msgs, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollLocked(now)
	if m.curStart.IsZero() {
		m.curStart = now
	}
	m.curMsgs += msgs
	m.curBytes += bytes
	m.msgs += msgs
	m.bytes += bytes
}

// rollLocked closes the intervals that ended before now.
func (m *Meter) rollLocked(now time.Time) {
	if m.curStart.IsZero() {
		return
	}
	elapsed := now.Sub(m.curStart)
	if elapsed < statsInterval {
		return
	}
	if elapsed < 2*statsInterval {
		m.prevMsgs, m.prevBytes = m.curMsgs, m.curBytes
	} else {
		m.prevMsgs, m.prevBytes = 0, 0 // a whole interval went by without a message
	}
	m.hasPrev = true
	m.curMsgs, m.curBytes = 0, 0
	m.curStart = m.curStart.Add(elapsed / statsInterval * statsInterval)
}

// Rate returns messages and bytes per second at now.
func (m *Meter) Rate(now time.Time) (msgsPerSec, bytesPerSec float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollLocked(now)
	if m.hasPrev {
		s := statsInterval.Seconds()
		return float64(m.prevMsgs) / s, float64(m.prevBytes) / s
	}
	if m.curStart.IsZero() {
		return 0, 0
	}
	s := max(now.Sub(m.curStart), minRateSpan).Seconds()
	return float64(m.curMsgs) / s, float64(m.curBytes) / s
}

// Totals returns the messages and bytes counted since the meter was made.
func (m *Meter) Totals() (msgs, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.msgs, m.bytes
}
