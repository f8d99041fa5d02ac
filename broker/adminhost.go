package broker

import (
	"context"
	"fmt"
	"net/http"

	"github.com/meridian-mq/meridian/broker/admin"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/broker/replication"
	"github.com/prometheus/client_golang/prometheus"
)

// The broker's side of the admin API (broker/admin serves the routes):
// the server's wiring, and the topic operations it asks for.

// deleteTopic deletes a topic and its data. Without force it refuses a
// topic with connected producers or consumers.
func (b *Broker) deleteTopic(ctx context.Context, tn meta.TopicName, force bool) error {
	t, err := b.getTopic(ctx, tn.String(), false)
	if err != nil {
		return err
	}
	if !force {
		t.mu.Lock()
		busy := len(t.producers) > 0
		for _, s := range t.subs {
			busy = busy || s.consumerCount() > 0
		}
		t.mu.Unlock()
		if busy {
			return fmt.Errorf("%w: topic %s has connected producers or consumers", meta.ErrNotEmpty, tn)
		}
	}
	if err := t.close(ctx); err != nil {
		return err
	}
	ml, err := mledger.Open(ctx, tn.ManagedLedgerName(), b.cfg.ManagedLedger)
	if err != nil {
		return err
	}
	if err := ml.Delete(ctx); err != nil {
		return err
	}
	_ = t.store.Delete(ctx, t.dedupKey())
	return b.meta.UnregisterTopic(ctx, tn)
}

func (t *Topic) subscription(name string) *Subscription {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.subs[name]
}

// createSubscription creates a durable subscription at the end of the topic.
func (t *Topic) createSubscription(ctx context.Context, name string) error {
	if err := meta.ValidSubscription(name); err != nil {
		return meta.BadRequest(err)
	}
	if t.subscription(name) != nil {
		return fmt.Errorf("%w: subscription %s", meta.ErrAlreadyExists, name)
	}
	cur, err := t.ml.OpenCursor(ctx, name, mledger.Latest)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.subs[name] == nil {
		t.subs[name] = newSubscription(t, name, 0, cur, true)
		t.b.metrics.subscriptions.Inc()
	}
	return nil
}

func (t *Topic) stats() admin.TopicStats {
	st := admin.TopicStats{StorageSize: t.ml.TotalSizeBytes(), Entries: t.ml.NumberOfEntries(), Publishers: []admin.PublisherStats{}, Subscriptions: map[string]admin.SubscriptionStats{}}
	t.mu.Lock()
	for p := range t.producers {
		st.Publishers = append(st.Publishers, admin.PublisherStats{ProducerName: p.name, ProducerID: p.id, Address: p.conn.nc.RemoteAddr().String(), ClientVersion: p.conn.clientVersion})
	}
	subs := make([]*Subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	t.mu.Lock()
	st.MsgInCounter = t.msgsIn
	t.mu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		ss := admin.SubscriptionStats{Type: s.subType().String(), UnackedMessages: s.core.Pending(), Consumers: []admin.ConsumerStats{}}
		for _, c := range s.core.Consumers() {
			ss.Consumers = append(ss.Consumers, admin.ConsumerStats{ConsumerName: c.Name, AvailablePermit: c.Permits, Address: s.consumers[c.ID].conn.nc.RemoteAddr().String()})
		}
		s.mu.Unlock()
		ss.MsgBacklog = s.cursor.Backlog()
		ss.MarkDelete = s.cursor.MarkDeleted().String()
		ss.ReadPosition = s.cursor.ReadPosition().String()
		st.Subscriptions[s.name] = ss
	}
	return st
}

func (t *Topic) internalStats() admin.InternalStats {
	st := admin.InternalStats{NumberOfEntries: t.ml.NumberOfEntries(), TotalSize: t.ml.TotalSizeBytes(), LastConfirmedEntry: t.ml.LastConfirmed().String(), Ledgers: []admin.LedgerStatsItem{}}
	for _, l := range t.ml.Ledgers() {
		st.Ledgers = append(st.Ledgers, admin.LedgerStatsItem{LedgerID: l.ID, Entries: l.Entries, Size: l.SizeBytes})
	}
	return st
}

