package autorecovery

import (
	"context"
	"sync"
	"time"
)

// TokenBucket is a byte-rate limiter. Pure: time is an input. Not safe for
// concurrent use (Throttle wraps it).
//
// Tokens accrue at Rate bytes/s up to Burst. Take(now, n) spends n bytes
// and returns how long the caller must wait before sending them; the debt
// is carried, so a request larger than Burst is allowed, just delayed.
type TokenBucket struct {
	Rate   float64 // bytes per second; <= 0 means unlimited
	Burst  float64 // bytes
	tokens float64
	last   time.Time
}

// NewTokenBucket returns a full bucket of rate bytes/s and burst bytes.
func NewTokenBucket(rate, burst float64) *TokenBucket {
	return &TokenBucket{Rate: rate, Burst: burst, tokens: burst}
}

// Take spends n bytes at now and returns the wait before they may go.
func (b *TokenBucket) Take(now time.Time, n int) time.Duration {
	if b.Rate <= 0 {
		return 0
	}
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(b.Burst, b.tokens+now.Sub(b.last).Seconds()*b.Rate)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.Rate * float64(time.Second))
}

// Throttle shares one TokenBucket between goroutines (every worker of a
// process). Safe for concurrent use.
type Throttle struct {
	mu sync.Mutex
	b  *TokenBucket
}

// NewThrottle limits to bytesPerSec (<= 0: unlimited) with a burst of a
// quarter second's worth (at least 1 MiB, so one large entry passes).
func NewThrottle(bytesPerSec int64) *Throttle {
	r := float64(bytesPerSec)
	return &Throttle{b: NewTokenBucket(r, max(r/4, 1<<20))}
}

// Wait blocks until n more bytes may be copied, or ctx ends.
func (t *Throttle) Wait(ctx context.Context, n int) error {
	t.mu.Lock()
	d := t.b.Take(time.Now(), n)
	t.mu.Unlock()
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
