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

// write sends a request that is not idempotent again while etcd says it
// was not applied, and returns any other answer (success or an ambiguous
// error) as it is.
func TestWriteRetriesOnlyUnappliedRequests(t *testing.T) {
	dropped := status.Error(codes.Unknown, "raft proposal dropped")
	ctx := context.Background()
	s := &Store{reqTO: 5 * time.Second}
	calls := 0
	v, _, err := write(ctx, s, false, "test", func(context.Context) (int, error) {
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
	_, _, err = write(ctx, s, false, "test", func(context.Context) (int, error) {
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
	_, _, err = write(cctx, s, false, "test", func(context.Context) (int, error) {
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

// An idempotent write is sent again after an unknown outcome, each attempt
// bounded by the request timeout (etcd answers "request timed out" when
// the client's deadline passes: a single deadline for every attempt would
// leave a retry no time), the whole by idempotentAttempts of them when the
// caller set no deadline; it says the outcome was uncertain.
func TestWriteRetriesIdempotentRequestsAfterUnknownOutcomes(t *testing.T) {
	s := &Store{reqTO: 100 * time.Millisecond}
	calls := 0
	v, uncertain, err := write(context.Background(), s, true, "test", func(ctx context.Context) (int, error) {
		calls++
		if calls == 1 {
			return 0, rpctypes.ErrTimeout
		}
		return 7, nil
	})
	if err != nil || v != 7 || !uncertain || calls != 2 {
		t.Fatalf("after one timeout: %d, uncertain %t, %v, %d calls; want 7, true, nil, 2", v, uncertain, err, calls)
	}

	// A member that never answers: each attempt ends at its own deadline.
	calls = 0
	start := time.Now()
	_, uncertain, err = write(context.Background(), s, true, "test", func(ctx context.Context) (int, error) {
		calls++
		dl, ok := ctx.Deadline()
		if !ok || time.Until(dl) > s.reqTO {
			t.Errorf("attempt %d: deadline in %v, want at most the request timeout", calls, time.Until(dl))
		}
		<-ctx.Done()
		return 0, ctx.Err()
	})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !uncertain || calls < 2 || calls > idempotentAttempts {
		t.Fatalf("never answered: %v, uncertain %t, after %d calls; want the deadline, uncertain, 2 to %d calls", err, uncertain, calls, idempotentAttempts)
	}
	if took > idempotentAttempts*s.reqTO+time.Second {
		t.Fatalf("gave up after %v; want about %v", took, idempotentAttempts*s.reqTO)
	}

	// Not idempotent: the unknown outcome is the caller's, at once.
	calls = 0
	_, uncertain, err = write(context.Background(), s, false, "test", func(ctx context.Context) (int, error) {
		calls++
		return 0, rpctypes.ErrTimeout
	})
	if calls != 1 || uncertain || !errors.Is(err, rpctypes.ErrTimeout) {
		t.Fatalf("not idempotent: %v, uncertain %t, %d calls", err, uncertain, calls)
	}
}
