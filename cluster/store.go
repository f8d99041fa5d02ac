package cluster

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/ratelog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/raft/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/health" // client-side health checking
	"google.golang.org/grpc/status"
)

// Errors returned by Store. Callers match them with errors.Is.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("cluster: key not found")
	// ErrExists: Create found the key already present.
	ErrExists = errors.New("cluster: key already exists")
	// ErrVersionMismatch: a compare-and-swap lost: the key changed since the
	// caller read it. The caller re-reads and decides again.
	ErrVersionMismatch = errors.New("cluster: version mismatch")
)

// StoreConfig says how to reach etcd.
type StoreConfig struct {
	// Endpoints of the etcd cluster, e.g. ["http://127.0.0.1:2379"]; an
	// entry may name its member's region, "east=http://10.0.0.1:2379"
	// (store_regions.go: AvoidRegions).
	Endpoints []string
	// Prefix under which every key of this store lives, e.g. "/meridian/east".
	// Keys passed to Store methods are relative to it. Must start with "/" and
	// not end with "/".
	Prefix string
	// DialTimeout bounds the first connection. Default 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds each request when the caller's context has no
	// deadline. Default 5s.
	RequestTimeout time.Duration
	// KeepAliveTime and KeepAliveTimeout: the client pings each endpoint's
	// connection after KeepAliveTime without traffic and drops it when no
	// answer comes within KeepAliveTimeout. Default 2 s and 2 s. Without
	// them, a member whose packets are silently dropped (a partition, a
	// paused host) keeps its connection "ready" and the client keeps
	// sending it requests that time out, instead of using the members that
	// still have a quorum: found by the split-view test, where west's
	// brokers stayed pinned to east's cut-off member and never failed over.
	// etcd refuses pings more frequent than its --grpc-keepalive-min-time
	// (5 s by default; Meridian's embedded etcd sets 1 s): against an
	// external etcd set that flag to 2 s or less, or the client backs off
	// to its default.
	KeepAliveTime, KeepAliveTimeout time.Duration
	// TLS, if set, connects over TLS (the endpoints are https://),
	// presenting its client certificate when the member asks for one.
	// Default nil: plaintext.
	TLS *tls.Config
	// Username and Password authenticate to etcd (etcd authentication
	// enabled); empty: none, or the TLS client certificate's common name
	// when the etcd member runs with --client-cert-auth.
	Username, Password string
	// DialOptions are added to the etcd client's gRPC dial options (a
	// test's client interceptor injects faults through them).
	DialOptions []grpc.DialOption
	// Logger receives, rate-limited, the writes sent again because their
	// outcome was unknown. Default slog.Default().
	Logger *slog.Logger
}

// Store is a thin, typed layer over an etcd client. It is safe for
// concurrent use.
type Store struct {
	cli    *clientv3.Client
	prefix string
	reqTO  time.Duration
	owned  bool
	eps    *storeEndpoints
	log    *ratelog.Logger
}

// KV is one key with its value and versions. Key is relative to the store's
// prefix.
type KV struct {
	Key         string
	Value       []byte
	ModRevision int64
	CreateRev   int64
	Lease       int64
}

