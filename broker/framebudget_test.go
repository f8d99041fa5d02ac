package broker

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// The frame budget (issue 30, item 1) admits frames in arrival order
// while they fit, lets small frames through without counting them, and
// gives a waiter's place up when its connection closes.
func TestFrameBudget(t *testing.T) {
	var waits atomic.Int32
	b := newFrameBudget(10<<20, func() { waits.Add(1) })
	never := make(chan struct{})
	if err := b.acquire(6<<20, never); err != nil {
		t.Fatal(err)
	}
	if err := b.acquire(1<<10, never); err != nil || b.inUse() != 6<<20 {
		t.Fatalf("a small frame: %v, in use %d", err, b.inUse())
	}
	got := make(chan string, 3)
	wait := func(name string, n int, cancel chan struct{}, queued int) {
		go func() {
			if err := b.acquire(n, cancel); err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("%s: %v", name, err)
				}
				got <- name + " cancelled"
				return
			}
			got <- name
		}()
		deadline := time.Now().Add(5 * time.Second)
		for b.waiting() < queued && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	cancelA := make(chan struct{})
	wait("a", 5<<20, cancelA, 1) // does not fit: waits
	wait("b", 1<<20, never, 2)   // would fit, but a came first
	select {
	case g := <-got:
		t.Fatalf("%s admitted past the budget or out of order", g)
	case <-time.After(50 * time.Millisecond):
	}
	close(cancelA) // a's connection closes: b goes
	// Either may report first: a's acquire grants b before it returns, and
	// b's goroutine can send before a's does (the order they came in once
	// failed a full ./broker run, issue 32). That b waited for a is shown
	// above: nothing was admitted before a gave its place up.
	results := map[string]bool{<-got: true, <-got: true}
	if !results["a cancelled"] || !results["b"] {
		t.Fatalf("got %v, want a cancelled and b admitted", results)
	}
	b.release(6 << 20)
	b.release(1 << 20)
	if b.inUse() != 0 || waits.Load() != 2 {
		t.Fatalf("in use %d, waits %d; want 0, 2", b.inUse(), waits.Load())
	}
}
