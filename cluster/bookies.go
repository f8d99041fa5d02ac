package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/proto/metapb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// Key layout of the bookie registry, relative to a region's store prefix.
const (
	bookiesWritable = "/bookies/writable/"
	bookiesReadOnly = "/bookies/readonly/"
	bookieCookies   = "/bookies/cookies/"
	ledgerIDKey     = "/ledger-id"
)

// DefaultRegistrationTTL is how long a bookie's registration outlives the
// bookie: 10 s, BookKeeper's etcd default. Shorter detects a dead bookie
// sooner for new ensembles; too short and a GC pause or a busy 2-core
// machine drops live bookies.
const DefaultRegistrationTTL = 10 * time.Second

// BookieRegistry is a bookie's registration in its region's etcd, and its
// cookie. It implements bookie.Registry. Safe for concurrent use.
type BookieRegistry struct {
	s          *Store
	ttl        time.Duration
	allocators []AllocatorStore
	// Logger, when set before the first Register, hears when the
	// registration's lease was lost and the bookie registered again.
	Logger *slog.Logger

	mu           sync.Mutex
	lease        *Lease
	key          string
	reg          *metapb.BookieRegistration
	deregistered bool // Deregister ran: the lease is not renewed any more
}

// NewBookieRegistry returns a registry on s (a region's store). ttl 0 means
// DefaultRegistrationTTL. allocators are the other stores whose ledger ids
// can be placed on this bookie (LedgerIDHighWater covers them): a
// multi-region deployment's global store; none when every ledger id comes
// from s (a single region, standalone).
func NewBookieRegistry(s *Store, ttl time.Duration, allocators ...AllocatorStore) *BookieRegistry {
	if ttl == 0 {
		ttl = DefaultRegistrationTTL
	}
	return &BookieRegistry{s: s, ttl: ttl, allocators: allocators}
}

// GetCookie returns the cookie recorded for bookieID.
func (r *BookieRegistry) GetCookie(ctx context.Context, bookieID string) (*metapb.Cookie, bool, error) {
	kv, err := r.s.Get(ctx, bookieCookies+bookieID)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	c := &metapb.Cookie{}
	if err := proto.Unmarshal(kv.Value, c); err != nil {
		return nil, false, fmt.Errorf("cluster: cookie of %s: %w", bookieID, err)
	}
	return c, true, nil
}

// PutCookie records the cookie.
func (r *BookieRegistry) PutCookie(ctx context.Context, c *metapb.Cookie) error {
	b, err := proto.Marshal(c)
	if err != nil {
		return err
	}
	_, err = r.s.Put(ctx, bookieCookies+c.BookieId, b)
	return err
}

// AllocatorStore is a store, other than the region's, whose IDAllocator
// hands out the ids of ledgers placed on this region's bookies: in a
// multi-region deployment the global store (brokers allocate every ledger
// id there, so that ids never collide between regions, and stretched
// ledgers live there). A wiped bookie's limbo bound must cover its ids too.
type AllocatorStore struct {
	// Name names the store in errors ("global store (--global-etcd)").
	Name string
	// Get returns the store, waiting until it is connected or ctx ends.
	Get func(ctx context.Context) (*Store, error)
}

// highWaterAttempt bounds one read of a store's high water, so that an
// unreachable member is retried (another endpoint, a healed network)
// within the caller's deadline rather than waited for until it.
const highWaterAttempt = 5 * time.Second

// LedgerIDHighWater returns an upper bound of every ledger id allocated so
// far by an allocator on the region's store or on any of the stores given
// to NewBookieRegistry (ledger ids are etcd revisions, see IDAllocator; the
// region's etcd and the global one count their revisions apart, so the
// bound is the maximum over them). It never guesses low: a store that
// cannot be read is retried until ctx ends, and then the error names it (a
// bound below an id this bookie held would let a wiped bookie answer "no
// such entry" for a ledger it lost, and a recovery close it short).
func (r *BookieRegistry) LedgerIDHighWater(ctx context.Context) (int64, error) {
	hw, err := highWaterOf(ctx, "region store", func(context.Context) (*Store, error) { return r.s, nil })
	if err != nil {
		return 0, err
	}
	for _, a := range r.allocators {
		h, err := highWaterOf(ctx, a.Name, a.Get)
		if err != nil {
			return 0, err
		}
		hw = max(hw, h)
	}
	return hw, nil
}

