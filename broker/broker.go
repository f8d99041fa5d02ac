package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/broker/access"
	"github.com/meridian-mq/meridian/broker/admin"
	"github.com/meridian-mq/meridian/broker/failoverctl"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/broker/replication"
	"github.com/meridian-mq/meridian/broker/security"
	"github.com/meridian-mq/meridian/broker/stretched"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/healthz"
	"github.com/meridian-mq/meridian/internal/netaddr"
	"github.com/meridian-mq/meridian/internal/ratelog"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// Broker serves the Pulsar protocol for the topics of its region.
type Broker struct {
	cfg Config
	log *slog.Logger
	// peerLog rate-limits the lines a remote peer can trigger
	// (conn.peerLog).
	peerLog *ratelog.Logger
	meta    *meta.Metadata
	metrics *metrics
	guard   *security.Guard
	ctx     context.Context
	cancel  context.CancelFunc
	id      string // random per start: generated producer names stay unique

	own       *ownership
	gown      *ownership     // stretched namespaces' bundles, in the global store
	bundles   *cluster.Cache // the region's bundle boundaries, watched (boundariesHint)
	stretched *stretched.Placement
	// stretchedLive is stretched once started, for the metrics (the admin
	// API serves before).
	stretchedLive atomic.Pointer[stretched.Placement]
	fo            *failoverctl.Shell
	// foStarted is set once fo is made and its control started: the
	// metrics read fo only then (the admin API serves before).
	foStarted atomic.Bool
	repl      *replication.Service
	lis       net.Listener
	lst       listenerSet // advertised listeners (listeners.go)
	admin     *admin.Server
	serverURL string

	health       *healthz.Checker          // probes.go
	policyTurned func()                    // the policy loop's turn, for /healthz
	registered   atomic.Pointer[ownership] // own, once Start registered it

	conns *connTable  // client connections and their limits
	np    *npRegistry // the loaded non-persistent topics (nonpersistent.go)

	mu     sync.Mutex
	topics map[string]*topicSlot
	// frames bounds the bytes of frames being read over all connections
	// (Config.MaxBufferedFrameBytes); nil: no bound.
	frames *frameBudget
	closed bool

	producerSeq atomic.Int64
	// sw: the planned switchovers' holds on this broker (switchover.go).
	sw       switchHolds
	limiters sync.Map // namespace + remote region → *nsLimiter
	reach    sync.Map // broker URL → reachability (reachableURL)
	wg       sync.WaitGroup
}

// topicSlot holds a topic being loaded or loaded.
type topicSlot struct {
	ready chan struct{}
	t     *Topic
	err   error
}

// New returns a broker; Start listens.
func New(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	b := &Broker{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "broker"),
		meta:   meta.NewMetadata(cfg.GlobalStore),
		topics: map[string]*topicSlot{},
		id:     hex.EncodeToString(rb[:]),
	}
	b.peerLog = ratelog.New(b.log, 0)
	b.np = newNPRegistry(b)
	b.sw.b = b
	b.metrics = newMetrics(cfg.Cluster, b)
	b.conns = newConnTable(cfg.MaxConnectionsPerIP, cfg.MaxUnauthenticatedConnections, b.metrics.connections)
	if cfg.MaxBufferedFrameBytes > 0 {
		b.frames = newFrameBudget(cfg.MaxBufferedFrameBytes, func() { b.limitExceeded(limitBufferedFrames) })
	}
	b.guard = security.New(cfg.Security, b.meta, cfg.Cluster, b.metrics.reg)
	scheme := "pulsar://"
	if b.guard.TLSOn() {
		scheme = "pulsar+ssl://"
	}
	lst, err := newListenerSet(cfg, scheme)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	b.lst = lst
	b.health, b.policyTurned = newHealth(cfg, b.registered.Load, func() []failoverctl.NamespaceLease {
		if !b.foStarted.Load() {
			return nil
		}
		return b.fo.Leases()
	})
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// Metadata returns the broker's tenants/namespaces store.
func (b *Broker) Metadata() *meta.Metadata { return b.meta }

