package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/failover"
)

// Automatic failover: the shell of failover.Core (failover/doc.go, "The
// shell's duties"). One broker per region — the controller, elected
// through the region's store under its broker lease — runs one Core per
// active-standby namespace:
//
//   - inputs every 250 ms: the gossip health view of every region, the
//     namespace's record (failover.go's watch) and lease key from the
//     global store, and the region's lease as the controller holds it;
//   - proposals are committed by compare-and-swap of the record's epoch;
//   - the region's lease is a key /failover-lease/NS {holder, epoch} in the
//     global store bound to an etcd lease the controller grants, creates
//     only if absent and only while the record names this region at this
//     epoch, renews with single keep-alive requests, and revokes when the
//     Core says so;
//   - after each successful acquisition or renewal the controller
//     publishes, in its region's store, the wall-clock deadline until which
//     the region may acknowledge (failover.LeaseDeadline of the renewal's
//     send time). Every broker of the region watches it and checks it
//     right before every produce acknowledgement and every new producer or
//     subscription: a region that cannot renew — partitioned, paused,
//     half-dead — stops acknowledging before the store can have given the
//     namespace to another region.
//
// Brokers agree on wall clocks to well within the lease's margin (NTP);
// the controller's own check uses its monotonic clock.

const (
	failoverLeaseKey   = "/failover-lease/"
	failoverServingKey = "/failover/serving/"
	controllerKey      = "/failover/controller"
)

type leaseRecord struct {
	Holder string `json:"holder"`
	Epoch  uint64 `json:"epoch"`
}

// serving is what the controller publishes for its region's brokers.
type serving struct {
	Epoch      uint64 `json:"epoch"`
	DeadlineNs int64  `json:"deadlineUnixNano"`
}

// nsControl is the controller's state for one namespace.
type nsControl struct {
	core     *failover.Core
	policy   failover.Policy
	leaseID  clientv3.LeaseID
	epoch    uint64
	renewed  time.Time
	ttl      time.Duration
	lastKind failover.Kind
}

// servingState: the deadlines this broker read from its region's store.
type servingState struct {
	mu    sync.Mutex
	m     map[string]serving
	nudge chan struct{} // wakes the control loop now
}

// nudgeControl makes the controller (if this broker is it) step at once
// and re-read the namespaces.
func (b *Broker) nudgeControl() {
	if b.serving == nil {
		return
	}
	select {
	case b.serving.nudge <- struct{}{}:
	default:
	}
}

func (b *Broker) failoverAuto() bool {
	return b.cfg.HealthView != nil && b.cfg.GlobalStore != b.cfg.Store
}

func (b *Broker) startFailoverControl() {
	if !b.failoverAuto() {
		return
	}
	b.serving = &servingState{m: map[string]serving{}, nudge: make(chan struct{}, 1)}
	b.wg.Add(2)
	go b.watchServing()
	go b.controlLoop()
}

// mayServe reports whether this broker may acknowledge produce (or take a
// producer or subscription) for the namespace now.
func (b *Broker) mayServe(ns string, pol Policies) bool {
	if !b.failoverAuto() || !activeStandby(pol) {
		return true
	}
	b.serving.mu.Lock()
	s, ok := b.serving.m[ns]
	b.serving.mu.Unlock()
	rec := b.fo.record(ns, pol)
	return ok && rec.Active == b.cfg.Cluster && s.Epoch == rec.Epoch && time.Now().UnixNano() < s.DeadlineNs
}

func (b *Broker) watchServing() {
	defer b.wg.Done()
	for b.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		kvs, rev, err := b.cfg.Store.List(ctx, failoverServingKey)
		cancel()
		if err != nil {
			select {
			case <-b.ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		m := map[string]serving{}
		for _, kv := range kvs {
			var s serving
			if json.Unmarshal(kv.Value, &s) == nil {
				m[kv.Key[len(failoverServingKey):]] = s
			}
		}
		b.serving.mu.Lock()
		b.serving.m = m
		b.serving.mu.Unlock()
		for evs := range b.cfg.Store.Watch(b.ctx, failoverServingKey, rev+1) {
			b.serving.mu.Lock()
			for _, ev := range evs {
				ns := ev.KV.Key[len(failoverServingKey):]
				var s serving
				if ev.Deleted || json.Unmarshal(ev.KV.Value, &s) != nil {
					delete(b.serving.m, ns)
					continue
				}
				b.serving.m[ns] = s
			}
			b.serving.mu.Unlock()
		}
	}
}

// controlLoop: while this broker is its region's controller, step every
// active-standby namespace's Core.
func (b *Broker) controlLoop() {
	defer b.wg.Done()
	cores := map[string]*nsControl{}
	tk := time.NewTicker(250 * time.Millisecond)
	defer tk.Stop()
	var nsList []string
	var listedAt time.Time
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-tk.C:
		case <-b.serving.nudge:
			listedAt = time.Time{}
		}
		if !b.isController() {
			for ns, c := range cores {
				b.dropLease(ns, c)
			}
			cores = map[string]*nsControl{}
			continue
		}
		if time.Since(listedAt) > 5*time.Second {
			if l, err := b.activeStandbyNamespaces(); err == nil {
				nsList, listedAt = l, time.Now()
			}
		}
		view := b.cfg.HealthView()
		for _, ns := range nsList {
			ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
			b.stepNamespace(ctx, ns, cores, view)
			cancel()
		}
	}
}

