package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/tools/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestStoreCreateCASDelete(t *testing.T) {
	url := testutil.StartEtcd(t)
	s := testutil.Store(t, url, "/t1")
	ctx := context.Background()

	rev, err := s.Create(ctx, "/k", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/k", []byte("b")); !errors.Is(err, cluster.ErrExists) {
		t.Fatalf("second create: got %v, want ErrExists", err)
	}
	rev2, err := s.CAS(ctx, "/k", []byte("c"), rev)
	if err != nil {
		t.Fatal(err)
	}
	// A CAS from the old revision loses.
	if _, err := s.CAS(ctx, "/k", []byte("d"), rev); !errors.Is(err, cluster.ErrVersionMismatch) {
		t.Fatalf("stale cas: got %v, want ErrVersionMismatch", err)
	}
	kv, err := s.Get(ctx, "/k")
	if err != nil || string(kv.Value) != "c" || kv.ModRevision != rev2 {
		t.Fatalf("get: %+v %v", kv, err)
	}
	if _, err := s.CAS(ctx, "/missing", []byte("x"), 1); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("cas on missing key: got %v, want ErrNotFound", err)
	}
	if err := s.DeleteCAS(ctx, "/k", rev); !errors.Is(err, cluster.ErrVersionMismatch) {
		t.Fatalf("stale delete: %v", err)
	}
	if err := s.DeleteCAS(ctx, "/k", rev2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "/k"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	// Prefixes isolate stores sharing one etcd.
	other := testutil.Store(t, url, "/t2")
	if _, err := other.Put(ctx, "/k", []byte("z")); err != nil {
		t.Fatal(err)
	}
	kvs, _, err := s.List(ctx, "/")
	if err != nil || len(kvs) != 0 {
		t.Fatalf("list of /t1 sees %d keys (%v)", len(kvs), err)
	}
}

