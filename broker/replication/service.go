package replication

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/clock"
	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
	"github.com/meridian-mq/meridian/replicator/transport"
)

// Config configures a Service. Read once by NewService.
type Config struct {
	// Cluster is this broker's region, BrokerID this broker in it.
	Cluster  string
	BrokerID string
	// Store is the region's metadata store (backlog markers); GlobalStore
	// the one every region shares (endpoints, orphans).
	Store, GlobalStore *cluster.Store
	// Meta reads namespaces' policies from the global store.
	Meta *meta.Metadata
	// ListenAddr is where the replication gRPC service listens ("" = the
	// Pulsar listener's host on a free port); AdvertisedAddr the address
	// other regions dial ("" = the listener's).
	ListenAddr, AdvertisedAddr string
	// Listeners are the broker's named listeners, registered beside its
	// service URL for lookups redirected from other regions (nil: none).
	Listeners meta.Listeners
	// HTTPListeners are their web service URLs, registered with them
	// (nil: none).
	HTTPListeners meta.HTTPListeners
	// AdminURL is the broker's advertised admin API URL, registered
	// beside its service URL (meta.RegionWebKey) for the region's
	// Clusters().Get in any region ("": none registered).
	AdminURL string
	// OwnershipTTL is the lease behind the endpoint's registration.
	OwnershipTTL time.Duration
	// ServerOptions and DialOptions are the gRPC transport's security
	// (TLS with client certificates); they come after the plaintext
	// defaults, which they override.
	ServerOptions []grpc.ServerOption
	DialOptions   []grpc.DialOption
	// Authorize admits an incoming stream from region source (nil: every
	// stream).
	Authorize func(ctx context.Context, source string) error
	// PeerHTTP is the client for the region's other brokers' admin APIs.
	PeerHTTP func(timeout time.Duration) *http.Client
	// Faults are fault injection for end-to-end tests and drills.
	Faults Faults
	// Verifier is the background verifier (verifier.go); zero: off.
	Verifier VerifierConfig
	// Metrics are the counters the service moves.
	Metrics Metrics
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Faults is fault injection for end-to-end tests and drills (read by
// cmd/meridian from MERIDIAN_FAULT_* in the broker's environment). The
// zero value injects nothing.
type Faults struct {
	// DropBatches: each sender silently drops its first N batches (they
	// are lost on the way; later ones go through, so the target sees a
	// gap).
	DropBatches int
	// Delay is slept before every send of batches: a slow WAN link, so
	// tests can tell a receipt that waited for the remote region from one
	// that did not.
	Delay time.Duration
	// AlterTopic and AlterSeq: when this region applies the replicated
	// entry of topic AlterTopic with origin sequence number AlterSeq, the
	// last byte of its message (its payload's) is flipped before it is
	// stored: a region's copy that differs from the origin's (a bug, or
	// corruption), for verification's tests. AlterSeq 0: nothing.
	AlterTopic string
	AlterSeq   uint64
}

// Metrics are the counters of replication (registered by the broker).
// A nil one counts nothing.
type Metrics struct {
	Sent, Applied, Duplicates prometheus.Counter
	// Alerts counts alerts by kind (sender alerts, sync events).
	Alerts *prometheus.CounterVec
	// Orphans counts orphans of failovers applied here.
	Orphans prometheus.Counter
	// Stages observes the seconds entries spend in each stage of their
	// replication, by stage (stamps.go); StoreToStore the seconds from
	// their origin's quorum-confirmed add to this region's, by origin
	// region. Nil: not observed.
	Stages, StoreToStore *prometheus.HistogramVec
}

// Host is what the service asks of the broker it runs in. Safe for
// concurrent use.
type Host interface {
	// Target returns the replication state of the topic when this broker
	// owns (or now acquires) it, or the replication address of the broker
	// of this region that owns it.
	Target(ctx context.Context, tn meta.TopicName, pol meta.Policies) (t *Topic, redirect string, err error)
	// Topic loads an existing topic on this broker (meta.ErrTopicNotFound
	// when it does not exist).
	Topic(ctx context.Context, name string) error
	// Loaded reports whether topic name is loaded on this broker.
	Loaded(name string) bool
	// Topics returns the replication state of every loaded topic.
	Topics() []*Topic
	// Serves reports whether this broker is the one a lookup of topic
	// name names.
	Serves(ctx context.Context, name string) (bool, error)
	// Peers lists the region's brokers: their ids and admin URLs.
	Peers(ctx context.Context) ([]Peer, error)
	// NonPersistentTarget returns, for a non-persistent topic this broker
	// owns (or now acquires), the function that hands entries from region
	// origin to its subscriptions (nothing stored), or the replication
	// address of the broker of this region that owns it.
	NonPersistentTarget(ctx context.Context, tn meta.TopicName, pol meta.Policies) (deliver func(origin string, entries []replicator.Entry), redirect string, err error)
	// Quarantine appends the entries idx of entries to topic name, as the
	// messages they are (their producer's name and sequence ids kept),
	// and returns once every one is persisted, with where each is (in
	// idx's order).
	Quarantine(ctx context.Context, name string, entries []replicator.Entry, idx []int) ([]mledger.Position, error)
	// Republish appends the message the quarantine topic holds at
	// r.Quarantined to topic r.Topic once (republish.go): already
	// reports that an earlier call appended it (its position returned);
	// a ResentError, that its own producer sent it again and the topic
	// holds that copy (nothing appended). Both topics must be this broker's (meta.NotOwnerError otherwise).
	Republish(ctx context.Context, r RepublishRequest) (pos mledger.Position, already bool, err error)
}

// Peer is a broker of the region.
type Peer struct {
	ID, AdminURL string
}

// ActiveRegions is the failover shell's view of the active regions
// (failoverctl.Shell). Its methods must be safe to call before the shell
// starts (they then know no record).
type ActiveRegions interface {
	// ActiveRegion returns the region that serves the namespace's
	// clients, or "" when every region serves it.
	ActiveRegion(ns string, pol meta.Policies) string
	// Record returns the namespace's failover record as last seen.
	Record(ns string, pol meta.Policies) meta.FailoverRecord
	// FailedOver returns the record when this region became active by an
	// unplanned move, else a record with no Previous.
	FailedOver(ns string, pol meta.Policies) meta.FailoverRecord
	// RegionDown reports whether the failover core declares region failed
	// as this broker sees it (down in its health view, or the previous
	// active region of an unplanned move): the RPO budget does not count
	// it (rpo.go). Cheap: called every rpoCheckEvery per topic and remote.
	RegionDown(region string) bool
}

// Log is a topic as replication sees it: the narrow interface the
// broker's topic implements. Safe for concurrent use.
type Log interface {
	// Policies returns the namespace's policies as the topic last read
	// them.
	Policies() meta.Policies
	// End returns the last entry's position, the last local sequence
	// number and the bytes of local entries, read together (moved only by
	// append callbacks, in log order).
	End() (last mledger.Position, seq uint64, bytes int64)
	// Applied returns the highest sequence number of origin persisted
	// here.
	Applied(origin string) uint64
	// AppendReplicated appends entries from another region, in order, and
	// calls done once every one is persisted or failed (with the first
	// failure), on the managed ledger's delivery goroutine, or at once
	// when nothing is to be written or the topic is closing. It does not
	// wait.
	AppendReplicated(entries []replicator.Entry, done func(error))
	// Closed reports whether the topic is closing.
	Closed() bool
	// OriginOf returns the origin id of the replicated entry at local
	// position p; LocalOf the local position of origin id.
	OriginOf(p mledger.Position) (mledger.Position, bool)
	LocalOf(id mledger.Position) (mledger.Position, bool)
	// HasConsumers reports whether subscription sub has consumers here.
	HasConsumers(sub string) bool
	// InBundle reports whether topic tn falls in the bundle the topic was
	// loaded under (this broker owns it too).
	InBundle(ctx context.Context, tn meta.TopicName) (bool, error)
	// SetRPOGate applies the RPO budget's decision to the topic's
	// producers (rpo.go): RPOHold holds their sends, RPORefuse closes them
	// and refuses new ones, RPOOpen lets everything through again (held
	// sends go on, in order). Called on changes only, from the budget's
	// goroutine, never under a lock of this package.
	SetRPOGate(g RPOGate)
}

// Service is a broker's side of geo-replication: the gRPC service for
// incoming streams, the client connections for outgoing ones, the
// per-topic senders and appliers, sync receipts, replicated
// subscriptions, orphans and status. Safe for concurrent use.
type Service struct {
	replpb.UnimplementedReplicationServer
	cfg     Config
	host    Host
	active  ActiveRegions
	log     *slog.Logger
	metrics Metrics
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	lis        net.Listener
	srv        *grpc.Server
	addr       string // advertised host:port
	serviceURL string // the broker's Pulsar service URL

	dialer *transport.Dialer // the client connections to other regions

	limiters sync.Map // namespace + remote region → *nsLimiter

	rpoTopics   sync.Map   // *Topic → struct{}: the topics with an RPO budget (rpo.go)
	republishMu sync.Mutex // one orphan republish at a time (republish.go)

	stageObs map[string]prometheus.Observer // metrics.Stages by stage

	// clock is what the senders and the sync receipts step and sleep on
	// (clock.Real; a test's fake clock).
	clock clock.Clock
	hooks testHooks
}

// testHooks are set by tests only, before the first topic is made.
type testHooks struct {
	// senderIdle and syncIdle, if set, are called by a sender's (a sync
	// state's) goroutine each time it goes to sleep, with when it wakes
	// next (zero: only an input wakes it).
	senderIdle func(rs *replSender, wake time.Time)
	syncIdle   func(ss *syncState, wake time.Time)
}

// NewService returns the replication service of cfg over host; Start
// listens.
func NewService(cfg Config, host Host, active ActiveRegions) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := cfg.Metrics
	if m.Sent == nil {
		m.Sent = prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered_sent"})
	}
	if m.Applied == nil {
		m.Applied = prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered_applied"})
	}
	if m.Duplicates == nil {
		m.Duplicates = prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered_duplicates"})
	}
	if m.Alerts == nil {
		m.Alerts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "unregistered_alerts"}, []string{"kind"})
	}
	if m.Orphans == nil {
		m.Orphans = prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered_orphans"})
	}
	svc := &Service{cfg: cfg, host: host, active: active, log: cfg.Logger, metrics: m, dialer: transport.NewDialer(cfg.DialOptions...),
		clock: clock.Real(), stageObs: stageObservers(m.Stages)}
	svc.ctx, svc.cancel = context.WithCancel(context.Background())
	return svc
}

