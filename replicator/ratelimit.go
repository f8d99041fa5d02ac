package replicator

import "time"

// Limiter rate-limits a Sender's sends. Take is called with the sender's
// current time (its last Tick) before each batch: ok means send now (the
// tokens are taken); otherwise retryAt is the earliest time another Take
// can succeed. A Limiter shared by several senders (a namespace's limit)
// must be safe for their concurrent use: the shell wraps a TokenBucket in
// a mutex.
type Limiter interface {
	Take(now time.Time, entries, bytes int) (ok bool, retryAt time.Time)
}

// RateLimit is a replication rate: a namespace policy. Each limit is off
// when 0.
type RateLimit struct {
	EntriesPerSecond int64
	BytesPerSecond   int64
}

// TokenBucket is a Limiter for one RateLimit, fed by the time passed to
// Take (no clock inside). The bucket holds one second's worth of tokens
// (the burst) and starts full. A batch goes when the bucket holds its cost;
// a batch larger than the burst goes when the bucket is full and leaves it
// in debt, so the average rate holds: at 1 MiB/s a 4 MiB batch waits for a
// full bucket, and the next one about 4 s more. Arithmetic is in integer
// nano-tokens, so equal inputs give equal answers. Not safe for concurrent
// use.
type TokenBucket struct {
	rate RateLimit
	// entries, bytes: tokens × 1e9 (a token per second is one nano-token
	// per nanosecond); negative is debt.
	entries, bytes int64
	last           time.Time
}

const nano = int64(time.Second)

// NewTokenBucket returns a full bucket for rate, as of now.
func NewTokenBucket(rate RateLimit, now time.Time) *TokenBucket {
	return &TokenBucket{rate: rate, entries: rate.EntriesPerSecond * nano, bytes: rate.BytesPerSecond * nano, last: now}
}

func (t *TokenBucket) refill(now time.Time) {
	d := now.Sub(t.last)
	if d <= 0 {
		return // time never runs backwards for the bucket
	}
	t.last = now
	d = min(d, 2*time.Second) // a full bucket after 1 s; more only overflows
	fill := func(tokens *int64, rate int64) {
		if rate > 0 {
			*tokens = min(rate*nano, *tokens+rate*int64(d))
		}
	}
	fill(&t.entries, t.rate.EntriesPerSecond)
	fill(&t.bytes, t.rate.BytesPerSecond)
}

// Take implements Limiter.
func (t *TokenBucket) Take(now time.Time, entries, bytes int) (bool, time.Time) {
	t.refill(now)
	var wait time.Duration
	check := func(tokens, rate int64, cost int) {
		if rate <= 0 {
			return
		}
		need := min(int64(cost)*nano, rate*nano)
		if deficit := need - tokens; deficit > 0 {
			wait = max(wait, time.Duration((deficit+rate-1)/rate))
		}
	}
	check(t.entries, t.rate.EntriesPerSecond, entries)
	check(t.bytes, t.rate.BytesPerSecond, bytes)
	if wait > 0 {
		return false, t.last.Add(wait)
	}
	if t.rate.EntriesPerSecond > 0 {
		t.entries -= int64(entries) * nano
	}
	if t.rate.BytesPerSecond > 0 {
		t.bytes -= int64(bytes) * nano
	}
	return true, time.Time{}
}
