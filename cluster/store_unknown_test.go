package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// A write etcd answers "request timed out" may have been applied (issue
// 32: a namespace create failed so on a loaded CI host). The store sends
// an idempotent write again and recognizes its own Create; it never
// reports a write that did not happen, nor creates a key twice. On a real
// etcd, with the answers lost by a client interceptor.
func TestCreateWithUnknownOutcome(t *testing.T) {
	url := testutil.StartEtcd(t)
	ctx := context.Background()
	peer := testutil.Store(t, url, "/u") // another writer, no faults

	t.Run("applied", func(t *testing.T) {
		f := &testutil.LostAnswers{Key: "/applied", Times: 1, Applied: true}
		s := testutil.StoreWith(t, url, "/u", f.DialOption())
		rev, err := s.Create(ctx, "/applied", []byte("v"))
		if err != nil {
			t.Fatalf("create whose first answer was lost after it applied: %v", err)
		}
		kv, err := peer.Get(ctx, "/applied")
		if err != nil || string(kv.Value) != "v" || kv.ModRevision != rev || kv.CreateRev != rev {
			t.Fatalf("after create (rev %d): %+v, %v; want v created at %d", rev, kv, err, rev)
		}
		if f.Calls() != 2 {
			t.Fatalf("%d transactions sent, want 2 (the lost one, the retry)", f.Calls())
		}
		// The next create of the key is refused as always.
		if _, err := s.Create(ctx, "/applied", []byte("v")); !errors.Is(err, cluster.ErrExists) {
			t.Fatalf("second create: %v, want ErrExists", err)
		}
	})

	t.Run("not applied", func(t *testing.T) {
		f := &testutil.LostAnswers{Key: "/lost", Times: 2}
		s := testutil.StoreWith(t, url, "/u", f.DialOption())
		rev, err := s.Create(ctx, "/lost", []byte("v"))
		if err != nil {
			t.Fatalf("create whose first two attempts timed out unapplied: %v", err)
		}
		if kv, err := peer.Get(ctx, "/lost"); err != nil || string(kv.Value) != "v" || kv.ModRevision != rev {
			t.Fatalf("after create (rev %d): %+v, %v", rev, kv, err)
		}
	})

	t.Run("someone else's key", func(t *testing.T) {
		// The key another writer created with another value, while our
		// first attempt timed out without applying: still ErrExists.
		if _, err := peer.Create(ctx, "/theirs", []byte("theirs")); err != nil {
			t.Fatal(err)
		}
		f := &testutil.LostAnswers{Key: "/theirs", Times: 1}
		s := testutil.StoreWith(t, url, "/u", f.DialOption())
		if _, err := s.Create(ctx, "/theirs", []byte("mine")); !errors.Is(err, cluster.ErrExists) {
			t.Fatalf("create over another writer's key after an unknown outcome: %v, want ErrExists", err)
		}
		if kv, _ := peer.Get(ctx, "/theirs"); string(kv.Value) != "theirs" {
			t.Fatalf("the key holds %q", kv.Value)
		}
		// Without an unknown outcome, even the same value is refused.
		if _, err := s.Create(ctx, "/theirs", []byte("theirs")); !errors.Is(err, cluster.ErrExists) {
			t.Fatalf("plain create of an existing key with its value: %v, want ErrExists", err)
		}
	})

	t.Run("with lease", func(t *testing.T) {
		f := &testutil.LostAnswers{Key: "/leased", Times: 1, Applied: true}
		s := testutil.StoreWith(t, url, "/u", f.DialOption())
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		lease, err := s.GrantLease(lctx, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateWithLease(ctx, "/leased", []byte("v"), lease.ID); err != nil {
			t.Fatalf("create with lease whose answer was lost after it applied: %v", err)
		}
		if kv, err := peer.Get(ctx, "/leased"); err != nil || kv.Lease != int64(lease.ID) {
			t.Fatalf("after create: %+v, %v; want it under lease %x", kv, err, lease.ID)
		}
	})

	t.Run("put and delete", func(t *testing.T) {
		fp := &testutil.LostAnswers{Key: "/put", Times: 1, Applied: true}
		if _, err := testutil.StoreWith(t, url, "/u", fp.DialOption()).Put(ctx, "/put", []byte("p")); err != nil || fp.Calls() != 2 {
			t.Fatalf("put whose answer was lost after it applied: %v after %d calls", err, fp.Calls())
		}
		fd := &testutil.LostAnswers{Key: "/put", Times: 1, Applied: true}
		if err := testutil.StoreWith(t, url, "/u", fd.DialOption()).Delete(ctx, "/put"); err != nil || fd.Calls() != 2 {
			t.Fatalf("delete whose answer was lost after it applied: %v after %d calls", err, fd.Calls())
		}
		if _, err := peer.Get(ctx, "/put"); !errors.Is(err, cluster.ErrNotFound) {
			t.Fatalf("after delete: %v", err)
		}
	})

	t.Run("compare-and-swap", func(t *testing.T) {
		// A CAS is not sent again after an unknown outcome: only its
		// caller can tell whether its own change is there.
		rev, err := peer.Create(ctx, "/cas", []byte("a"))
		if err != nil {
			t.Fatal(err)
		}
		f := &testutil.LostAnswers{Key: "/cas", Times: 1, Applied: true}
		s := testutil.StoreWith(t, url, "/u", f.DialOption())
		if _, err := s.CAS(ctx, "/cas", []byte("b"), rev); !cluster.OutcomeUnknown(err) {
			t.Fatalf("CAS with a lost answer: %v, want the unknown outcome", err)
		}
		if f.Calls() != 1 {
			t.Fatalf("CAS sent %d times", f.Calls())
		}
	})
}

// OutcomeUnknown: what etcd's client returns for a write that may have
// been applied, against what says it was not or failed for good.
func TestOutcomeUnknown(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrGRPCTimeout, true},
		{rpctypes.ErrTimeout, true}, // as the client converts it
		{rpctypes.ErrGRPCTimeoutDueToLeaderFail, true},
		{rpctypes.ErrGRPCTimeoutDueToConnectionLost, true},
		{rpctypes.ErrGRPCLeaderChanged, true},
		{rpctypes.ErrGRPCStopped, true},
		{context.DeadlineExceeded, true},
		{rpctypes.ErrGRPCNoLeader, false}, // not applied
		{rpctypes.ErrNoLeader, false},
		{context.Canceled, false},
		{rpctypes.ErrGRPCPermissionDenied, false},
		{rpctypes.ErrGRPCCompacted, false},
		{errors.New("cluster: other"), false},
	} {
		if got := cluster.OutcomeUnknown(tc.err); got != tc.want {
			t.Errorf("OutcomeUnknown(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}
