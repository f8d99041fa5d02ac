package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/cluster"
)

// Ownership by bundles, as Pulsar does: a namespace's topics hash (CRC32
// of the topic name) into Bundles hash ranges; each bundle is owned by one
// broker of the region through an etcd key bound to that broker's lease —
// one lease per broker, one key per bundle, not one per topic.
//
//   - /brokers/ID: a live broker's registration (service and admin URLs),
//     under its lease.
//   - /ownership/TENANT/NS/0xLOWER_0xUPPER: the owner's id, under its lease.
//
// A lookup answers the owner; for an unowned bundle it picks the live
// broker owning the fewest bundles. A broker acquires a bundle when a
// producer or consumer of one of its topics arrives and nobody owns it
// (create-if-absent), and refuses (ServiceNotReady: the client looks up
// again) when another broker owns it. When a broker dies its lease
// expires, its keys vanish, and the next lookup places the bundle
// elsewhere; the new owner opens the topics' managed ledgers, which fences
// the old owner's ledgers. A broker that loses its lease closes every
// topic at once (it may be partitioned from etcd while another broker
// takes its bundles).

// BrokerInfo is a broker's registration.
type BrokerInfo struct {
	ID         string `json:"id"`
	ServiceURL string `json:"serviceUrl"`
	AdminURL   string `json:"adminUrl"`
	// ReplicationAddr is where other regions stream replicated entries.
	ReplicationAddr string `json:"replicationAddr,omitempty"`
	// Listeners are the broker's named URLs (Config.AdvertisedListeners),
	// ServiceURL its internal one; nil without named listeners.
	Listeners meta.Listeners `json:"advertisedListeners,omitempty"`
	// HTTPListeners are their web service URLs (http:// and https://
	// entries of Config.AdvertisedListeners), nil without any: what an
	// HTTP lookup in a listener answers and where an admin call is
	// redirected to in the caller's listener.
	HTTPListeners meta.HTTPListeners `json:"advertisedHttpListeners,omitempty"`
}

type bundle struct {
	ns           string
	lower, upper uint32 // [lower, upper]
}

func (b bundle) key() string {
	return fmt.Sprintf("/ownership/%s/0x%08x_0x%08x", b.ns, b.lower, b.upper)
}

func (b bundle) String() string { return fmt.Sprintf("%s/0x%08x_0x%08x", b.ns, b.lower, b.upper) }

// bundleOf maps a topic to the bundle of boundaries that holds its hash.
// boundaries are ascending, start at 0 and end at 0xffffffff; bundle i is
// [boundaries[i], boundaries[i+1]-1], the last one including 0xffffffff.
// Partitions of one topic hash by their own names, so they spread.
func bundleOf(t meta.TopicName, boundaries []uint32) bundle {
	h := crc32.ChecksumIEEE([]byte(t.String()))
	i := sort.Search(len(boundaries)-1, func(i int) bool { return boundaries[i+1] > h }) // first range whose upper bound is above h
	if i >= len(boundaries)-1 {
		i = len(boundaries) - 2
	}
	upper := boundaries[i+1] - 1
	if i == len(boundaries)-2 {
		upper = boundaries[i+1]
	}
	return bundle{ns: t.NamespaceName(), lower: boundaries[i], upper: upper}
}

func (bd bundle) contains(h uint32) bool { return bd.lower <= h && h <= bd.upper }

// ownership is this broker's side of bundle ownership.
type ownership struct {
	b     *Broker
	lease *cluster.Lease
	info  BrokerInfo

	mu    sync.Mutex
	owned map[string]bundle // by key
	// handoffs: bundles this broker released to another by a balancing
	// move (moveBundle with a target), by key, for handoffWindow: this
	// broker does not take one back meanwhile (acquire answers the target
	// as its owner), so the move lands instead of bouncing.
	handoffs map[string]handoff

	// store holds the registration and the bundle keys: the region's store,
	// or for stretched namespaces (whose topics one broker of any region
	// owns at a time) the global store. regKey is the registration's key.
	store  *cluster.Store
	regKey string

	// cache is a watched copy of the store's bundle keys: a lookup of an
	// owned bundle answers from it without reading etcd (ownerHint).
	cache *cluster.Cache
}

