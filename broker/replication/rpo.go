package replication

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
)

// The RPO budget (namespace policy maxReplicationLagMs,
// maxReplicationLagBytes, maxReplicationLagAction; issue 33 item 2): an
// async namespace's bound on what an unplanned failover may lose, enforced
// on the producers of the region that takes them.
//
//   - A topic is over its budget when, for a remote region of the
//     namespace that is not declared failed, the oldest local entry that
//     region has not acknowledged is older than maxReplicationLagMs, or the
//     bytes of local entries it has not acknowledged pass
//     maxReplicationLagBytes (its sender's status, SecondsBehind brought up
//     to now, and BacklogBytes).
//   - Over the budget, the topic's gate closes (Log.SetRPOGate): hold —
//     sends wait unanswered, in order, as a planned switchover's hold does
//     — or refuse — producers are closed and new ones refused with
//     ProducerBlockedQuotaExceededException. It opens when every counted
//     region is back under the budget.
//   - A remote region is declared failed when the failover shell says so
//     (ActiveRegions.RegionDown: the failover core's condition of it in
//     this region's health view is down). Its lag then does not count
//     (state suspended, alert rpo-budget-suspended): a dead standby never
//     stops the active region. It counts again once it is not declared
//     failed and back under the budget — caught up, as a region rejoins a
//     sync set (alert rpo-budget-resumed).
//
// One goroutine per broker (rpoLoop) checks the topics that have a
// budget every rpoCheckEvery: a check reads the senders' published
// statuses and the failover shell's view, no etcd and no socket. The
// enforcement overshoots the budget by at most rpoCheckEvery plus the
// time a send already admitted takes to persist.
//
// Distinct from backlogQuotaBytes and the replicator core's Quota (which
// protect this region's disks and never touch producers): the budget
// bounds loss, the quota bounds storage. A namespace may set both.

// rpoCheckEvery is how often the topics with a budget are checked.
const rpoCheckEvery = 100 * time.Millisecond

// rpoEventsKept bounds a topic's remembered budget transitions.
const rpoEventsKept = 64

// RPOGate is what the RPO budget does to a topic's producers now.
type RPOGate int

const (
	// RPOOpen: under the budget, or no budget.
	RPOOpen RPOGate = iota
	// RPOHold: sends wait unanswered until the gate opens.
	RPOHold
	// RPORefuse: producers are closed and new ones refused.
	RPORefuse
)

func (g RPOGate) String() string {
	switch g {
	case RPOHold:
		return "hold"
	case RPORefuse:
		return "refuse"
	}
	return "open"
}

// A (topic, remote region)'s state under the budget.
const (
	RPOUnder     = "under"     // counted, under the budget
	RPOExceeded  = "exceeded"  // counted, over the budget: the gate is closed
	RPOSuspended = "suspended" // the region is declared failed: not counted
)

// rpoBudget is a namespace's budget; zero: none.
type rpoBudget struct {
	maxLag   time.Duration
	maxBytes int64
	action   RPOGate // RPOHold or RPORefuse
}

func budgetOf(pol meta.Policies) rpoBudget {
	rp := pol.Replication
	if rp == nil || (rp.MaxLagMs <= 0 && rp.MaxLagBytes <= 0) {
		return rpoBudget{}
	}
	b := rpoBudget{maxLag: time.Duration(rp.MaxLagMs) * time.Millisecond, maxBytes: rp.MaxLagBytes, action: RPOHold}
	if rp.MaxLagAction == meta.LagRefuse {
		b.action = RPORefuse
	}
	return b
}

func (b rpoBudget) set() bool { return b.maxLag > 0 || b.maxBytes > 0 }

// over reports whether a sender's status passes the budget.
func (b rpoBudget) over(st Status) bool {
	return b.maxLag > 0 && st.SecondsBehind > b.maxLag.Seconds() || b.maxBytes > 0 && st.BacklogBytes > b.maxBytes
}

// rpoVerdict decides a topic's gate from its senders' statuses and each
// remote's previous state (prev): each remote's state, and the gate —
// b.action when a counted remote is over the budget. A remote declared
// failed is suspended; one that was suspended stays so, no longer
// declared failed, until it is back under the budget (it rejoins once
// caught up, as a region does a sync set: a region that returns after an
// outage, with all of it to catch up on, does not stop the active region
// meanwhile). Pure.
func rpoVerdict(b rpoBudget, sts []Status, prev map[string]string, declaredFailed func(region string) bool) (RPOGate, map[string]string) {
	states := map[string]string{}
	gate := RPOOpen
	if !b.set() {
		return gate, states
	}
	for _, st := range sts {
		switch {
		case declaredFailed(st.Remote), prev[st.Remote] == RPOSuspended && b.over(st):
			states[st.Remote] = RPOSuspended
		case b.over(st):
			states[st.Remote] = RPOExceeded
			gate = b.action
		default:
			states[st.Remote] = RPOUnder
		}
	}
	return gate, states
}

