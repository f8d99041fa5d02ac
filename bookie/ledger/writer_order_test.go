package ledger_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Callbacks run in call order, refusals included: an oversize add refused
// after N accepted ones reports after their N completions, never before.
func TestRefusedAddReportsInOrder(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	c := newClient(t, r, "r1", func(c *ledger.Config) { c.MaxEntryBytes = 1024 })
	ctx := ctxT(t, time.Minute)
	w, err := c.Create(ctx, opts(3, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int64
	var wg sync.WaitGroup
	for i := int64(0); i < 200; i++ {
		wg.Add(1)
		w.AppendAsync(payloadOf(w.ID(), i), func(e int64, err error) {
			defer wg.Done()
			mu.Lock()
			order = append(order, e)
			mu.Unlock()
		})
	}
	wg.Add(1)
	var tooLarge error
	w.AppendAsync(make([]byte, 2048), func(e int64, err error) {
		defer wg.Done()
		mu.Lock()
		tooLarge = err
		order = append(order, -1)
		mu.Unlock()
	})
	wg.Wait()
	if !errors.Is(tooLarge, ledger.ErrTooLarge) {
		t.Fatalf("oversize add: %v", tooLarge)
	}
	for i, e := range order {
		if i < 200 && e != int64(i) {
			t.Fatalf("callback %d reported entry %d", i, e)
		}
	}
	if order[200] != -1 {
		t.Fatalf("the refusal was reported before earlier adds completed: %v", order[195:])
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