// Start creates the default tenant and namespace if missing and listens.
func (b *Broker) Start() error {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	// EnsureDefaults is idempotent, so an error it cannot tell applied from
	// not (a write that timed out while the global store's leadership
	// moved) is met by running it again, until the start's deadline.
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		err := b.meta.EnsureDefaults(actx, b.cfg.Cluster)
		acancel()
		if err == nil {
			break
		}
		b.log.Warn("creating the default tenant and namespace; trying again", "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
	lis, scheme, err := b.guard.Listen(b.cfg.ListenAddr)
	if err != nil {
		return err
	}
	b.lis = lis
	for _, ba := range b.lst.binds {
		blis, _, err := b.guard.Listen(ba.Addr)
		if err != nil {
			lis.Close()
			b.lst.close()
			return fmt.Errorf("%w (bind address of listener %s)", err, ba.Listener)
		}
		b.lst.bound = append(b.lst.bound, blis)
	}
	adv := b.cfg.AdvertisedAddr
	if a := b.lst.internalAddr(scheme); a != "" {
		adv = a
	}
	if adv == "" {
		adv = netaddr.Advertised(lis.Addr().String(), nil)
	}
	b.serverURL = scheme + adv
	if b.cfg.BrokerID == "" {
		b.cfg.BrokerID = adv
	}
	if b.cfg.AdminAddr != "" {
		b.admin = b.newAdmin()
		if err := b.admin.Start(); err != nil {
			lis.Close()
			b.lst.close()
			return err
		}
	}
	b.repl = b.newReplication()
	if err := b.repl.Start(b.lis.Addr().String(), b.serverURL); err != nil {
		lis.Close()
		b.lst.close()
		if b.admin != nil {
			b.admin.Close()
		}
		return err
	}
	b.fo = b.newFailoverShell()
	b.fo.StartWatch()
	if b.stretched, err = b.startStretched(); err != nil {
		lis.Close()
		b.lst.close()
		b.repl.Close()
		return err
	}
	if err := b.startOwnership(ctx); err != nil {
		lis.Close()
		b.lst.close()
		b.repl.Close()
		if b.admin != nil {
			b.admin.Close()
		}
		return err
	}
	b.registered.Store(b.own)
	b.fo.StartControl()
	b.foStarted.Store(true)
	b.meta.Watch()
	b.bundles = cluster.WatchPrefix(b.cfg.Store, "/bundles/")
	b.wg.Add(2 + len(b.lst.bound))
	go b.acceptLoop(b.lis, "")
	for i, blis := range b.lst.bound {
		go b.acceptLoop(blis, b.lst.binds[i].Listener)
	}
	go b.policyLoop()
	b.fo.StartProbe()
	b.log.Info("broker serving", "pulsar", b.serverURL, "admin", b.AdminURL())
	return nil
}

// Addr returns the Pulsar listener's address.
func (b *Broker) Addr() string { return b.lis.Addr().String() }

// ServiceURL returns pulsar://advertised-address (pulsar+ssl:// with TLS).
func (b *Broker) ServiceURL() string { return b.serverURL }

// acceptLoop serves the connections lis accepts: the main socket
// (listener "") or one bound for a listener (Config.BindAddresses).
func (b *Broker) acceptLoop(lis net.Listener, listener string) {
	defer b.wg.Done()
	for {
		nc, err := lis.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			b.peerLog.Warn("accept", "err", err) // EMFILE under a connection flood
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		c := newConn(b, nc)
		c.bindListener = listener
		refused, closed := b.conns.admit(c)
		if closed {
			nc.Close()
			return
		}
		if refused != "" {
			b.limitExceeded(refused)
			nc.Close()
			continue
		}
		go c.serve()
	}
}

// Close stops serving: closes client connections, then every topic (its
// pending appends complete, its cursors are flushed, its ledger closed).
func (b *Broker) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	// Not ready from now on (a load balancer takes the broker out of
	// rotation), before any bundle is handed over.
	if b.health != nil {
		b.health.Drain("stopping")
	}
	b.mu.Unlock()
	// Serve on while the prober sees it and the load balancer takes the
	// broker out (a Kubernetes endpoint update takes seconds): clients
	// stop being sent here before their topics move.
	if d := b.cfg.ShutdownDrainDelay; d > 0 {
		b.log.Info("broker draining: not ready, serving on before the hand-off", "delay", d)
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	conns := b.conns.close()
	if b.lis != nil {
		b.lis.Close()
	}
	b.lst.close()
	// Hand every bundle to another broker while client connections are
	// still open, so clients get CLOSE_PRODUCER/CLOSE_CONSUMER with the new
	// owner's address and reconnect there without a lookup.
	b.handOff(ctx)
	var errs []error
	b.np.closeAll()
	for _, t := range b.loadedTopics() {
		if err := t.close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	// Let the CLOSE_* frames reach the clients before the sockets close.
	time.Sleep(100 * time.Millisecond)
	for _, c := range conns {
		c.close("broker closing")
	}
	if b.admin != nil {
		b.admin.Close()
	}
	if b.repl != nil {
		b.repl.Close()
	}
	for _, o := range []*ownership{b.own, b.gown} {
		if o == nil {
			continue
		}
		if l := o.currentLease(); l != nil {
			_ = l.Revoke(ctx)
		}
		if o.cache != nil {
			o.cache.Close()
		}
	}
	if b.bundles != nil {
		b.bundles.Close()
	}
	b.meta.Close()
	b.cancel()
	if b.fo != nil {
		b.fo.Close()
	}
	b.wg.Wait()
	if b.stretched != nil {
		b.stretched.Close()
	}
	return errors.Join(errs...)
}

func (b *Broker) loadedTopics() []*Topic {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*Topic
	for _, s := range b.topics {
		select {
		case <-s.ready:
			if s.t != nil {
				out = append(out, s.t)
			}
		default:
		}
	}
	return out
}

// partitions answers PARTITIONED_METADATA: 0 for a non-partitioned topic.
// The namespace must exist.
func (b *Broker) partitions(ctx context.Context, topic string) (int, error) {
	tn, err := meta.ParseTopic(topic)
	if err != nil {
		return 0, err
	}
	if _, err := b.meta.GetPolicies(ctx, tn.NamespaceName()); err != nil {
		return 0, namespaceErr(tn.NamespaceName(), err)
	}
	return b.meta.Partitions(ctx, tn)
}

// lookup answers LOOKUP: Connect to the broker that owns the topic's
// bundle. For an unowned bundle it picks the live broker owning the fewest
// bundles: itself — it acquires the bundle before answering — or another,
// answered with an authoritative Redirect that makes the client ask that
// broker, which then acquires the bundle itself (authoritative lookups are
// never redirected again). So "Connect X" always means X owns the bundle.
//
// listener names the listener to answer in ("": the internal one); one
// this broker does not have is refused before anything is acquired, one
// the owner lacks when its URL is answered (meta.ErrNoListener).
func (b *Broker) lookup(ctx context.Context, topic string, authoritative bool, listener string) (url string, redirect bool, err error) {
	tn, err := meta.ParseTopic(topic)
	if err != nil {
		return "", false, err
	}
	if _, err := b.own.info.urlFor(listener); err != nil {
		return "", false, err
	}
	if bi, ok := b.lookupHint(tn); ok {
		b.metrics.lookups.WithLabelValues("memory").Inc()
		u, err := bi.urlFor(listener)
		return u, false, err
	}
	b.metrics.lookups.WithLabelValues("store").Inc()
	pol, err := b.meta.GetPolicies(ctx, tn.NamespaceName())
	if err != nil {
		return "", false, namespaceErr(tn.NamespaceName(), err)
	}
	bd, err := b.bundleFor(ctx, pol, tn)
	if err != nil {
		return "", false, fmt.Errorf("%w: %v", meta.ErrServiceNotReady, err)
	}
	own := b.ownershipFor(pol)
	if bi, ok, err := own.owner(ctx, bd); err != nil {
		return "", false, fmt.Errorf("%w: %v", meta.ErrServiceNotReady, err)
	} else if ok {
		u, err := bi.urlFor(listener)
		return u, false, err
	}
	target := b.own.info
	if !authoritative {
		if target, err = b.own.candidate(ctx); err != nil {
			return "", false, fmt.Errorf("%w: %v", meta.ErrServiceNotReady, err)
		}
	}
	if target.ID != b.cfg.BrokerID {
		u, err := target.urlFor(listener)
		return u, true, err
	}
	mine, owner, err := own.acquire(ctx, bd)
	if err != nil {
		return "", false, fmt.Errorf("%w: %v", meta.ErrServiceNotReady, err)
	}
	if !mine {
		u, err := owner.urlFor(listener)
		return u, false, err
	}
	u, err := b.own.info.urlFor(listener)
	return u, false, err
}

// lookupHint answers the lookup of a topic whose bundle has an owner from
// the watched copies of the namespace's policies, its bundle boundaries
// and the bundle keys: no etcd read, the common case. ok is false when a
// copy lacks what it needs (then lookup reads the store). A hint may be a
// moment stale, like any lookup answer by the time the client acts on it:
// the broker it names checks its ownership with fresh reads when the
// client's producer or consumer arrives (loadTopic), and refuses otherwise,
// and the client looks up again.
func (b *Broker) lookupHint(tn meta.TopicName) (BrokerInfo, bool) {
	ns := tn.NamespaceName()
	pol, ok := b.meta.PoliciesHint(ns)
	if !ok {
		return BrokerInfo{}, false
	}
	bs, ok := b.boundariesHint(ns)
	if !ok {
		return BrokerInfo{}, false
	}
	own := b.ownershipFor(pol)
	if own == nil {
		return BrokerInfo{}, false
	}
	return own.ownerHint(bundleOf(tn, bs))
}

// getTopic returns the loaded topic, loading (and, with create, creating)
// it on first use.
func (b *Broker) getTopic(ctx context.Context, name string, create bool) (*Topic, error) {
	tn, err := meta.ParseTopic(name)
	if err != nil {
		return nil, err
	}
	if !tn.Persistent() {
		// Never a managed ledger for it: its producers and consumers are
		// served by nonpersistent.go; everything else (schemas, admin
		// calls, replication) has nothing stored to work on.
		return nil, fmt.Errorf("%w: %s is a non-persistent topic: nothing of it is stored", meta.ErrNotAllowed, tn)
	}
	key := tn.String()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: broker closing", meta.ErrServiceNotReady)
	}
	s, ok := b.topics[key]
	if !ok {
		s = &topicSlot{ready: make(chan struct{})}
		b.topics[key] = s
		b.mu.Unlock()
		s.t, s.err = b.loadTopic(ctx, tn, create)
		if s.err != nil {
			b.mu.Lock()
			delete(b.topics, key)
			b.mu.Unlock()
		}
		close(s.ready)
	} else {
		b.mu.Unlock()
	}
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: loading %s: %v", meta.ErrServiceNotReady, key, ctx.Err())
	}
	return s.t, s.err
}

