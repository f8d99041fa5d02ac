package cluster_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A PreferLeader member (the global store's witness) takes the raft
// leadership and takes it back after it moved elsewhere: a data region's
// member never leads, so losing the region never changes the leader (which
// would extend every lease, the dead region's failover lease included).
// startGlobalStore starts the three members of a global store (the third,
// "witness", with PreferLeader if preferWitness) and returns them and their
// client URLs.
func startGlobalStore(t *testing.T, preferWitness bool) ([]*cluster.Etcd, []string) {
	t.Helper()
	names := []string{"global-east", "global-west", "witness"}
	var clientURLs, initial []string
	for _, n := range names {
		clientURLs = append(clientURLs, "http://"+testutil.FreeAddr(t))
		initial = append(initial, n+"=http://"+testutil.FreeAddr(t))
	}
	members := make([]*cluster.Etcd, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			members[i], errs[i] = cluster.StartEtcd(cluster.EtcdConfig{
				Name: n, DataDir: t.TempDir(), ClientURL: clientURLs[i],
				PeerURL:        strings.TrimPrefix(initial[i], n+"="),
				InitialCluster: strings.Join(initial, ","),
				PreferLeader:   preferWitness && n == "witness", LeaderCheckInterval: 200 * time.Millisecond,
			})
		}()
	}
	wg.Wait()
	for i, m := range members {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Cleanup(m.Close)
	}
	return members, clientURLs
}

func TestPreferLeaderTakesLeadershipBack(t *testing.T) {
	names := []string{"global-east", "global-west", "witness"}
	members, clientURLs := startGlobalStore(t, true)
	witness := members[2]
	testutil.Eventually(t, 15*time.Second, "the witness to lead", witness.IsLeader)

	// Move the leadership to global-east by hand: the witness takes it back.
	cli, err := clientv3.New(clientv3.Config{Endpoints: clientURLs[2:], DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var east uint64
	for _, m := range ml.Members {
		if m.Name == "global-east" {
			east = m.ID
		}
	}
	if _, err := cli.MoveLeader(ctx, east); err != nil {
		t.Fatalf("moving the leadership to global-east: %v", err)
	}
	testutil.Eventually(t, 15*time.Second, "the witness to lead again", witness.IsLeader)
	for i, m := range members[:2] {
		if m.IsLeader() {
			t.Fatalf("%s still leads", names[i])
		}
	}
}
