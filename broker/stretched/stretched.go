package stretched

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/failover"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// Stretched namespaces (mode stretched): instead of replicators, each
// topic's ledgers are written to bookies of several regions before an
// entry is acknowledged — BookKeeper's region-aware placement, Pulsar's
// way to sync geo-replication. What that takes here:
//
//   - Every broker mirrors its region's bookie registrations into the
//     global store (/stretched/REGION/bookies/...), so a writer in one
//     region can choose bookies of another (over gRPC, as its own).
//   - The topic's managed ledger — its ledger list, cursors and every
//     ledger's metadata — lives in the global store, so a surviving region
//     can open it, recover the last ledger (fencing the bookies it can
//     reach) and read every acknowledged entry.
//   - The topic's bundle is owned through the global store (Broker.gown),
//     so one broker of any region owns it at a time; a lookup in another
//     region answers that broker.
//   - Placement is region-aware over the namespace's regions: by default
//     E = Qw = 4 and Qa = 3 with every ack quorum spanning two regions, so
//     an acknowledged entry survives the loss of a whole region. A
//     namespace's persistence policy overrides the quorums (validated at
//     policy time).
//
// # Degraded placement after a region loss
//
// With two regions, no ledger can keep the two-region rule once one of
// them is gone. A broker declares region R gone for stretched placement
// (Placement.refreshGone, every second) when all of these hold:
//
//  1. R's mirrored bookie registrations are gone from the global store:
//     no broker of R has renewed them for its ownership lease, so R
//     cannot write the global store either (and cannot own a stretched
//     topic or create a stretched ledger — no split brain);
//  2. gossip, where the broker has it, has R down (not merely suspect);
//  3. this broker saw R's bookies before, or a failover record says the
//     failover decision moved a namespace away from R unplanned (so a
//     broker that starts while R is down knows; a region that never
//     started is not "lost").
//
// While R is gone, each new ledger of a stretched namespace (created at a
// rollover, after a writer failed, or at takeover; mledger.Config.Adjust)
// is placed over the namespace's surviving regions. If they still number
// MinRegionsForDurability (three regions, one lost) only R is left out
// and the quorums stay. Otherwise the ledger is placed degraded, the way
// this broker places a single-region namespace's ledgers: the broker's
// managed-ledger quorums (default E=3 Qw=3 Qa=2) and its rack rule
// (default: every write set on >= 2 racks, enforced), inside the
// surviving region(s); the ledger's metadata records it
// (custom "stretched-degraded": the regions left out). Alert
// replication_alerts_total{kind="stretched-degraded"} (once per namespace
// and loss), gauges meridian_broker_stretched_degraded{namespace} and
// meridian_broker_stretched_region_gone{region}. When R's registrations
// are back (and gossip no longer has it down), new ledgers are
// region-aware again, and every loaded topic that wrote a degraded ledger
// rolls over at its next append (RollNext, alert "stretched-restored"),
// so the single-region window ends with the outage.
//
// The durability claim, then:
//
//   - an entry acknowledged before R was declared gone was fsynced on Qa
//     bookies spanning two regions: it survives the loss of R (the
//     survivor recovers the open ledger from its own copies:
//     ledger.Config.DegradedRecovery);
//   - an entry acknowledged while R is gone is fsynced on Qa bookies of
//     the surviving region on >= 2 racks: it survives a bookie or a rack
//     loss there, not the loss of the surviving region. That stays true
//     of the degraded ledgers after R returns — nothing copies them to R
//     yet — until retention trims them. It is the trade sync replication
//     makes when the failover decision removes a failed region from the
//     sync set (broker/replication): keep serving, say so, alert.
//
// A writer whose ensemble holds R's bookies (the owner survived R) cannot
// replace them under the two-region rule: its ensemble change gives up
// after stretchedEnsembleChangeTimeout, the managed ledger recovers that
// ledger and creates the next — degraded by then.

const stretchedPrefix = "/stretched/"

// Default quorums of stretched ledgers.
const (
	stretchedEnsemble = 4
	stretchedQw       = 4
	stretchedQa       = 3
)

// stretchedEnsembleChangeTimeout bounds a stretched writer's search for a
// replacement bookie (the regional client's default is 30 s): after a
// region loss no replacement exists under the two-region rule, and the
// sooner the writer gives up the sooner its managed ledger moves on to a
// degraded ledger. A writer that merely lost one bookie finds its
// replacement in well under a second.
const stretchedEnsembleChangeTimeout = 10 * time.Second

