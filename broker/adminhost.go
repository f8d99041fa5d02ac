package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/broker/admin"
	"github.com/meridian-mq/meridian/broker/failoverctl"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/broker/replication"
	"github.com/meridian-mq/meridian/internal/netaddr"
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

// newAdmin returns the admin API over this broker.
func (b *Broker) newAdmin() *admin.Server {
	cfg := admin.Config{
		Addr: b.cfg.AdminAddr, Cluster: b.cfg.Cluster, Meta: b.meta,
		Broker: adminBroker{b}, Failover: adminBroker{b}, Replication: adminBroker{b},
		Health: b.cfg.Health, Metrics: append(prometheus.Gatherers{b.metrics.reg}, b.cfg.ExtraMetrics...),
		Probes: b.health, HTTP: b.cfg.AdminHTTP, Logger: b.log, DefaultRetention: defaultRetention(b.cfg.ManagedLedger),
		PeerHTTP: func(timeout time.Duration) *http.Client { return &http.Client{Timeout: timeout} },
	}
	if b.cfg.Security.GossipKeys != nil {
		cfg.GossipKeys = b.cfg.Security.GossipKeys
	}
	if b.guard != nil {
		cfg.Auth, cfg.Listen, cfg.PeerHTTP = b.guard, b.guard.ListenAdmin, b.guard.PeerHTTP
	}
	return admin.New(cfg)
}

// AdminURL returns http://admin-address (https:// with TLS), or "" when
// the API is off.
//
// The host is the one the admin API listens on, or — listening on every
// interface (0.0.0.0:8080, as in a container) — the broker's advertised
// host (its internal listener's, or AdvertisedAddr's), as Pulsar's broker
// id is its advertised address and web service port: the address other
// brokers and the brokers list give, never a wildcard no one can dial.
func (b *Broker) AdminURL() string {
	if b.admin == nil {
		return ""
	}
	return advertisedAdminURL(b.admin.URL(), b.serverURL)
}

