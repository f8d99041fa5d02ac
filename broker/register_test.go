package broker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// A broker whose registration in the global store failed at start (the
// global store slow or electing a leader — CI saw a broker exit on a
// timed-out lease grant) keeps running: stretched bundles answer a
// retriable error meanwhile, and the registration is made as soon as the
// global store answers again. On a real etcd, stopped and restarted on
// its data directory.
func TestGlobalRegistrationRetriedInTheBackground(t *testing.T) {
	cfg := cluster.EtcdConfig{Name: "global", DataDir: t.TempDir(),
		ClientURL: "http://" + testutil.FreeAddr(t), PeerURL: "http://" + testutil.FreeAddr(t)}
	e, err := cluster.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	global, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{e.ClientURL()}, Prefix: "/global",
		DialTimeout: time.Second, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer global.Close()
	e.Close()

	bctx, bcancel := context.WithCancel(context.Background())
	defer bcancel()
	b := &Broker{ctx: bctx, cancel: bcancel, cfg: Config{Cluster: "east", BrokerID: "east-broker-1", OwnershipTTL: 3 * time.Second}, log: slog.Default()}
	b.np = newNPRegistry(b)
	g := &ownership{b: b, owned: map[string]bundle{}, info: BrokerInfo{ID: "east-broker-1"}, store: global,
		regKey: "/stretched/brokers/east/east-broker-1"}
	rctx, rcancel := context.WithTimeout(bctx, 2*time.Second)
	_, err = g.register(rctx)
	rcancel()
	if err == nil {
		t.Fatal("registered in a stopped etcd")
	}
	go g.keep(nil)
	bd := bundle{ns: "public/geo", lower: 0, upper: 0xffffffff}
	if _, _, err := g.acquire(context.Background(), bd); !errors.Is(err, errNotRegistered) {
		t.Fatalf("acquire while unregistered: %v, want errNotRegistered", err)
	}

	e, err = cluster.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	testutil.Eventually(t, 30*time.Second, "the registration in the global store", func() bool {
		_, err := global.Get(context.Background(), g.regKey)
		return err == nil && g.currentLease() != nil
	})
	mine, _, err := g.acquire(context.Background(), bd)
	if err != nil || !mine {
		t.Fatalf("acquire after registering: mine=%v err=%v", mine, err)
	}
}