// stretchedDegradedKey is the custom metadata key of a ledger placed
// degraded: the regions it left out, comma-separated.
const stretchedDegradedKey = "stretched-degraded"

// Placement is the broker's stretched-ledger machinery. Safe for
// concurrent use.
type Placement struct {
	cfg    Config
	host   Host
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	client *ledger.Client
	src    *multiRegionBookies

	goneGauge     *prometheus.GaugeVec // by region
	degradedGauge *prometheus.GaugeVec // by namespace

	mu sync.Mutex
	// seen: regions whose mirrored bookies this broker has seen.
	seen map[string]bool
	// gone: regions declared gone, since when.
	gone map[string]time.Time
	// degraded: namespace → managed ledgers that created (or tried to
	// create) a degraded ledger since a region of theirs was lost.
	degraded map[string]map[string]bool
}

// Start starts the stretched placement of a broker: the mirror of its
// region's bookies into the global store, the view of every other
// region's, and the region-loss rule. It returns nil, nil when the broker
// is not multi-region (no bookie source, or one store for everything):
// stretched namespaces are refused there.
func Start(cfg Config, host Host) (*Placement, error) {
	if cfg.Bookies == nil || cfg.GlobalStore == cfg.Store {
		return nil, nil
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	src := &multiRegionBookies{local: cfg.Bookies, localRegion: cfg.Cluster, global: cfg.GlobalStore, views: map[string]*cluster.BookieView{}}
	lc, err := ledger.New(ledger.Config{Store: cfg.GlobalStore, IDs: cluster.NewIDAllocator(cfg.GlobalStore), Bookies: src,
		Region: cfg.Cluster, DegradedRecovery: true, EnsembleChangeTimeout: stretchedEnsembleChangeTimeout,
		Logger: cfg.Logger.With("component", "stretched-ledger"), DialOptions: cfg.DialOptions})
	if err != nil {
		return nil, err
	}
	l := prometheus.Labels{"cluster": cfg.Cluster}
	s := &Placement{cfg: cfg, host: host, log: cfg.Logger, client: lc, src: src, seen: map[string]bool{}, gone: map[string]time.Time{}, degraded: map[string]map[string]bool{},
		goneGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "meridian", Subsystem: "broker", Name: "stretched_region_gone",
			Help: "1 while this broker has the region declared gone for stretched placement (its bookies' registrations gone from the global store, gossip has it down).", ConstLabels: l}, []string{"region"}),
		degradedGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "meridian", Subsystem: "broker", Name: "stretched_degraded",
			Help: "1 while a stretched namespace's new ledgers on this broker are placed degraded (inside the surviving region: an entry acknowledged now survives no further region loss).", ConstLabels: l}, []string{"namespace"}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.goneGauge, s.degradedGauge)
	}
	s.wg.Add(2)
	go s.mirrorLoop()
	go s.watchRegions()
	return s, nil
}

// Close stops the loops, then closes the stretched ledger client and the
// other regions' bookie views.
func (s *Placement) Close() {
	s.cancel()
	s.wg.Wait()
	s.client.Close()
	s.src.close()
}

