package failoverctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/failover"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// The active region of an active-standby namespace, and how brokers steer
// unmodified clients to it: the record, manual failover and steering (the
// gossip-driven decision and the self-fencing lease are control.go's).
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

// failoverState caches the records the broker watches.
type failoverState struct {
	sh *Shell
	mu sync.Mutex
	// recs: the stored records by namespace (absent: the primary, epoch 0).
	recs map[string]meta.FailoverRecord
	read bool // the first list succeeded
}

func (sh *Shell) startFailover() {
	sh.fo = &failoverState{sh: sh, recs: map[string]meta.FailoverRecord{}}
	sh.wg.Add(1)
	go sh.fo.watchLoop()
}

// watchLoop lists the records, then follows changes; after a broken watch
// it lists again.
func (f *failoverState) watchLoop() {
	defer f.sh.wg.Done()
	sh := f.sh
	for sh.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(sh.ctx, 10*time.Second)
		kvs, rev, err := sh.cfg.GlobalStore.List(ctx, meta.FailoverKey)
		cancel()
		if err != nil {
			select {
			case <-sh.ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		recs := map[string]meta.FailoverRecord{}
		for _, kv := range kvs {
			var r meta.FailoverRecord
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
				sh.activeChanged(ns, r)
			}
		}
		for evs := range sh.cfg.GlobalStore.Watch(sh.ctx, meta.FailoverKey, rev+1) {
			for _, ev := range evs {
				var r meta.FailoverRecord
				if ev.Deleted || json.Unmarshal(ev.KV.Value, &r) != nil || r.Namespace == "" {
					continue
				}
				f.committed(r)
			}
		}
	}
}

// committed takes a record known to be committed — from the watch, or the
// controller's own compare-and-swap, which it need not wait to see come
// back through the watch — if it is newer than the one held, and acts on
// the change.
func (f *failoverState) committed(r meta.FailoverRecord) {
	f.mu.Lock()
	o, ok := f.recs[r.Namespace]
	if ok && o.Epoch >= r.Epoch {
		f.mu.Unlock()
		return
	}
	f.recs[r.Namespace] = r
	f.mu.Unlock()
	f.sh.activeChanged(r.Namespace, r)
}

// record returns the namespace's record as last seen (the primary at
// epoch 0 when none is stored).
func (f *failoverState) record(ns string, pol meta.Policies) meta.FailoverRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.recs[ns]; ok {
		return r
	}
	return meta.FailoverRecord{Namespace: ns, Active: pol.Effective().Primary}
}

// activeRegion returns the region that serves the namespace's clients, or
// "" when every region serves it.
func (sh *Shell) activeRegion(ns string, pol meta.Policies) string {
	if sh.fo == nil || !meta.ActiveStandby(pol) {
		return ""
	}
	return sh.fo.record(ns, pol).Active
}

