package replication

import (
	"sync"
	"time"

	"github.com/meridian-mq/meridian/replicator"
)

// The namespaces' replication rate limits.

// nsLimiter is a namespace's replication rate limit towards one remote
// region, shared by the senders of all its topics on this broker.
type nsLimiter struct {
	mu   sync.Mutex
	rate int64
	tb   *replicator.TokenBucket
}

func (l *nsLimiter) Take(now time.Time, entries, bytes int) (bool, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tb == nil {
		return true, time.Time{}
	}
	return l.tb.Take(now, entries, bytes)
}

// replLimiter returns the limiter of (namespace, remote), set to rate
// bytes per second (0: none).
func (svc *Service) replLimiter(ns, remote string, rate int64) *nsLimiter {
	v, _ := svc.limiters.LoadOrStore(ns+"\x00"+remote, &nsLimiter{})
	l := v.(*nsLimiter)
	l.mu.Lock()
	defer l.mu.Unlock()
	if rate != l.rate {
		l.rate, l.tb = rate, nil
		if rate > 0 {
			l.tb = replicator.NewTokenBucket(replicator.RateLimit{BytesPerSecond: rate}, svc.clock.Now())
		}
	}
	return l
}