// mirrorLoop copies this region's bookie registrations into the global
// store every second, under a lease of this broker (brokers of a region
// write the same values; a key outlives a dead broker until the next copy
// by another, or its lease).
func (s *Placement) mirrorLoop() {
	defer s.wg.Done()
	mirror := s.cfg.GlobalStore.Sub(stretchedPrefix + s.cfg.Cluster)
	var lease *cluster.Lease
	written := map[string]string{}
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	for {
		func() {
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
			defer cancel()
			if lease != nil {
				select {
				case <-lease.Lost():
					lease, written = nil, map[string]string{}
				default:
				}
			}
			if lease == nil {
				l, err := s.cfg.GlobalStore.GrantLease(s.ctx, s.cfg.OwnershipTTL)
				if err != nil {
					return
				}
				lease = l
			}
			kvs, _, err := s.cfg.Store.List(ctx, "/bookies/")
			if err != nil {
				return
			}
			seen := map[string]bool{}
			for _, kv := range kvs {
				seen[kv.Key] = true
				if written[kv.Key] == string(kv.Value) {
					continue
				}
				if _, err := mirror.PutWithLease(ctx, kv.Key, kv.Value, lease.ID); err != nil {
					return
				}
				written[kv.Key] = string(kv.Value)
			}
			for k := range written {
				if !seen[k] {
					_ = mirror.Delete(ctx, k)
					delete(written, k)
				}
			}
		}()
		select {
		case <-s.ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// watchRegions keeps a bookie view of every other registered region and,
// every second, which of them are gone (refreshGone).
func (s *Placement) watchRegions() {
	defer s.wg.Done()
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	var regions []string
	for i := 0; ; i++ {
		if i%2 == 0 {
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
			rs, err := s.cfg.Meta.ListRegions(ctx)
			cancel()
			if err == nil {
				regions = rs
				for _, r := range regions {
					if r != s.cfg.Cluster {
						s.src.watch(s.ctx, r)
					}
				}
			}
		}
		s.refreshGone(regions)
		select {
		case <-s.ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// regionGone is the rule of the package comment: region gone for
// stretched placement. mirrored: its bookie registrations in the global
// store (-1: not watched yet); gossipDown: gossip has it down (true when
// the broker runs without gossip); known: seen before, or declared failed
// by a failover record.
func regionGone(mirrored int, gossipDown, known bool) bool {
	return mirrored == 0 && gossipDown && known
}

// refreshGone re-evaluates every other region; a region that returns
// ends the degraded placement of the namespaces that used it.
func (s *Placement) refreshGone(regions []string) {
	var view *cluster.HealthView
	if s.cfg.HealthView != nil {
		v := s.cfg.HealthView()
		view = &v
	}
	declared := s.host.DeclaredFailed()
	var returned []string
	now := time.Now()
	for _, r := range regions {
		if r == s.cfg.Cluster {
			continue
		}
		n := s.src.count(r)
		down := view == nil || failover.StatusOf(*view, r, false).Condition() == failover.Down
		s.mu.Lock()
		if n > 0 {
			s.seen[r] = true
		}
		gone := regionGone(n, down, s.seen[r] || declared[r])
		_, was := s.gone[r]
		switch {
		case gone && !was:
			s.gone[r] = now
			s.goneGauge.WithLabelValues(r).Set(1)
			s.log.Warn("stretched: region declared gone: new stretched ledgers are placed without it", "region", r)
		case !gone && was:
			delete(s.gone, r)
			s.goneGauge.WithLabelValues(r).Set(0)
			returned = append(returned, r)
			s.log.Info("stretched: region back: new stretched ledgers use it again", "region", r)
		}
		s.mu.Unlock()
	}
	if len(returned) > 0 {
		s.restore()
	}
}

// restore ends degraded placement for the namespaces none of whose regions
// is gone any more: each of their loaded topics that wrote a degraded
// ledger rolls over at its next append, onto a region-aware ledger.
func (s *Placement) restore() {
	s.mu.Lock()
	nss := slices.Collect(maps.Keys(s.degraded))
	s.mu.Unlock()
	regions := map[string][]string{} // read outside the lock: adjust must not wait on the store
	for _, ns := range nss {
		if pol, err := s.cfg.Meta.GetPolicies(s.ctx, ns); err == nil {
			regions[ns] = pol.ReplicationClusters
		}
	}
	roll := map[string]bool{}
	s.mu.Lock()
	for _, ns := range nss {
		mls, ok := s.degraded[ns]
		if !ok || slices.ContainsFunc(regions[ns], func(r string) bool { _, g := s.gone[r]; return g }) {
			continue // still short of a region
		}
		for ml := range mls {
			roll[ml] = true
		}
		delete(s.degraded, ns)
		s.degradedGauge.WithLabelValues(ns).Set(0)
		s.alert("stretched-restored")
		s.log.Warn("stretched: namespace placed region-aware again; its degraded ledgers roll over", "namespace", ns, "topics", len(mls))
	}
	s.mu.Unlock()
	s.host.RollNext(roll)
}

// adjust is a stretched topic's mledger.Config.Adjust: the placement of
// its next ledger given the regions gone now.
func (s *Placement) adjust(o ledger.CreateOptions) ledger.CreateOptions {
	ml := o.Custom["managed-ledger"] // TENANT/NS/DOMAIN/TOPIC
	parts := strings.SplitN(ml, "/", 3)
	if len(parts) < 3 {
		return o
	}
	ns := parts[0] + "/" + parts[1]
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.gone) == 0 {
		return o
	}
	gone := make(map[string]bool, len(s.gone))
	for r := range s.gone {
		gone[r] = true
	}
	out, left := degradePlacement(o, gone, s.fallback())
	if left == nil || out.Custom[stretchedDegradedKey] == "" {
		return out
	}
	mls := s.degraded[ns]
	if mls == nil {
		mls = map[string]bool{}
		s.degraded[ns] = mls
		s.degradedGauge.WithLabelValues(ns).Set(1)
		s.alert("stretched-degraded")
		s.log.Warn("stretched: namespace places new ledgers degraded (an entry acknowledged now survives no further region loss)",
			"namespace", ns, "gone", strings.Join(left, ","), "e", out.EnsembleSize, "qw", out.WriteQuorum, "qa", out.AckQuorum)
	}
	mls[ml] = true
	return out
}

// fallback is the degraded quorums and rack rule: this broker's own
// managed-ledger defaults, as a single-region namespace gets them.
func (s *Placement) fallback() degradedQuorums {
	m := s.cfg.ManagedLedger
	q := degradedQuorums{e: m.EnsembleSize, qw: m.WriteQuorum, qa: m.AckQuorum}
	if q.e == 0 && q.qw == 0 && q.qa == 0 {
		d := mledger.DefaultConfig()
		q.e, q.qw, q.qa = d.EnsembleSize, d.WriteQuorum, d.AckQuorum
	}
	p := m.Placement
	if p.Kind == "" {
		p = rack.DefaultPolicy()
	}
	q.minRacks, q.enforce = p.MinRacksPerWriteQuorum, p.Enforce
	return q
}

// degradedQuorums are what a degraded stretched ledger is created with.
type degradedQuorums struct {
	e, qw, qa int
	minRacks  int
	enforce   bool
}

// degradePlacement returns the options of a stretched ledger when the
// regions in gone are lost, and the namespace's regions it leaves out
// (nil: none of them is gone, o is returned as is). Pure.
//
// The surviving regions are the policy's regions less gone. If they
// still number MinRegionsForDurability, only the region set shrinks.
// Otherwise the ledger is degraded: quorums q, region-aware over the
// survivors with q's rack rule (and the two-region rule if two or more
// survive), Custom[stretchedDegradedKey] naming the regions left out. A
// placement that is not region-aware, or with no survivor, is returned
// as is.
func degradePlacement(o ledger.CreateOptions, gone map[string]bool, q degradedQuorums) (ledger.CreateOptions, []string) {
	p := o.Placement
	if p.Kind != rack.RegionAware || len(p.Regions) == 0 {
		return o, nil
	}
	var survivors, left []string
	for _, r := range p.Regions {
		if gone[r] {
			left = append(left, r)
		} else {
			survivors = append(survivors, r)
		}
	}
	if len(left) == 0 || len(survivors) == 0 {
		return o, nil
	}
	p.Regions = survivors
	if len(survivors) >= p.MinRegionsForDurability {
		o.Placement = p
		return o, left
	}
	p.MinRegionsForDurability = 0
	if len(survivors) >= 2 {
		p.MinRegionsForDurability = 2
	}
	p.MinRacksPerWriteQuorum, p.Enforce = q.minRacks, q.enforce
	d := o
	d.EnsembleSize, d.WriteQuorum, d.AckQuorum = q.e, q.qw, q.qa
	d.Placement = p
	if d.Placement.Validate(d.EnsembleSize, d.WriteQuorum, d.AckQuorum) != nil {
		d.Placement.MinRegionsForDurability = 0 // quorums too small for two regions: spread only
	}
	d.Custom = maps.Clone(o.Custom)
	if d.Custom == nil {
		d.Custom = map[string]string{}
	}
	d.Custom[stretchedDegradedKey] = strings.Join(left, ",")
	return d, left
}

// multiRegionBookies is the bookie source of stretched ledgers: this
// region's live bookies plus the mirrored registrations of the others.
type multiRegionBookies struct {
	local       ledger.BookieSource
	localRegion string
	global      *cluster.Store

	mu    sync.Mutex
	views map[string]*cluster.BookieView
}

func (m *multiRegionBookies) watch(ctx context.Context, region string) {
	m.mu.Lock()
	_, ok := m.views[region]
	m.mu.Unlock()
	if ok {
		return
	}
	v, err := cluster.WatchBookies(ctx, m.global.Sub(stretchedPrefix+region))
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.views[region]; ok {
		v.Close()
		return
	}
	m.views[region] = v
}

// count returns how many bookies of region are mirrored in the global
// store (any state), or -1 when the region is not watched yet.
func (m *multiRegionBookies) count(region string) int {
	m.mu.Lock()
	v, ok := m.views[region]
	m.mu.Unlock()
	if !ok {
		return -1
	}
	return len(v.Bookies(false))
}

func (m *multiRegionBookies) remote() []*cluster.BookieView {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*cluster.BookieView, 0, len(m.views))
	for _, v := range m.views {
		out = append(out, v)
	}
	return out
}

func (m *multiRegionBookies) Writable() []*metapb.BookieRegistration {
	out := m.local.Writable()
	for _, v := range m.remote() {
		for _, b := range v.Bookies(true) {
			out = append(out, b.Reg)
		}
	}
	return out
}

// ReadOnly returns the read-only bookies of this region and the mirrored
// ones of the others (ledger.ReadOnlyLister).
func (m *multiRegionBookies) ReadOnly() []*metapb.BookieRegistration {
	var out []*metapb.BookieRegistration
	if l, ok := m.local.(ledger.ReadOnlyLister); ok {
		out = l.ReadOnly()
	}
	for _, v := range m.remote() {
		for _, b := range v.Bookies(false) {
			if b.State == cluster.BookieReadOnly {
				out = append(out, b.Reg)
			}
		}
	}
	return out
}

func (m *multiRegionBookies) Lookup(id string) (*metapb.BookieRegistration, bool) {
	if r, ok := m.local.Lookup(id); ok {
		return r, true
	}
	for _, v := range m.remote() {
		if b, ok := v.Lookup(id); ok {
			return b.Reg, true
		}
	}
	return nil, false
}

func (m *multiRegionBookies) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.views {
		v.Close()
	}
}

// LedgerStats returns the counters of the stretched ledgers' client.
func (s *Placement) LedgerStats() ledger.Stats { return s.client.Stats() }

// LedgerConfig adapts a topic's managed-ledger config to a stretched
// namespace: metadata in the global store, the stretched ledger client,
// region-aware placement over the namespace's regions.
func (s *Placement) LedgerConfig(mlc *mledger.Config, pol meta.Policies) error {
	for _, r := range pol.ReplicationClusters {
		if r != s.cfg.Cluster {
			s.src.watch(s.ctx, r) // at once, not at the next poll
		}
	}
	mlc.Store = s.cfg.GlobalStore
	mlc.Ledgers = s.client
	if p := pol.Persistence; p == nil || p.EnsembleSize == 0 {
		mlc.EnsembleSize, mlc.WriteQuorum, mlc.AckQuorum = stretchedEnsemble, stretchedQw, stretchedQa
	}
	mlc.Placement = rack.Policy{Kind: rack.RegionAware, Regions: append([]string(nil), pol.ReplicationClusters...),
		MinRegionsForDurability: 2, MinRacksPerWriteQuorum: 2, Enforce: true}
	mlc.Adjust = s.adjust
	return mlc.Placement.Validate(mlc.EnsembleSize, mlc.WriteQuorum, mlc.AckQuorum)
}

func (s *Placement) alert(kind string) {
	if s.cfg.Alert != nil {
		s.cfg.Alert(kind)
	}
}

// Config configures a Placement. Read once by Start.
type Config struct {
	// Cluster is this broker's region.
	Cluster string
	// Store is the region's metadata store (its bookie registrations are
	// mirrored from it); GlobalStore the one every region shares.
	Store, GlobalStore *cluster.Store
	// Meta reads the registered regions and namespaces' policies.
	Meta *meta.Metadata
	// Bookies is the region's bookie source (the one the broker's ledger
	// client uses).
	Bookies ledger.BookieSource
	// HealthView, if set, is the gossip view of every region (a region is
	// gone only when gossip has it down too).
	HealthView func() cluster.HealthView
	// OwnershipTTL is the lease behind the mirrored registrations.
	OwnershipTTL time.Duration
	// ManagedLedger is the broker's managed-ledger template: its quorums
	// and rack rule are the degraded placement's.
	ManagedLedger mledger.Config
	// DialOptions are the bookie links' gRPC security.
	DialOptions []grpc.DialOption
	// Registerer takes the gauges; Alert counts events by kind.
	Registerer prometheus.Registerer
	Alert      func(kind string)
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Host is what the placement asks of the broker. Safe for concurrent use.
type Host interface {
	// DeclaredFailed returns the regions an unplanned failover declared
	// failed (failoverctl.Shell).
	DeclaredFailed() map[string]bool
	// RollNext makes every loaded topic whose managed ledger is named in
	// mls start a new ledger at its next append.
	RollNext(mls map[string]bool)
}
