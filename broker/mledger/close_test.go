package mledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// Close waits for background work (a ledger switch, a trim, a cursor
// flush) and the callback deliverer no longer than its context: a broker
// unloading a topic within a hand-off's deadline must not block past it.
// The work finishes on its own; a later Close sees it done. (A managed
// ledger failed already, so Close has nothing to write.)
func TestCloseWaitsForBackgroundNoLongerThanCtx(t *testing.T) {
	ml := &ManagedLedger{name: "t", log: slog.New(slog.NewTextHandler(io.Discard, nil)), deliverDone: make(chan struct{}),
		cursors: map[string]*Cursor{}}
	ml.cond = sync.NewCond(&ml.mu)
	ml.state, ml.err = stFailed, fmt.Errorf("%w: t: test", ErrFailed)
	ml.bg.Add(1) // background work that does not end by itself

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ml.Close(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close: %v, want the context's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting for background work 10 s after its 200 ms context ended")
	}
	// A second Close also ends with its context while the work runs…
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if err := ml.Close(ctx2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Close while the work runs: %v, want the context's error", err)
	}
	// …and returns once it has finished.
	ml.bg.Done()
	ctx3, cancel3 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel3()
	if err := ml.Close(ctx3); err != nil {
		t.Fatalf("Close after the work finished: %v", err)
	}
}
