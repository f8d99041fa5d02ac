package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The errors etcd's server sends for a write it did not apply, as the
// client receives them: a dropped proposal comes as code Unknown with
// raft's message (what CI saw when a broker created the default tenant
// while the global store's leadership moved to the witness).
func TestNotApplied(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unknown, "raft proposal dropped"), true},
		{rpctypes.ErrGRPCNoLeader, true},
		{rpctypes.ErrGRPCRequestTooManyRequests, true},
		// Ambiguous: the write may have been applied.
		{rpctypes.ErrGRPCLeaderChanged, false},
		{rpctypes.ErrGRPCTimeout, false},
		{context.DeadlineExceeded, false},
		{status.Error(codes.Unavailable, "connection refused"), false},
	} {
		if got := NotApplied(tc.err); got != tc.want {
			t.Errorf("NotApplied(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}

// write sends a request again while etcd says it was not applied, and
// returns any other answer (success or an ambiguous error) as it is.
func TestWriteRetriesOnlyUnappliedRequests(t *testing.T) {
	dropped := status.Error(codes.Unknown, "raft proposal dropped")
	ctx := context.Background()
	calls := 0
	v, err := write(ctx, func(context.Context) (int, error) {
		calls++
		if calls < 3 {
			return 0, dropped
		}
		return 42, nil
	})
	if err != nil || v != 42 || calls != 3 {
		t.Fatalf("after two dropped proposals: %d, %v, %d calls; want 42, nil, 3", v, err, calls)
	}

	calls = 0
	_, err = write(ctx, func(context.Context) (int, error) {
		calls++
		return 0, rpctypes.ErrGRPCTimeout
	})
	if !errors.Is(err, rpctypes.ErrGRPCTimeout) || calls != 1 {
		t.Fatalf("an ambiguous error: %v after %d calls; want it at once", err, calls)
	}

	// Until the context ends, then the last error.
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	calls = 0
	_, err = write(cctx, func(context.Context) (int, error) {
		calls++
		return 0, dropped
	})
	if !NotApplied(err) || calls < 2 {
		t.Fatalf("dropped until the deadline: %v after %d calls", err, calls)
	}
}

// Connect asks again an etcd that answers it has no leader yet (reads are
// safe to repeat), and gives up at once on one that is not there.
func TestElecting(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrGRPCNoLeader, true},
		{rpctypes.ErrGRPCTimeout, true},
		{rpctypes.ErrGRPCTimeoutDueToLeaderFail, true},
		{rpctypes.ErrGRPCLeaderChanged, true},
		{rpctypes.ErrGRPCRequestTooManyRequests, true},
		{context.DeadlineExceeded, false},
		{status.Error(codes.Unavailable, "connection refused"), false},
		{rpctypes.ErrGRPCPermissionDenied, false},
	} {
		if got := electing(tc.err); got != tc.want {
			t.Errorf("electing(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}

func TestConnectGivesUpOnAnAbsentEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := Connect(ctx, StoreConfig{Endpoints: []string{"http://127.0.0.1:1"}, Prefix: "/x", DialTimeout: time.Second})
	if err == nil {
		t.Fatal("connected to nothing")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("gave up after %v; want about the dial timeout (1s)", d)
	}
}