func (b *Broker) loadTopic(ctx context.Context, tn meta.TopicName, create bool) (*Topic, error) {
	pol, err := b.meta.GetPolicies(ctx, tn.NamespaceName())
	if err != nil {
		return nil, namespaceErr(tn.NamespaceName(), err)
	}
	bd, err := b.bundleFor(ctx, pol, tn)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", meta.ErrServiceNotReady, err)
	}
	if mine, owner, err := b.ownershipFor(pol).acquire(ctx, bd); err != nil {
		return nil, fmt.Errorf("%w: bundle %s: %v", meta.ErrServiceNotReady, bd, err)
	} else if !mine {
		return nil, meta.NotOwnerError{OwnerAdminURL: owner.AdminURL, OwnerHTTPListeners: owner.HTTPListeners, Err: fmt.Errorf("%w: bundle %s is owned by %s", meta.ErrTopicFenced, bd, owner.ID)}
	}
	if tn.Partition < 0 {
		if n, err := b.meta.Partitions(ctx, tn); err != nil {
			return nil, err
		} else if n > 0 {
			return nil, fmt.Errorf("%w: %s is partitioned (%d partitions): use its partitions", meta.ErrNotAllowed, tn, n)
		}
	}
	exists, err := b.meta.TopicExists(ctx, tn)
	if err != nil {
		return nil, err
	}
	if !exists {
		if !create {
			return nil, fmt.Errorf("%w: %s", meta.ErrTopicNotFound, tn)
		}
		if err := b.meta.RegisterTopic(ctx, tn); err != nil {
			return nil, err
		}
	}
	mlc := b.cfg.ManagedLedger
	for _, err := range applyLedgerPolicies(&mlc, pol) {
		b.log.Warn("topic load: a stored namespace policy is out of range and not applied (the broker's default is)", "topic", tn.String(), "err", err)
	}
	if pol.Effective().Mode == meta.ReplicationStretched {
		if err := b.stretchedLedgerConfig(&mlc, pol); err != nil {
			return nil, err
		}
	}
	ml, err := mledger.Open(ctx, tn.ManagedLedgerName(), mlc)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %v", meta.ErrServiceNotReady, tn, err)
	}
	t := newTopic(b, tn, ml, pol)
	t.bundle = bd
	t.store = mlc.Store
	if err := t.load(ctx); err != nil {
		ml.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: load %s: %v", meta.ErrServiceNotReady, tn, err)
	}
	b.metrics.topics.Inc()
	b.log.Info("topic loaded", append([]any{"topic", tn.String(), "entries", ml.NumberOfEntries()}, t.loaded...)...)
	// Not the requester's context: a client that gives up must not cut
	// the replicators' start short (a cursor create cancelled after etcd
	// applied it once fenced the topic; see mledger's errRecordMoved).
	rctx, rcancel := context.WithTimeout(b.ctx, 30*time.Second)
	t.repl.Sync(rctx)
	rcancel()
	return t, nil
}