// isController makes this broker its region's controller if none is, and
// reports whether it is.
func (b *Broker) isController() bool {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	kv, err := b.cfg.Store.Get(ctx, controllerKey)
	if err == nil {
		return string(kv.Value) == b.cfg.BrokerID
	}
	if !errors.Is(err, cluster.ErrNotFound) {
		return false
	}
	_, err = b.cfg.Store.CreateWithLease(ctx, controllerKey, []byte(b.cfg.BrokerID), b.own.currentLease().ID)
	return err == nil
}

func (b *Broker) activeStandbyNamespaces() ([]string, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	tenants, err := b.meta.ListTenants(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range tenants {
		nss, err := b.meta.ListNamespaces(ctx, t)
		if err != nil {
			return nil, err
		}
		for _, ns := range nss {
			pol, err := b.meta.GetPolicies(ctx, ns)
			if err == nil && activeStandby(pol) && slices.Contains(pol.ReplicationClusters, b.cfg.Cluster) {
				out = append(out, ns)
			}
		}
	}
	return out, nil
}

func corePolicy(pol Policies) failover.Policy {
	eff := pol.Effective()
	regions := []string{eff.Primary}
	for _, r := range pol.ReplicationClusters {
		if r != eff.Primary {
			regions = append(regions, r)
		}
	}
	return failover.Policy{Mode: failover.ActiveStandby, Regions: regions,
		FailoverDelay: failover.DefaultFailoverDelay, SwitchBackDelay: 0, LookupHold: failover.DefaultLookupHold, CatchUpRequired: true}
}

func (b *Broker) leaseRules() failover.LeaseRules {
	if b.cfg.FailoverLease.TTL > 0 {
		return b.cfg.FailoverLease
	}
	return failover.DefaultLeaseRules()
}

func (b *Broker) stepNamespace(ctx context.Context, ns string, cores map[string]*nsControl, view cluster.HealthView) {
	pol, err := b.meta.GetPolicies(ctx, ns)
	if err != nil || !activeStandby(pol) {
		if c := cores[ns]; c != nil {
			b.dropLease(ns, c)
			delete(cores, ns)
		}
		return
	}
	p := corePolicy(pol)
	c := cores[ns]
	if c == nil || !slices.Equal(c.policy.Regions, p.Regions) {
		core, err := failover.NewCore(failover.Config{Region: b.cfg.Cluster, Policy: p, Lease: b.leaseRules()})
		if err != nil {
			b.log.Warn("failover: core not started", "namespace", ns, "err", err)
			return
		}
		if c != nil {
			b.dropLease(ns, c)
		}
		c = &nsControl{core: core, policy: p}
		cores[ns] = c
	}
	// What the store holds: the record (watched) and the lease key.
	b.fo.mu.Lock()
	fr, stored := b.fo.recs[ns]
	read := b.fo.read
	b.fo.mu.Unlock()
	committed := failover.Committed{Read: read}
	if stored {
		committed.Record = failover.Record{Active: fr.Active, Epoch: fr.Epoch, Previous: fr.Previous, CatchUp: fr.CatchUp, Reason: fr.Reason, Since: time.UnixMilli(fr.SinceMs)}
	}
	if kv, err := b.cfg.GlobalStore.Get(ctx, failoverLeaseKey+ns); err == nil {
		var lr leaseRecord
		if json.Unmarshal(kv.Value, &lr) == nil {
			committed.Lease = failover.StoreLease{Holder: lr.Holder, Epoch: lr.Epoch}
		}
	} else if !errors.Is(err, cluster.ErrNotFound) {
		committed.Read = false // cut off from the store: stay standby
	}
	// Renew the region's lease if due.
	rules := b.leaseRules()
	now := time.Now()
	if c.leaseID != 0 && now.Sub(c.renewed) >= rules.RenewEvery {
		sent := time.Now()
		resp, err := b.cfg.GlobalStore.Client().KeepAliveOnce(ctx, c.leaseID)
		switch {
		case err == nil && resp.TTL > 0:
			c.renewed = sent
			b.publishServing(ctx, ns, c)
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			// Unknown: keep the old renewal time; the deadline runs out.
		default:
			b.log.Warn("failover: region lease lost", "namespace", ns, "err", err)
			c.leaseID, c.epoch, c.renewed = 0, 0, time.Time{}
		}
	}
	in := failover.Input{Now: time.Now(), Regions: failover.StatusesOf(view, p, nil), Committed: committed}
	if c.leaseID != 0 {
		in.Lease = failover.LocalLease{Epoch: c.epoch, RenewedAt: c.renewed, TTL: c.ttl}
	}
	out := c.core.Step(in)
	if out.Instruction.Kind != c.lastKind {
		b.log.Warn("failover: instruction", "namespace", ns, "instruction", out.String())
		c.lastKind = out.Instruction.Kind
	}
	if out.ReleaseLease {
		b.dropLease(ns, c)
	}
	if pr := out.Proposal; pr != nil {
		if err := b.propose(ctx, ns, pr); err != nil {
			b.log.Info("failover: proposal not committed", "namespace", ns, "proposal", pr.Kind.String(), "err", err)
		} else {
			b.metrics.replAlerts.WithLabelValues("failover-" + pr.Kind.String()).Inc()
		}
	}
	if out.AcquireLease && c.leaseID == 0 {
		b.acquireLease(ctx, ns, c, committed.Record)
	}
}

// propose commits a proposal: the record goes from epoch From to From+1
// only if it is still at From.
func (b *Broker) propose(ctx context.Context, ns string, pr *failover.Proposal) error {
	key := failoverKey + ns
	next := FailoverRecord{Namespace: ns, Active: pr.NewActive, Epoch: pr.NewEpoch, Previous: pr.Previous, CatchUp: pr.CatchUp,
		SinceMs: time.Now().UnixMilli(), Reason: pr.Reason}
	v, _ := json.Marshal(next)
	if pr.From == 0 {
		if _, err := b.cfg.GlobalStore.Create(ctx, key, v); err != nil {
			return err
		}
	} else {
		kv, err := b.cfg.GlobalStore.Get(ctx, key)
		if err != nil {
			return err
		}
		var cur FailoverRecord
		if err := json.Unmarshal(kv.Value, &cur); err != nil {
			return err
		}
		if cur.Epoch != pr.From {
			return fmt.Errorf("the record is at epoch %d, not %d", cur.Epoch, pr.From)
		}
		if _, err := b.cfg.GlobalStore.CAS(ctx, key, v, kv.ModRevision); err != nil {
			return err
		}
	}
	b.log.Warn("failover: committed", "namespace", ns, "kind", pr.Kind.String(), "active", pr.NewActive, "epoch", pr.NewEpoch, "previous", pr.Previous, "reason", pr.Reason)
	return nil
}

// acquireLease grants an etcd lease and creates the lease key with it if
// the key is absent and the record still names this region at its epoch.
func (b *Broker) acquireLease(ctx context.Context, ns string, c *nsControl, rec failover.Record) {
	if rec.Active != b.cfg.Cluster || rec.Epoch == 0 {
		return
	}
	cli := b.cfg.GlobalStore.Client()
	rules := b.leaseRules()
	grant, err := cli.Grant(ctx, int64((rules.TTL+time.Second-1)/time.Second))
	if err != nil {
		return
	}
	sent := time.Now()
	prefix := b.cfg.GlobalStore.Prefix()
	cur, err := b.cfg.GlobalStore.Get(ctx, failoverKey+ns)
	if err != nil {
		_, _ = cli.Revoke(context.Background(), grant.ID)
		return
	}
	var fr FailoverRecord
	if json.Unmarshal(cur.Value, &fr) != nil || fr.Active != b.cfg.Cluster || fr.Epoch != rec.Epoch {
		_, _ = cli.Revoke(context.Background(), grant.ID)
		return
	}
	lv, _ := json.Marshal(leaseRecord{Holder: b.cfg.Cluster, Epoch: rec.Epoch})
	lk := prefix + failoverLeaseKey + ns
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(lk), "=", 0), clientv3.Compare(clientv3.ModRevision(prefix+failoverKey+ns), "=", cur.ModRevision)).
		Then(clientv3.OpPut(lk, string(lv), clientv3.WithLease(grant.ID))).Commit()
	if err != nil || !resp.Succeeded {
		_, _ = cli.Revoke(context.Background(), grant.ID)
		return
	}
	c.leaseID, c.epoch, c.renewed, c.ttl = grant.ID, rec.Epoch, sent, time.Duration(grant.TTL)*time.Second
	b.log.Warn("failover: region lease acquired", "namespace", ns, "epoch", rec.Epoch, "ttl", c.ttl)
	b.publishServing(ctx, ns, c)
}

// publishServing tells the region's brokers until when they may
// acknowledge for the namespace.
func (b *Broker) publishServing(ctx context.Context, ns string, c *nsControl) {
	deadline := failover.LeaseDeadline(c.renewed, c.ttl, b.leaseRules())
	v, _ := json.Marshal(serving{Epoch: c.epoch, DeadlineNs: deadline.UnixNano()})
	if _, err := b.cfg.Store.Put(ctx, failoverServingKey+ns, v); err != nil {
		b.log.Warn("failover: serving deadline not published", "namespace", ns, "err", err)
	}
}

// dropLease stops the region serving the namespace, then revokes its
// lease.
func (b *Broker) dropLease(ns string, c *nsControl) {
	if c.leaseID == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.cfg.Store.Delete(ctx, failoverServingKey+ns)
	_, _ = b.cfg.GlobalStore.Client().Revoke(ctx, c.leaseID)
	b.log.Warn("failover: region lease released", "namespace", ns, "epoch", c.epoch)
	c.leaseID, c.epoch, c.renewed = 0, 0, time.Time{}
}
