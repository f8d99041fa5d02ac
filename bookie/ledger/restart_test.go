package ledger_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// steadyWriter adds to w continuously (inFlight adds outstanding, one new
// add every pace) and records the longest gap between two completions.
type steadyWriter struct {
	w    *ledger.Writer
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	acked  int64
	last   time.Time
	maxGap time.Duration
	gapEnd int64 // the entry that ended the longest gap
	err    error
	errAt  time.Time
}

func startSteadyWriter(w *ledger.Writer, inFlight int, pace time.Duration) *steadyWriter {
	s := &steadyWriter{w: w, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		sem := make(chan struct{}, inFlight)
		var wg sync.WaitGroup
		defer wg.Wait()
		for i := int64(0); ; i++ {
			select {
			case <-s.stop:
				return
			case sem <- struct{}{}:
			}
			if w.Err() != nil {
				<-sem
				return
			}
			wg.Add(1)
			w.AppendAsync(payloadOf(w.ID(), i), func(got int64, err error) {
				defer wg.Done()
				defer func() { <-sem }()
				now := time.Now()
				s.mu.Lock()
				defer s.mu.Unlock()
				if err != nil {
					if s.err == nil {
						s.err, s.errAt = err, now
					}
					return
				}
				if !s.last.IsZero() && now.Sub(s.last) > s.maxGap {
					s.maxGap, s.gapEnd = now.Sub(s.last), got
				}
				s.last = now
				s.acked++
			})
			time.Sleep(pace)
		}
	}()
	return s
}

func (s *steadyWriter) ackedN() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// waitAcked waits until n more adds completed than now (or the writer
// failed).
func (s *steadyWriter) waitAcked(t *testing.T, n int64, what string) {
	t.Helper()
	want := s.ackedN() + n
	testutil.Eventually(t, 90*time.Second, what, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.acked >= want || s.err != nil
	})
}

// finish stops adding and returns the longest gap (up to the failure, if
// the writer failed) and the writer's error.
func (s *steadyWriter) finish() (time.Duration, int64, error) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	gap := s.maxGap
	if s.err != nil && s.errAt.Sub(s.last) > gap {
		gap = s.errAt.Sub(s.last) // no completion from the last one to the failure
	}
	return gap, s.gapEnd, s.err
}

