package autorecovery

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/digest"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// The integration tests run real etcd and `meridian bookie` processes, five
// bookies on three racks, with the auditor and workers in process.

var fiveOnThree = []string{"r1", "r1", "r2", "r2", "r3"}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

func watch(t *testing.T, s *cluster.Store) *cluster.BookieView {
	t.Helper()
	v, err := cluster.WatchBookies(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

func newLedgerClient(t *testing.T, s *cluster.Store, v *cluster.BookieView, region string) *ledger.Client {
	t.Helper()
	c, err := ledger.New(ledger.Config{Store: s, Bookies: ledger.ViewSource{View: v}, Region: region, AddTimeout: 3 * time.Second, ReadTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testConfig(t *testing.T, s *cluster.Store, v *cluster.BookieView, delay time.Duration) Config {
	cfg := DefaultConfig()
	cfg.Store, cfg.Bookies = s, v
	cfg.LostBookieDelay = delay
	cfg.CheckInterval = 250 * time.Millisecond
	cfg.ScrubInterval = time.Hour
	cfg.ElectionTTL = 2 * time.Second
	cfg.LockTTL = 2 * time.Second
	cfg.PollInterval = 250 * time.Millisecond
	cfg.RetryBackoff = time.Second
	cfg.Logger = testLogger(t)
	return cfg
}

// run starts f in a goroutine until the returned stop is called (or the
// test ends).
func run(t *testing.T, f func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func payload(id, e int64, size int) []byte {
	p := bytes.Repeat([]byte{byte(e)}, size)
	copy(p, fmt.Sprintf("ledger %d entry %d|", id, e))
	return p
}

// writeLedgers writes n closed ledgers of entries entries of size bytes,
// E=3 Qw=3 Qa=2 under the default rack-aware policy.
func writeLedgers(t *testing.T, c *ledger.Client, n, entries, size int) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids []int64
	for range n {
		w, err := c.Create(ctx, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Placement: rack.DefaultPolicy()})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		for e := range entries {
			wg.Add(1)
			w.AppendAsync(payload(w.ID(), int64(e), size), func(_ int64, err error) {
				defer wg.Done()
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, w.ID())
	}
	return ids
}

func readMeta(t *testing.T, s *cluster.Store, id int64) *metapb.LedgerMetadata {
	t.Helper()
	m, err := ledger.ReadMetadata(context.Background(), s, id)
	if err != nil {
		t.Fatal(err)
	}
	return m.Meta
}

func holds(m *metapb.LedgerMetadata, bookieID string) bool {
	for _, f := range m.Fragments {
		for _, b := range f.Ensemble {
			if b.Id == bookieID {
				return true
			}
		}
	}
	return false
}

// readDirect reads an entry from one bookie by address, bypassing the
// ledger client: proof that this replica itself holds it.
func readDirect(t *testing.T, addr string, ledgerID, entryID int64) *bookiepb.ReadEntryResponse {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := bookiepb.NewBookieClient(cc).ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: ledgerID, EntryId: entryID})
	if err != nil {
		t.Fatalf("direct read %d/%d from %s: %v", ledgerID, entryID, addr, err)
	}
	return resp
}

// checkFullyReplicated: every fragment of the closed ledger is on Qw live,
// distinct bookies within the rack rule, and every entry reads back intact
// from every replica of its write set.
func checkFullyReplicated(t *testing.T, r *testutil.Region, v *cluster.BookieView, id int64, size int) {
	t.Helper()
	m := readMeta(t, r.Store, id)
	if m.State != metapb.LedgerState_CLOSED {
		t.Fatalf("ledger %d is %s", id, m.State)
	}
	e, qw := int(m.EnsembleSize), int(m.WriteQuorum)
	for fi, f := range m.Fragments {
		ens := make([]rack.Bookie, len(f.Ensemble))
		seen := map[string]bool{}
		for i, b := range f.Ensemble {
			if _, ok := v.Lookup(b.Id); !ok {
				t.Fatalf("ledger %d fragment %d: member %s is not a live bookie", id, fi, b.Id)
			}
			if seen[b.Id] {
				t.Fatalf("ledger %d fragment %d: %s twice", id, fi, b.Id)
			}
			seen[b.Id] = true
			ens[i] = ledger.RackBookie(b)
		}
		if a := rack.Check(ledger.PolicyOf(m), ens, qw, int(m.AckQuorum)); a != rack.AdherenceStrict {
			t.Fatalf("ledger %d fragment %d: placement %s: %v", id, fi, a, ens)
		}
		last, _ := ledger.FragmentLastEntry(m, fi)
		for en := f.FirstEntryId; en <= last; en++ {
			want := payload(id, en, size)
			for _, p := range ledger.WriteSet(en, e, qw) {
				b := f.Ensemble[p]
				resp := readDirect(t, b.Addr, id, en)
				if resp.Status != bookiepb.Status_OK {
					t.Fatalf("ledger %d entry %d on %s: %s %s", id, en, b.Id, resp.Status, resp.Message)
				}
				if digest.Entry(id, en, resp.Lac, resp.Payload) != resp.Digest || !bytes.Equal(resp.Payload, want) {
					t.Fatalf("ledger %d entry %d on %s: wrong content", id, en, b.Id)
				}
			}
		}
	}
}

// Issue test (1): 5 bookies on 3 racks, E=3 Qw=3 Qa=2, several ledgers;
// kill -9 one bookie and keep it dead: within lostBookieRecoveryDelay +
// copy time every fragment is back at Qw replicas on live bookies, the rack
// rule holds, every entry reads back intact from each replica. Two workers
// run, and no ledger is copied by both. An open ledger whose writer is
// alive and idle is not fenced.
func TestLostBookieIsReReplicated(t *testing.T) {
	t.Parallel()
	const (
		nLedgers = 6
		entries  = 300
		size     = 1024
		delay    = 3 * time.Second
	)
	r := testutil.StartRegion(t, "east", fiveOnThree...)
	v := watch(t, r.Store)
	c := newLedgerClient(t, r.Store, v, r.Name)
	ids := writeLedgers(t, c, nLedgers, entries, size)

	// An open ledger with an idle, live writer.
	ctx := context.Background()
	ow, err := c.Create(ctx, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for e := range 10 {
		if _, err := ow.Append(ctx, payload(ow.ID(), int64(e), size)); err != nil {
			t.Fatal(err)
		}
	}

	victim := readMeta(t, r.Store, ids[0]).Fragments[0].Ensemble[0].Id
	var affected []int64
	for _, id := range ids {
		if holds(readMeta(t, r.Store, id), victim) {
			affected = append(affected, id)
		}
	}

	cfg := testConfig(t, r.Store, v, delay)
	var copiers sync.Map // ledger id -> worker id
	cfg.testHookCopied = func(w *Worker, lid, _ int64) {
		if prev, loaded := copiers.LoadOrStore(lid, w.ID()); loaded && prev != w.ID() {
			t.Errorf("ledger %d copied by both %s and %s", lid, prev, w.ID())
		}
	}
	a, err := NewAuditor(cfg, "auditor-1")
	if err != nil {
		t.Fatal(err)
	}
	run(t, a.Run)
	var workers []*Worker
	for i := range 2 {
		w, err := NewWorker(cfg, fmt.Sprintf("worker-%d", i+1), newLedgerClient(t, r.Store, v, r.Name))
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
		run(t, w.Run)
	}
	testutil.Eventually(t, 10*time.Second, "auditor elected", a.Leader)

	t.Logf("killing %s (in %d of %d closed ledgers)", victim, len(affected), nLedgers)
	killed := time.Now()
	r.Bookie(victim).Kill()
	var unregistered time.Time
	testutil.Eventually(t, 30*time.Second, victim+" unregistered", func() bool {
		_, ok := v.Lookup(victim)
		return !ok
	})
	unregistered = time.Now()
	testutil.Eventually(t, 60*time.Second, "every closed ledger off "+victim, func() bool {
		for _, id := range ids {
			if holds(readMeta(t, r.Store, id), victim) {
				return false
			}
		}
		return true
	})
	repaired := time.Now()
	var copied, copiedBytes int64
	for _, w := range workers {
		s := w.Stats()
		copied += s.Entries
		copiedBytes += s.Bytes
	}
	t.Logf("re-replicated %d entries (%d KiB) of %d ledgers: lease expiry %s, then delay %s + audit + copy %s (copy alone %s); total from kill %s",
		copied, copiedBytes>>10, len(affected), unregistered.Sub(killed).Round(time.Millisecond), delay,
		repaired.Sub(unregistered).Round(time.Millisecond), (repaired.Sub(unregistered) - delay).Round(time.Millisecond),
		repaired.Sub(killed).Round(time.Millisecond))
	if want := int64(len(affected) * entries); copied < want {
		t.Errorf("copied %d entries, want at least %d (every entry of an E=Qw=3 ledger is on every member)", copied, want)
	}
	if repaired.Sub(unregistered) > delay+20*time.Second {
		t.Errorf("repair took %s after the registration expired", repaired.Sub(unregistered))
	}
	for _, id := range ids {
		checkFullyReplicated(t, r, v, id, size)
	}

	// The idle open ledger: untouched, not fenced: its writer still appends.
	om := readMeta(t, r.Store, ow.ID())
	if om.State != metapb.LedgerState_OPEN {
		t.Fatalf("open ledger %d moved to %s", ow.ID(), om.State)
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := ow.Append(actx, payload(ow.ID(), 10, size)); err != nil {
		t.Fatalf("idle writer of open ledger %d cannot append after auto-recovery: %v", ow.ID(), err)
	}
	if err := ow.Close(actx); err != nil {
		t.Fatal(err)
	}
}

// Issue test (2): a bookie killed and restarted within the delay triggers
// no copy.
func TestRestartWithinDelayCopiesNothing(t *testing.T) {
	t.Parallel()
	const delay = 8 * time.Second
	r := testutil.StartRegion(t, "west", fiveOnThree...)
	v := watch(t, r.Store)
	c := newLedgerClient(t, r.Store, v, r.Name)
	ids := writeLedgers(t, c, 3, 100, 512)
	victim := readMeta(t, r.Store, ids[0]).Fragments[0].Ensemble[0].Id
	before := map[int64]string{}
	for _, id := range ids {
		before[id] = readMeta(t, r.Store, id).String()
	}

	cfg := testConfig(t, r.Store, v, delay)
	a, err := NewAuditor(cfg, "auditor-1")
	if err != nil {
		t.Fatal(err)
	}
	run(t, a.Run)
	w, err := NewWorker(cfg, "worker-1", newLedgerClient(t, r.Store, v, r.Name))
	if err != nil {
		t.Fatal(err)
	}
	run(t, w.Run)
	testutil.Eventually(t, 10*time.Second, "auditor elected", a.Leader)

	b := r.Bookie(victim)
	b.Kill()
	// Wait for the registration to expire: the auditor now sees it gone.
	testutil.Eventually(t, 30*time.Second, victim+" unregistered", func() bool {
		_, ok := v.Lookup(victim)
		return !ok
	})
	gone := time.Now()
	time.Sleep(delay / 2) // down for half the delay, then back
	b.Restart()
	r.WaitRegistered(victim)
	back := time.Since(gone)
	t.Logf("%s was unregistered for %s (delay %s)", victim, back.Round(time.Millisecond), delay)
	if back >= delay {
		t.Fatalf("restart took %s, longer than the delay: test is void", back)
	}
	time.Sleep(delay - back + 2*time.Second)
	if l := a.Lost(); len(l) != 0 {
		t.Fatalf("bookies declared lost: %v", l)
	}
	kvs, _, err := r.Store.List(context.Background(), markerPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != 0 {
		t.Fatalf("%d under-replication markers written", len(kvs))
	}
	if s := w.Stats(); s.Entries != 0 || s.Fragments != 0 {
		t.Fatalf("worker copied: %+v", s)
	}
	for _, id := range ids {
		if got := readMeta(t, r.Store, id).String(); got != before[id] {
			t.Fatalf("ledger %d metadata changed:\n%s\n->\n%s", id, before[id], got)
		}
	}
}

// Issue test (3): a worker killed mid-copy leaves the fragment to be
// finished by another, with no half-swapped metadata; the two never copy at
// the same time (the second waits for the first's claim to expire).
func TestWorkerKilledMidCopyIsFinishedByAnother(t *testing.T) {
	t.Parallel()
	const entries, size = 400, 1024
	r := testutil.StartRegion(t, "north", fiveOnThree...)
	v := watch(t, r.Store)
	c := newLedgerClient(t, r.Store, v, r.Name)
	ids := writeLedgers(t, c, 1, entries, size)
	id := ids[0]
	victim := readMeta(t, r.Store, id).Fragments[0].Ensemble[1].Id

	// Each worker gets its own etcd connection, so "killing" one (closing
	// its connection, no clean shutdown) lets its lease expire on its own.
	storeA := testutil.Store(t, r.EtcdURL, testutil.RegionPrefix(r.Name))
	storeB := testutil.Store(t, r.EtcdURL, testutil.RegionPrefix(r.Name))
	cfg := testConfig(t, r.Store, v, 0)
	a, err := NewAuditor(cfg, "auditor-1")
	if err != nil {
		t.Fatal(err)
	}
	run(t, a.Run)

	var mu sync.Mutex
	var killedAt time.Time
	var metaAtKill *metapb.LedgerMetadata
	active := map[string]bool{}
	var stopA func()
	cfgA := cfg
	cfgA.Store = storeA
	cfgA.ThrottleBytesPerSec = 200 << 10 // slow, so the kill lands mid-copy
	killOnce := sync.Once{}
	cfgA.testHookCopied = func(w *Worker, lid, e int64) {
		mu.Lock()
		defer mu.Unlock()
		if !killedAt.IsZero() {
			return
		}
		active["A"] = true
		if e >= entries/4 {
			killOnce.Do(func() {
				storeA.Close()
				killedAt = time.Now()
				go stopA()
			})
		}
	}
	wA, err := NewWorker(cfgA, "A", newLedgerClient(t, storeA, v, r.Name))
	if err != nil {
		t.Fatal(err)
	}
	stopA = run(t, wA.Run)

	r.Bookie(victim).Kill()
	testutil.Eventually(t, 40*time.Second, "worker A killed mid-copy", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !killedAt.IsZero()
	})
	metaAtKill = readMeta(t, r.Store, id)
	if !holds(metaAtKill, victim) {
		t.Fatalf("metadata swapped before the copy finished: %v", metaAtKill)
	}

	cfgB := cfg
	cfgB.Store = storeB
	cfgB.testHookCopied = func(w *Worker, lid, e int64) {
		mu.Lock()
		defer mu.Unlock()
		if since := time.Since(killedAt); since < time.Second {
			t.Errorf("B copied %s after A was killed, before A's claim could expire", since)
		}
	}
	wB, err := NewWorker(cfgB, "B", newLedgerClient(t, storeB, v, r.Name))
	if err != nil {
		t.Fatal(err)
	}
	run(t, wB.Run)
	testutil.Eventually(t, 40*time.Second, "B finished the ledger", func() bool {
		return !holds(readMeta(t, r.Store, id), victim)
	})
	t.Logf("A copied %d entries before it was killed; B copied %d and swapped %d positions; finished %s after the kill",
		wA.Stats().Entries, wB.Stats().Entries, wB.Stats().Fragments, time.Since(killedAt).Round(time.Millisecond))
	if s := wA.Stats(); s.Fragments != 0 || s.Ledgers != 0 {
		t.Fatalf("killed worker A swapped metadata: %+v", s)
	}
	checkFullyReplicated(t, r, v, id, size)
	testutil.Eventually(t, 10*time.Second, "marker deleted", func() bool {
		kvs, _, err := r.Store.List(context.Background(), markerPrefix)
		return err == nil && len(kvs) == 0
	})
}

// The scrub finds fragments below their write quorum although every member
// is registered: a bookie whose disk was wiped comes back (new instance,
// its old ledgers in limbo) within the delay, so no loss is declared; the
// scrub's sample reads find its replicas empty and a worker copies the
// entries back onto it. The ensembles do not change.
func TestScrubRefillsAWipedBookie(t *testing.T) {
	const entries, size = 200, 512
	r := testutil.StartRegion(t, "wipe", fiveOnThree...)
	v := watch(t, r.Store)
	c := newLedgerClient(t, r.Store, v, r.Name)
	ids := writeLedgers(t, c, 3, entries, size)
	victim := readMeta(t, r.Store, ids[0]).Fragments[0].Ensemble[0].Id
	before := map[int64]*metapb.LedgerMetadata{}
	for _, id := range ids {
		before[id] = readMeta(t, r.Store, id)
	}
	b := r.Bookie(victim)
	b.Kill()
	if err := os.RemoveAll(b.DataDir); err != nil {
		t.Fatal(err)
	}
	b.Restart()
	r.WaitRegistered(victim)
	if resp := readDirect(t, b.Addr, ids[0], 0); resp.Status == bookiepb.Status_OK {
		t.Fatal("the wiped bookie still serves the entry: test is void")
	}

	cfg := testConfig(t, r.Store, v, time.Minute)
	cfg.ScrubInterval = 2 * time.Second
	cfg.ScrubReader = c
	a, err := NewAuditor(cfg, "auditor")
	if err != nil {
		t.Fatal(err)
	}
	run(t, a.Run)
	w, err := NewWorker(cfg, "worker", newLedgerClient(t, r.Store, v, r.Name))
	if err != nil {
		t.Fatal(err)
	}
	run(t, w.Run)
	testutil.Eventually(t, 60*time.Second, "the wiped replicas refilled", func() bool {
		for _, id := range ids {
			m := readMeta(t, r.Store, id)
			if !holds(m, victim) {
				continue
			}
			for p, bk := range m.Fragments[0].Ensemble {
				if bk.Id != victim {
					continue
				}
				for _, e := range SampleEntries(m, 0, p) {
					if readDirect(t, b.Addr, id, e).Status != bookiepb.Status_OK {
						return false
					}
				}
			}
		}
		ms, err := ListMarkers(context.Background(), r.Store)
		return err == nil && len(ms) == 0
	})
	if l := a.Lost(); len(l) != 0 {
		t.Fatalf("bookies declared lost: %v", l)
	}
	for _, id := range ids {
		checkFullyReplicated(t, r, v, id, size)
		if now := readMeta(t, r.Store, id); !proto.Equal(now, before[id]) {
			t.Fatalf("ledger %d metadata changed:\n%v\n->\n%v", id, before[id], now)
		}
	}
	t.Logf("worker: %+v", w.Stats())
}
