// Package ratelog passes a repeated log message at most once per interval
// and counts what it held back, so one noisy condition (a retry loop, a
// peer sending bad frames, a dead bookie probed again and again) cannot
// flood a log and hide the line that explains an outage.
//
// A message is identified by a key the caller chooses: usually the message
// text plus what distinguishes one source from another (a bookie address,
// a client IP). The first message of a key is logged; later ones within
// Every of the last logged one are counted; the next one logged after that
// carries "suppressed", the count held back since. Nothing is logged from
// a timer: a condition that stops repeating leaves its last count unsaid,
// which is the price of having no goroutine.
//
// One Logger is safe for concurrent use. It keeps at most MaxKeys keys and
// forgets them all when that fills (a flood of distinct keys is logged,
// not held back: losing a count is better than growing without bound).
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultEvery is the interval of a Logger made with New: one line per
// key every 10 s is few enough to read and often enough that a condition
// still going on shows in any minute of a log.
const DefaultEvery = 10 * time.Second

// MaxKeys bounds the keys a Limiter remembers.
const MaxKeys = 4096

// Limiter decides, per key, whether a message passes now. It is pure
// logic with time as an input, so it is tested without sleeping.
type Limiter struct {
	// Every is the shortest interval between two messages of one key
	// that pass; 0 passes every message.
	Every time.Duration

	mu   sync.Mutex
	seen map[string]*seen
}

type seen struct {
	at         time.Time
	suppressed int
}

// Allow reports whether a message of key passes at now, and if it does,
// how many messages of key were held back since the last one that passed.
func (l *Limiter) Allow(key string, now time.Time) (pass bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]*seen{}
	}
	s := l.seen[key]
	if s != nil && now.Sub(s.at) < l.Every {
		s.suppressed++
		return false, 0
	}
	if s == nil {
		if len(l.seen) >= MaxKeys {
			clear(l.seen)
		}
		s = &seen{}
		l.seen[key] = s
	}
	suppressed, s.suppressed, s.at = s.suppressed, 0, now
	return true, suppressed
}

// Logger is a *slog.Logger whose keyed calls are rate-limited.
type Logger struct {
	L   *slog.Logger
	lim Limiter
	now func() time.Time
}

// New returns a Logger that passes each key at most once per every
// (DefaultEvery when every is 0).
func New(l *slog.Logger, every time.Duration) *Logger {
	if every == 0 {
		every = DefaultEvery
	}
	return &Logger{L: l, lim: Limiter{Every: every}, now: time.Now}
}

// Log logs msg at level with args unless a message of key passed within
// the interval; a message that passes after some were held back carries
// "suppressed", their count.
func (r *Logger) Log(level slog.Level, key, msg string, args ...any) {
	if r == nil || r.L == nil || !r.L.Enabled(context.Background(), level) {
		return
	}
	pass, suppressed := r.lim.Allow(key, r.now())
	if !pass {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	r.L.Log(context.Background(), level, msg, args...)
}

// Warn is Log at slog.LevelWarn with msg as its key.
func (r *Logger) Warn(msg string, args ...any) { r.Log(slog.LevelWarn, msg, msg, args...) }

// Info is Log at slog.LevelInfo with msg as its key.
func (r *Logger) Info(msg string, args ...any) { r.Log(slog.LevelInfo, msg, msg, args...) }

// Error is Log at slog.LevelError with msg as its key.
func (r *Logger) Error(msg string, args ...any) { r.Log(slog.LevelError, msg, msg, args...) }

// Keys returns how many keys the Limiter remembers.
func (l *Limiter) Keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}
