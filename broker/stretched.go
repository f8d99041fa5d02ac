package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
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
// After a region loss the survivor's new ledgers cannot satisfy the
// two-region rule: placement fails and produce stops until the region
// returns (no degraded mode yet).

const stretchedPrefix = "/stretched/"

// Default quorums of stretched ledgers.
const (
	stretchedEnsemble = 4
	stretchedQw       = 4
	stretchedQa       = 3
)

// stretched is the broker's stretched-ledger machinery.
type stretched struct {
	b      *Broker
	client *ledger.Client
	src    *multiRegionBookies
}

func (b *Broker) startStretched() error {
	if b.cfg.Bookies == nil || b.cfg.GlobalStore == b.cfg.Store {
		return nil
	}
	src := &multiRegionBookies{local: b.cfg.Bookies, localRegion: b.cfg.Cluster, global: b.cfg.GlobalStore, views: map[string]*cluster.BookieView{}}
	lc, err := ledger.New(ledger.Config{Store: b.cfg.GlobalStore, IDs: cluster.NewIDAllocator(b.cfg.GlobalStore), Bookies: src,
		Region: b.cfg.Cluster, DegradedRecovery: true, Logger: b.cfg.Logger.With("component", "stretched-ledger")})
	if err != nil {
		return err
	}
	b.stretched = &stretched{b: b, client: lc, src: src}
	b.wg.Add(2)
	go b.stretched.mirrorLoop()
	go b.stretched.watchRegions()
	return nil
}

func (s *stretched) close() {
	s.client.Close()
	s.src.close()
}

// mirrorLoop copies this region's bookie registrations into the global
// store every second, under a lease of this broker (brokers of a region
// write the same values; a key outlives a dead broker until the next copy
// by another, or its lease).
func (s *stretched) mirrorLoop() {
	defer s.b.wg.Done()
	b := s.b
	mirror := b.cfg.GlobalStore.Sub(stretchedPrefix + b.cfg.Cluster)
	var lease *cluster.Lease
	written := map[string]string{}
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	for {
		func() {
			ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
			defer cancel()
			if lease != nil {
				select {
				case <-lease.Lost():
					lease, written = nil, map[string]string{}
				default:
				}
			}
			if lease == nil {
				l, err := b.cfg.GlobalStore.GrantLease(b.ctx, b.cfg.OwnershipTTL)
				if err != nil {
					return
				}
				lease = l
			}
			kvs, _, err := b.cfg.Store.List(ctx, "/bookies/")
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
		case <-b.ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// watchRegions keeps a bookie view of every other registered region.
func (s *stretched) watchRegions() {
	defer s.b.wg.Done()
	b := s.b
	tk := time.NewTicker(2 * time.Second)
	defer tk.Stop()
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		regions, err := b.meta.ListRegions(ctx)
		cancel()
		if err == nil {
			for _, r := range regions {
				if r != b.cfg.Cluster {
					s.src.watch(b.ctx, r)
				}
			}
		}
		select {
		case <-b.ctx.Done():
			return
		case <-tk.C:
		}
	}
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

// stretchedLedgerConfig adapts a topic's managed-ledger config to a
// stretched namespace: metadata in the global store, the stretched ledger
// client, region-aware placement over the namespace's regions.
func (b *Broker) stretchedLedgerConfig(mlc *mledger.Config, pol Policies) error {
	if b.stretched == nil {
		return fmt.Errorf("%w: namespace mode stretched needs a multi-region broker (a global store and the region's bookie view)", ErrNotAllowed)
	}
	for _, r := range pol.ReplicationClusters {
		if r != b.cfg.Cluster {
			b.stretched.src.watch(b.ctx, r) // at once, not at the next poll
		}
	}
	mlc.Store = b.cfg.GlobalStore
	mlc.Ledgers = b.stretched.client
	if p := pol.Persistence; p == nil || p.EnsembleSize == 0 {
		mlc.EnsembleSize, mlc.WriteQuorum, mlc.AckQuorum = stretchedEnsemble, stretchedQw, stretchedQa
	}
	mlc.Placement = rack.Policy{Kind: rack.RegionAware, Regions: append([]string(nil), pol.ReplicationClusters...),
		MinRegionsForDurability: 2, MinRacksPerWriteQuorum: 2, Enforce: true}
	return mlc.Placement.Validate(mlc.EnsembleSize, mlc.WriteQuorum, mlc.AckQuorum)
}