func (b *Broker) startOwnership(ctx context.Context) error {
	info := BrokerInfo{ID: b.cfg.BrokerID, ServiceURL: b.serverURL, AdminURL: b.AdminURL(), ReplicationAddr: b.repl.Addr(), Listeners: b.lst.byName, HTTPListeners: b.lst.http}
	o := &ownership{b: b, owned: map[string]bundle{}, info: info, store: b.cfg.Store, regKey: "/brokers/" + b.cfg.BrokerID}
	lease, err := o.register(ctx)
	if err != nil {
		return err
	}
	o.lease = lease
	o.cache = cluster.WatchPrefix(o.store, "/ownership/")
	b.own = o
	go o.keep(lease)
	if b.cfg.GlobalStore != b.cfg.Store {
		g := &ownership{b: b, owned: map[string]bundle{}, info: info, store: b.cfg.GlobalStore,
			regKey: "/stretched/brokers/" + b.cfg.Cluster + "/" + b.cfg.BrokerID}
		// The global store is another region's quorum away and may be
		// slow or cut off when this broker starts: a failed registration
		// there does not stop the broker (its region's own namespaces
		// need only the region's store); keep registers it in the
		// background, and stretched bundles wait until it has.
		lease, err := g.register(ctx)
		if err != nil {
			b.log.Warn("not registered in the global store yet; retrying in the background (stretched namespaces wait)", "err", err)
			lease = nil
		}
		g.lease = lease
		g.cache = cluster.WatchPrefix(g.store, "/ownership/")
		b.gown = g
		go g.keep(lease)
	}
	return nil
}

// ownershipFor is the ownership a namespace's bundles are held under.
func (b *Broker) ownershipFor(pol meta.Policies) *ownership {
	if b.gown != nil && pol.Replication != nil && pol.Replication.Mode == meta.ReplicationStretched {
		return b.gown
	}
	return b.own
}

// register grants a lease and puts the broker's registration under it.
func (o *ownership) register(ctx context.Context) (*cluster.Lease, error) {
	b := o.b
	lease, err := o.store.GrantLease(b.ctx, b.cfg.OwnershipTTL)
	if err != nil {
		return nil, err
	}
	v, _ := json.Marshal(o.info)
	if _, err := o.store.PutWithLease(ctx, o.regKey, v, lease.ID); err != nil {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = lease.Revoke(rctx)
		cancel()
		return nil, err
	}
	return lease, nil
}

// errNotRegistered: the broker has no registration in the store the
// bundle lives in yet (the global store did not answer when it started).
var errNotRegistered = errors.New("broker not registered in the global store yet")

// currentLease is the lease bundles are acquired under; nil while the
// broker is not registered.
func (o *ownership) currentLease() *cluster.Lease {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lease
}