// forgetTopic drops a closed topic from the registry.
func (b *Broker) forgetTopic(t *Topic) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.topics[t.name.String()]; ok && s.t == t {
		delete(b.topics, t.name.String())
		b.metrics.topics.Dec()
	}
}

func (b *Broker) newProducerName() string {
	return fmt.Sprintf("%s-%s-%d", b.cfg.Cluster, b.id, b.producerSeq.Add(1))
}

func (b *Broker) createProducer(ctx context.Context, c *conn, m *pb.CommandProducer) (*Producer, admission, error) {
	// Before the topic is loaded: a refused name costs nothing.
	if err := meta.ValidProducerName(m.GetProducerName()); err != nil {
		return nil, admission{}, err
	}
	t, err := b.getTopic(ctx, m.GetTopic(), true)
	if err != nil {
		return nil, admission{}, err
	}
	name := m.GetProducerName()
	if name == "" {
		name = b.newProducerName()
	}
	p := &Producer{
		id: m.GetProducerId(), name: name, conn: c, topic: t,
		mode:    access.Mode(m.GetProducerAccessMode()),
		pending: make(chan struct{}, b.cfg.MaxPendingSendsPerProducer),
		since:   time.Now(),
	}
	if m.Schema != nil {
		v, err := t.schemaFor(ctx, m.Schema)
		if err != nil {
			return nil, admission{}, err
		}
		p.schemaVersion = v
	}
	// Only the active region decides on access: a standby one redirects
	// before any producer is granted, queued or fenced here.
	if err := b.fo.CheckActive(ctx, t.name, t.policies()); err != nil {
		return nil, admission{}, err
	}
	if sub := m.GetInitialSubscriptionName(); sub != "" {
		if err := t.ensureInitialSubscription(ctx, sub); err != nil {
			return nil, admission{}, err
		}
	}
	var epoch *uint64
	if m.TopicEpoch != nil {
		epoch = proto.Uint64(m.GetTopicEpoch())
	}
	adm, err := t.addProducer(ctx, p, epoch)
	if err != nil {
		return nil, admission{}, err
	}
	return p, adm, nil
}

func (b *Broker) subscribe(ctx context.Context, c *conn, m *pb.CommandSubscribe) (*Consumer, error) {
	create := m.ForceTopicCreation == nil || m.GetForceTopicCreation()
	t, err := b.getTopic(ctx, m.GetTopic(), create)
	if err != nil {
		return nil, err
	}
	if err := b.fo.CheckActive(ctx, t.name, t.policies()); err != nil {
		return nil, err
	}
	if err := t.checkConsumerSchema(ctx, m.GetSchema()); err != nil {
		return nil, err
	}
	return t.subscribe(ctx, c, m)
}
