package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// A watched copy of a prefix follows puts and deletes, leaves other keys
// out, stays current while nothing is written (progress notifications),
// and stops answering once etcd goes quiet.
func TestCacheFollowsThePrefixAndGoesStaleWhenEtcdStops(t *testing.T) {
	e, err := cluster.StartEtcd(cluster.EtcdConfig{Name: "cache", DataDir: t.TempDir(),
		ClientURL: "http://" + testutil.FreeAddr(t), PeerURL: "http://" + testutil.FreeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			e.Close()
		}
	}()
	s := testutil.Store(t, e.ClientURL(), "/c")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Put(ctx, "/in/a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	c := cluster.WatchPrefix(s, "/in/")
	defer c.Close()
	testutil.Eventually(t, 10*time.Second, "the copy is live", c.Live)
	get := func(key string) (string, bool) {
		kv, found, live := c.Get(key)
		if !live {
			t.Fatalf("the copy stopped being live (reading %s)", key)
		}
		return string(kv.Value), found
	}
	if v, ok := get("/in/a"); !ok || v != "1" {
		t.Fatalf("listed key: %q %t", v, ok)
	}
	if _, err := s.Put(ctx, "/in/b", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "/out/x", []byte("3")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "/in/a", []byte("4")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "/in/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "/in/z", nil); err != nil { // the last write: after it, all the above are seen
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the last write seen", func() bool { _, ok := get("/in/z"); return ok })
	if v, ok := get("/in/a"); !ok || v != "4" {
		t.Errorf("/in/a after its update: %q %t, want 4", v, ok)
	}
	if _, ok := get("/in/b"); ok {
		t.Error("/in/b still there after its delete")
	}
	if _, ok := get("/out/x"); ok {
		t.Error("a key outside the prefix is in the copy")
	}
	if _, found, _ := c.Get("/out/x"); found {
		t.Error("found a key outside the prefix")
	}
	// Nothing written for longer than StaleAfter: progress keeps it live.
	time.Sleep(cluster.StaleAfter + time.Second)
	if !c.Live() {
		t.Fatal("an idle copy stopped being live: progress notifications did not arrive")
	}
	e.Close()
	stopped = true
	testutil.Eventually(t, cluster.StaleAfter+5*time.Second, "the copy stops answering once etcd is gone", func() bool {
		_, _, live := c.Get("/in/a")
		return !live
	})
}