// errNotActive refuses a producer or subscription outside the active
// region: ServiceNotReady, which the Go client retries with a new lookup.
func (sh *Shell) checkActive(ctx context.Context, tn meta.TopicName, pol meta.Policies) error {
	if a := sh.activeRegion(tn.NamespaceName(), pol); a != "" && a != sh.cfg.Cluster {
		return fmt.Errorf("%w: namespace %s is active in region %s (this is %s): look the topic up again", meta.ErrServiceNotReady, tn.NamespaceName(), a, sh.cfg.Cluster)
	}
	if sh.servingLapsed(tn.NamespaceName(), pol) {
		return fmt.Errorf("%w: region %s lost the lease of namespace %s (cut off from the global store, or failing over): look the topic up again", meta.ErrServiceNotReady, sh.cfg.Cluster, tn.NamespaceName())
	}
	if !sh.mayServe(tn.NamespaceName(), pol) {
		// The region may be about to serve (a new namespace's first epoch,
		// a lease being acquired): wake the controller and wait a little,
		// since the Go client does not retry a refused creation.
		sh.nudgeControl()
		wait, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		for wait.Err() == nil && !sh.mayServe(tn.NamespaceName(), pol) {
			select {
			case <-wait.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
		if sh.mayServe(tn.NamespaceName(), pol) {
			return nil
		}
		return fmt.Errorf("%w: region %s does not hold the lease of namespace %s now (acquiring it, or cut off from the global store)", meta.ErrServiceNotReady, sh.cfg.Cluster, tn.NamespaceName())
	}
	return nil
}

// crossRegionLookup answers a LOOKUP for a topic whose namespace is active
// in another region: a broker of that region to ask (non-authoritative
// redirect), or "" when this region answers.
func (sh *Shell) crossRegionLookup(ctx context.Context, topic string) (string, error) {
	tn, err := meta.ParseTopic(topic)
	if err != nil {
		return "", nil // the normal lookup reports it
	}
	pol, err := sh.meta.LookupPolicies(ctx, tn.NamespaceName())
	if err != nil {
		return "", nil
	}
	a := sh.activeRegion(tn.NamespaceName(), pol)
	if a == sh.cfg.Cluster && sh.servingLapsed(tn.NamespaceName(), pol) {
		// This region was active and lost its lease (cut off from the
		// global store, or about to learn of a failover): it cannot serve,
		// and its record may be stale. Ask a broker of another region,
		// which answers from its own record (and sends the client back if
		// this region is still active there).
		for _, r := range corePolicy(pol).Regions {
			if r == sh.cfg.Cluster {
				continue
			}
			if urls, _ := sh.regionBrokers(ctx, r); len(urls) > 0 {
				return urls[rand.IntN(len(urls))], nil
			}
		}
		return "", nil
	}
	if a == "" || a == sh.cfg.Cluster {
		return "", nil
	}
	if sh.holdLookup(ctx, tn.NamespaceName(), pol, a) {
		// The record changed while the lookup was held: answer from it.
		return sh.crossRegionLookup(ctx, topic)
	}
	urls, err := sh.regionBrokers(ctx, a)
	if err != nil || len(urls) == 0 {
		return "", fmt.Errorf("%w: namespace %s is active in region %s, which has no reachable broker registered: %v", meta.ErrServiceNotReady, tn.NamespaceName(), a, err)
	}
	// Gossip takes a second or two to see a dead region; a refused
	// connection says it at once. Send the client only to a broker that
	// accepts connections, and otherwise hold the lookup like a suspect
	// region's (a redirect to a dead host costs the client a doubling of
	// its lookup backoff: one such answer made a consumer come back 10 s
	// after the producer).
	if sh.failoverAuto() && meta.ActiveStandby(pol) {
		deadline := time.Now().Add(corePolicy(pol).LookupHold)
		for {
			if u := sh.reachableURL(urls); u != "" {
				return u, nil
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			if sh.activeRegion(tn.NamespaceName(), pol) != a {
				return sh.crossRegionLookup(ctx, topic)
			}
		}
	}
	return urls[rand.IntN(len(urls))], nil
}

// reachableURL returns one of urls (pulsar://host:port) whose broker
// answers a protocol handshake within 500 ms (a killed broker refuses the
// connection; a paused one accepts it — its kernel does — but never
// answers), or "". An answer is kept for 500 ms.
func (sh *Shell) reachableURL(urls []string) string {
	for _, i := range rand.Perm(len(urls)) {
		u := urls[i]
		if v, ok := sh.reach.Load(u); ok {
			r := v.(reachability)
			if time.Since(r.at) < 500*time.Millisecond {
				if r.ok {
					return u
				}
				continue
			}
		}
		host := strings.TrimPrefix(u, "pulsar://")
		if pu, err := url.Parse(u); err == nil && pu.Host != "" {
			host = pu.Host
		}
		ok := sh.handshake(u, host, 500*time.Millisecond)
		sh.reach.Store(u, reachability{ok: ok, at: time.Now()})
		if ok {
			return u
		}
	}
	return ""
}

// handshake reports whether the broker at host (service URL u) answers
// CONNECT with CONNECTED — or, with authentication on, with the ERROR
// that refuses a CONNECT without a token: either way it serves — within
// timeout.
func (sh *Shell) handshake(u, host string, timeout time.Duration) bool {
	c, err := sh.dial(u, host, timeout)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	frame, err := codec.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("meridian-reachability"), ProtocolVersion: proto.Int32(20)}})
	if err != nil {
		return false
	}
	if _, err := c.Write(frame); err != nil {
		return false
	}
	f, err := codec.NewDecoder(c, 1<<20).Next()
	return err == nil && (f.Cmd.GetType() == pb.BaseCommand_CONNECTED ||
		f.Cmd.GetType() == pb.BaseCommand_ERROR && f.Cmd.GetError().GetError() == pb.ServerError_AuthenticationError)
}

