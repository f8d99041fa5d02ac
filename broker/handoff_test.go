package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// A bundle a balancing move hands to another broker is not taken back by
// the broker that released it: the next request for one of its topics
// there (a remote region's replicator still sending to it, a lookup) is
// answered with the target as the owner, and the target acquires it.
// Before, the releasing broker acquired it again at once — the move had
// closed the topics' clients for nothing, and the balancer tried again
// every round (2 of 3 moves bounced in a standby region: redeliveries to
// the consumers each time). Past the window any broker may take it (a
// target that died). On a real etcd (embedded).
func TestBalancedBundleIsNotTakenBack(t *testing.T) {
	store := testutil.Store(t, testutil.StartEtcd(t), "/west")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newOwnership := func(id string) *ownership {
		b := testBroker()
		t.Cleanup(b.cancel)
		b.cfg.BrokerID, b.cfg.OwnershipTTL, b.cfg.Store = id, 5*time.Second, store
		o := &ownership{b: b, owned: map[string]bundle{}, info: BrokerInfo{ID: id, ReplicationAddr: id + ":7000"}, store: store, regKey: "/brokers/" + id}
		var err error
		if o.lease, err = o.register(ctx); err != nil {
			t.Fatal(err)
		}
		b.own = o
		return o
	}
	o1, o2 := newOwnership("west-broker-1"), newOwnership("west-broker-2")
	bd := bundle{ns: "public/swa", lower: 0x80000000, upper: 0xbfffffff}
	if mine, _, err := o1.acquire(ctx, bd); err != nil || !mine {
		t.Fatalf("acquire: mine=%v err=%v", mine, err)
	}
	o1.b.moveBundle(ctx, bd, nil, &o2.info)
	if _, err := store.Get(ctx, bd.key()); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("bundle key after the move: %v, want it released", err)
	}
	// Asked again at once, the releasing broker points at the target.
	mine, owner, err := o1.acquire(ctx, bd)
	if err != nil || mine || owner.ID != "west-broker-2" {
		t.Fatalf("acquire on the broker that handed the bundle off: mine=%v owner=%q err=%v; want the target named, the bundle not taken back", mine, owner.ID, err)
	}
	if _, err := store.Get(ctx, bd.key()); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("bundle key after the refused acquire: %v, want none", err)
	}
	if a, err := o1.b.replTargetRedirect(ctx, bd); err != nil || a != "west-broker-2:7000" {
		t.Fatalf("a replicator sending to the old owner is sent to %q (%v), want the target's replication address", a, err)
	}
	if mine, _, err := o2.acquire(ctx, bd); err != nil || !mine {
		t.Fatalf("the target's acquire: mine=%v err=%v", mine, err)
	}
}