// NewTopic returns the replication state of a loaded topic named name
// whose log is ml; the broker's topic (log) holds it for its lifetime.
func (svc *Service) NewTopic(name meta.TopicName, ml *mledger.ManagedLedger, log Log) *Topic {
	return &Topic{svc: svc, name: name, ml: ml, log: log}
}

// Topic is one loaded topic's replication state: its senders (one per
// remote region), its appliers (one per origin region), its sync
// receipts and its pending replicated subscription updates. Safe for
// concurrent use.
type Topic struct {
	svc  *Service
	name meta.TopicName
	ml   *mledger.ManagedLedger
	log  Log

	mu   sync.Mutex
	repl *topicRepl // senders and appliers, created on first use

	// stamps: when the last entries were persisted here (stamps.go).
	stamps persistTimes

	syncMu sync.Mutex
	sync   *syncState // sync mode: receipts held for remote regions (sync.go)

	// subMu guards the replicated subscriptions' updates that named
	// entries not arrived yet (applySubscription), retried as replicated
	// entries arrive; subRetrying while a retry is scheduled. Nothing is
	// called under it: EntryArrived takes it under the topic's own lock.
	subMu       sync.Mutex
	subPending  map[string]pendingSubUpdate
	subRetrying bool
	subRecv     uint64 // updates received, numbering them (pendingSubUpdate.n)

	// verified: the last background verification, by remote region.
	verifyMu sync.Mutex
	verified map[string]verifyResult

	// rpo: the RPO budget's state (rpo.go).
	rpo rpoState
}

