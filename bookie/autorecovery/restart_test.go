package autorecovery

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
)

var threeRacks = []string{"r1", "r2", "r3"}

// Issue 32: a region's bookies killed (kill -9) and started again at once,
// as when a whole region comes back, while the auditor runs. Each new
// process takes over the registration its previous run left (that run's
// lease outlives it by the TTL), so no bookie ever drops out of the
// registry, and none is declared lost. They used to wait the old leases
// out: every registration was deleted when its lease expired, ~10 s after
// the kill, before the new process wrote it again, and an auditor that
// looked in between saw every bookie of the region gone at once and
// declared them all lost (the rack rule: no delay).
func TestRegionRestartKeepsBookiesRegistered(t *testing.T) {
	r := testutil.StartRegion(t, "east", threeRacks...)
	v := watch(t, r.Store)
	c := newLedgerClient(t, r.Store, v, r.Name)
	writeLedgers(t, c, 2, 50, 256)
	cfg := testConfig(t, r.Store, v, time.Minute)
	a, err := NewAuditor(cfg, "auditor-1")
	if err != nil {
		t.Fatal(err)
	}
	run(t, a.Run)
	testutil.Eventually(t, 10*time.Second, "auditor elected", a.Leader)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, rev, err := r.Store.List(ctx, "/bookies/")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var deleted []string
	go func() {
		for evs := range r.Store.Watch(ctx, "/bookies/writable/", rev+1) {
			for _, ev := range evs {
				if ev.Deleted {
					mu.Lock()
					deleted = append(deleted, ev.KV.Key)
					mu.Unlock()
				}
			}
		}
	}()
	restarted := time.Now()
	for _, b := range r.Bookies {
		b.Restart()
	}
	// Past the previous runs' leases (DefaultRegistrationTTL after the
	// kill), with the auditor checking every CheckInterval.
	time.Sleep(cluster.DefaultRegistrationTTL + 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(deleted) > 0 {
		t.Fatalf("restarted bookies dropped out of the registry: %s deleted (within %v of the restart); the auditor declared lost: %v",
			strings.Join(deleted, ", "), time.Since(restarted).Round(time.Second), a.Lost())
	}
	if l := a.Lost(); len(l) != 0 {
		t.Fatalf("bookies declared lost after a restart: %v", l)
	}
	kvs, _, err := r.Store.List(ctx, markerPrefix)
	if err != nil || len(kvs) != 0 {
		t.Fatalf("%d under-replication markers (%v)", len(kvs), err)
	}
}

// Issue 32: markers that name bookies which came back with their data (as
// the false "all lost" of a restarted region left behind, in etcd, for
// good) are completed without copying: the replicas stay. The worker used
// to keep every named bookie out of the candidates for ever; in a region
// with no bookie to spare it retried each such ledger every RetryBackoff,
// forever, logging "0 usable (0 live)" each time.
func TestMarkerNamingReturnedBookiesCompletesWithoutCopying(t *testing.T) {
	r := testutil.StartRegion(t, "east", threeRacks...)
	v := watch(t, r.Store)
	c := newLedgerClient(t, r.Store, v, r.Name)
	ids := writeLedgers(t, c, 2, 50, 256)
	before := map[int64]string{}
	ctx := context.Background()
	for _, id := range ids {
		m := readMeta(t, r.Store, id)
		before[id] = m.String()
		var all []string
		for _, b := range m.Fragments[0].Ensemble {
			all = append(all, b.Id)
		}
		mk := Marker{LedgerID: id, Lost: all, Fragments: []int{0}}
		if _, err := r.Store.Put(ctx, markerKey(id), mk.encode()); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t, r.Store, v, time.Minute)
	w, err := NewWorker(cfg, "worker-1", newLedgerClient(t, r.Store, v, r.Name))
	if err != nil {
		t.Fatal(err)
	}
	run(t, w.Run)
	testutil.Eventually(t, 30*time.Second, "markers completed", func() bool {
		kvs, _, err := r.Store.List(ctx, markerPrefix)
		return err == nil && len(kvs) == 0
	})
	if s := w.Stats(); s.Entries != 0 || s.Fragments != 0 || s.Failures != 0 {
		t.Fatalf("worker stats %+v: want nothing copied and no failure", s)
	}
	for _, id := range ids {
		if got := readMeta(t, r.Store, id).String(); got != before[id] {
			t.Fatalf("ledger %d metadata changed:\n%s\n->\n%s", id, before[id], got)
		}
	}
}