// Issue 28 §4 step 5: a rolling restart of bookies (kill -9 one, start it
// again, then the next) under a writer adding continuously. The writer
// excluded every bookie that failed within the last minute, and in a
// rolling restart the only spare is the bookie restarted just before: the
// change found no replacement and held every completion until it gave up.
// Now a restarted bookie is taken again, and completions wait only for
// the metadata compare-and-swap: the longest gap between two completions
// stays far below a second (bound 2 s for a loaded CI machine).
func TestBookieRestartDoesNotStallTheWriter(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r1", "r2", "r2")
	c := newClient(t, r, "r1")
	ctx := ctxT(t, 4*time.Minute)
	w, err := c.Create(ctx, opts(3, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	sw := startSteadyWriter(w, 16, 2*time.Millisecond)
	sw.waitAcked(t, 200, "200 adds before the restarts")
	for _, b := range r.Bookies {
		b.Kill() // kill -9, adds in flight
		sw.waitAcked(t, 50, "adds while "+b.ID+" is down")
		time.Sleep(300 * time.Millisecond)
		b.Restart()
		r.WaitRegistered(b.ID)
		sw.waitAcked(t, 300, "adds after "+b.ID+" restarted")
	}
	gap, at, err := sw.finish()
	m := w.Metadata().Meta
	t.Logf("rolling restart of %d bookies: %d adds, longest gap between two completions %v (ending at entry %d), %d fragments",
		len(r.Bookies), sw.ackedN(), gap.Round(time.Millisecond), at, len(m.Fragments))
	if err != nil {
		t.Fatalf("the writer failed during the rolling restart (longest gap %v): %v", gap.Round(time.Millisecond), err)
	}
	if gap >= 2*time.Second {
		t.Fatalf("the writer stalled for %v during the rolling restart (bound 2 s)", gap.Round(time.Millisecond))
	}
	if len(m.Fragments) < 2 {
		t.Fatalf("%d fragment(s): the restarts changed no ensemble", len(m.Fragments))
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Every acknowledged entry reads back.
	rd, err := c.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	n := sw.ackedN()
	if rd.LastEntry() != n-1 {
		t.Fatalf("closed at %d, %d adds acknowledged", rd.LastEntry(), n)
	}
	for next := int64(0); next < n; {
		got, err := rd.ReadRange(ctx, next, n-1, 0)
		if err != nil || len(got) == 0 {
			t.Fatalf("read from %d: %v", next, err)
		}
		for _, e := range got {
			if e.EntryID != next || !bytes.Equal(e.Payload, payloadOf(w.ID(), next)) {
				t.Fatalf("entry %d: wrong entry or bytes", next)
			}
			next++
		}
	}
}

// waitDirect waits until the bookie at addr holds entry e (read directly):
// an add completes on Qa acknowledgements, and the write to the rest of
// its write set may still be on its way.
func waitDirect(t *testing.T, addr, bookie string, ledgerID, e int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := readDirect(t, addr, ledgerID, e)
		if resp.Status == bookiepb.Status_OK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("entry %d is not on %s within 10 s: %v", e, bookie, resp.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Under the default (enforced) rack rule, a lone rack's bookie that dies
// leaves no replacement keeping two racks per write set: the writer takes
// a bookie that breaks the rule rather than stall, logs a warning and
// counts it (ledger.Stats, the broker's
// meridian_broker_ensemble_replacements_breaking_placement_total).
func TestReplacementBreaksTheRackRuleWhenNoBookieKeepsIt(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r2", "r2")
	var logs syncBuffer
	c := newClient(t, r, "r1", func(cfg *ledger.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		cfg.EnsembleChangeTimeout = 3 * time.Second
	})
	ctx := ctxT(t, 2*time.Minute)
	w, err := c.Create(ctx, opts(3, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	var lone *metapb.BookieRef // the r1 bookie: every ensemble needs it for two racks
	for _, b := range w.Metadata().LastFragment().Ensemble {
		if b.Rack == "r1" {
			lone = b
		}
	}
	if lone == nil {
		t.Fatalf("ensemble %v has no r1 bookie", w.Metadata().LastFragment().Ensemble)
	}
	for i := range int64(100) {
		if _, err := w.Append(ctx, payloadOf(w.ID(), i)); err != nil {
			t.Fatal(err)
		}
	}
	r.Bookie(lone.Id).Kill()
	killed := time.Now()
	// Adds go on at Qa meanwhile; the change commits once the failed
	// bookie was found not back (a probe of up to 500 ms).
	next := int64(100)
	deadline := time.Now().Add(30 * time.Second)
	for len(w.Metadata().Meta.Fragments) < 2 || next < 400 {
		if time.Now().After(deadline) {
			t.Fatalf("no ensemble change within 30 s of the lone r1 bookie's death (%d adds)", next)
		}
		if _, err := w.Append(ctx, payloadOf(w.ID(), next)); err != nil {
			t.Fatalf("add %d after the lone r1 bookie died: %v", next, err)
		}
		next++
	}
	total := next
	t.Logf("ensemble changed within %v of the kill; %d adds", time.Since(killed).Round(time.Millisecond), total)
	m := w.Metadata()
	last := m.LastFragment()
	if len(m.Meta.Fragments) != 2 {
		t.Fatalf("%d fragments, want 2 (one ensemble change)", len(m.Meta.Fragments))
	}
	for _, b := range last.Ensemble {
		if b.Rack != "r2" {
			t.Fatalf("new ensemble %v: want every member in r2 (no bookie left in r1)", last.Ensemble)
		}
	}
	if got := c.Stats().ReplacementsBreakingPlacement; got != 1 {
		t.Fatalf("ReplacementsBreakingPlacement %d, want 1", got)
	}
	if !strings.Contains(logs.String(), "breaks the placement rule") {
		t.Fatalf("no warning about the broken rule in the log:\n%s", logs.String())
	}
	// The new fragment holds its entries (the first 300) on their whole
	// write sets.
	addrs := map[string]string{}
	for _, b := range r.Bookies {
		addrs[b.ID] = b.Addr
	}
	for e := last.FirstEntryId; e < min(total, last.FirstEntryId+300); e++ {
		for _, p := range writeSet(e, 3, 3) {
			waitDirect(t, addrs[last.Ensemble[p].Id], last.Ensemble[p].Id, w.ID(), e)
		}
	}
}

// BookKeeper's delayEnsembleChange: with no replacement at all (3 bookies,
// E=3) the writer goes on while every add reaches Qa on the live members
// of the committed ensemble, and keeps retrying the change: the failed
// bookie, once restarted, takes its position again in a new fragment.
// Only when adds cannot reach Qa (two of three dead) do they fail, after
// EnsembleChangeTimeout.
func TestWriterGoesOnWithoutAReplacementWhileQaHolds(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	const changeTimeout = 2 * time.Second
	c := newClient(t, r, "r1", func(cfg *ledger.Config) { cfg.EnsembleChangeTimeout = changeTimeout })
	ctx := ctxT(t, 2*time.Minute)
	w, err := c.Create(ctx, opts(3, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	id := w.ID()
	ens := w.Metadata().LastFragment().Ensemble
	addrs := map[string]string{}
	for _, b := range r.Bookies {
		addrs[b.ID] = b.Addr
	}
	next := int64(0)
	add := func(what string) {
		t.Helper()
		if got, err := w.Append(ctx, payloadOf(id, next)); err != nil || got != next {
			t.Fatalf("add %d (%s): entry %d, %v", next, what, got, err)
		}
		next++
	}
	for range 50 {
		add("all bookies up")
	}

	// 1. One member dead, no other bookie: adds go on with Qa = 2.
	dead := r.Bookie(ens[0].Id)
	dead.Kill()
	from := next
	start := time.Now()
	for range 300 {
		add(dead.ID + " dead, no replacement")
	}
	took := time.Since(start)
	if n := len(w.Metadata().Meta.Fragments); n != 1 {
		t.Fatalf("%d fragments while no replacement exists, want 1", n)
	}
	for e := from; e < next; e++ {
		for _, p := range writeSet(e, 3, 3) {
			if ens[p].Id == dead.ID {
				continue
			}
			if resp := readDirect(t, addrs[ens[p].Id], id, e); resp.Status != bookiepb.Status_OK {
				t.Fatalf("entry %d, acknowledged with %s dead, is not on live member %s: %v", e, dead.ID, ens[p].Id, resp.Status)
			}
		}
	}
	t.Logf("300 adds with %s dead and no replacement: %v (change timeout %v)", dead.ID, took.Round(time.Millisecond), changeTimeout)

	// 2. It comes back: it takes its position again, in a new fragment
	// holding every later entry on all three.
	dead.Restart()
	r.WaitRegistered(dead.ID)
	deadline := time.Now().Add(30 * time.Second)
	for len(w.Metadata().Meta.Fragments) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted %s was not taken back within 30 s", dead.ID)
		}
		add(dead.ID + " restarted")
		time.Sleep(10 * time.Millisecond)
	}
	last := w.Metadata().LastFragment()
	for p, b := range last.Ensemble {
		if b.Id != ens[p].Id {
			t.Fatalf("new ensemble %v, want the same members %v", last.Ensemble, ens)
		}
	}
	for range 50 {
		add("after the restart")
	}
	for e := last.FirstEntryId; e < next; e++ {
		for _, p := range writeSet(e, 3, 3) {
			waitDirect(t, addrs[last.Ensemble[p].Id], last.Ensemble[p].Id, id, e)
		}
	}

	// 3. Two of three dead: Qa cannot be met; the add fails, and only
	// after EnsembleChangeTimeout.
	r.Bookie(ens[1].Id).Kill()
	r.Bookie(ens[2].Id).Kill()
	start = time.Now()
	_, err = w.Append(ctx, payloadOf(id, next))
	took = time.Since(start)
	if err == nil {
		t.Fatal("an add with 1 of 3 bookies alive (Qa 2) succeeded")
	}
	if !errors.Is(err, ledger.ErrNotEnoughBookies) {
		t.Fatalf("add with Qa out of reach: %v, want ErrNotEnoughBookies", err)
	}
	if took < changeTimeout || took > changeTimeout+15*time.Second {
		t.Fatalf("the add failed after %v, want just after EnsembleChangeTimeout %v", took, changeTimeout)
	}
	t.Logf("with Qa out of reach the add failed after %v: %v", took.Round(time.Millisecond), err)
}
