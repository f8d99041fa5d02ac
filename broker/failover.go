package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/cluster"
)

// The active region of an active-standby namespace, and how brokers steer
// unmodified clients to it (the failover issue's first slice: the record,
// manual failover and steering; the gossip-driven decision and the
// self-fencing lease of failover/ come next).
//
//   - The record /failover/TENANT/NS in the global store names the active
//     region and its epoch. Absent, the namespace's primary is active at
//     epoch 0. Every change is a compare-and-swap to epoch+1, so exactly
//     one region is active per epoch; `meridian admin failover NS --to R`
//     makes one.
//   - Every broker watches the records. A LOOKUP of a topic of an
//     active-standby namespace answered by a broker of another region is
//     redirected (not authoritative) to a broker of the active region, which
//     answers with the owner there. Producers and subscriptions are refused
//     outside the active region with ServiceNotReady — retriable: the Go
//     client looks up again — never TopicNotFound or ProducerFenced, which
//     make it give up for good.
//   - When the active region changes, the old active region's brokers close
//     the namespace's producers and consumers (CLOSE_PRODUCER /
//     CLOSE_CONSUMER), so clients look up again and land in the new one.
//   - Active-active namespaces and single-region namespaces are served
//     everywhere, as before.

const failoverKey = "/failover/"

// FailoverRecord is the active region of an active-standby namespace.
type FailoverRecord struct {
	Namespace string `json:"namespace"`
	Active    string `json:"active"`
	Epoch     uint64 `json:"epoch"`
	Previous  string `json:"previous,omitempty"`
	CatchUp   bool   `json:"catchUp,omitempty"`
	SinceMs   int64  `json:"sinceMs"`
	Reason    string `json:"reason,omitempty"`
}

// failoverState caches the records the broker watches.
type failoverState struct {
	b  *Broker
	mu sync.Mutex
	// recs: the stored records by namespace (absent: the primary, epoch 0).
	recs map[string]FailoverRecord
	read bool // the first list succeeded
}

func (b *Broker) startFailover() {
	b.fo = &failoverState{b: b, recs: map[string]FailoverRecord{}}
	b.wg.Add(1)
	go b.fo.watchLoop()
}

// watchLoop lists the records, then follows changes; after a broken watch
// it lists again.
func (f *failoverState) watchLoop() {
	defer f.b.wg.Done()
	b := f.b
	for b.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		kvs, rev, err := b.cfg.GlobalStore.List(ctx, failoverKey)
		cancel()
		if err != nil {
			select {
			case <-b.ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		recs := map[string]FailoverRecord{}
		for _, kv := range kvs {
			var r FailoverRecord
			if json.Unmarshal(kv.Value, &r) == nil && r.Namespace != "" {
				recs[r.Namespace] = r
			}
		}
		f.mu.Lock()
		old := f.recs
		f.recs, f.read = recs, true
		f.mu.Unlock()
		for ns, r := range recs {
			if o, ok := old[ns]; !ok || o.Epoch != r.Epoch {
				b.activeChanged(ns, r)
			}
		}
		for evs := range b.cfg.GlobalStore.Watch(b.ctx, failoverKey, rev+1) {
			for _, ev := range evs {
				var r FailoverRecord
				if ev.Deleted || json.Unmarshal(ev.KV.Value, &r) != nil || r.Namespace == "" {
					continue
				}
				f.mu.Lock()
				o, ok := f.recs[r.Namespace]
				if ok && o.Epoch >= r.Epoch {
					f.mu.Unlock()
					continue
				}
				f.recs[r.Namespace] = r
				f.mu.Unlock()
				b.activeChanged(r.Namespace, r)
			}
		}
	}
}

// record returns the namespace's record as last seen (the primary at
// epoch 0 when none is stored).
func (f *failoverState) record(ns string, pol Policies) FailoverRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.recs[ns]; ok {
		return r
	}
	return FailoverRecord{Namespace: ns, Active: pol.Effective().Primary}
}