// advertisedAdminURL is adminURL (scheme://host:port, the socket's) with
// a wildcard host replaced by serviceURL's host.
func advertisedAdminURL(adminURL, serviceURL string) string {
	scheme, hp, ok := strings.Cut(adminURL, "://")
	if !ok {
		return adminURL
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil || !netaddr.IsWildcard(host) {
		return adminURL
	}
	_, shp, _ := strings.Cut(serviceURL, "://")
	sh, _, err := net.SplitHostPort(shp)
	if err != nil || netaddr.IsWildcard(sh) {
		return adminURL
	}
	return scheme + "://" + net.JoinHostPort(sh, port)
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

func (a adminBroker) RepublishOrphans(ctx context.Context, ns, topic string) (any, error) {
	return a.b.repl.RepublishOrphans(ctx, ns, topic)
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

func (a adminBroker) ReplicationRPO(ctx context.Context, filter string, local bool) (any, error) {
	if local {
		out := a.b.repl.RPO(filter)
		if out == nil {
			out = []replication.RPOTopic{}
		}
		return out, nil
	}
	return a.b.repl.RegionRPO(ctx, filter)
}

func (a adminBroker) VerifyReplication(ctx context.Context, target string, settle time.Duration) (any, error) {
	return a.b.repl.VerifyReplication(ctx, target, settle)
}

// adminTopic is a loaded topic as the admin API sees it (admin.Topic).
type adminTopic struct{ t *Topic }

func (a adminTopic) Name() meta.TopicName                  { return a.t.name }
func (a adminTopic) Stats() admin.TopicStats               { return a.t.stats() }
func (a adminTopic) InternalStats() admin.InternalStats    { return a.t.internalStats() }
func (a adminTopic) InternalInfo() admin.ManagedLedgerInfo { return a.t.internalInfo() }

func (a adminTopic) SubscriptionNames() []string {
	names := []string{}
	for _, s := range a.t.subscriptions() {
		names = append(names, s.name)
	}
	return names
}

// DeleteSubscription deletes the subscription, and with force closes its
// consumers — only once its cursor is gone: a consumer closed earlier
// subscribes again at once and, finding the subscription or its cursor
// still there, kept the deleted subscription alive on a deleted cursor.
// Closed afterwards, it creates a new subscription (as with Pulsar).
func (a adminTopic) DeleteSubscription(ctx context.Context, name string, force bool) error {
	t := a.t
	s := t.subscription(name)
	if s != nil && s.consumerCount() > 0 && !force {
		return fmt.Errorf("%w: subscription %s has consumers", meta.ErrNotEmpty, s.name)
	}
	err := t.deleteSubscription(ctx, name)
	if s != nil {
		s.closeConsumers(nil)
	}
	return err
}

func (a adminTopic) ResetCursor(ctx context.Context, sub string, ms int64) error {
	s := a.t.subscription(sub)
	if s == nil {
		return fmt.Errorf("%w: subscription %s", meta.ErrNotFound, sub)
	}
	if err := s.seekTime(ctx, ms); err != nil {
		return err
	}
	s.closeConsumers(nil)
	return nil
}

// defaultRetention is the managed ledgers' retention in Pulsar's units.
func defaultRetention(c mledger.Config) meta.Retention {
	r := meta.Retention{RetentionTimeInMinutes: int(c.RetentionTime / time.Minute), RetentionSizeInMB: c.RetentionSizeBytes >> 20}
	if c.RetentionTime < 0 {
		r.RetentionTimeInMinutes = -1
	}
	if c.RetentionSizeBytes < 0 {
		r.RetentionSizeInMB = -1
	}
	return r
}

// The broker as the admin API sees it: brokers, lookups, bundles.

func (a adminBroker) LoadedTopics(ns string) []admin.Topic {
	var out []admin.Topic
	for _, t := range a.b.loadedTopics() {
		if t.name.NamespaceName() == ns {
			out = append(out, adminTopic{t})
		}
	}
	return out
}

func (a adminBroker) Self() admin.BrokerInfo {
	return admin.BrokerInfo{ID: a.b.cfg.BrokerID, ServiceURL: a.b.serverURL, AdminURL: a.b.AdminURL(), Listeners: a.b.lst.byName, HTTPListeners: a.b.lst.http}
}

func (a adminBroker) Brokers(ctx context.Context) ([]admin.BrokerInfo, error) {
	if a.b.own == nil {
		return []admin.BrokerInfo{a.Self()}, nil
	}
	bs, err := a.b.own.brokers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]admin.BrokerInfo, 0, len(bs))
	for _, bi := range bs {
		out = append(out, admin.BrokerInfo{ID: bi.ID, ServiceURL: bi.ServiceURL, AdminURL: bi.AdminURL, Listeners: bi.Listeners, HTTPListeners: bi.HTTPListeners})
	}
	return out, nil
}

// Lookup answers as a client's lookup would, in listener ("": the
// internal one): a broker of the region the namespace is active in when
// that is another (as a binary LOOKUP is redirected), else the bundle's
// owner in this region (it may acquire the bundle for this broker, as a
// lookup does), with its admin URL found in the region's registrations.
func (a adminBroker) Lookup(ctx context.Context, tn meta.TopicName, listener string) (admin.BrokerInfo, error) {
	if listener == a.b.lst.internal {
		listener = ""
	}
	if a.b.fo != nil {
		other, rb, err := a.b.fo.CrossRegionBroker(ctx, tn.String(), listener)
		if err != nil {
			return admin.BrokerInfo{}, err
		}
		if other != "" {
			// Another region's broker, with its web service URLs
			// (issue 28 §1).
			return admin.BrokerInfo{ServiceURL: other, AdminURL: rb.AdminURL, HTTPListeners: rb.HTTPListeners}, nil
		}
	}
	url, _, err := a.b.lookup(ctx, tn.String(), false, listener)
	if err != nil {
		return admin.BrokerInfo{}, err
	}
	in := func(bi admin.BrokerInfo) bool {
		u, err := meta.Listeners(bi.Listeners).URLFor(bi.ServiceURL, listener)
		return err == nil && u == url
	}
	if self := a.Self(); in(self) {
		self.ServiceURL = url
		return self, nil
	}
	bs, err := a.Brokers(ctx)
	if err != nil {
		return admin.BrokerInfo{}, err
	}
	for _, bi := range bs {
		if in(bi) {
			bi.ServiceURL = url
			return bi, nil
		}
	}
	return admin.BrokerInfo{ServiceURL: url}, nil
}

func (a adminBroker) HealthCheck(ctx context.Context) error {
	if a.b.own != nil && a.b.own.currentLease() == nil {
		return fmt.Errorf("%w: broker %s is not registered (no lease)", meta.ErrServiceNotReady, a.b.cfg.BrokerID)
	}
	if _, err := a.b.meta.ListTenants(ctx); err != nil {
		return fmt.Errorf("%w: metadata: %v", meta.ErrServiceNotReady, err)
	}
	return nil
}

func (a adminBroker) OwnedBundles() []string {
	seen := map[string]bool{}
	var out []string
	for _, own := range []*ownership{a.b.own, a.b.gown} {
		if own == nil {
			continue
		}
		for _, bd := range own.ownedBundles() {
			if name := bd.ns + "/" + adminBundle(bd).String(); !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}

func (a adminBroker) Bundles(ctx context.Context, ns string) ([]uint32, error) {
	pol, err := a.b.meta.GetPolicies(ctx, ns)
	if err != nil {
		return nil, err
	}
	bs, _, err := a.b.boundaries(ctx, ns, pol)
	return bs, err
}

// adminBundle and internalBundle convert between Pulsar's bundle range
// [lower, upper) (the last including 0xffffffff) and the broker's closed
// one.
func adminBundle(bd bundle) admin.Bundle {
	if bd.upper == 0xffffffff {
		return admin.Bundle{Lower: bd.lower, Upper: bd.upper}
	}
	return admin.Bundle{Lower: bd.lower, Upper: bd.upper + 1}
}

func internalBundle(ns string, bd admin.Bundle) bundle {
	if bd.Upper == 0xffffffff {
		return bundle{ns: ns, lower: bd.Lower, upper: bd.Upper}
	}
	return bundle{ns: ns, lower: bd.Lower, upper: bd.Upper - 1}
}

func (a adminBroker) BundleOf(ctx context.Context, tn meta.TopicName) (admin.Bundle, error) {
	pol, err := a.b.meta.GetPolicies(ctx, tn.NamespaceName())
	if err != nil {
		return admin.Bundle{}, err
	}
	bd, err := a.b.bundleFor(ctx, pol, tn)
	if err != nil {
		return admin.Bundle{}, err
	}
	return adminBundle(bd), nil
}

// bundleTopics returns the loaded topics of a bundle.
func (a adminBroker) bundleTopics(bd bundle) []*Topic {
	var out []*Topic
	for _, t := range a.b.loadedTopics() {
		t.mu.Lock()
		in := t.bundle == bd
		t.mu.Unlock()
		if in {
			out = append(out, t)
		}
	}
	return out
}

// ownedBy answers for a bundle another broker owns: ask that broker.
func ownedBy(bd bundle, bi BrokerInfo) error {
	return meta.StatusError{Status: http.StatusPreconditionFailed, Err: fmt.Errorf("bundle %s is owned by broker %s: ask it (%s)", adminBundle(bd), bi.ID, bi.AdminURL)}
}

func (a adminBroker) UnloadBundle(ctx context.Context, ns string, abd admin.Bundle) error {
	pol, err := a.b.meta.GetPolicies(ctx, ns)
	if err != nil {
		return err
	}
	own := a.b.own
	if own == nil || a.b.ownershipFor(pol) != own {
		return meta.StatusError{Status: http.StatusMethodNotAllowed, Err: fmt.Errorf("the bundles of namespace %s (stretched) are not unloaded through the admin API", ns)}
	}
	bd := internalBundle(ns, abd)
	if !own.owns(bd) {
		bi, ok, err := own.owner(ctx, bd)
		if err != nil {
			return err
		}
		if ok && bi.ID != a.b.cfg.BrokerID {
			return ownedBy(bd, bi)
		}
		return nil // nobody owns it: nothing is loaded
	}
	a.b.moveBundle(ctx, bd, a.bundleTopics(bd), nil)
	return nil
}

func (a adminBroker) SplitBundle(ctx context.Context, ns string, abd admin.Bundle, unload bool) error {
	pol, err := a.b.meta.GetPolicies(ctx, ns)
	if err != nil {
		return err
	}
	if a.b.own == nil || a.b.ownershipFor(pol) != a.b.own {
		return meta.StatusError{Status: http.StatusMethodNotAllowed, Err: fmt.Errorf("the bundles of namespace %s (stretched) are not split through the admin API", ns)}
	}
	bd := internalBundle(ns, abd)
	if bd.upper-bd.lower < 2 {
		return meta.StatusError{Status: http.StatusPreconditionFailed, Err: fmt.Errorf("bundle %s is too small to split", abd)}
	}
	// The owner splits (as Pulsar's): an unowned bundle is acquired first.
	mine, owner, err := a.b.own.acquire(ctx, bd)
	if err != nil {
		return fmt.Errorf("%w: %v", meta.ErrServiceNotReady, err)
	}
	if !mine {
		return ownedBy(bd, owner)
	}
	mid := bd.lower + (bd.upper-bd.lower)/2 + 1
	a.b.split(ctx, bd, a.bundleTopics(bd))
	bs, _, err := a.b.boundaries(ctx, ns, pol)
	if err != nil {
		return err
	}
	if !slices.Contains(bs, mid) {
		return meta.StatusError{Status: http.StatusConflict, Err: fmt.Errorf("bundle %s was not split: the namespace's bundles changed meanwhile; try again", abd)}
	}
	if unload {
		for _, h := range []bundle{{ns: ns, lower: bd.lower, upper: mid - 1}, {ns: ns, lower: mid, upper: bd.upper}} {
			if a.b.own.owns(h) {
				a.b.moveBundle(ctx, h, a.bundleTopics(h), nil)
			}
		}
	}
	return nil
}

func (a adminBroker) UnloadNamespace(ctx context.Context, ns string) error {
	// The bundles of the region's ownership (moveBundle releases there);
	// a stretched namespace's are held in the global store.
	if a.b.own == nil {
		return nil
	}
	for _, bd := range a.b.own.ownedBundles() {
		if bd.ns == ns {
			a.b.moveBundle(ctx, bd, a.bundleTopics(bd), nil)
		}
	}
	return nil
}

func (a adminBroker) Switchover(ctx context.Context, ns, region string, timeout time.Duration, dryRun bool, reason string) (any, error) {
	rep, err := a.b.fo.Switchover(ctx, ns, region, failoverctl.SwitchoverOptions{Timeout: timeout, DryRun: dryRun, Reason: reason})
	if err != nil && rep.State == "" {
		return nil, err // refused before it held anything
	}
	if err != nil {
		return rep, err // aborted: its report beside the error (issue 33)
	}
	return rep, nil
}

func (a adminBroker) RegionSwitchover(ctx context.Context, region, to string, timeout time.Duration, dryRun bool, reason string) (any, error) {
	rep, err := a.b.fo.RegionSwitchover(ctx, region, to, failoverctl.SwitchoverOptions{Timeout: timeout, DryRun: dryRun, Reason: reason})
	if err != nil && rep.State == "" {
		return nil, err // refused before it started
	}
	return rep, err
}

func (a adminBroker) SwitchoverLocal(ctx context.Context, ns, what string, q url.Values, body []byte) (any, error) {
	switch what {
	case "hold":
		var h failoverctl.Hold
		if err := json.Unmarshal(body, &h); err != nil {
			return nil, meta.BadRequest(fmt.Errorf("a hold: %w", err))
		}
		return nil, a.b.sw.hold(ns, h)
	case "release":
		var rel SwitchoverRelease
		if err := json.Unmarshal(body, &rel); err != nil || rel.ID == "" {
			return nil, meta.BadRequest(fmt.Errorf("a release needs an id: %v", err))
		}
		a.b.sw.release(ns, rel.ID, rel.Record)
		return nil, nil
	case "readiness":
		if q.Get("target") == "" {
			return nil, meta.BadRequest(errors.New("readiness needs target=REGION"))
		}
		return a.b.sw.readiness(ctx, ns, q.Get("target"), q.Get("dryRun") == "true"), nil
	}
	return nil, meta.BadRequest(fmt.Errorf("no switchover call %q", what))
}
