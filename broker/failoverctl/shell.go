package failoverctl

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/failover"
	"github.com/meridian-mq/meridian/internal/clock"
)

// Config configures a Shell. Read once by New.
type Config struct {
	// Cluster is this broker's region; BrokerID this broker in it.
	Cluster  string
	BrokerID string
	// Store is the region's metadata store, GlobalStore the one every
	// region shares (the records, leases and judgements). With one store
	// (GlobalStore == Store) nothing fails over on its own.
	Store, GlobalStore *cluster.Store
	// Meta reads namespaces' policies from the global store.
	Meta *meta.Metadata
	// HealthView, if set with a separate GlobalStore, turns on automatic
	// failover (the controller): the gossip view of every region.
	HealthView func() cluster.HealthView
	// HealthChanges, if set, delivers each new gossip view
	// (cluster.Membership.Subscribe): the controller steps as soon as a
	// region's health changes instead of at its next poll.
	HealthChanges func() (<-chan cluster.HealthView, func())
	// Clock the controller sleeps on. Default clock.Real().
	Clock clock.Clock
	// FailoverLease: the rules of the regions' leases (zero: failover's
	// defaults, a 5 s TTL).
	FailoverLease failover.LeaseRules
	// PublishProbe, if set, runs the write probe (probe.go) every
	// ProbeInterval, each bounded by ProbeTimeout, and is given every
	// result. ManagedLedger is the template of the probe's managed ledger.
	PublishProbe                func(ok bool, at time.Time)
	ProbeInterval, ProbeTimeout time.Duration
	ManagedLedger               mledger.Config
	// Probed, if set, is told every probe's result and duration (metrics).
	Probed func(ok bool, took time.Duration)
	// Alert, if set, counts an event by kind (failover-KIND on a committed
	// proposal).
	Alert func(kind string)
	// Dial opens a connection to a broker's Pulsar listener for a
	// reachability check (TLS for a pulsar+ssl:// URL); nil dials plain
	// TCP.
	Dial func(u, host string, timeout time.Duration) (net.Conn, error)
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Host is what the shell asks of the broker it runs in. Safe for
// concurrent use.
type Host interface {
	// Topics returns the topics of namespace ns loaded on this broker.
	Topics(ns string) []Topic
	// Lease returns the broker's registration lease in the region's store
	// (the controller key is bound to it).
	Lease() clientv3.LeaseID
	// ReplicationStatus returns the replicators of namespace ns on every
	// broker of the region.
	ReplicationStatus(ctx context.Context, ns string) ([]SenderStatus, error)
	// SwitchoverHold makes every broker of the region hold the produce
	// and dispatch of namespace ns for a planned switchover (switchover.go)
	// until h.DeadlineMs at the latest; an error: not every broker holds.
	SwitchoverHold(ctx context.Context, ns string, h Hold) error
	// SwitchoverRelease ends hold id on every broker of the region: with
	// rec nil the held sends are appended and dispatch resumes (aborted);
	// with the committed record, each broker takes it first, then drops
	// the held sends unanswered (their clients resend them in the new
	// active region) and closes the namespace's clients.
	SwitchoverRelease(ctx context.Context, ns, id string, rec *meta.FailoverRecord) error
	// SwitchoverReadiness returns, from every broker of the region, the
	// namespace's loaded topics' readiness to move to target (with dry,
	// nothing is held: what would be lost now).
	SwitchoverReadiness(ctx context.Context, ns, target string, dry bool) ([]TopicReadiness, error)
	// ActiveHere is told every record taken that makes this region the
	// namespace's active region: a planned switchover's moved hold of an
	// earlier epoch ends (the namespace was switched back here).
	ActiveHere(ns string, rec meta.FailoverRecord)
}

// Topic is a loaded topic as the shell sees it.
type Topic interface {
	// Policies returns the namespace's policies as the topic last read them.
	Policies() meta.Policies
	// RollNext makes the next entry start a new ledger, so ids issued
	// from now on sort above every id issued before (a new epoch here).
	RollNext()
	// RegionFailed takes region out of the topic's sync set at epoch (an
	// unplanned move away from it); a no-op when the topic is not sync.
	RegionFailed(region string, epoch uint64)
	// CloseProducers and CloseConsumers close the topic's producers and
	// every subscription's consumers (CLOSE_PRODUCER, CLOSE_CONSUMER): their
	// clients look the topic up again.
	CloseProducers()
	CloseConsumers()
}

// SenderStatus is what the controller reads of one replicator (a topic
// towards a remote region) to judge whether that region is caught up.
type SenderStatus struct {
	Remote         string
	Connected      bool
	BacklogEntries int64
	SecondsBehind  float64
	AckedSeq       uint64
	LocalSeq       uint64
}

// Shell is the failover shell of one broker: it watches the failover
// records, steers clients to the active region, runs the region's
// controller (one Core per active-standby namespace) when this broker is
// it, and the write probe. Safe for concurrent use.
type Shell struct {
	cfg  Config
	host Host
	log  *slog.Logger
	meta *meta.Metadata
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	fo      *failoverState
	serving *servingState

	regionCache sync.Map // region → its brokers' service URLs, as last read
	// listenerCache: internal service URL → the broker's registration
	// (meta.RegionBroker: its named listeners, web service URLs), as
	// last read.
	listenerCache sync.Map
	reach         sync.Map // broker URL → reachability (reachableURL)
	badMu         sync.Mutex
	badSince      map[string]time.Time // region → when lookups first saw it not up (holdLookup)
}

// New returns the shell of cfg over host; StartWatch, StartControl and
// StartProbe start its parts.
func New(cfg Config, host Host) *Shell {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	sh := &Shell{cfg: cfg, host: host, log: cfg.Logger, meta: cfg.Meta, badSince: map[string]time.Time{}}
	sh.ctx, sh.stop = context.WithCancel(context.Background())
	return sh
}

// StartWatch starts following the failover records (before the broker
// serves: lookups and admission read them).
func (sh *Shell) StartWatch() { sh.startFailover() }

// StartControl starts the controller's loops when automatic failover is
// on (after the broker registered: the controller key is bound to its
// lease).
func (sh *Shell) StartControl() { sh.startFailoverControl() }

// StartProbe starts the write probe when configured.
func (sh *Shell) StartProbe() {
	if sh.cfg.PublishProbe != nil {
		sh.wg.Add(1)
		go sh.probeLoop()
	}
}

// Close stops every loop and waits for them.
func (sh *Shell) Close() {
	sh.stop()
	sh.wg.Wait()
}

// Auto reports whether automatic failover is on (a health view and a
// separate global store).
func (sh *Shell) Auto() bool { return sh.failoverAuto() }

// ActiveRegion returns the region that serves the namespace's clients,
// or "" when every region serves it.
// A nil Shell (a broker not started) knows no active region.
func (sh *Shell) ActiveRegion(ns string, pol meta.Policies) string {
	if sh == nil {
		return ""
	}
	return sh.activeRegion(ns, pol)
}

// Record returns the namespace's record as last seen (the primary at
// epoch 0 when none is stored).
// A nil Shell, or one not watching yet, knows no record: the primary at
// epoch 0.
func (sh *Shell) Record(ns string, pol meta.Policies) meta.FailoverRecord {
	if sh == nil || sh.fo == nil {
		return meta.FailoverRecord{Namespace: ns, Active: pol.Effective().Primary}
	}
	return sh.fo.record(ns, pol)
}

// DeclaredFailed returns the regions an unplanned move declared failed
// (the previous active region of a record that did not wait to catch up).
func (sh *Shell) DeclaredFailed() map[string]bool {
	declared := map[string]bool{}
	if sh == nil || sh.fo == nil {
		return declared
	}
	sh.fo.mu.Lock()
	for _, r := range sh.fo.recs {
		if r.Previous != "" && r.Previous != r.Active && !r.CatchUp {
			declared[r.Previous] = true
		}
	}
	sh.fo.mu.Unlock()
	return declared
}

// RegionDown reports whether the failover core declares region failed as
// this broker sees it now: its condition in this broker's health view is
// down (failover.StatusOf: failed or unknown members, or a failed write
// probe; a suspected region is not down). False without a health view
// (no automatic failover): nothing is declared failed. The RPO budget
// does not count such a region (broker/replication/rpo.go). Unlike
// DeclaredFailed, it ends when the region is seen up again.
func (sh *Shell) RegionDown(region string) bool {
	if sh == nil || sh.cfg.HealthView == nil {
		return false
	}
	return failover.StatusOf(sh.cfg.HealthView(), region, false).Condition() == failover.Down
}

// CheckActive refuses (meta.ErrServiceNotReady, retriable) a producer or
// subscription of tn outside the namespace's active region, or while
// this region does not hold its lease.
func (sh *Shell) CheckActive(ctx context.Context, tn meta.TopicName, pol meta.Policies) error {
	return sh.checkActive(ctx, tn, pol)
}

// CrossRegionLookup answers a LOOKUP for a topic whose namespace is
// active in another region: a broker of that region to ask (a
// non-authoritative redirect), or "" when this region answers. listener
// is the client's listener ("": the internal one): the answer is that
// broker's URL of that name (meta.ErrNoListener if it has none).
func (sh *Shell) CrossRegionLookup(ctx context.Context, topic, listener string) (string, error) {
	u, err := sh.crossRegionLookup(ctx, topic)
	if u == "" || err != nil || listener == "" {
		return u, err
	}
	return sh.inListener(ctx, u, listener)
}

// CrossRegionBroker is CrossRegionLookup with the broker's registration
// (its admin URL and listeners' web service URLs, for an HTTP lookup's
// httpUrl): url the broker's URL in listener, rb empty when its record
// names none (registered before them, or not read yet).
func (sh *Shell) CrossRegionBroker(ctx context.Context, topic, listener string) (url string, rb meta.RegionBroker, err error) {
	u, err := sh.crossRegionLookup(ctx, topic)
	if u == "" || err != nil {
		return u, rb, err
	}
	url = u
	if listener != "" {
		if url, err = sh.inListener(ctx, u, listener); err != nil {
			return "", rb, err
		}
	}
	rb, _ = sh.regionBroker(ctx, u)
	return url, rb, nil
}

// MayServe reports whether this broker may acknowledge produce (or take
// a producer or subscription) for the namespace now.
func (sh *Shell) MayServe(ns string, pol meta.Policies) bool { return sh.mayServe(ns, pol) }

// FailoverStatus returns the records of the active-standby namespaces
// (ns "" = all known) with the health of their regions.
func (sh *Shell) FailoverStatus(ctx context.Context, ns string) ([]FailoverStatus, error) {
	return sh.failoverStatus(ctx, ns)
}

func (sh *Shell) dial(u, host string, timeout time.Duration) (net.Conn, error) {
	if sh.cfg.Dial != nil {
		return sh.cfg.Dial(u, host, timeout)
	}
	return net.DialTimeout("tcp", host, timeout)
}

func (sh *Shell) alert(kind string) {
	if sh.cfg.Alert != nil {
		sh.cfg.Alert(kind)
	}
}

// NamespaceLease is an active-standby namespace's record as this broker
// last saw it, and whether this region fenced itself for it.
type NamespaceLease struct {
	meta.FailoverRecord
	// Lapsed: this region is the record's active region at its epoch,
	// held its lease, and the lease's deadline passed without a renewal:
	// it acknowledges no produce for the namespace (it fenced itself).
	Lapsed bool
}

// Leases returns the records of the active-standby namespaces this broker
// watches (none before the watch started), sorted by namespace. Not
// before StartControl returned.
func (sh *Shell) Leases() []NamespaceLease {
	if sh == nil || sh.fo == nil {
		return nil
	}
	sh.fo.mu.Lock()
	recs := make([]meta.FailoverRecord, 0, len(sh.fo.recs))
	for _, r := range sh.fo.recs {
		recs = append(recs, r)
	}
	sh.fo.mu.Unlock()
	slices.SortFunc(recs, func(a, b meta.FailoverRecord) int { return strings.Compare(a.Namespace, b.Namespace) })
	now := time.Now().UnixNano()
	out := make([]NamespaceLease, len(recs))
	for i, r := range recs {
		var s serving
		ok := false
		if sh.serving != nil { // nil: no automatic failover
			sh.serving.mu.Lock()
			s, ok = sh.serving.m[r.Namespace]
			sh.serving.mu.Unlock()
		}
		out[i] = NamespaceLease{FailoverRecord: r, Lapsed: ok && r.Active == sh.cfg.Cluster && s.Epoch == r.Epoch && now >= s.DeadlineNs}
	}
	return out
}