// RPOEvent is one transition of a topic's budget, for the admin read and
// drill timelines.
type RPOEvent struct {
	At time.Time `json:"at"`
	// Remote is the region whose state changed ("" for the gate).
	Remote string `json:"remote,omitempty"`
	// State: a region's new state (under, exceeded, suspended), or the
	// gate's (open, hold, refuse).
	State string `json:"state"`
	// SecondsBehind and BacklogBytes of the region at the transition.
	SecondsBehind float64 `json:"secondsBehind,omitempty"`
	BacklogBytes  int64   `json:"backlogBytes,omitempty"`
}

// rpoState is a topic's budget state (Topic.rpo), under mu.
type rpoState struct {
	mu     sync.Mutex
	gate   RPOGate
	since  time.Time // when the gate last changed
	states map[string]string
	events []RPOEvent
	// closedTotal is the time the gate was closed, before since.
	closedTotal time.Duration
}

// checkRPO decides t's gate now, with down telling the regions declared
// failed, and applies a change of it.
func (t *Topic) checkRPO(now time.Time, down func(region string) bool) {
	b := budgetOf(t.policies())
	sts := t.senderStatus()
	r := &t.rpo
	r.mu.Lock()
	gate, states := rpoVerdict(b, sts, r.states, down)
	changedGate := gate != r.gate
	for _, st := range sts {
		was, is := r.states[st.Remote], states[st.Remote]
		if was == is {
			continue
		}
		r.events = append(r.events, RPOEvent{At: now, Remote: st.Remote, State: is, SecondsBehind: st.SecondsBehind, BacklogBytes: st.BacklogBytes})
		switch {
		case is == RPOSuspended:
			t.svc.metrics.Alerts.WithLabelValues("rpo-budget-suspended").Inc()
			t.svc.log.Warn("RPO budget suspended for a region declared failed: its lag no longer holds producers", "topic", t.name.String(), "remote", st.Remote, "secondsBehind", st.SecondsBehind)
		case was == RPOSuspended:
			t.svc.metrics.Alerts.WithLabelValues("rpo-budget-resumed").Inc()
			t.svc.log.Warn("RPO budget counts a region again (no longer declared failed)", "topic", t.name.String(), "remote", st.Remote, "state", is)
		case is == RPOExceeded:
			t.svc.metrics.Alerts.WithLabelValues("rpo-budget-exceeded").Inc()
			t.svc.log.Warn("RPO budget exceeded: producers "+b.action.String(), "topic", t.name.String(), "remote", st.Remote, "secondsBehind", st.SecondsBehind, "backlogBytes", st.BacklogBytes)
		case was == RPOExceeded:
			t.svc.log.Warn("RPO budget: region back under the budget", "topic", t.name.String(), "remote", st.Remote, "secondsBehind", st.SecondsBehind)
		}
	}
	r.states = states
	if changedGate {
		if r.gate != RPOOpen {
			r.closedTotal += now.Sub(r.since)
		}
		r.gate, r.since = gate, now
		r.events = append(r.events, RPOEvent{At: now, State: gate.String()})
	}
	if n := len(r.events); n > rpoEventsKept {
		r.events = slices.Clone(r.events[n-rpoEventsKept:])
	}
	r.mu.Unlock()
	if changedGate {
		t.log.SetRPOGate(gate)
	}
}

// openRPO opens t's gate (the budget was removed, or the topic stops).
func (t *Topic) openRPO(now time.Time) {
	r := &t.rpo
	r.mu.Lock()
	was := r.gate
	if was != RPOOpen {
		r.closedTotal += now.Sub(r.since)
		r.gate, r.since = RPOOpen, now
		r.events = append(r.events, RPOEvent{At: now, State: RPOOpen.String()})
	}
	r.states = nil
	r.mu.Unlock()
	if was != RPOOpen {
		t.log.SetRPOGate(RPOOpen)
	}
}

// trackRPO adds t to (or, without a budget, removes it from) the topics
// the budget loop checks. Called by Sync.
func (t *Topic) trackRPO() {
	if budgetOf(t.policies()).set() && !t.log.Closed() {
		t.svc.rpoTopics.Store(t, struct{}{})
		return
	}
	if _, ok := t.svc.rpoTopics.LoadAndDelete(t); ok {
		t.openRPO(t.svc.clock.Now())
	}
}

// untrackRPO removes t from the budget loop and opens its gate (Stop):
// the topic is closing, so the sends it held find it closed and are
// dropped unanswered (their clients resend them to the next owner).
func (t *Topic) untrackRPO() {
	t.svc.rpoTopics.Delete(t)
	t.openRPO(t.svc.clock.Now())
}

// rpoLoop checks the topics with a budget every rpoCheckEvery.
func (svc *Service) rpoLoop() {
	defer svc.wg.Done()
	tm := svc.clock.NewTimer(rpoCheckEvery)
	defer tm.Stop()
	for {
		select {
		case <-svc.ctx.Done():
			return
		case <-tm.C():
		}
		tm.Reset(rpoCheckEvery)
		now := svc.clock.Now()
		// One read of the failover shell's view per region per pass.
		seen := map[string]bool{}
		down := func(region string) bool {
			d, ok := seen[region]
			if !ok {
				d = svc.active.RegionDown(region)
				seen[region] = d
			}
			return d
		}
		svc.rpoTopics.Range(func(k, _ any) bool {
			k.(*Topic).checkRPO(now, down)
			return true
		})
	}
}

