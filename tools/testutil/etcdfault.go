package testutil

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// LostAnswers injects, into an etcd client (cluster.StoreConfig.DialOptions),
// the answer etcd gives a write whose proposal missed its deadline:
// "etcdserver: request timed out". Of the writes (puts, deletes,
// transactions) that touch a key containing Key, the first Skip pass, and
// the Times after them get it. With Applied, each of them first
// reaches etcd and is applied (the proposal committed late, or the
// answer was lost); without, it is not sent. Other requests pass.
type LostAnswers struct {
	Key     string
	Skip    int
	Times   int
	Applied bool
	// OnLost, if set, runs after each write whose answer is lost (after
	// it applied, with Applied), before the client gets the answer: a
	// test makes a competing write there, deterministically between the
	// lost attempt and whatever the client does next.
	OnLost func()

	mu    sync.Mutex
	calls int // writes on Key seen
}

// Calls returns how many writes on Key the store sent (the lost ones
// included).
func (f *LostAnswers) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// DialOption returns the interceptor as a dial option.
func (f *LostAnswers) DialOption() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !f.touches(req) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		f.mu.Lock()
		f.calls++
		lose := f.calls > f.Skip && f.calls <= f.Skip+f.Times
		f.mu.Unlock()
		if !lose {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if f.Applied {
			if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
				return err
			}
		}
		if f.OnLost != nil {
			f.OnLost()
		}
		return rpctypes.ErrGRPCTimeout
	})
}

func (f *LostAnswers) touches(req any) bool {
	switch r := req.(type) {
	case *etcdserverpb.PutRequest:
		return strings.Contains(string(r.Key), f.Key)
	case *etcdserverpb.DeleteRangeRequest:
		return strings.Contains(string(r.Key), f.Key)
	case *etcdserverpb.TxnRequest:
		return f.touchesTxn(r)
	}
	return false
}

func (f *LostAnswers) touchesTxn(txn *etcdserverpb.TxnRequest) bool {
	for _, c := range txn.Compare {
		if strings.Contains(string(c.Key), f.Key) {
			return true
		}
	}
	for _, ops := range [][]*etcdserverpb.RequestOp{txn.Success, txn.Failure} {
		for _, op := range ops {
			if p := op.GetRequestPut(); p != nil && strings.Contains(string(p.Key), f.Key) {
				return true
			}
		}
	}
	return false
}

// StoreWith is Store with extra dial options (LostAnswers.DialOption).
func StoreWith(t testing.TB, url, prefix string, opts ...grpc.DialOption) *cluster.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{url}, Prefix: prefix, DialOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
