package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// runWriter keeps adding to w until it fails, recording acknowledged ids.
type runWriter struct {
	mu      sync.Mutex
	acked   map[int64]bool
	failErr error
	done    chan struct{}
}

func startWriting(w *ledger.Writer, inflight int) *runWriter {
	rw := &runWriter{acked: map[int64]bool{}, done: make(chan struct{})}
	go func() {
		defer close(rw.done)
		sem := make(chan struct{}, inflight)
		for i := int64(0); ; i++ {
			sem <- struct{}{}
			rw.mu.Lock()
			stop := rw.failErr != nil
			rw.mu.Unlock()
			if stop {
				return
			}
			w.AppendAsync(payloadOf(w.ID(), i), func(got int64, err error) {
				rw.mu.Lock()
				if err != nil {
					if rw.failErr == nil {
						rw.failErr = err
					}
				} else {
					rw.acked[got] = true
				}
				rw.mu.Unlock()
				<-sem
			})
		}
	}()
	return rw
}

func (rw *runWriter) ackedCount() int {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return len(rw.acked)
}

func (rw *runWriter) maxAcked() int64 {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	m := int64(-1)
	for e := range rw.acked {
		m = max(m, e)
	}
	return m
}

// checkRecovered asserts the recovered ledger holds every acknowledged
// entry intact.
func checkRecovered(t *testing.T, rd *ledger.Reader, acked map[int64]bool) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	for e := range acked {
		if e > rd.LastEntry() {
			t.Fatalf("acknowledged entry %d lost: recovery closed the ledger at %d", e, rd.LastEntry())
		}
		en, err := rd.Read(ctx, e)
		if err != nil {
			t.Fatalf("acknowledged entry %d: %v", e, err)
		}
		if !bytes.Equal(en.Payload, payloadOf(rd.Metadata().Meta.LedgerId, e)) {
			t.Fatalf("acknowledged entry %d: wrong payload", e)
		}
	}
}

// Test 3 of the storage issue: W1 keeps adding while W2 recovers the
// ledger. W1's later adds fail with "fenced"; the recovered ledger holds
// every entry W1 got an acknowledgement for; a second recovery gives the
// same last entry.
func TestFencingStopsOldWriter(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	c1 := newClient(t, r, "r1")
	c2 := newClient(t, r, "r2")
	ctx := ctxT(t, 2*time.Minute)
	w1, err := c1.Create(ctx, opts(3, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	rw := startWriting(w1, 16)
	testutil.Eventually(t, 30*time.Second, "500 acks", func() bool { return rw.ackedCount() >= 500 })

	rd, err := c2.Recover(ctx, w1.ID())
	if err != nil {
		t.Fatal(err)
	}
	<-rw.done
	if !errors.Is(rw.failErr, ledger.ErrFenced) {
		t.Fatalf("W1 after recovery: got %v, want ErrFenced", rw.failErr)
	}
	if _, err := w1.Append(ctx, []byte("late")); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("W1 add after fencing: got %v, want ErrFenced", err)
	}
	checkRecovered(t, rd, rw.acked)
	t.Logf("W1 acked up to %d; recovered last entry %d", rw.maxAcked(), rd.LastEntry())

	rd2, err := c1.Recover(ctx, w1.ID())
	if err != nil {
		t.Fatal(err)
	}
	if rd2.LastEntry() != rd.LastEntry() {
		t.Fatalf("second recovery closed at %d, first at %d", rd2.LastEntry(), rd.LastEntry())
	}
	if err := w1.Close(ctx); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("W1 close after recovery: got %v, want ErrFenced", err)
	}
}

// W1 works from stale metadata and cannot reach etcd at all: fencing on the
// bookies alone stops it.
func TestFencingWithoutMetadataAccess(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	ctx := ctxT(t, 2*time.Minute)
	// W1's own connection to etcd, closed once the ledger exists.
	s1, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{r.EtcdURL}, Prefix: testutil.RegionPrefix("east")})
	if err != nil {
		t.Fatal(err)
	}
	c1 := newClient(t, r, "r1", func(c *ledger.Config) { c.Store = s1 })
	w1, err := c1.Create(ctx, opts(3, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	rw := startWriting(w1, 16)
	testutil.Eventually(t, 30*time.Second, "300 acks", func() bool { return rw.ackedCount() >= 300 })
	s1.Close() // W1 can no longer read or change metadata

	c2 := newClient(t, r, "r2")
	rd, err := c2.Recover(ctx, w1.ID())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-rw.done:
	case <-time.After(30 * time.Second):
		t.Fatal("W1 kept going after recovery")
	}
	if !errors.Is(rw.failErr, ledger.ErrFenced) {
		t.Fatalf("W1: got %v, want ErrFenced", rw.failErr)
	}
	checkRecovered(t, rd, rw.acked)
}

// One bookie never receives the fence (it is paused through the recovery):
// the fence on the others is enough — W1 can never gather Qa=2 acks again.
func TestFencingWithOneBookieMissingTheFence(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	c1 := newClient(t, r, "r1", func(c *ledger.Config) { c.AddTimeout = 30 * time.Second })
	c2 := newClient(t, r, "r2", func(c *ledger.Config) { c.ReadTimeout = 2 * time.Second })
	ctx := ctxT(t, 2*time.Minute)
	w1, err := c1.Create(ctx, opts(3, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	rw := startWriting(w1, 16)
	testutil.Eventually(t, 30*time.Second, "300 acks", func() bool { return rw.ackedCount() >= 300 })

	paused := r.Bookie(w1.Metadata().LastFragment().Ensemble[2].Id)
	paused.Signal(syscall.SIGSTOP)
	paused.WaitStopped(t)
	rd, err := c2.Recover(ctx, w1.ID())
	if err != nil {
		paused.Signal(syscall.SIGCONT)
		t.Fatal(err)
	}
	// W1 keeps trying against the two fenced bookies and the paused one.
	time.Sleep(500 * time.Millisecond)
	paused.Signal(syscall.SIGCONT)
	select {
	case <-rw.done:
	case <-time.After(60 * time.Second):
		t.Fatal("W1 kept going after recovery")
	}
	if !errors.Is(rw.failErr, ledger.ErrFenced) {
		t.Fatalf("W1: got %v, want ErrFenced", rw.failErr)
	}
	if m := rw.maxAcked(); m > rd.LastEntry() {
		t.Fatalf("W1 got an ack for entry %d after recovery closed the ledger at %d", m, rd.LastEntry())
	}
	checkRecovered(t, rd, rw.acked)
	rd2, err := c1.Recover(context.Background(), w1.ID())
	if err != nil {
		t.Fatal(err)
	}
	if rd2.LastEntry() != rd.LastEntry() {
		t.Fatalf("second recovery closed at %d, first at %d", rd2.LastEntry(), rd.LastEntry())
	}
}