// activeStandby reports whether the namespace has one active region at a
// time (several regions, failover active-standby).
func activeStandby(pol Policies) bool {
	return len(pol.ReplicationClusters) > 1 && pol.Effective().Failover == FailoverActiveStandby
}

// activeRegion returns the region that serves the namespace's clients, or
// "" when every region serves it.
func (b *Broker) activeRegion(ns string, pol Policies) string {
	if b.fo == nil || !activeStandby(pol) {
		return ""
	}
	return b.fo.record(ns, pol).Active
}

// errNotActive refuses a producer or subscription outside the active
// region: ServiceNotReady, which the Go client retries with a new lookup.
func (b *Broker) checkActive(ctx context.Context, tn TopicName, pol Policies) error {
	if a := b.activeRegion(tn.NamespaceName(), pol); a != "" && a != b.cfg.Cluster {
		return fmt.Errorf("%w: namespace %s is active in region %s (this is %s): look the topic up again", ErrServiceNotReady, tn.NamespaceName(), a, b.cfg.Cluster)
	}
	if !b.mayServe(tn.NamespaceName(), pol) {
		// The region may be about to serve (a new namespace's first epoch,
		// a lease being acquired): wake the controller and wait a little,
		// since the Go client does not retry a refused creation.
		b.nudgeControl()
		wait, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		for wait.Err() == nil && !b.mayServe(tn.NamespaceName(), pol) {
			select {
			case <-wait.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
		if b.mayServe(tn.NamespaceName(), pol) {
			return nil
		}
		return fmt.Errorf("%w: region %s does not hold the lease of namespace %s now (acquiring it, or cut off from the global store)", ErrServiceNotReady, b.cfg.Cluster, tn.NamespaceName())
	}
	return nil
}

// crossRegionLookup answers a LOOKUP for a topic whose namespace is active
// in another region: a broker of that region to ask (non-authoritative
// redirect), or "" when this region answers.
func (b *Broker) crossRegionLookup(ctx context.Context, topic string) (string, error) {
	tn, err := ParseTopic(topic)
	if err != nil {
		return "", nil // the normal lookup reports it
	}
	pol, err := b.meta.GetPolicies(ctx, tn.NamespaceName())
	if err != nil {
		return "", nil
	}
	a := b.activeRegion(tn.NamespaceName(), pol)
	if a == "" || a == b.cfg.Cluster {
		return "", nil
	}
	urls, err := b.regionBrokers(ctx, a)
	if err != nil || len(urls) == 0 {
		return "", fmt.Errorf("%w: namespace %s is active in region %s, which has no reachable broker registered: %v", ErrServiceNotReady, tn.NamespaceName(), a, err)
	}
	return urls[rand.IntN(len(urls))], nil
}

// regionBrokers lists the service URLs of a region's live brokers, from
// the global store.
func (b *Broker) regionBrokers(ctx context.Context, region string) ([]string, error) {
	return listValues(ctx, b.cfg.GlobalStore, regionBrokersKey(region))
}

func regionBrokersKey(region string) string { return "/regions/" + region + "/brokers/" }

// activeChanged applies a new record: outside the new active region, the
// namespace's producers and consumers are closed so their clients look up
// again and land in the active region.
func (b *Broker) activeChanged(ns string, r FailoverRecord) {
	b.log.Info("namespace active region", "namespace", ns, "active", r.Active, "epoch", r.Epoch)
	if r.Active == b.cfg.Cluster {
		// Entries produced here from now on get a new ledger, so their ids
		// sort above every id the previous active region issued. (A topic
		// loaded later opens a new ledger anyway.)
		for _, t := range b.loadedTopics() {
			if t.name.NamespaceName() != ns {
				continue
			}
			t.ml.RollNext()
			if ss := t.syncState(); ss != nil && r.Previous != "" && !r.CatchUp {
				ss.regionFailed(r.Previous, r.Epoch)
			}
		}
		return
	}
	for _, t := range b.loadedTopics() {
		if t.name.NamespaceName() != ns {
			continue
		}
		t.mu.Lock()
		pol := t.pol
		producers := make([]*Producer, 0, len(t.producers))
		for p := range t.producers {
			producers = append(producers, p)
		}
		subs := make([]*Subscription, 0, len(t.subs))
		for _, s := range t.subs {
			subs = append(subs, s)
		}
		t.mu.Unlock()
		if !activeStandby(pol) {
			continue
		}
		for _, p := range producers {
			p.closeByBroker("")
		}
		for _, s := range subs {
			s.closeConsumers("")
		}
	}
}

// Failover makes region the namespace's active region (a manual failover:
// drills, maintenance): a compare-and-swap of its record to the next
// epoch. It returns the new record.
func (b *Broker) Failover(ctx context.Context, ns, region, reason string) (FailoverRecord, error) {
	pol, err := b.meta.GetPolicies(ctx, ns)
	if err != nil {
		return FailoverRecord{}, err
	}
	if !activeStandby(pol) {
		return FailoverRecord{}, badRequest(fmt.Errorf("namespace %s is not active-standby over several regions (failover %s, regions %v): nothing to move", ns, pol.Effective().Failover, pol.ReplicationClusters))
	}
	if !slices.Contains(pol.ReplicationClusters, region) {
		return FailoverRecord{}, badRequest(fmt.Errorf("region %s is not one of namespace %s's regions %v", region, ns, pol.ReplicationClusters))
	}
	key := failoverKey + ns
	cur := FailoverRecord{Namespace: ns, Active: pol.Effective().Primary}
	var rev int64
	kv, err := b.cfg.GlobalStore.Get(ctx, key)
	switch {
	case err == nil:
		if err := json.Unmarshal(kv.Value, &cur); err != nil {
			return FailoverRecord{}, err
		}
		rev = kv.ModRevision
	case errors.Is(err, cluster.ErrNotFound):
	default:
		return FailoverRecord{}, err
	}
	if cur.Active == region {
		return cur, httpError{http.StatusConflict, fmt.Errorf("namespace %s is already active in %s (epoch %d)", ns, region, cur.Epoch)}
	}
	next := FailoverRecord{Namespace: ns, Active: region, Epoch: cur.Epoch + 1, Previous: cur.Active, SinceMs: time.Now().UnixMilli(), Reason: reason}
	v, _ := json.Marshal(next)
	if rev == 0 {
		_, err = b.cfg.GlobalStore.Create(ctx, key, v)
	} else {
		_, err = b.cfg.GlobalStore.CAS(ctx, key, v, rev)
	}
	switch {
	case errors.Is(err, cluster.ErrVersionMismatch), errors.Is(err, cluster.ErrExists), errors.Is(err, cluster.ErrNotFound):
		return FailoverRecord{}, fmt.Errorf("%w: the record changed meanwhile, read it again: %v", ErrServiceNotReady, err)
	case err != nil:
		// A request in flight to a member that just died is not retried
		// by etcd (not idempotent): the caller may try again.
		return FailoverRecord{}, fmt.Errorf("%w: global store: %v", ErrServiceNotReady, err)
	}
	b.log.Warn("failover committed", "namespace", ns, "from", cur.Active, "to", region, "epoch", next.Epoch, "reason", reason)
	return next, nil
}

// failoverStatus returns the records of the active-standby namespaces of
// a tenant/namespace filter ("" = all known).
func (b *Broker) failoverStatus(ctx context.Context, ns string) ([]FailoverRecord, error) {
	if ns != "" {
		pol, err := b.meta.GetPolicies(ctx, ns)
		if err != nil {
			return nil, err
		}
		if !activeStandby(pol) {
			return []FailoverRecord{}, nil
		}
		return []FailoverRecord{b.fo.record(ns, pol)}, nil
	}
	b.fo.mu.Lock()
	defer b.fo.mu.Unlock()
	out := make([]FailoverRecord, 0, len(b.fo.recs))
	for _, r := range b.fo.recs {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b FailoverRecord) int { return strings.Compare(a.Namespace, b.Namespace) })
	return out, nil
}