// Connect dials etcd.
func Connect(ctx context.Context, cfg StoreConfig) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("cluster: no etcd endpoints")
	}
	if cfg.Prefix == "" || !strings.HasPrefix(cfg.Prefix, "/") || strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("cluster: prefix %q must start with '/' and not end with '/'", cfg.Prefix)
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.KeepAliveTime == 0 {
		cfg.KeepAliveTime = 2 * time.Second
	}
	if cfg.KeepAliveTimeout == 0 {
		cfg.KeepAliveTimeout = 2 * time.Second
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	eps := parseEndpoints(cfg.Endpoints)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            urls(eps),
		DialTimeout:          cfg.DialTimeout,
		TLS:                  cfg.TLS,
		Username:             cfg.Username,
		Password:             cfg.Password,
		DialKeepAliveTime:    cfg.KeepAliveTime,
		DialKeepAliveTimeout: cfg.KeepAliveTimeout,
		// The client's own context (Client.Ctx) must last until Close:
		// callers bound Connect with a timeout they cancel when it
		// returns, and a client context cancelled then made Ctx useless
		// as "the store is open" (and would cancel anything defaulting
		// to it, such as concurrency sessions). ctx still bounds the
		// reachability check below.
		Context: context.WithoutCancel(ctx),
		Logger:  quietZap(),
		// gRPC health checking (etcd serves grpc.health.v1): a member is
		// sent requests only while its health stream says SERVING. A
		// paused member's kernel still accepts connections, so after each
		// keepalive failure the client reconnected and, round-robin, kept
		// sending it a third of all requests, each hanging until its
		// deadline (seen: a paused region stalled the survivors' failover
		// control for 12 s). A server without the health service counts as
		// healthy (gRFC A17).
		DialOptions: append([]grpc.DialOption{grpc.WithDefaultServiceConfig(`{"loadBalancingPolicy":"round_robin","healthCheckConfig":{"serviceName":""}}`)}, cfg.DialOptions...),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to etcd %v: %w", cfg.Endpoints, err)
	}
	s := &Store{cli: cli, prefix: cfg.Prefix, reqTO: cfg.RequestTimeout, owned: true,
		eps: &storeEndpoints{all: eps, inUse: strings.Join(urls(eps), ",")},
		log: ratelog.New(cmp.Or(cfg.Logger, slog.Default()), 0)}
	// Fail fast when etcd is not there rather than on first use; but an
	// etcd that answers it cannot serve yet (electing a leader: seen on a
	// global store whose witness was taking the leadership) is asked
	// again until ctx ends.
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		cctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
		_, err := cli.Get(cctx, s.abs("/__ping"))
		cancel()
		if err == nil {
			return s, nil
		}
		if !electing(err) || ctx.Err() != nil {
			cli.Close()
			return nil, fmt.Errorf("cluster: etcd %v not reachable: %w", cfg.Endpoints, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// electing reports an answer of an etcd that is up but has no leader to
// serve a request through yet, or lost it during the request.
func electing(err error) bool {
	switch rpctypes.ErrorDesc(err) {
	case rpctypes.ErrorDesc(rpctypes.ErrGRPCNoLeader),
		rpctypes.ErrorDesc(rpctypes.ErrGRPCTimeout),
		rpctypes.ErrorDesc(rpctypes.ErrGRPCTimeoutDueToLeaderFail),
		rpctypes.ErrorDesc(rpctypes.ErrGRPCLeaderChanged),
		rpctypes.ErrorDesc(rpctypes.ErrGRPCRequestTooManyRequests):
		return true
	}
	return false
}

// Sub returns a Store sharing this one's connection with a longer prefix.
// Closing the sub-store does not close the connection.
func (s *Store) Sub(prefix string) *Store {
	return &Store{cli: s.cli, prefix: s.prefix + prefix, reqTO: s.reqTO, eps: s.eps, log: s.log}
}

// Prefix returns the store's key prefix.
func (s *Store) Prefix() string { return s.prefix }

// Client exposes the etcd client for what this type does not wrap (elections).
func (s *Store) Client() *clientv3.Client { return s.cli }

// Close closes the connection if this Store owns it.
func (s *Store) Close() error {
	if s.owned {
		return s.cli.Close()
	}
	return nil
}

func (s *Store) abs(key string) string { return s.prefix + key }

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.reqTO)
}

// NotApplied reports whether err says etcd did not apply the request, so
// that sending it again cannot apply it twice: the leader dropped the
// proposal (a leadership transfer is under way — the global store's
// witness takes the leadership back whenever another member has it), there
// is no leader, or the server shed the request. etcd's client does not
// retry a write that reached the server; these three are safe to.
func NotApplied(err error) bool {
	switch rpctypes.ErrorDesc(err) {
	case raft.ErrProposalDropped.Error(),
		rpctypes.ErrorDesc(rpctypes.ErrGRPCNoLeader),
		rpctypes.ErrorDesc(rpctypes.ErrGRPCRequestTooManyRequests):
		return true
	}
	return false
}

