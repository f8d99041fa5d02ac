package ratelog

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLimiterPassesOncePerIntervalAndCountsTheRest(t *testing.T) {
	l := Limiter{Every: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	type step struct {
		key        string
		at         time.Duration
		pass       bool
		suppressed int
	}
	for i, s := range []step{
		{"a", 0, true, 0},
		{"a", time.Second, false, 0},
		{"b", time.Second, true, 0}, // keys are independent
		{"a", 9 * time.Second, false, 0},
		{"a", 10 * time.Second, true, 2}, // the two held back
		{"a", 11 * time.Second, false, 0},
		{"a", 30 * time.Second, true, 1},
		{"a", 45 * time.Second, true, 0}, // nothing held back since
	} {
		pass, n := l.Allow(s.key, t0.Add(s.at))
		if pass != s.pass || n != s.suppressed {
			t.Fatalf("step %d (%s at %v): got pass=%v suppressed=%d, want %v %d", i, s.key, s.at, pass, n, s.pass, s.suppressed)
		}
	}
}

func TestLimiterZeroIntervalPassesEverything(t *testing.T) {
	var l Limiter
	now := time.Unix(0, 0)
	for i := 0; i < 3; i++ {
		if pass, n := l.Allow("k", now); !pass || n != 0 {
			t.Fatalf("message %d: pass=%v suppressed=%d", i, pass, n)
		}
	}
}

func TestLimiterForgetsKeysWhenFull(t *testing.T) {
	l := Limiter{Every: time.Hour}
	now := time.Unix(0, 0)
	for i := 0; i < MaxKeys; i++ {
		l.Allow(fmt.Sprint(i), now)
	}
	if pass, _ := l.Allow("0", now); pass {
		t.Fatal("key 0 passed again within the interval before the table filled")
	}
	l.Allow("new", now) // the table is full: forgotten, then "new" kept
	if len(l.seen) != 1 {
		t.Fatalf("%d keys kept after the table filled, want 1", len(l.seen))
	}
	if pass, _ := l.Allow("0", now); !pass {
		t.Fatal("key 0 still held back after the table was cleared")
	}
}

func TestLoggerWritesSuppressedCount(t *testing.T) {
	var buf bytes.Buffer
	r := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute)
	now := time.Unix(0, 0)
	r.now = func() time.Time { return now }
	for i := 0; i < 5; i++ {
		r.Warn("bookie unreachable", "bookie", "b1")
	}
	now = now.Add(time.Minute)
	r.Warn("bookie unreachable", "bookie", "b1")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines logged, want 2:\n%s", len(lines), buf.String())
	}
	if strings.Contains(lines[0], "suppressed") || !strings.Contains(lines[1], "suppressed=4") {
		t.Fatalf("want the second line to carry suppressed=4:\n%s", buf.String())
	}
}

func TestLoggerBelowLevelCountsNothing(t *testing.T) {
	var buf bytes.Buffer
	r := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})), time.Minute)
	r.Info("chatty")
	r.Warn("chatty")
	if !strings.Contains(buf.String(), "msg=chatty") || strings.Contains(buf.String(), "suppressed") {
		t.Fatalf("a message below the level counted against its key:\n%s", buf.String())
	}
}
