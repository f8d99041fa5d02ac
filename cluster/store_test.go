package cluster_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/testutil"
	"github.com/meridian-mq/meridian/proto/metapb"
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