// OutcomeUnknown reports whether err leaves a write's outcome unknown: it
// may have been applied, or may never be. etcd answers "request timed
// out" (or "..., possibly due to previous leader failure") when a
// proposal is not applied by the request's deadline: on a slow disk it
// commits a moment later; but a proposal that a follower forwarded to a
// leader handing over its leadership (the global store's witness takes
// it back after every election) is dropped without a word, and the
// follower waits out the deadline for it — the write never happens. The
// same holds for a deadline that ends on the client's side first, a
// member stopping during the request, and a connection that breaks after
// sending it (gRPC Unavailable). NotApplied errors are not unknown.
func OutcomeUnknown(err error) bool {
	if err == nil || NotApplied(err) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	if st, ok := status.FromError(err); ok {
		return st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded
	}
	return false
}

// idempotentAttempts: a write that may be sent again after an unknown
// outcome (Put, Delete, Create) gets this many request timeouts in all
// when its caller's context has no deadline, each attempt one request
// timeout. One attempt is not enough: etcd answers "request timed out"
// when the client's deadline passes, so the first attempt uses up the
// whole of a single timeout and a retry needs time of its own.
const idempotentAttempts = 3

// write runs one write request. It sends it again, after a short pause,
// while etcd says it was not applied (NotApplied); and, if idempotent
// (sending it twice leaves what sending it once does: Put, Delete, and
// Create, which recognizes its own key), while the outcome is unknown
// (OutcomeUnknown). Each attempt of an idempotent write is bounded by the
// store's request timeout, the whole by ctx or, without a deadline,
// idempotentAttempts request timeouts; a write that is not idempotent is
// sent once more only when not applied, within ctx or one request
// timeout. op names the write in the log (a retry after an unknown
// outcome is logged, rate-limited). uncertain reports that an earlier
// attempt's outcome was unknown: it may have been applied, so an answer
// that the request changed nothing (Create: the key exists) may be the
// earlier attempt's doing.
func write[T any](ctx context.Context, s *Store, idempotent bool, op string, do func(context.Context) (T, error)) (v T, uncertain bool, err error) {
	if _, ok := ctx.Deadline(); !ok {
		budget := s.reqTO
		if idempotent {
			budget = idempotentAttempts * s.reqTO
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, budget)
		defer cancel()
	}
	pause := 20 * time.Millisecond
	for {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if idempotent {
			actx, cancel = context.WithTimeout(ctx, s.reqTO)
		}
		v, err = do(actx)
		cancel()
		switch {
		case err == nil:
			return v, uncertain, nil
		case NotApplied(err):
		case idempotent && OutcomeUnknown(err):
			uncertain = true
			s.log.Warn("cluster: etcd write's outcome unknown; sending it again", "op", op, "err", err)
		default:
			return v, uncertain, err
		}
		select {
		case <-ctx.Done():
			if uncertain {
				err = fmt.Errorf("%w (the outcome is unknown: it may have been applied)", err)
			}
			return v, uncertain, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// Get returns the key's value and mod revision, or ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (KV, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.abs(key))
	if err != nil {
		return KV{}, fmt.Errorf("cluster: get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return KV{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return s.kv(resp.Kvs[0].Key, resp.Kvs[0].Value, resp.Kvs[0].ModRevision, resp.Kvs[0].CreateRevision, resp.Kvs[0].Lease), nil
}

func (s *Store) kv(k, v []byte, mod, create, lease int64) KV {
	return KV{Key: strings.TrimPrefix(string(k), s.prefix), Value: v, ModRevision: mod, CreateRev: create, Lease: lease}
}

// Put writes the key unconditionally and returns the new revision.
func (s *Store) Put(ctx context.Context, key string, val []byte) (int64, error) {
	resp, _, err := write(ctx, s, true, "put "+key, func(ctx context.Context) (*clientv3.PutResponse, error) {
		return s.cli.Put(ctx, s.abs(key), string(val))
	})
	if err != nil {
		return 0, fmt.Errorf("cluster: put %s: %w", key, err)
	}
	return resp.Header.Revision, nil
}

// PutWithLease writes the key bound to a lease: it disappears when the lease
// expires or is revoked.
func (s *Store) PutWithLease(ctx context.Context, key string, val []byte, lease clientv3.LeaseID) (int64, error) {
	resp, _, err := write(ctx, s, true, "put "+key, func(ctx context.Context) (*clientv3.PutResponse, error) {
		return s.cli.Put(ctx, s.abs(key), string(val), clientv3.WithLease(lease))
	})
	if err != nil {
		return 0, fmt.Errorf("cluster: put %s: %w", key, err)
	}
	return resp.Header.Revision, nil
}

// Create writes the key only if it does not exist; it returns the new
// revision (the key's mod revision) or ErrExists. A Create whose first
// attempt's outcome was unknown (OutcomeUnknown: it may have been applied)
// is sent again; if that finds the key holding exactly val, the first
// attempt created it and Create succeeds. (A concurrent Create of the
// same key with the same value looks the same; its caller wanted the
// same thing.) Otherwise ErrExists, as always.
func (s *Store) Create(ctx context.Context, key string, val []byte) (int64, error) {
	return s.create(ctx, key, val, clientv3.NoLease)
}

// CreateWithLease writes the key bound to a lease only if it does not
// exist; it returns ErrExists otherwise. After an unknown outcome it
// succeeds as Create does, when the key holds val under this lease.
func (s *Store) CreateWithLease(ctx context.Context, key string, val []byte, lease clientv3.LeaseID) (int64, error) {
	return s.create(ctx, key, val, lease)
}

func (s *Store) create(ctx context.Context, key string, val []byte, lease clientv3.LeaseID) (int64, error) {
	k := s.abs(key)
	put := clientv3.OpPut(k, string(val))
	if lease != clientv3.NoLease {
		put = clientv3.OpPut(k, string(val), clientv3.WithLease(lease))
	}
	resp, uncertain, err := write(ctx, s, true, "create "+key, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
			Then(put).
			Else(clientv3.OpGet(k)).
			Commit()
	})
	if err != nil {
		return 0, fmt.Errorf("cluster: create %s: %w", key, err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	if uncertain && len(resp.Responses) > 0 {
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 &&
			bytes.Equal(kvs[0].Value, val) && kvs[0].Lease == int64(lease) {
			return kvs[0].ModRevision, nil
		}
	}
	return 0, fmt.Errorf("%w: %s", ErrExists, key)
}

// CAS replaces the key's value only if its mod revision is still modRev. It
// returns the new mod revision, ErrVersionMismatch if the key changed, or
// ErrNotFound if it is gone.
func (s *Store) CAS(ctx context.Context, key string, val []byte, modRev int64) (int64, error) {
	k := s.abs(key)
	resp, _, err := write(ctx, s, false, "cas "+key, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", modRev)).
			Then(clientv3.OpPut(k, string(val))).
			Else(clientv3.OpGet(k, clientv3.WithKeysOnly())).
			Commit()
	})
	if err != nil {
		return 0, fmt.Errorf("cluster: cas %s: %w", key, err)
	}
	if !resp.Succeeded {
		if len(resp.Responses) > 0 && len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			return 0, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		return 0, fmt.Errorf("%w: %s (expected revision %d)", ErrVersionMismatch, key, modRev)
	}
	return resp.Header.Revision, nil
}

// Delete removes the key unconditionally. Deleting a missing key is not an
// error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if _, _, err := write(ctx, s, true, "delete "+key, func(ctx context.Context) (*clientv3.DeleteResponse, error) {
		return s.cli.Delete(ctx, s.abs(key))
	}); err != nil {
		return fmt.Errorf("cluster: delete %s: %w", key, err)
	}
	return nil
}

// DeleteCAS removes the key only if its mod revision is still modRev.
func (s *Store) DeleteCAS(ctx context.Context, key string, modRev int64) error {
	k := s.abs(key)
	resp, _, err := write(ctx, s, false, "delete "+key, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", modRev)).
			Then(clientv3.OpDelete(k)).
			Commit()
	})
	if err != nil {
		return fmt.Errorf("cluster: delete %s: %w", key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %s (expected revision %d)", ErrVersionMismatch, key, modRev)
	}
	return nil
}

// List returns every key under prefix (relative), sorted by key, and the
// store revision at which the list was read (to start a Watch from).
func (s *Store) List(ctx context.Context, prefix string) ([]KV, int64, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.abs(prefix), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, 0, fmt.Errorf("cluster: list %s: %w", prefix, err)
	}
	out := make([]KV, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, s.kv(kv.Key, kv.Value, kv.ModRevision, kv.CreateRevision, kv.Lease))
	}
	return out, resp.Header.Revision, nil
}