// highWaterOf reads the high water of the store get returns, retrying
// until ctx ends.
func highWaterOf(ctx context.Context, name string, get func(context.Context) (*Store, error)) (int64, error) {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		s, err := get(ctx)
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, highWaterAttempt)
			var hw int64
			hw, err = NewIDAllocator(s).HighWater(actx)
			cancel()
			if err == nil {
				return hw, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("cluster: ledger id high water of the %s: %w (gave up: %v)", name, err, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// ledgersPrefix is where ledger metadata lives in a store, one key per
// ledger, "/ledgers/" and the id in 20 digits (bookie/ledger's ledgerKey).
const ledgersPrefix = "/ledgers/"

// ListLedgers returns the id of every ledger in the region's store,
// ascending (ListLedgerIDs). It implements bookie.LedgerLister, for the
// bookie's garbage collection. In a multi-region deployment the global
// store holds the metadata of stretched ledgers, whose entries are on
// regions' bookies too: a bookie there must list it as well
// (cmd/meridian's bookie does), or it takes them for deleted ledgers.
func (r *BookieRegistry) ListLedgers(ctx context.Context) ([]int64, error) {
	return ListLedgerIDs(ctx, r.s)
}

// ListLedgerIDs returns the id of every ledger whose metadata is in s,
// ascending, for garbage collection: the store is read in one request at
// one revision (linearizable), and a failure, a truncated answer or a key
// under the prefix that is not a ledger's is an error, never a shorter
// list.
func ListLedgerIDs(ctx context.Context, s *Store) ([]int64, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.abs(ledgersPrefix), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("cluster: list %s%s: %w", s.prefix, ledgersPrefix, err)
	}
	if resp.More || int64(len(resp.Kvs)) != resp.Count {
		return nil, fmt.Errorf("cluster: list %s%s: truncated answer (%d of %d keys)", s.prefix, ledgersPrefix, len(resp.Kvs), resp.Count)
	}
	ids := make([]int64, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rel := strings.TrimPrefix(string(kv.Key), s.abs(ledgersPrefix))
		id, err := strconv.ParseInt(rel, 10, 64)
		if err != nil || len(rel) != 20 || id < 0 {
			return nil, fmt.Errorf("cluster: list %s%s: key %q is not a ledger's", s.prefix, ledgersPrefix, kv.Key)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// Register publishes reg under a lease kept alive until Deregister or until
// the store's connection closes (the process dies). ctx bounds this call
// only. Calling it again replaces the registration (e.g. to move it to
// read-only). If another live process holds the same bookie id, Register
// waits up to twice the TTL for its lease to expire and then fails.
//
// A registration left by this bookie's own previous run (same instance id,
// same advertised address) is taken over at once: that run is dead, since
// this process holds its data dir and its address, and its lease merely
// has not run out yet (after a kill -9 it lasts the TTL; after an etcd
// restart, which renews every lease, the TTL again). Waiting it out would
// hide a running bookie from its region for that long: new ensembles could
// not use it, and auto-recovery, seeing every bookie of a restarted region
// gone at once, declared them all lost.
func (r *BookieRegistry) Register(ctx context.Context, reg *metapb.BookieRegistration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deregistered = false
	return r.registerLocked(ctx, reg)
}

func (r *BookieRegistry) registerLocked(ctx context.Context, reg *metapb.BookieRegistration) error {
	b, err := proto.Marshal(reg)
	if err != nil {
		return err
	}
	if r.lease != nil {
		select {
		case <-r.lease.Lost(): // expired: its keys are gone
			r.lease = nil
		default:
		}
	}
	if r.lease == nil {
		l, err := r.s.GrantLease(context.WithoutCancel(ctx), r.ttl)
		if err != nil {
			return err
		}
		r.lease = l
		go r.renew(l)
	}
	key := bookiesWritable + reg.Id
	other := bookiesReadOnly + reg.Id
	if reg.ReadOnly {
		key, other = other, key
	}
	deadline := time.Now().Add(2 * r.ttl)
	for {
		ok, err := r.claim(ctx, key, other, b, reg)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: another bookie already registered as %q", reg.Id)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	r.key = key
	r.reg = proto.Clone(reg).(*metapb.BookieRegistration)
	return nil
}

// claim writes key under our lease unless a key of this id is held by
// another lease that is not our previous run's (predecessor), and removes
// the key of the other state. The put binds key to our lease, so the
// predecessor's lease expiring later deletes nothing of ours.
func (r *BookieRegistry) claim(ctx context.Context, key, other string, val []byte, reg *metapb.BookieRegistration) (bool, error) {
	for _, k := range []string{key, other} {
		kv, err := r.s.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		if kv.Lease != int64(r.lease.ID) && !predecessor(kv.Value, reg) {
			return false, nil
		}
	}
	if err := r.s.Delete(ctx, other); err != nil {
		return false, err
	}
	if _, err := r.s.PutWithLease(ctx, key, val, r.lease.ID); err != nil {
		return false, err
	}
	return true, nil
}

// predecessor reports whether val, a registration held by another lease, is
// the one reg's bookie left in a previous run: the same id, the same
// instance id (the same data dir, which its store holds locked) and the
// same advertised address (which this process listens on before it
// registers). Another process with that id is told apart by its instance
// id (another data dir) or its address.
func predecessor(val []byte, reg *metapb.BookieRegistration) bool {
	old := &metapb.BookieRegistration{}
	if err := proto.Unmarshal(val, old); err != nil {
		return false
	}
	return reg.GetInstanceId() != "" && old.GetId() == reg.GetId() &&
		old.GetInstanceId() == reg.GetInstanceId() && old.GetAddr() == reg.GetAddr()
}

// renew registers the bookie again, under a new lease, when l is lost
// while it is still the registration's lease: its keep-alive stopped
// (etcd unreachable, or this process stalled, for the TTL), so etcd
// deleted the registration, and the bookie, still serving and still alive
// in gossip, was out of its region's registry for good: no new ensemble
// could use it. It retries until it succeeds, Deregister runs, or the
// store closes.
func (r *BookieRegistry) renew(l *Lease) {
	done := r.s.cli.Ctx().Done()
	select {
	case <-l.Lost():
	case <-done:
		return
	}
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		if r.s.cli.Ctx().Err() != nil {
			return // the store closed: the process is going
		}
		r.mu.Lock()
		if r.lease != l || r.deregistered || r.reg == nil {
			r.mu.Unlock()
			return // replaced (a Register meanwhile) or revoked
		}
		reg := r.reg
		ctx, cancel := context.WithTimeout(r.s.cli.Ctx(), 2*r.ttl+10*time.Second)
		err := r.registerLocked(ctx, reg) // grants a new lease: l is lost
		cancel()
		if err == nil {
			r.mu.Unlock()
			if r.Logger != nil {
				r.Logger.Warn("bookie: registration lease lost; registered again", "bookie", reg.GetId(), "lost_lease", int64(l.ID))
			}
			return // the new lease has its own renew
		}
		if r.lease != l && r.lease != nil { // granted, but the claim failed: drop it
			nl := r.lease
			rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
			nl.Revoke(rctx) // its renew returns: r.lease is not it
			rcancel()
		}
		r.lease = l // the next try starts over from the lost lease
		r.mu.Unlock()
		if r.Logger != nil {
			r.Logger.Warn("bookie: registration lease lost; registering again failed, retrying", "bookie", reg.GetId(), "err", err, "retry_in", wait)
		}
		select {
		case <-done:
			return
		case <-time.After(wait):
		}
	}
}

// Deregister revokes the registration at once.
func (r *BookieRegistry) Deregister(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deregistered = true
	if r.lease == nil {
		return nil
	}
	err := r.lease.Revoke(ctx)
	r.lease = nil
	return err
}

// BookieState is a registered bookie's state.
type BookieState string

const (
	BookieWritable BookieState = "writable"
	BookieReadOnly BookieState = "read-only"
)

// RegisteredBookie is one entry of the registry view.
type RegisteredBookie struct {
	Reg   *metapb.BookieRegistration
	State BookieState
}

// BookieView is a live view of a region's registered bookies, kept current
// by a watch. Safe for concurrent use.
type BookieView struct {
	s      *Store
	mu     sync.RWMutex
	byID   map[string]RegisteredBookie
	cancel context.CancelFunc
	done   chan struct{}
	ready  chan struct{}
}

// WatchBookies starts a view of the region's bookies. Close stops it.
func WatchBookies(ctx context.Context, s *Store) (*BookieView, error) {
	ctx, cancel := context.WithCancel(ctx)
	v := &BookieView{s: s, byID: map[string]RegisteredBookie{}, cancel: cancel, done: make(chan struct{}), ready: make(chan struct{})}
	rev, err := v.reload(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	go v.run(ctx, rev)
	return v, nil
}

func (v *BookieView) reload(ctx context.Context) (int64, error) {
	kvs, rev, err := v.s.List(ctx, "/bookies/")
	if err != nil {
		return 0, err
	}
	m := map[string]RegisteredBookie{}
	for _, kv := range kvs {
		v.apply(m, kv, false)
	}
	v.mu.Lock()
	v.byID = m
	v.mu.Unlock()
	return rev, nil
}

func (v *BookieView) apply(m map[string]RegisteredBookie, kv KV, deleted bool) {
	var state BookieState
	var id string
	switch {
	case strings.HasPrefix(kv.Key, bookiesWritable):
		state, id = BookieWritable, strings.TrimPrefix(kv.Key, bookiesWritable)
	case strings.HasPrefix(kv.Key, bookiesReadOnly):
		state, id = BookieReadOnly, strings.TrimPrefix(kv.Key, bookiesReadOnly)
	default:
		return
	}
	if deleted {
		if cur, ok := m[id]; ok && cur.State == state {
			delete(m, id)
		}
		return
	}
	reg := &metapb.BookieRegistration{}
	if err := proto.Unmarshal(kv.Value, reg); err != nil {
		return
	}
	m[id] = RegisteredBookie{Reg: reg, State: state}
}

func (v *BookieView) run(ctx context.Context, rev int64) {
	defer close(v.done)
	for ctx.Err() == nil {
		for evs := range v.s.Watch(ctx, "/bookies/", rev+1) {
			v.mu.Lock()
			for _, ev := range evs {
				v.apply(v.byID, ev.KV, ev.Deleted)
				if ev.KV.ModRevision > rev {
					rev = ev.KV.ModRevision
				}
			}
			v.mu.Unlock()
		}
		// The watch ended (compaction, leader loss, etcd restart): re-list.
		for ctx.Err() == nil {
			r, err := v.reload(ctx)
			if err == nil {
				rev = r
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// Bookies returns the registered bookies sorted by id. With writableOnly,
// read-only bookies are left out.
func (v *BookieView) Bookies(writableOnly bool) []RegisteredBookie {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]RegisteredBookie, 0, len(v.byID))
	for _, b := range v.byID {
		if writableOnly && b.State != BookieWritable {
			continue
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Reg.Id < out[j].Reg.Id })
	return out
}

// Lookup returns a registered bookie by id.
func (v *BookieView) Lookup(id string) (RegisteredBookie, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	b, ok := v.byID[id]
	return b, ok
}

// Close stops the view.
func (v *BookieView) Close() {
	v.cancel()
	<-v.done
}