// EntryArrived is told, under the topic's lock and in log order, that a
// replicated entry was persisted: pending subscription updates are
// retried shortly (retryPendingSubscriptions).
func (t *Topic) EntryArrived() {
	t.subMu.Lock()
	defer t.subMu.Unlock()
	if len(t.subPending) > 0 && !t.subRetrying {
		t.subRetrying = true
		go t.retryPendingSubscriptions()
	}
}

// Sync starts a sender for every remote region of the namespace that has
// none and stops (and deletes the cursor of) those no longer listed, and
// keeps the sync receipts' state in step with the policies. Called after
// load and when policies change.
func (t *Topic) Sync(ctx context.Context) {
	t.syncReplication(ctx)
	t.trackRPO()
}

// Stop stops every sender and the sync receipts' clock (on unload; the
// senders' cursors stay; held receipts are not released: their producers
// resend to the next owner). It waits for the senders no longer than ctx.
func (t *Topic) Stop(ctx context.Context) {
	t.untrackRPO()
	t.stopReplication(ctx)
	t.stopSync()
}

// Wake tells the senders the log grew.
func (t *Topic) Wake() { t.wakeSenders() }

// Hold keeps release until the entry with local sequence number seq is
// persisted in the namespace's sync set (seq 0: behind every entry
// tracked so far) and reports true; false when the namespace is not sync
// (the caller releases at once).
func (t *Topic) Hold(seq uint64, release func()) bool {
	ss := t.syncState()
	if ss == nil {
		return false
	}
	ss.hold(seq, release)
	return true
}

// RegionFailed takes a region the failover decision declared failed out
// of the sync set at epoch; a no-op when the namespace is not sync.
func (t *Topic) RegionFailed(region string, epoch uint64) {
	if ss := t.syncState(); ss != nil {
		ss.regionFailed(region, epoch)
	}
}

// Close stops the service: the server, the client connections, the
// endpoint's registration and every loop.
func (svc *Service) Close() {
	svc.close()
	svc.cancel()
	svc.wg.Wait()
}

// Status lists the senders of the loaded topics, optionally of one
// namespace or topic (filter).
func (svc *Service) Status(filter string) []Status { return svc.replicationStatus(filter) }

// RegionStatus is Status over every broker of the region (asked through
// their admin APIs).
func (svc *Service) RegionStatus(ctx context.Context, filter string) ([]Status, error) {
	return svc.regionReplicationStatus(ctx, filter)
}

// LoadBacklogged loads, on the broker that owns them, the topics whose
// replicators still have a backlog but that nothing loaded (after a
// restart, replication resumes by itself). Called from the policy loop.
func (svc *Service) LoadBacklogged(ctx context.Context) { svc.loadBacklogged(ctx) }

// Orphans lists a namespace's recorded orphan batches, oldest epoch and
// lowest sequence first.
func (svc *Service) Orphans(ctx context.Context, ns string) ([]OrphanBatch, error) {
	return svc.orphans(ctx, ns)
}