// ListValues returns the values of the keys under prefix, in key order.
func (s *Store) ListValues(ctx context.Context, prefix string) ([]string, error) {
	kvs, _, err := s.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, string(kv.Value))
	}
	return out, nil
}

// Event is one change seen by Watch. Deleted events carry no value.
type Event struct {
	KV      KV
	Deleted bool
}

// Watch streams changes under prefix from revision fromRev (0 = now) until
// ctx is done. The channel closes when the watch ends; a caller that needs a
// consistent view re-lists and watches again from the list's revision + 1.
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) <-chan []Event {
	return s.watch(ctx, prefix, fromRev, false)
}

// WatchProgress is Watch that also delivers an empty batch for each
// progress notification etcd sends (RequestProgress asks for one): a
// watcher that hears one knows its copy is current as of then.
func (s *Store) WatchProgress(ctx context.Context, prefix string, fromRev int64) <-chan []Event {
	return s.watch(ctx, prefix, fromRev, true)
}

// RequestProgress asks etcd to send every watch of this store a progress
// notification (seen by WatchProgress watchers as an empty batch).
func (s *Store) RequestProgress(ctx context.Context) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	// The watches' stream is the one of contexts that require a leader.
	return s.cli.RequestProgress(clientv3.WithRequireLeader(ctx))
}

