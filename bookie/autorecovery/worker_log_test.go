package autorecovery

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/tools/testutil"
)

// A worker whose repairs all fail (here: no bookie is left to copy to)
// warns once per interval with the count it held back, not once per
// ledger per RetryBackoff: a region's worth of ledgers failing would
// flood the log and hide what explains it.
func TestWorkerRetryWarningsAreRateLimited(t *testing.T) {
	const ledgers = 20
	s, v := stallRegion(t, ledgers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 1; i <= ledgers; i++ {
		mk := Marker{LedgerID: int64(i), Lost: []string{"b3"}, Fragments: []int{0}}
		if _, err := s.Put(ctx, markerKey(mk.LedgerID), mk.encode()); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"b1", "b2", "b3", "b4", "b5"} {
		if err := s.Delete(ctx, "/bookies/writable/"+id); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "an empty view", func() bool { return len(v.Bookies(false)) == 0 })
	var logged syncBuffer
	cfg := testConfig(t, s, v, time.Hour)
	cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	cfg.RetryBackoff = time.Nanosecond // every pass retries every ledger
	w, err := NewWorker(cfg, "w", newLedgerClient(t, s, v, "stall"))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := s.GrantLease(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := w.pass(ctx, lease); err != nil {
			t.Fatal(err)
		}
	}
	if f := w.Stats().Failures; f != 3*ledgers {
		t.Fatalf("%d failures, want %d", f, 3*ledgers)
	}
	if n := strings.Count(logged.String(), "re-replication failed; will retry"); n != 1 {
		t.Errorf("%d retry warnings for %d failures in a few seconds, want 1:\n%s", n, 3*ledgers, logged.String())
	}
}
