package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// The auditor's loss detection and status do not wait for a scan, and a
// scan does not wait on a bookie that does not answer more than once.
//
// The auditor used to detect, scan and publish in one loop, so a scan held
// back both the detection of the next loss and the status: a scrub reads
// entries from every registered member of every completed fragment, and a
// bookie that is registered but does not answer (a power-cut host until
// its registration lease expires, a partitioned one for as long as the
// partition lasts) cost a read timeout per fragment it holds — the loop
// stood still for ledgers × timeout. Here a hook makes the scrub's reads
// from one bookie hang.

// stallRegion registers five bookies on three racks (b1 b2: r1, b3 b4:
// r2, b5: r3) and writes n closed ledgers of 10 entries, E=3 Qw=3 Qa=2,
// on (b1 or b2, b3, b5): rack r1 and b3 are in every one.
func stallRegion(t *testing.T, n int) (*cluster.Store, *cluster.BookieView) {
	t.Helper()
	s := testutil.Store(t, testutil.StartEtcd(t), "/stall")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	racks := map[string]string{"b1": "r1", "b2": "r1", "b3": "r2", "b4": "r2", "b5": "r3"}
	for id, rk := range racks {
		b, err := proto.Marshal(&metapb.BookieRegistration{Id: id, Addr: "127.0.0.1:1", Region: "stall", Rack: rk})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, "/bookies/writable/"+id, b); err != nil {
			t.Fatal(err)
		}
	}
	ref := func(id string) *metapb.BookieRef {
		return &metapb.BookieRef{Id: id, Addr: "127.0.0.1:1", Region: "stall", Rack: racks[id]}
	}
	for i := 1; i <= n; i++ {
		r1 := []string{"b1", "b2"}[i%2]
		m := &metapb.LedgerMetadata{LedgerId: int64(i), EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, State: metapb.LedgerState_CLOSED, LastEntryId: 9,
			Fragments: []*metapb.Fragment{{FirstEntryId: 0, Ensemble: []*metapb.BookieRef{ref(r1), ref("b3"), ref("b5")}}}}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, fmt.Sprintf("/ledgers/%020d", i), b); err != nil {
			t.Fatal(err)
		}
	}
	v := watch(t, s)
	testutil.Eventually(t, 10*time.Second, "5 bookies in the view", func() bool { return len(v.Bookies(false)) == 5 })
	return s, v
}

// A rack is lost while a scrub hangs on a bookie that does not answer
// (registered, so it is read). The status names the lost bookies within
// a few CheckIntervals, and the loss's markers are written: the loss
// pre-empts the scrub. Before, neither happened until the hung read
// returned.
func TestRackLossIsPublishedWhileAScrubHangsOnABookie(t *testing.T) {
	const ledgers = 4
	s, v := stallRegion(t, ledgers)
	cfg := testConfig(t, s, v, time.Hour)
	cfg.CheckInterval = 50 * time.Millisecond
	cfg.StatusInterval = 100 * time.Millisecond
	cfg.ScrubInterval = time.Millisecond // a scrub right after the first scan
	cfg.scrubReadTimeout = time.Hour     // only the scan's own context ends a hung read
	hung := make(chan struct{}, 1)
	cfg.testHookScrubRead = func(ctx context.Context, b *metapb.BookieRef, _, _ int64) (*bookiepb.ReadEntryResponse, error) {
		if b.Id != "b3" {
			return &bookiepb.ReadEntryResponse{Status: bookiepb.Status_OK}, nil
		}
		select {
		case hung <- struct{}{}:
		default:
		}
		<-ctx.Done() // b3 never answers
		return nil, ctx.Err()
	}
	a, err := NewAuditor(cfg, "auditor")
	if err != nil {
		t.Fatal(err)
	}
	run(t, a.Run)
	select {
	case <-hung:
	case <-time.After(30 * time.Second):
		t.Fatal("no scrub read from b3")
	}

	// Rack r1 goes: both registrations expire at once.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lostAt := time.Now()
	for _, id := range []string{"b1", "b2"} {
		if err := s.Delete(ctx, "/bookies/writable/"+id); err != nil {
			t.Fatal(err)
		}
	}
	// Bounds far above CheckInterval + StatusInterval (150 ms), far below
	// the hung read (for ever).
	testutil.Eventually(t, 10*time.Second, "the status names rack r1 lost", func() bool {
		st, err := ReadStatus(ctx, s)
		return err == nil && st.Auditor != nil && slices.Equal(st.Auditor.Lost, []string{"b1", "b2"})
	})
	published := time.Since(lostAt)
	testutil.Eventually(t, 10*time.Second, "a marker for every ledger on rack r1", func() bool {
		ms, err := ListMarkers(ctx, s)
		return err == nil && len(ms) == ledgers
	})
	t.Logf("rack r1 in the status %s after its registrations went, its %d markers %s after, while the scrub hung on b3",
		published.Round(time.Millisecond), ledgers, time.Since(lostAt).Round(time.Millisecond))
}

// A scrub asks a bookie that does not answer once per scan, not once per
// fragment it holds: each read ends at the read timeout (here the
// reader's own, 200 ms), and the bookie is skipped for the rest of the
// scan. Before, a scrub of 30 ledgers on it took 30 timeouts.
func TestScrubAsksAnUnansweringBookieOncePerScan(t *testing.T) {
	const ledgers = 30
	s, v := stallRegion(t, ledgers)
	cfg := testConfig(t, s, v, time.Hour)
	var mu sync.Mutex
	calls := map[string]int{}
	errTimeout := errors.New("read timeout")
	cfg.testHookScrubRead = func(ctx context.Context, b *metapb.BookieRef, _, _ int64) (*bookiepb.ReadEntryResponse, error) {
		mu.Lock()
		calls[b.Id]++
		mu.Unlock()
		if b.Id != "b3" {
			return &bookiepb.ReadEntryResponse{Status: bookiepb.Status_OK}, nil
		}
		select { // the ledger client's ReadTimeout ends a read to a bookie that does not answer
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
			return nil, errTimeout
		}
	}
	a, err := NewAuditor(cfg, "auditor")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	known := map[string]bool{}
	start := time.Now()
	if err := a.scan(ctx, nil, known, &episode{}, true); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if calls["b3"] != 1 {
		t.Errorf("the scrub asked b3, which does not answer, %d times in one scan (%s); want once", calls["b3"], took.Round(time.Millisecond))
	}
	if calls["b5"] < ledgers {
		t.Errorf("the scrub read b5 %d times, want at least once per ledger (%d): the others are still checked", calls["b5"], ledgers)
	}
	t.Logf("scrub of %d ledgers with b3 not answering: %s, reads %v", ledgers, took.Round(time.Millisecond), calls)
}