func (s *Store) watch(ctx context.Context, prefix string, fromRev int64, progress bool) <-chan []Event {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if fromRev > 0 {
		opts = append(opts, clientv3.WithRev(fromRev))
	}
	wch := s.cli.Watch(clientv3.WithRequireLeader(ctx), s.abs(prefix), opts...)
	out := make(chan []Event)
	go func() {
		defer close(out)
		for resp := range wch {
			if resp.Err() != nil {
				return
			}
			if len(resp.Events) == 0 && !progress {
				continue
			}
			evs := make([]Event, 0, len(resp.Events))
			for _, ev := range resp.Events {
				evs = append(evs, Event{
					KV:      s.kv(ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision, ev.Kv.CreateRevision, ev.Kv.Lease),
					Deleted: ev.Type == clientv3.EventTypeDelete,
				})
			}
			select {
			case out <- evs:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// Lease is a granted etcd lease kept alive in the background until Revoke or
// until the context given to GrantLease is done.
type Lease struct {
	ID   clientv3.LeaseID
	TTL  time.Duration
	lost chan struct{}
	s    *Store
	stop context.CancelFunc
}

// Lost is closed when keep-alive stops (the lease expired or the context
// ended): keys bound to it are gone or about to be.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Revoke ends the lease at once, deleting its keys.
func (l *Lease) Revoke(ctx context.Context) error {
	l.stop()
	ctx, cancel := l.s.ctx(ctx)
	defer cancel()
	_, err := l.s.cli.Revoke(ctx, l.ID)
	if err != nil {
		return fmt.Errorf("cluster: revoke lease: %w", err)
	}
	return nil
}

// GrantLease grants a lease of ttl (rounded up to whole seconds, minimum 1 s)
// and keeps it alive while ctx lives.
func (s *Store) GrantLease(ctx context.Context, ttl time.Duration) (*Lease, error) {
	secs := int64((ttl + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	resp, _, err := write(ctx, s, false, "grant lease", func(ctx context.Context) (*clientv3.LeaseGrantResponse, error) {
		return s.cli.Grant(ctx, secs)
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: grant lease: %w", err)
	}
	kctx, stop := context.WithCancel(ctx)
	ka, err := s.cli.KeepAlive(kctx, resp.ID)
	if err != nil {
		stop()
		return nil, fmt.Errorf("cluster: keep lease alive: %w", err)
	}
	l := &Lease{ID: resp.ID, TTL: time.Duration(secs) * time.Second, lost: make(chan struct{}), s: s, stop: stop}
	go func() {
		defer close(l.lost)
		for range ka {
		}
	}()
	return l, nil
}