type reachability struct {
	ok bool
	at time.Time
}

// holdLookup: while the active region of a namespace is suspect or down
// in this broker's gossip view, a standby does not send clients there at
// once (they would hang on a dead host until their connection timeout):
// it holds the lookup until the region is up again, the record names
// another region (then it reports true), or LookupHold has passed since
// this broker first saw the region not up (failover/doc.go, Hold).
func (sh *Shell) holdLookup(ctx context.Context, ns string, pol meta.Policies, active string) bool {
	if !sh.failoverAuto() || !meta.ActiveStandby(pol) {
		return false
	}
	hold := corePolicy(pol).LookupHold
	for {
		up := failover.StatusOf(sh.cfg.HealthView(), active, false).Condition() == failover.Up
		sh.badMu.Lock()
		since, seen := sh.badSince[active]
		switch {
		case up:
			delete(sh.badSince, active)
		case !seen:
			since = time.Now()
			sh.badSince[active] = since
		}
		sh.badMu.Unlock()
		if up || time.Since(since) >= hold {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
		if sh.activeRegion(ns, pol) != active {
			return true
		}
	}
}

// regionBrokers lists the service URLs of a region's live brokers, from
// the global store.
// The last list read is kept: a region cut off from the global store
// still knows where the others were.
func (sh *Shell) regionBrokers(ctx context.Context, region string) ([]string, error) {
	lctx, cancel := context.WithTimeout(ctx, time.Second) // the cache below answers a cut-off region
	urls, err := sh.cfg.GlobalStore.ListValues(lctx, meta.RegionBrokersKey(region))
	cancel()
	if err == nil && len(urls) > 0 {
		sh.regionCache.Store(region, urls)
		return urls, nil
	}
	if v, ok := sh.regionCache.Load(region); ok {
		return v.([]string), nil
	}
	// The region's registrations may be gone for a moment (their leases
	// lapsed while a global-store member was paused): gossip knows its
	// live brokers too.
	if sh.cfg.HealthView != nil {
		var gossip []string
		for _, m := range sh.cfg.HealthView().Region(region).Alive(cluster.RoleBroker) {
			// A broker publishes its listen address: usable unless it is
			// a wildcard one.
			if h, _, err := net.SplitHostPort(m.Addr); err == nil && h != "" && !net.ParseIP(h).IsUnspecified() {
				gossip = append(gossip, "pulsar://"+m.Addr)
			}
		}
		if len(gossip) > 0 {
			return gossip, nil
		}
	}
	return urls, err
}

// inListener is the URL of listener name of the broker (of another
// region) whose internal service URL is u, from the brokers' listener
// registrations in the global store (meta.RegionListenersKey); the last
// read answers while the store does not.
func (sh *Shell) inListener(ctx context.Context, u, name string) (string, error) {
	if v, ok := sh.listenerCache.Load(u); ok {
		if l, err := v.(meta.RegionBroker).Listeners.URLFor(u, name); err == nil {
			return l, nil
		}
	}
	if err := sh.readRegionBrokers(ctx); err != nil {
		if v, ok := sh.listenerCache.Load(u); ok {
			return v.(meta.RegionBroker).Listeners.URLFor(u, name)
		}
		return "", fmt.Errorf("%w: the listeners of %s: %v", meta.ErrServiceNotReady, u, err)
	}
	v, ok := sh.listenerCache.Load(u)
	if !ok {
		return "", meta.ErrNoListener(name)
	}
	return v.(meta.RegionBroker).Listeners.URLFor(u, name)
}

// regionBroker is the registration of the broker (of another region)
// whose internal service URL is u (meta.RegionListenersKey), as last
// read; ok false when it registered none.
func (sh *Shell) regionBroker(ctx context.Context, u string) (rb meta.RegionBroker, ok bool) {
	if v, ok := sh.listenerCache.Load(u); ok {
		return v.(meta.RegionBroker), true
	}
	_ = sh.readRegionBrokers(ctx) // the last read answers while the store does not
	if v, ok := sh.listenerCache.Load(u); ok {
		return v.(meta.RegionBroker), true
	}
	return rb, false
}

// readRegionBrokers reads the brokers' registrations of every region
// into listenerCache.
func (sh *Shell) readRegionBrokers(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	// The registrations of every region: their service URLs say whose
	// they are.
	vals, err := sh.cfg.GlobalStore.ListValues(lctx, "/regions/")
	if err != nil {
		return err
	}
	for _, v := range vals {
		var rb meta.RegionBroker
		if json.Unmarshal([]byte(v), &rb) == nil && rb.ServiceURL != "" && (rb.Listeners != nil || rb.AdminURL != "") {
			sh.listenerCache.Store(rb.ServiceURL, rb)
		}
	}
	return nil
}

// activeChanged applies a new record: outside the new active region, the
// namespace's producers and consumers are closed so their clients look up
// again and land in the active region.
func (sh *Shell) activeChanged(ns string, r meta.FailoverRecord) {
	sh.log.Info("namespace active region", "namespace", ns, "active", r.Active, "epoch", r.Epoch)
	if r.Active == sh.cfg.Cluster {
		// A moved hold left by a switchover away from here ends: the
		// producers' sends are taken again.
		sh.host.ActiveHere(ns, r)
		// Entries produced here from now on get a new ledger, so their ids
		// sort above every id the previous active region issued. (A topic
		// loaded later opens a new ledger anyway.)
		for _, t := range sh.host.Topics(ns) {
			t.RollNext()
			if r.Previous != "" && !r.CatchUp {
				t.RegionFailed(r.Previous, r.Epoch)
			}
		}
		return
	}
	for _, t := range sh.host.Topics(ns) {
		if !meta.ActiveStandby(t.Policies()) {
			continue
		}
		t.CloseProducers()
		t.CloseConsumers()
	}
}

// Failover makes region the namespace's active region (a manual failover:
// drills, maintenance): a compare-and-swap of its record to the next
// epoch. It returns the new record.
func (sh *Shell) Failover(ctx context.Context, ns, region, reason string) (meta.FailoverRecord, error) {
	pol, err := sh.meta.GetPolicies(ctx, ns)
	if err != nil {
		return meta.FailoverRecord{}, err
	}
	if !meta.ActiveStandby(pol) {
		return meta.FailoverRecord{}, meta.BadRequest(fmt.Errorf("namespace %s is not active-standby over several regions (failover %s, regions %v): nothing to move", ns, pol.Effective().Failover, pol.ReplicationClusters))
	}
	if !slices.Contains(pol.ReplicationClusters, region) {
		return meta.FailoverRecord{}, meta.BadRequest(fmt.Errorf("region %s is not one of namespace %s's regions %v", region, ns, pol.ReplicationClusters))
	}
	key := meta.FailoverKey + ns
	cur := meta.FailoverRecord{Namespace: ns, Active: pol.Effective().Primary}
	var rev int64
	kv, err := sh.cfg.GlobalStore.Get(ctx, key)
	switch {
	case err == nil:
		if err := json.Unmarshal(kv.Value, &cur); err != nil {
			return meta.FailoverRecord{}, err
		}
		rev = kv.ModRevision
	case errors.Is(err, cluster.ErrNotFound):
	default:
		return meta.FailoverRecord{}, err
	}
	if cur.Active == region {
		return cur, meta.StatusError{Status: http.StatusConflict, Err: fmt.Errorf("namespace %s is already active in %s (epoch %d)", ns, region, cur.Epoch)}
	}
	next := meta.FailoverRecord{Namespace: ns, Active: region, Epoch: cur.Epoch + 1, Previous: cur.Active, SinceMs: time.Now().UnixMilli(), Reason: reason}
	v, _ := json.Marshal(next)
	if rev == 0 {
		_, err = sh.cfg.GlobalStore.Create(ctx, key, v)
	} else {
		_, err = sh.cfg.GlobalStore.CAS(ctx, key, v, rev)
	}
	switch {
	case errors.Is(err, cluster.ErrVersionMismatch), errors.Is(err, cluster.ErrExists), errors.Is(err, cluster.ErrNotFound):
		return meta.FailoverRecord{}, fmt.Errorf("%w: the record changed meanwhile, read it again: %v", meta.ErrServiceNotReady, err)
	case err != nil:
		// A request in flight to a member that just died is not retried
		// by etcd (not idempotent): the caller may try again.
		return meta.FailoverRecord{}, fmt.Errorf("%w: global store: %v", meta.ErrServiceNotReady, err)
	}
	sh.log.Warn("failover committed", "namespace", ns, "from", cur.Active, "to", region, "epoch", next.Epoch, "reason", reason)
	return next, nil
}

// failoverStatus returns the records of the active-standby namespaces of
// a tenant/namespace filter ("" = all known).
func (sh *Shell) failoverStatus(ctx context.Context, ns string) ([]FailoverStatus, error) {
	var recs []meta.FailoverRecord
	if ns != "" {
		pol, err := sh.meta.GetPolicies(ctx, ns)
		if err != nil {
			return nil, err
		}
		if !meta.ActiveStandby(pol) {
			return []FailoverStatus{}, nil
		}
		recs = []meta.FailoverRecord{sh.fo.record(ns, pol)}
	} else {
		sh.fo.mu.Lock()
		for _, r := range sh.fo.recs {
			recs = append(recs, r)
		}
		sh.fo.mu.Unlock()
		slices.SortFunc(recs, func(a, b meta.FailoverRecord) int { return strings.Compare(a.Namespace, b.Namespace) })
	}
	out := make([]FailoverStatus, 0, len(recs))
	for _, r := range recs {
		st := FailoverStatus{FailoverRecord: r}
		if r.SinceMs > 0 {
			st.SinceTime = time.UnixMilli(r.SinceMs).UTC().Format(time.RFC3339Nano)
		}
		if sh.cfg.HealthView != nil {
			if pol, err := sh.meta.GetPolicies(ctx, r.Namespace); err == nil {
				view := sh.cfg.HealthView()
				for _, region := range corePolicy(pol).Regions {
					rs := failover.StatusOf(view, region, false)
					st.Health = append(st.Health, RegionCondition{Region: region, Condition: rs.Condition().String(), Detail: rs.Detail})
				}
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// FailoverStatus is a namespace's record with, as this broker's gossip
// sees them, the health of its regions.
type FailoverStatus struct {
	meta.FailoverRecord
	SinceTime string            `json:"since,omitempty"`
	Health    []RegionCondition `json:"health,omitempty"`
}

// RegionCondition is one region's condition for failover: up, suspect or
// down, and why it is not healthy.
type RegionCondition struct {
	Region    string `json:"region"`
	Condition string `json:"condition"`
	Detail    string `json:"detail,omitempty"`
}

// FailedOver returns the namespace's record when this region became its
// active region by an unplanned move (the previous region was declared
// failed), else a record with no Previous.
func (sh *Shell) FailedOver(ns string, pol meta.Policies) meta.FailoverRecord {
	if sh == nil || sh.fo == nil || !meta.ActiveStandby(pol) {
		return meta.FailoverRecord{}
	}
	r := sh.fo.record(ns, pol)
	if r.Active != sh.cfg.Cluster || r.CatchUp || r.Previous == "" || r.Previous == sh.cfg.Cluster {
		return meta.FailoverRecord{}
	}
	return r
}