// keep watches the lease. When it is lost (etcd unreachable, or the
// broker paused past its TTL) every topic closes at once — another broker
// may own them now — and the broker registers again under a new lease, so
// it serves again once etcd answers.
//
// A nil lease (the registration failed at start) goes straight to
// registering.
func (o *ownership) keep(lease *cluster.Lease) {
	b := o.b
	for {
		if lease != nil {
			select {
			case <-lease.Lost():
			case <-b.ctx.Done():
				return
			}
			b.mu.Lock()
			closing := b.closed
			b.mu.Unlock()
			if closing || b.ctx.Err() != nil {
				return
			}
			b.log.Error("broker lost its etcd lease: closing every topic owned under it (another broker may own them now)", "registration", o.regKey)
			o.mu.Lock()
			o.owned = map[string]bundle{}
			o.mu.Unlock()
			b.np.close(func(t *npTopic) bool { return b.ownershipFor(t.policies()) == o }, nil)
			for _, t := range b.loadedTopics() {
				// Only the topics held under this lease: losing the global
				// store (a region cut off) must not close the region's own
				// topics, whose ownership lives in the region's store.
				if b.ownershipFor(t.policies()) != o {
					continue
				}
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				t.close(cctx)
				cancel()
			}
		}
		for {
			ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
			nl, err := o.register(ctx)
			cancel()
			if err == nil {
				o.mu.Lock()
				o.lease = nl
				o.mu.Unlock()
				lease = nl
				b.log.Info("broker registered under a new lease", "registration", o.regKey)
				break
			}
			if b.ctx.Err() != nil {
				return
			}
			b.log.Warn("broker registration failed; retrying", "err", err)
			select {
			case <-b.ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

func (o *ownership) brokers(ctx context.Context) ([]BrokerInfo, error) {
	kvs, _, err := o.b.cfg.Store.List(ctx, "/brokers/")
	if err != nil {
		return nil, err
	}
	out := make([]BrokerInfo, 0, len(kvs))
	for _, kv := range kvs {
		var bi BrokerInfo
		if json.Unmarshal(kv.Value, &bi) == nil {
			out = append(out, bi)
		}
	}
	return out, nil
}

// owner returns the owner of a bundle, if any.
func (o *ownership) owner(ctx context.Context, bd bundle) (BrokerInfo, bool, error) {
	kv, err := o.store.Get(ctx, bd.key())
	if errors.Is(err, cluster.ErrNotFound) {
		return BrokerInfo{}, false, nil
	}
	if err != nil {
		return BrokerInfo{}, false, err
	}
	var bi BrokerInfo
	if err := json.Unmarshal(kv.Value, &bi); err != nil {
		return BrokerInfo{}, false, err
	}
	return bi, true, nil
}

// ownerHint answers a bundle's owner from memory: this broker for a
// bundle it holds, else the watched copy of the bundle keys. ok is false
// when neither knows (the bundle is unowned, or the copy is not current):
// then ask owner. The answer may be a moment stale; the broker it names
// checks its ownership when the client's producer or consumer arrives.
func (o *ownership) ownerHint(bd bundle) (BrokerInfo, bool) {
	o.mu.Lock()
	_, mine := o.owned[bd.key()]
	o.mu.Unlock()
	if mine {
		return o.info, true
	}
	if o.cache == nil {
		return BrokerInfo{}, false
	}
	kv, found, live := o.cache.Get(bd.key())
	if !found || !live {
		return BrokerInfo{}, false
	}
	var bi BrokerInfo
	if err := json.Unmarshal(kv.Value, &bi); err != nil || bi.ServiceURL == "" {
		return BrokerInfo{}, false
	}
	return bi, true
}

// candidate picks the live broker owning the fewest bundles.
func (o *ownership) candidate(ctx context.Context) (BrokerInfo, error) {
	bs, err := o.brokers(ctx)
	if err != nil {
		return BrokerInfo{}, err
	}
	if len(bs) == 0 {
		return o.info, nil
	}
	kvs, _, err := o.b.cfg.Store.List(ctx, "/ownership/")
	if err != nil {
		return BrokerInfo{}, err
	}
	load := map[string]int{}
	for _, kv := range kvs {
		var bi BrokerInfo
		if json.Unmarshal(kv.Value, &bi) == nil {
			load[bi.ID]++
		}
	}
	sort.Slice(bs, func(i, j int) bool {
		if load[bs[i].ID] != load[bs[j].ID] {
			return load[bs[i].ID] < load[bs[j].ID]
		}
		return bs[i].ID < bs[j].ID
	})
	return bs[0], nil
}

// handoff is a bundle handed to another broker (ownership.handoffs).
type handoff struct {
	to    BrokerInfo
	until time.Time
}

// handoffWindow: how long a broker that handed a bundle to another keeps
// from taking it back. A balancing move released the bundle and the next
// request for one of its topics on this broker — a remote region's
// replicator still sending here, a lookup — acquired it again at once:
// the move closed the topics' clients (a consumer's unacknowledged
// deliveries were redelivered) and did not balance anything, round after
// round (TestPlannedSwitchoverAcrossBrokersAndRegionWide: 2 of 3 moves in
// a standby region bounced back). Past the window (a target that died
// before it took the bundle) any broker acquires it.
const handoffWindow = 5 * time.Second

// handOff records that bd is being released to to (moveBundle).
func (o *ownership) handOff(bd bundle, to BrokerInfo) {
	if to.ID == o.info.ID {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.handoffs == nil {
		o.handoffs = map[string]handoff{}
	}
	now := time.Now()
	for k, h := range o.handoffs {
		if now.After(h.until) {
			delete(o.handoffs, k)
		}
	}
	o.handoffs[bd.key()] = handoff{to: to, until: now.Add(handoffWindow)}
}

// handedTo returns the broker bd was handed to within handoffWindow.
func (o *ownership) handedTo(bd bundle) (BrokerInfo, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h, ok := o.handoffs[bd.key()]
	if !ok || time.Now().After(h.until) {
		return BrokerInfo{}, false
	}
	return h.to, true
}

// acquire makes this broker the bundle's owner if nobody is; it reports
// whether this broker owns it. A bundle this broker just handed to
// another (handOff) is not taken back: the target is answered as its
// owner.
func (o *ownership) acquire(ctx context.Context, bd bundle) (bool, BrokerInfo, error) {
	o.mu.Lock()
	_, mine := o.owned[bd.key()]
	o.mu.Unlock()
	if mine {
		return true, o.info, nil
	}
	if to, ok := o.handedTo(bd); ok {
		return false, to, nil
	}
	lease := o.currentLease()
	if lease == nil {
		return false, BrokerInfo{}, errNotRegistered
	}
	v, _ := json.Marshal(o.info)
	_, err := o.store.CreateWithLease(ctx, bd.key(), v, lease.ID)
	if err == nil {
		o.mu.Lock()
		o.owned[bd.key()] = bd
		o.mu.Unlock()
		o.b.log.Info("bundle acquired", "bundle", bd.String())
		return true, o.info, nil
	}
	if !errors.Is(err, cluster.ErrExists) {
		return false, BrokerInfo{}, err
	}
	bi, ok, err := o.owner(ctx, bd)
	if err != nil {
		return false, BrokerInfo{}, err
	}
	if ok && bi.ID == o.info.ID {
		// Ours from before a restart of this process under the same id.
		o.mu.Lock()
		o.owned[bd.key()] = bd
		o.mu.Unlock()
		return true, o.info, nil
	}
	return false, bi, nil
}

// release gives a bundle up.
func (o *ownership) release(ctx context.Context, bd bundle) error {
	o.mu.Lock()
	delete(o.owned, bd.key())
	o.mu.Unlock()
	return o.store.Delete(ctx, bd.key())
}

func (o *ownership) ownedBundles() []bundle {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]bundle, 0, len(o.owned))
	for _, bd := range o.owned {
		out = append(out, bd)
	}
	return out
}

func (o *ownership) owns(bd bundle) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.owned[bd.key()]
	return ok
}

// bundleFor returns a topic's bundle under its namespace's current
// boundaries (read from etcd, never cached: a split elsewhere must never
// let two brokers own overlapping ranges).
func (b *Broker) bundleFor(ctx context.Context, pol meta.Policies, tn meta.TopicName) (bundle, error) {
	bs, _, err := b.boundaries(ctx, tn.NamespaceName(), pol)
	if err != nil {
		return bundle{}, err
	}
	return bundleOf(tn, bs), nil
}

// boundariesHint returns a namespace's bundle boundaries from the watched
// copy of the region's bundle records (ok false: ask boundaries).
func (b *Broker) boundariesHint(ns string) ([]uint32, bool) {
	if b.bundles == nil {
		return nil, false
	}
	kv, found, live := b.bundles.Get("/bundles/" + ns)
	if !found || !live {
		return nil, false
	}
	var bs []uint32
	if err := json.Unmarshal(kv.Value, &bs); err != nil || len(bs) < 2 {
		return nil, false
	}
	return bs, true
}

// boundaries returns a namespace's bundle boundaries and their etcd
// revision, creating the initial even split from the policy's bundle
// count on first use.
func (b *Broker) boundaries(ctx context.Context, ns string, pol meta.Policies) ([]uint32, int64, error) {
	key := "/bundles/" + ns
	for {
		kv, err := b.cfg.Store.Get(ctx, key)
		if err == nil {
			var bs []uint32
			if err := json.Unmarshal(kv.Value, &bs); err != nil || len(bs) < 2 {
				return nil, 0, fmt.Errorf("bundles of %s: bad record", ns)
			}
			return bs, kv.ModRevision, nil
		}
		if !errors.Is(err, cluster.ErrNotFound) {
			return nil, 0, err
		}
		// A stored numBundles out of range (past the admin API) is not
		// applied: the default split is, with a warning.
		n, err := pol.BundleCount()
		if err != nil {
			b.log.Warn("bundles: a stored namespace policy is out of range and not applied (the default is)", "namespace", ns, "bundles", n, "err", err)
		}
		v, _ := json.Marshal(meta.EvenBoundaries(n))
		if _, err := b.cfg.Store.Create(ctx, key, v); err != nil && !errors.Is(err, cluster.ErrExists) {
			return nil, 0, err
		}
	}
}

// handOff unloads every owned bundle to other brokers (graceful shutdown):
// each topic is closed (its ledger closed, cursors flushed), the bundle
// released, and its clients told to reconnect to the new owner directly
// (assignedBrokerServiceUrl), so sends resume without a lookup.
func (b *Broker) handOff(ctx context.Context) {
	if b.own == nil {
		return
	}
	bs, err := b.own.brokers(ctx)
	if err != nil {
		b.log.Warn("hand-off: cannot list brokers", "err", err)
		return
	}
	var others []BrokerInfo
	for _, bi := range bs {
		if bi.ID != b.cfg.BrokerID {
			others = append(others, bi)
		}
	}
	// Stop being a candidate for new bundles first.
	_ = b.cfg.Store.Delete(ctx, "/brokers/"+b.cfg.BrokerID)
	byBundle := map[string][]*Topic{}
	for _, t := range b.loadedTopics() {
		byBundle[t.bundle.key()] = append(byBundle[t.bundle.key()], t)
	}
	i := 0
	for _, bd := range b.own.ownedBundles() {
		var target *BrokerInfo
		if len(others) > 0 {
			target = &others[i%len(others)]
			i++
		}
		b.moveBundle(ctx, bd, byBundle[bd.key()], target)
	}
}