func TestIDAllocatorUniqueIncreasingAcrossClients(t *testing.T) {
	url := testutil.StartEtcd(t)
	a := cluster.NewIDAllocator(testutil.Store(t, url, "/r"))
	b := cluster.NewIDAllocator(testutil.Store(t, url, "/r"))
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for _, al := range []*cluster.IDAllocator{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for range 100 {
				id, err := al.Next(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if id <= last {
					t.Errorf("id %d not above previous %d", id, last)
				}
				last = id
				mu.Lock()
				if seen[id] {
					t.Errorf("id %d handed out twice", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	hw, err := a.HighWater(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id := range seen {
		if id > hw {
			t.Fatalf("high water %d below allocated id %d", hw, id)
		}
	}
}

func TestBookieRegistryLeaseAndView(t *testing.T) {
	url := testutil.StartEtcd(t)
	s := testutil.Store(t, url, "/east")
	ctx := context.Background()
	view, err := cluster.WatchBookies(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()

	r1 := cluster.NewBookieRegistry(s, time.Second)
	reg := &metapb.BookieRegistration{Id: "b1", Addr: "127.0.0.1:1", Region: "east", Rack: "r1"}
	if err := r1.Register(ctx, reg); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "b1 writable in view", func() bool {
		b, ok := view.Lookup("b1")
		return ok && b.State == cluster.BookieWritable && b.Reg.Rack == "r1"
	})

	// A second process claiming the same id is refused while b1 lives.
	r2 := cluster.NewBookieRegistry(s, time.Second)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r2.Register(cctx, reg); err == nil {
		t.Fatal("second registration of a live bookie id succeeded")
	}

	// Read-only moves the key.
	reg.ReadOnly = true
	if err := r1.Register(ctx, reg); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "b1 read-only in view", func() bool {
		b, ok := view.Lookup("b1")
		return ok && b.State == cluster.BookieReadOnly
	})
	if got := view.Bookies(true); len(got) != 0 {
		t.Fatalf("writable bookies: %v, want none", got)
	}
	if err := r1.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "b1 gone from view", func() bool {
		_, ok := view.Lookup("b1")
		return !ok
	})

	// Cookies round-trip.
	if _, found, err := r1.GetCookie(ctx, "b1"); err != nil || found {
		t.Fatalf("cookie before put: found=%v err=%v", found, err)
	}
	if err := r1.PutCookie(ctx, &metapb.Cookie{BookieId: "b1", InstanceId: "i1"}); err != nil {
		t.Fatal(err)
	}
	c, found, err := r1.GetCookie(ctx, "b1")
	if err != nil || !found || c.InstanceId != "i1" {
		t.Fatalf("cookie: %v %v %v", c, found, err)
	}
}

func TestLeaseExpiryRemovesRegistration(t *testing.T) {
	url := testutil.StartEtcd(t)
	s := testutil.Store(t, url, "/east")
	dying, err := cluster.Connect(context.Background(), cluster.StoreConfig{Endpoints: []string{url}, Prefix: "/east"})
	if err != nil {
		t.Fatal(err)
	}
	r := cluster.NewBookieRegistry(dying, time.Second)
	if err := r.Register(context.Background(), &metapb.BookieRegistration{Id: "b9", Addr: "x"}); err != nil {
		t.Fatal(err)
	}
	// The process "dies" without deregistering: its connection closes and
	// keep-alive stops; the lease must expire by itself.
	dying.Close()
	testutil.Eventually(t, 10*time.Second, "registration expiry", func() bool {
		kvs, _, err := s.List(context.Background(), "/bookies/writable/")
		return err == nil && len(kvs) == 0
	})
}

// A bookie killed (kill -9) and started again on its data dir finds its
// previous run's registration still there: that run's lease lasts its TTL
// (and an etcd restart renews it for another TTL). The new run takes the
// registration over at once, so the bookie never drops out of the
// registry (issue 32: a restarted region's bookies were unregistered for
// ~11 s, and auto-recovery declared all three lost); another process with
// the same id is still refused while the registration's holder lives.
func TestBookieRegistryTakesOverItsPreviousRunAtOnce(t *testing.T) {
	url := testutil.StartEtcd(t)
	s := testutil.Store(t, url, "/east")
	ctx := context.Background()
	const ttl = 4 * time.Second
	dying, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{url}, Prefix: "/east"})
	if err != nil {
		t.Fatal(err)
	}
	reg := &metapb.BookieRegistration{Id: "b1", Addr: "127.0.0.1:1", Region: "east", Rack: "r1", InstanceId: "i1"}
	if err := cluster.NewBookieRegistry(dying, ttl).Register(ctx, reg); err != nil {
		t.Fatal(err)
	}
	_, rev, err := s.List(ctx, "/bookies/")
	if err != nil {
		t.Fatal(err)
	}
	// Every change to the registry from now on.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	events := s.Watch(wctx, "/bookies/", rev+1)
	dying.Close() // killed: keep-alive stops, the lease runs its TTL

	next := cluster.NewBookieRegistry(s, ttl)
	start := time.Now()
	if err := next.Register(ctx, reg); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > ttl/2 {
		t.Fatalf("the restarted bookie registered after %v: it waited for its own previous run's lease (TTL %v) to run out", took, ttl)
	}
	// The previous run's lease expires meanwhile; the registration, bound
	// to the new lease, must stay.
	deadline := time.After(ttl + 3*time.Second)
	for done := false; !done; {
		select {
		case evs := <-events:
			for _, ev := range evs {
				if ev.Deleted {
					t.Fatalf("the registration was deleted (%s) after the restarted bookie took it over", ev.KV.Key)
				}
			}
		case <-deadline:
			done = true
		}
	}
	kvs, _, err := s.List(ctx, "/bookies/writable/")
	if err != nil || len(kvs) != 1 {
		t.Fatalf("registrations after the old lease's TTL: %d (%v), want 1", len(kvs), err)
	}

	// Not a previous run: another data dir (instance), or another address,
	// with the same id, while the holder lives.
	for _, other := range []*metapb.BookieRegistration{
		{Id: "b1", Addr: reg.Addr, InstanceId: "i2"},
		{Id: "b1", Addr: "127.0.0.1:2", InstanceId: "i1"},
		{Id: "b1", Addr: reg.Addr},
	} {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := cluster.NewBookieRegistry(s, ttl).Register(cctx, other)
		cancel()
		if err == nil {
			t.Fatalf("%v registered over a live bookie's registration", other)
		}
	}
}

// A bookie's registration lease can be lost while the bookie lives (etcd
// unreachable, or the process stalled, for the TTL): etcd deletes the
// registration. The bookie still serves and is alive in gossip, so its
// region looks healthy, yet no new ensemble can use it: the registry must
// get it back. It used to stay unregistered until the process restarted
// (issue 32: "0 usable (0 live)" in a region whose bookies all ran). Here
// the lease is revoked behind the registry's back; after Deregister
// nothing comes back.
func TestBookieRegistryRegistersAgainAfterItsLeaseIsLost(t *testing.T) {
	url := testutil.StartEtcd(t)
	s := testutil.Store(t, url, "/east")
	ctx := context.Background()
	r := cluster.NewBookieRegistry(testutil.Store(t, url, "/east"), 2*time.Second)
	reg := &metapb.BookieRegistration{Id: "b1", Addr: "127.0.0.1:1", Region: "east", Rack: "r1", InstanceId: "i1"}
	if err := r.Register(ctx, reg); err != nil {
		t.Fatal(err)
	}
	kv, err := s.Get(ctx, "/bookies/writable/b1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "b1 registered again under a new lease", func() bool {
		kv2, err := s.Get(ctx, "/bookies/writable/b1")
		return err == nil && kv2.Lease != kv.Lease
	})
	if err := r.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if _, err := s.Get(ctx, "/bookies/writable/b1"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("after Deregister: %v, want no registration", err)
	}
}

// ListLedgerIDs, which a bookie's garbage collection deletes by, lists
// every ledger of the store (not another prefix's), ascending, and fails
// rather than skip a key under /ledgers/ that is not a ledger's.
func TestListLedgerIDs(t *testing.T) {
	url := testutil.StartEtcd(t)
	s := testutil.Store(t, url, "/east")
	other := testutil.Store(t, url, "/west")
	ctx := context.Background()
	for _, id := range []int64{42, 7, 1000000} {
		if _, err := s.Put(ctx, fmt.Sprintf("/ledgers/%020d", id), []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Put(ctx, fmt.Sprintf("/ledgers/%020d", 5), []byte("m")); err != nil {
		t.Fatal(err)
	}
	ids, err := cluster.NewBookieRegistry(s, 0).ListLedgers(ctx)
	if err != nil || !slices.Equal(ids, []int64{7, 42, 1000000}) {
		t.Fatalf("ListLedgers = %v, %v; want [7 42 1000000]", ids, err)
	}
	if _, err := s.Put(ctx, "/ledgers/junk", nil); err != nil {
		t.Fatal(err)
	}
	if ids, err := cluster.ListLedgerIDs(ctx, s); err == nil {
		t.Fatalf("a key that is not a ledger's was skipped: %v", ids)
	}
}
