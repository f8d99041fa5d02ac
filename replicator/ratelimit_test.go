package replicator

import (
	"testing"
	"time"
)

func TestTokenBucket(t *testing.T) {
	b := NewTokenBucket(RateLimit{EntriesPerSecond: 10, BytesPerSecond: 1000}, t0)
	// The burst: one second's worth.
	if ok, _ := b.Take(t0, 5, 500); !ok {
		t.Fatal("first take refused")
	}
	if ok, _ := b.Take(t0, 5, 500); !ok {
		t.Fatal("second take refused")
	}
	ok, at := b.Take(t0, 1, 100)
	if ok || !at.Equal(t0.Add(100*time.Millisecond)) {
		t.Fatalf("empty bucket: ok=%v retry at %v, want +100ms", ok, at.Sub(t0))
	}
	if ok, _ := b.Take(t0.Add(100*time.Millisecond), 1, 100); !ok {
		t.Fatal("refused after the refill")
	}
	// A batch larger than the burst waits for a full bucket, then goes
	// into debt.
	ok, at = b.Take(t0.Add(100*time.Millisecond), 1, 3000)
	if ok || !at.Equal(t0.Add(1100*time.Millisecond)) {
		t.Fatalf("oversized: ok=%v retry at %v, want +1.1s", ok, at.Sub(t0))
	}
	if ok, _ := b.Take(at, 1, 3000); !ok {
		t.Fatal("oversized refused with a full bucket")
	}
	ok, at2 := b.Take(at, 1, 1)
	if ok || at2.Sub(at) != 2*time.Second+time.Millisecond {
		t.Fatalf("after debt: ok=%v retry in %v, want 2.001s", ok, at2.Sub(at))
	}
	// Time going backwards does not refill.
	if ok, _ := b.Take(t0, 1, 1); ok {
		t.Fatal("refilled by an older time")
	}
	// 0 is unlimited.
	u := NewTokenBucket(RateLimit{}, t0)
	for range 1000 {
		if ok, _ := u.Take(t0, 100, 1<<20); !ok {
			t.Fatal("unlimited bucket refused")
		}
	}
}