// RPORemote is one (topic, remote region) in the RPO read.
type RPORemote struct {
	Remote string `json:"remote"`
	// State under the budget: under, exceeded or suspended ("" without a
	// budget).
	State string `json:"state,omitempty"`
	// AtRisk*: what losing this region now (an unplanned failover to the
	// remote) would lose: the local entries the remote has not
	// acknowledged (a batch counts once), their bytes, the age of the
	// oldest.
	AtRiskSeconds float64 `json:"atRiskSeconds"`
	AtRiskEntries int64   `json:"atRiskEntries"`
	AtRiskBytes   int64   `json:"atRiskBytes"`
	Connected     bool    `json:"connected"`
}

// RPOTopic is one topic in the RPO read.
type RPOTopic struct {
	Topic     string `json:"topic"`
	Namespace string `json:"namespace"`
	// The namespace's budget (0: none) and its action, as the topic last
	// read its policies.
	MaxLagMs    int64  `json:"maxReplicationLagMs,omitempty"`
	MaxLagBytes int64  `json:"maxReplicationLagBytes,omitempty"`
	Action      string `json:"action,omitempty"`
	// Gate: open, hold or refuse.
	Gate    string      `json:"gate"`
	Since   *time.Time  `json:"since,omitempty"` // when the gate last changed
	Remotes []RPORemote `json:"remotes"`
	// ClosedSeconds is how long the gate has been closed (hold or
	// refuse) since the topic loaded here, the current closing included.
	ClosedSeconds float64    `json:"closedSeconds"`
	Events        []RPOEvent `json:"events,omitempty"`
}

// RPO returns the RPO read of this broker's loaded topics of filter (a
// namespace or a topic; "" all).
func (svc *Service) RPO(filter string) []RPOTopic {
	now := svc.clock.Now()
	var out []RPOTopic
	for _, t := range svc.host.Topics() {
		name := t.name.String()
		if filter != "" && name != filter && t.name.NamespaceName() != filter && !strings.HasPrefix(name, filter+"-partition-") {
			continue
		}
		sts := t.Status()
		if len(sts) == 0 {
			continue
		}
		out = append(out, t.rpoRead(now, sts))
	}
	slices.SortFunc(out, func(a, b RPOTopic) int { return strings.Compare(a.Topic, b.Topic) })
	return out
}

func (t *Topic) rpoRead(now time.Time, sts []Status) RPOTopic {
	r := &t.rpo
	r.mu.Lock()
	defer r.mu.Unlock()
	rt := RPOTopic{Topic: t.name.String(), Namespace: t.name.NamespaceName(), Gate: r.gate.String(), Events: slices.Clone(r.events), ClosedSeconds: r.closedTotal.Seconds()}
	if b := budgetOf(t.policies()); b.set() {
		rt.MaxLagMs, rt.MaxLagBytes, rt.Action = b.maxLag.Milliseconds(), b.maxBytes, b.action.String()
	}
	if !r.since.IsZero() {
		s := r.since
		rt.Since = &s
	}
	if r.gate != RPOOpen {
		rt.ClosedSeconds += now.Sub(r.since).Seconds()
	}
	for _, st := range sts {
		rt.Remotes = append(rt.Remotes, RPORemote{Remote: st.Remote, State: r.states[st.Remote], AtRiskSeconds: st.SecondsBehind,
			AtRiskEntries: st.BacklogEntries, AtRiskBytes: st.BacklogBytes, Connected: st.Connected})
	}
	return rt
}

// RegionRPO is RPO over every broker of the region (asked through their
// admin APIs, path is their local read).
func (svc *Service) RegionRPO(ctx context.Context, filter string) ([]RPOTopic, error) {
	out := svc.RPO(filter)
	if out == nil {
		out = []RPOTopic{}
	}
	peers, err := svc.host.Peers(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range peers {
		if p.ID == svc.cfg.BrokerID || p.AdminURL == "" {
			continue
		}
		u := p.AdminURL + "/admin/v2/meridian/replication/rpo?local=true&filter=" + url.QueryEscape(filter)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		// A broker that just died stays registered until its lease
		// expires: skip what does not answer soon.
		resp, err := svc.cfg.PeerHTTP(3 * time.Second).Do(req)
		if err != nil {
			svc.log.Debug("replication rpo: broker did not answer", "broker", p.ID, "err", err)
			continue
		}
		var more []RPOTopic
		err = json.NewDecoder(resp.Body).Decode(&more)
		resp.Body.Close()
		if err != nil {
			svc.log.Debug("replication rpo: bad answer", "broker", p.ID, "err", err)
			continue
		}
		out = append(out, more...)
	}
	slices.SortFunc(out, func(a, b RPOTopic) int { return strings.Compare(a.Topic, b.Topic) })
	return out, nil
}
