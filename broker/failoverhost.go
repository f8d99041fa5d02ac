package broker

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-mq/meridian/broker/failoverctl"
	"github.com/meridian-mq/meridian/broker/meta"
)

// The broker's side of the failover shell (broker/failoverctl): its
// wiring, and the loaded topics and replication status it asks for.

// newFailoverShell returns the failover shell over this broker.
func (b *Broker) newFailoverShell() *failoverctl.Shell {
	cfg := failoverctl.Config{
		Cluster: b.cfg.Cluster, BrokerID: b.cfg.BrokerID,
		Store: b.cfg.Store, GlobalStore: b.cfg.GlobalStore, Meta: b.meta,
		HealthView: b.cfg.HealthView, HealthChanges: b.cfg.HealthChanges, FailoverLease: b.cfg.FailoverLease,
		PublishProbe: b.cfg.PublishProbe, ProbeInterval: b.cfg.ProbeInterval, ProbeTimeout: b.cfg.ProbeTimeout,
		ManagedLedger: b.cfg.ManagedLedger,
		Probed:        b.metrics.probe,
		Alert:         func(kind string) { b.metrics.replAlerts.WithLabelValues(kind).Inc() },
		Logger:        b.log,
	}
	if b.guard != nil {
		cfg.Dial = b.guard.HandshakeConn
	}
	return failoverctl.New(cfg, failoverHost{b})
}

// failoverHost is the broker as the failover shell sees it.
type failoverHost struct{ b *Broker }

func (h failoverHost) Topics(ns string) []failoverctl.Topic {
	var out []failoverctl.Topic
	for _, t := range h.b.loadedTopics() {
		if t.name.NamespaceName() == ns {
			out = append(out, failoverTopic{t})
		}
	}
	for _, t := range h.b.np.loaded() {
		if t.name.NamespaceName() == ns {
			out = append(out, npFailoverTopic{t})
		}
	}
	return out
}

func (h failoverHost) Lease() clientv3.LeaseID { return h.b.own.currentLease().ID }

func (h failoverHost) ReplicationStatus(ctx context.Context, ns string) ([]failoverctl.SenderStatus, error) {
	st, err := h.b.repl.RegionStatus(ctx, ns)
	if err != nil {
		return nil, err
	}
	out := make([]failoverctl.SenderStatus, len(st))
	for i, s := range st {
		out[i] = failoverctl.SenderStatus{Remote: s.Remote, Connected: s.Connected, BacklogEntries: s.BacklogEntries,
			SecondsBehind: s.SecondsBehind, AckedSeq: s.AckedSeq, LocalSeq: s.LocalSeq}
	}
	return out, nil
}

// failoverTopic is a loaded topic as the failover shell sees it.
type failoverTopic struct{ t *Topic }

func (f failoverTopic) Policies() meta.Policies { return f.t.policies() }
func (f failoverTopic) RollNext()               { f.t.ml.RollNext() }

func (f failoverTopic) RegionFailed(region string, epoch uint64) {
	f.t.repl.RegionFailed(region, epoch)
}

func (f failoverTopic) CloseProducers() {
	t := f.t
	t.mu.Lock()
	// Queued producers first: the producers' leaving must not grant one of
	// them exclusive access in a region that no longer serves.
	t.refuseWaitingLocked()
	producers := make([]*Producer, 0, len(t.producers))
	for p := range t.producers {
		producers = append(producers, p)
	}
	t.mu.Unlock()
	for _, p := range producers {
		p.closeByBroker(nil)
	}
}

func (f failoverTopic) CloseConsumers() {
	for _, s := range f.t.subscriptions() {
		s.closeConsumers(nil)
	}
}

// npFailoverTopic is a loaded non-persistent topic as the failover shell
// sees it: nothing stored, so nothing to roll or to take out of a sync
// set; its clients are closed to look it up again.
type npFailoverTopic struct{ t *npTopic }

func (f npFailoverTopic) Policies() meta.Policies     { return f.t.pol }
func (f npFailoverTopic) RollNext()                   {}
func (f npFailoverTopic) RegionFailed(string, uint64) {}

func (f npFailoverTopic) CloseProducers() {
	f.t.mu.Lock()
	producers := make([]*npProducer, 0, len(f.t.producers))
	for p := range f.t.producers {
		producers = append(producers, p)
	}
	f.t.mu.Unlock()
	for _, p := range producers {
		p.closeByBroker(nil)
	}
}

func (f npFailoverTopic) CloseConsumers() {
	f.t.mu.Lock()
	subs := make([]*npSub, 0, len(f.t.subs))
	for _, s := range f.t.subs {
		subs = append(subs, s)
	}
	f.t.mu.Unlock()
	for _, s := range subs {
		s.closeConsumers(nil)
	}
}