// newAdmin returns the admin API over this broker.
func (b *Broker) newAdmin() *admin.Server {
	cfg := admin.Config{
		Addr: b.cfg.AdminAddr, Cluster: b.cfg.Cluster, Meta: b.meta,
		Broker: adminBroker{b}, Failover: adminBroker{b}, Replication: adminBroker{b},
		Health: b.cfg.Health, Metrics: append(prometheus.Gatherers{b.metrics.reg}, b.cfg.ExtraMetrics...),
		Probes: b.health, Logger: b.log,
	}
	if b.cfg.Security.GossipKeys != nil {
		cfg.GossipKeys = b.cfg.Security.GossipKeys
	}
	if b.guard != nil {
		cfg.Auth, cfg.Listen = b.guard, b.guard.ListenAdmin
	}
	return admin.New(cfg)
}

// AdminURL returns http://admin-address (https:// with TLS), or "" when
// the API is off.
func (b *Broker) AdminURL() string {
	if b.admin == nil {
		return ""
	}
	return b.admin.URL()
}

// AdminHandler returns the admin API's handler.
func (b *Broker) AdminHandler() http.Handler { return b.newAdmin().Handler() }

// adminBroker is the broker as the admin API sees it (admin.Broker,
// admin.Failover, admin.Replication).
type adminBroker struct{ b *Broker }

func (a adminBroker) Topic(ctx context.Context, name string, create bool) (admin.Topic, error) {
	t, err := a.b.getTopic(ctx, name, create)
	if err != nil {
		return nil, err
	}
	return adminTopic{t}, nil
}

func (a adminBroker) DeleteTopic(ctx context.Context, tn meta.TopicName, force bool) error {
	return a.b.deleteTopic(ctx, tn, force)
}

func (a adminBroker) Failover(ctx context.Context, ns, region, reason string) (meta.FailoverRecord, error) {
	return a.b.fo.Failover(ctx, ns, region, reason)
}

func (a adminBroker) FailoverStatus(ctx context.Context, ns string) (any, error) {
	return a.b.fo.FailoverStatus(ctx, ns)
}

func (a adminBroker) Orphans(ctx context.Context, ns string) (any, error) {
	return a.b.repl.Orphans(ctx, ns)
}

func (a adminBroker) ReplicationStatus(ctx context.Context, filter string, local bool) (any, error) {
	if local {
		out := a.b.repl.Status(filter)
		if out == nil {
			out = []replication.Status{}
		}
		return out, nil
	}
	return a.b.repl.RegionStatus(ctx, filter)
}

// adminTopic is a loaded topic as the admin API sees it (admin.Topic).
type adminTopic struct{ t *Topic }

func (a adminTopic) Stats() admin.TopicStats            { return a.t.stats() }
func (a adminTopic) InternalStats() admin.InternalStats { return a.t.internalStats() }

func (a adminTopic) SubscriptionNames() []string {
	names := []string{}
	for _, s := range a.t.subscriptions() {
		names = append(names, s.name)
	}
	return names
}

func (a adminTopic) CreateSubscription(ctx context.Context, name string) error {
	return a.t.createSubscription(ctx, name)
}

func (a adminTopic) DeleteSubscription(ctx context.Context, name string, force bool) error {
	t := a.t
	if s := t.subscription(name); s != nil && s.consumerCount() > 0 && !force {
		return fmt.Errorf("%w: subscription %s has consumers", meta.ErrNotEmpty, s.name)
	} else if s != nil {
		s.closeConsumers("")
	}
	return t.deleteSubscription(ctx, name)
}

func (a adminTopic) ResetCursor(ctx context.Context, sub string, ms int64) error {
	s := a.t.subscription(sub)
	if s == nil {
		return fmt.Errorf("%w: subscription %s", meta.ErrNotFound, sub)
	}
	if err := s.seekTime(ctx, ms); err != nil {
		return err
	}
	s.closeConsumers("")
	return nil
}
