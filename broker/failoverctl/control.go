package failoverctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/failover"
	"github.com/meridian-mq/meridian/internal/clock"
)

// Automatic failover: the shell of failover.Core (failover/doc.go, "The
// shell's duties"). One broker per region — the controller, elected
// through the region's store under its broker lease — runs one Core per
// active-standby namespace:
//
//   - inputs: the gossip health view of every region (stepped on each
//     change), the namespace's record (failover.go's watch) and lease key
//     from the global store (watched, and read at each step), and the
//     region's lease as the controller holds it; the loop sleeps until an
//     input changes, the Core's Output.Wake, a renewal falls due, or
//     controlPoll (250 ms) passed;
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

// controlStepTimeout bounds one namespace's step of the control loop
// (its store reads, renewal, proposal and lease acquisition).
const controlStepTimeout = 2 * time.Second

// quick runs a global-store read in attempts of at most 600 ms within
// ctx (readAttempts).
func quick(ctx context.Context, read func(context.Context) error) error {
	return meta.ReadAttempts(ctx, 600*time.Millisecond, read)
}

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
	wake     time.Time // the Core's last Output.Wake
	// servedEpoch: the epoch whose serving deadline is published to the
	// region's brokers (mayServe) — only once the Core said Serve in it,
	// not when its lease was acquired: a planned move's new active region
	// holds the lease while it catches up, and must not take producers or
	// consumers until it has (the Core's "catching up" retry).
	servedEpoch uint64

	judgedAt  time.Time
	judging   atomic.Bool                  // a publishCaughtUp runs
	published map[string]caughtUpRecord    // by target region; publishCaughtUp's
	says      map[[2]string]caughtUpRecord // every region's judgements (from, to), as read at saysAt
	saysAt    time.Time
}

// servingState: the deadlines this broker read from its region's store.
type servingState struct {
	mu    sync.Mutex
	m     map[string]serving
	nudge chan struct{} // wakes the control loop now
}

// nudgeControl makes the controller (if this broker is it) step at once
// and re-read the namespaces.
func (sh *Shell) nudgeControl() {
	if sh.serving == nil {
		return
	}
	select {
	case sh.serving.nudge <- struct{}{}:
	default:
	}
}

func (sh *Shell) failoverAuto() bool {
	return sh.cfg.HealthView != nil && sh.cfg.GlobalStore != sh.cfg.Store
}

func (sh *Shell) startFailoverControl() {
	if !sh.failoverAuto() {
		return
	}
	sh.serving = &servingState{m: map[string]serving{}, nudge: make(chan struct{}, 1)}
	sh.wg.Add(5)
	go sh.watchServing()
	go sh.controlLoop()
	go sh.closeOnLapse()
	go sh.watchLeases()
	go sh.avoidUnreachableRegions()
}

// avoidUnreachableRegions keeps the global store's client off the members
// of regions gossip sees no alive member of (cluster.Store.AvoidRegions):
// a paused or cut-off region's member accepts connections and answers
// nothing, and until the client's keepalive gave up on it (about 4 s) a
// third of the survivors' requests — the failover control's among them —
// hung there until their deadline (a silent outage committed its failover
// 7 s after the pause where the lease alone needs 5 s).
func (sh *Shell) avoidUnreachableRegions() {
	defer sh.wg.Done()
	tk := time.NewTicker(200 * time.Millisecond)
	defer tk.Stop()
	var last []string
	for {
		select {
		case <-sh.ctx.Done():
			return
		case <-tk.C:
		}
		avoid := slices.DeleteFunc(sh.cfg.HealthView().Unreachable(), func(r string) bool { return r == sh.cfg.Cluster })
		if !slices.Equal(avoid, last) {
			sh.log.Info("global store: avoiding the members of unreachable regions", "regions", avoid)
			last = avoid
		}
		sh.cfg.GlobalStore.AvoidRegions(avoid)
	}
}

// watchLeases wakes the control loop whenever a region's lease key
// changes in the global store: a dead region's lease expiring is what a
// crash failover waits for last, and the next step must not wait for its
// poll (controlPoll).
func (sh *Shell) watchLeases() {
	defer sh.wg.Done()
	for sh.ctx.Err() == nil {
		for range sh.cfg.GlobalStore.Watch(sh.ctx, failoverLeaseKey, 0) {
			sh.nudgeControl()
		}
		select {
		case <-sh.ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// closeOnLapse: once a namespace's serving deadline passes without a
// renewal (the region lost its lease: cut off from the global store, or
// the namespace moved), this broker closes the namespace's consumers as
// it refuses its producers: nothing new will be acknowledged here, so
// their clients look up again and land where the namespace is served. A
// consumer left on a cut-off region received nothing for 10 s after the
// producer had moved (region-partition drill).
func (sh *Shell) closeOnLapse() {
	defer sh.wg.Done()
	handled := map[string]serving{}
	tk := time.NewTicker(250 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-sh.ctx.Done():
			return
		case <-tk.C:
		}
		sh.serving.mu.Lock()
		var due []string
		now := time.Now().UnixNano()
		for ns, s := range sh.serving.m {
			if now >= s.DeadlineNs && handled[ns] != s {
				handled[ns] = s
				due = append(due, ns)
			}
		}
		sh.serving.mu.Unlock()
		for _, ns := range due {
			for _, t := range sh.host.Topics(ns) {
				if !sh.servingLapsed(ns, t.Policies()) {
					continue
				}
				t.CloseConsumers()
			}
		}
	}
}

// mayServe reports whether this broker may acknowledge produce (or take a
// producer or subscription) for the namespace now.
func (sh *Shell) mayServe(ns string, pol meta.Policies) bool {
	if !sh.failoverAuto() || !meta.ActiveStandby(pol) {
		return true
	}
	sh.serving.mu.Lock()
	s, ok := sh.serving.m[ns]
	sh.serving.mu.Unlock()
	rec := sh.fo.record(ns, pol)
	return ok && rec.Active == sh.cfg.Cluster && s.Epoch == rec.Epoch && time.Now().UnixNano() < s.DeadlineNs
}

// servingLapsed reports whether this region held the namespace's lease at
// the epoch it knows and its deadline has passed without a renewal: it
// may not serve, and may be cut off from the global store.
func (sh *Shell) servingLapsed(ns string, pol meta.Policies) bool {
	if !sh.failoverAuto() || !meta.ActiveStandby(pol) {
		return false
	}
	sh.serving.mu.Lock()
	s, ok := sh.serving.m[ns]
	sh.serving.mu.Unlock()
	rec := sh.fo.record(ns, pol)
	return ok && rec.Active == sh.cfg.Cluster && s.Epoch == rec.Epoch && time.Now().UnixNano() >= s.DeadlineNs
}

func (sh *Shell) watchServing() {
	defer sh.wg.Done()
	for sh.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(sh.ctx, 10*time.Second)
		kvs, rev, err := sh.cfg.Store.List(ctx, failoverServingKey)
		cancel()
		if err != nil {
			select {
			case <-sh.ctx.Done():
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
		sh.serving.mu.Lock()
		sh.serving.m = m
		sh.serving.mu.Unlock()
		for evs := range sh.cfg.Store.Watch(sh.ctx, failoverServingKey, rev+1) {
			sh.serving.mu.Lock()
			for _, ev := range evs {
				ns := ev.KV.Key[len(failoverServingKey):]
				var s serving
				if ev.Deleted || json.Unmarshal(ev.KV.Value, &s) != nil {
					delete(sh.serving.m, ns)
					continue
				}
				sh.serving.m[ns] = s
			}
			sh.serving.mu.Unlock()
		}
	}
}

// controlPoll is the longest the controller goes without a step: its
// inputs that announce no change (the lease key's value is read, the
// policies listed, the controller key checked) are polled at this pace.
// Between polls it steps on every change of a region's gossip health, of
// the records and lease keys (watched), at its Core's Output.Wake and when
// a lease renewal falls due.
const controlPoll = 250 * time.Millisecond

// minControlGap spaces steps that are due at once (a renewal that keeps
// timing out stays due), so the loop never spins.
const minControlGap = 20 * time.Millisecond

// nextControlStep returns when the controller steps next, at most poll
// after now: at the earliest Core's Wake and renewal due among cores,
// and never sooner than minControlGap.
func nextControlStep(now time.Time, poll, renewEvery time.Duration, cores map[string]*nsControl) time.Time {
	at := now.Add(poll)
	for _, c := range cores {
		if !c.wake.IsZero() && c.wake.Before(at) {
			at = c.wake
		}
		if c.leaseID != 0 {
			if due := c.renewed.Add(renewEvery); due.Before(at) {
				at = due
			}
		}
	}
	if floor := now.Add(minControlGap); at.Before(floor) {
		at = floor
	}
	return at
}

// healthSignature is what of a gossip view the Core reads (each region's
// health, its problems, its suspect members): a view that changes only
// tags or probe times the Core would not act on (brokers republish their
// probe tag every second) does not cost a step.
func healthSignature(v cluster.HealthView) string {
	var b strings.Builder
	for _, r := range v.Regions() {
		rh := v.Region(r)
		fmt.Fprintf(&b, "%s:%t:%d:%s|", r, rh.Healthy(), len(rh.Suspect("")), strings.Join(rh.Problems(), ";"))
	}
	return b.String()
}

// controlLoop: while this broker is its region's controller, step every
// active-standby namespace's Core — at once on an input, else when
// nextControlStep says, sleeping on the shell's clock in between.
func (sh *Shell) controlLoop() {
	defer sh.wg.Done()
	cores := map[string]*nsControl{}
	alarm := clock.NewAlarm(sh.cfg.Clock)
	defer alarm.Stop()
	var views <-chan cluster.HealthView
	if sh.cfg.HealthChanges != nil {
		ch, cancel := sh.cfg.HealthChanges()
		defer cancel()
		views = ch
	}
	var lastHealth string
	var nsList []string
	var listedAt time.Time
	type listResult struct {
		nss []string
		err error
	}
	listed := make(chan listResult, 1)
	listing := false
	next := sh.cfg.Clock.Now()
	for {
		select {
		case <-sh.ctx.Done():
			return
		case <-alarm.Set(next):
		case <-sh.serving.nudge:
			listedAt = time.Time{}
		case v, ok := <-views:
			if !ok {
				views = nil
				continue
			}
			if sig := healthSignature(v); sig != lastHealth {
				lastHealth = sig
			} else {
				continue
			}
		case r := <-listed:
			listing = false
			if r.err == nil {
				nsList = r.nss
			}
		}
		now := sh.cfg.Clock.Now()
		if !sh.isController() {
			for ns, c := range cores {
				sh.dropLease(ns, c)
			}
			cores = map[string]*nsControl{}
			next = now.Add(controlPoll)
			continue
		}
		if now.Sub(listedAt) > 5*time.Second && !listing {
			// Listed in the background: a global store that does not
			// answer must not stall the steps of the namespaces known.
			listing, listedAt = true, now
			go func() {
				l, err := sh.activeStandbyNamespaces()
				select {
				case listed <- listResult{l, err}:
				case <-sh.ctx.Done():
				}
			}()
		}
		select {
		case r := <-listed:
			listing = false
			if r.err == nil {
				nsList = r.nss
			} else {
				listedAt = time.Time{}
			}
		default:
		}
		for _, ns := range nsList {
			// A fresh view per namespace, and short store calls: a global
			// store member that stopped answering (paused, cut off) must not
			// hold the loop — with 5 s per call and two namespaces, a
			// paused region was acted on 12 s after it stopped.
			ctx, cancel := context.WithTimeout(sh.ctx, controlStepTimeout)
			sh.stepNamespace(ctx, ns, cores, sh.cfg.HealthView())
			cancel()
		}
		next = nextControlStep(sh.cfg.Clock.Now(), controlPoll, sh.leaseRules().RenewEvery, cores)
	}
}

// isController makes this broker its region's controller if none is, and
// reports whether it is.
func (sh *Shell) isController() bool {
	ctx, cancel := context.WithTimeout(sh.ctx, 5*time.Second)
	defer cancel()
	kv, err := sh.cfg.Store.Get(ctx, controllerKey)
	if err == nil {
		return string(kv.Value) == sh.cfg.BrokerID
	}
	if !errors.Is(err, cluster.ErrNotFound) {
		return false
	}
	_, err = sh.cfg.Store.CreateWithLease(ctx, controllerKey, []byte(sh.cfg.BrokerID), sh.host.Lease())
	return err == nil
}

func (sh *Shell) activeStandbyNamespaces() ([]string, error) {
	ctx, cancel := context.WithTimeout(sh.ctx, 10*time.Second)
	defer cancel()
	tenants, err := sh.meta.ListTenants(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range tenants {
		nss, err := sh.meta.ListNamespaces(ctx, t)
		if err != nil {
			return nil, err
		}
		for _, ns := range nss {
			pol, err := sh.meta.GetPolicies(ctx, ns)
			if err == nil && meta.ActiveStandby(pol) && slices.Contains(pol.ReplicationClusters, sh.cfg.Cluster) {
				out = append(out, ns)
			}
		}
	}
	return out, nil
}

func corePolicy(pol meta.Policies) failover.Policy {
	eff := pol.Effective()
	regions := []string{eff.Primary}
	for _, r := range pol.ReplicationClusters {
		if r != eff.Primary {
			regions = append(regions, r)
		}
	}
	p := failover.Policy{Mode: failover.ActiveStandby, Regions: regions,
		FailoverDelay: failover.DefaultFailoverDelay, SwitchBackDelay: failover.DefaultSwitchBackDelay, LookupHold: failover.DefaultLookupHold, CatchUpRequired: true}
	if eff.FailoverDelayMs > 0 {
		p.FailoverDelay = time.Duration(eff.FailoverDelayMs) * time.Millisecond
	}
	if d := eff.SwitchBackDelayMs; d != nil {
		p.SwitchBackDelay = max(0, time.Duration(*d)*time.Millisecond) // 0 or -1: never
	}
	return p
}

// Caught-up judgements (failover/doc.go, the shell's duty 3): every
// controller publishes, for each other region of a namespace, whether
// its own region's replicators have delivered everything of the
// namespace to that region — /failover/caughtup/NS/FROM/TO {caughtUp, at}
// in the global store, rewritten on change and every 5 s. A region R is
// caught up when every other region that is up says so within the last
// 10 s: the active region's word decides a switch-back to R, and after it
// the old active region's word lets R serve (it has everything the old
// active acknowledged once the old active's senders report no backlog).
const (
	caughtUpKey   = "/failover/caughtup/"
	caughtUpFresh = 10 * time.Second
)

type caughtUpRecord struct {
	// CaughtUp: nothing of the namespace is left to send to the region.
	CaughtUp bool `json:"caughtUp"`
	// Near: every stream to it is connected and at most nearLag behind.
	Near bool  `json:"near"`
	AtMs int64 `json:"atMs"`
}

// nearLag: while producers keep writing, a replication backlog is rarely
// exactly empty when sampled; a region this close behind may be switched
// back to — the new epoch then waits (CatchUp) until the old active
// region's senders report nothing left, which they soon do since it no
// longer takes produce.
const nearLag = time.Second

// publishCaughtUp computes and publishes this region's judgements for ns
// (one at a time per namespace: nsControl.judging).
func (sh *Shell) publishCaughtUp(ctx context.Context, ns string, c *nsControl) {
	st, err := sh.host.ReplicationStatus(ctx, ns)
	if err != nil {
		return
	}
	for _, r := range c.policy.Regions {
		if r == sh.cfg.Cluster {
			continue
		}
		ok, near := true, true
		for _, s := range st {
			if s.Remote != r {
				continue
			}
			if !s.Connected || s.BacklogEntries > 0 || s.AckedSeq != s.LocalSeq {
				ok = false
			}
			if !s.Connected || s.SecondsBehind > nearLag.Seconds() {
				near = false
			}
		}
		prev, seen := c.published[r]
		if seen && prev.CaughtUp == ok && prev.Near == near && time.Since(time.UnixMilli(prev.AtMs)) < 5*time.Second {
			continue
		}
		rec := caughtUpRecord{CaughtUp: ok, Near: near, AtMs: time.Now().UnixMilli()}
		v, _ := json.Marshal(rec)
		if _, err := sh.cfg.GlobalStore.Put(ctx, caughtUpKey+ns+"/"+sh.cfg.Cluster+"/"+r, v); err == nil {
			if c.published == nil {
				c.published = map[string]caughtUpRecord{}
			}
			c.published[r] = rec
		}
	}
}

// caughtUpFunc reads every region's judgements of ns. The region a
// planned move made active must be caught up exactly before it serves;
// for deciding a switch-back, near is enough.
func (sh *Shell) caughtUpFunc(ctx context.Context, ns string, c *nsControl, view cluster.HealthView, rec failover.Record) func(string) bool {
	// Judgements are rewritten at most once a second: read them as often,
	// not on every step.
	if c.says == nil || time.Since(c.saysAt) >= time.Second {
		var kvs []cluster.KV
		err := quick(ctx, func(ctx context.Context) (err error) {
			kvs, _, err = sh.cfg.GlobalStore.List(ctx, caughtUpKey+ns+"/")
			return err
		})
		if err != nil {
			c.says = nil
			return nil
		}
		c.says, c.saysAt = map[[2]string]caughtUpRecord{}, time.Now()
		for _, kv := range kvs {
			parts := strings.Split(strings.TrimPrefix(kv.Key, caughtUpKey+ns+"/"), "/")
			var r caughtUpRecord
			if len(parts) == 2 && json.Unmarshal(kv.Value, &r) == nil {
				c.says[[2]string{parts[0], parts[1]}] = r
			}
		}
	}
	says, p := c.says, c.policy
	return func(to string) bool {
		for _, from := range p.Regions {
			if from == to || failover.StatusOf(view, from, false).Condition() != failover.Up {
				continue
			}
			r, ok := says[[2]string{from, to}]
			if !ok || time.Since(time.UnixMilli(r.AtMs)) > caughtUpFresh {
				return false
			}
			if exact := rec.CatchUp && rec.Active == to; exact && !r.CaughtUp || !exact && !r.Near {
				return false
			}
		}
		return true
	}
}

func (sh *Shell) leaseRules() failover.LeaseRules {
	if sh.cfg.FailoverLease.TTL > 0 {
		return sh.cfg.FailoverLease
	}
	return failover.DefaultLeaseRules()
}

func (sh *Shell) stepNamespace(ctx context.Context, ns string, cores map[string]*nsControl, view cluster.HealthView) {
	pol, err := sh.meta.GetPolicies(ctx, ns)
	if err != nil || !meta.ActiveStandby(pol) {
		if c := cores[ns]; c != nil {
			sh.dropLease(ns, c)
			delete(cores, ns)
		}
		return
	}
	p := corePolicy(pol)
	c := cores[ns]
	if c == nil || !slices.Equal(c.policy.Regions, p.Regions) {
		core, err := failover.NewCore(failover.Config{Region: sh.cfg.Cluster, Policy: p, Lease: sh.leaseRules()})
		if err != nil {
			sh.log.Warn("failover: core not started", "namespace", ns, "err", err)
			return
		}
		if c != nil {
			sh.dropLease(ns, c)
		}
		c = &nsControl{core: core, policy: p}
		cores[ns] = c
	}
	// What the store holds: the record (watched) and the lease key.
	sh.fo.mu.Lock()
	fr, stored := sh.fo.recs[ns]
	read := sh.fo.read
	sh.fo.mu.Unlock()
	committed := failover.Committed{Read: read}
	if stored {
		committed.Record = failover.Record{Active: fr.Active, Epoch: fr.Epoch, Previous: fr.Previous, CatchUp: fr.CatchUp, Reason: fr.Reason, Since: time.UnixMilli(fr.SinceMs)}
	}
	var kv cluster.KV
	if err := quick(ctx, func(ctx context.Context) (err error) {
		kv, err = sh.cfg.GlobalStore.Get(ctx, failoverLeaseKey+ns)
		return err
	}); err == nil {
		var lr leaseRecord
		if json.Unmarshal(kv.Value, &lr) == nil {
			committed.Lease = failover.StoreLease{Holder: lr.Holder, Epoch: lr.Epoch}
		}
	} else if !errors.Is(err, cluster.ErrNotFound) {
		committed.Read = false // cut off from the store: stay standby
	}
	// Renew the region's lease if due.
	rules := sh.leaseRules()
	now := time.Now()
	if c.leaseID != 0 && now.Sub(c.renewed) >= rules.RenewEvery {
		sent := time.Now()
		resp, err := sh.cfg.GlobalStore.Client().KeepAliveOnce(ctx, c.leaseID)
		switch {
		case err == nil && resp.TTL > 0:
			c.renewed = sent
			if c.servedEpoch == c.epoch {
				sh.publishServing(ctx, ns, c)
			}
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			// Unknown: keep the old renewal time; the deadline runs out.
		default:
			sh.log.Warn("failover: region lease lost", "namespace", ns, "err", err)
			c.leaseID, c.epoch, c.renewed, c.servedEpoch = 0, 0, time.Time{}, 0
		}
	}
	if time.Since(c.judgedAt) >= time.Second && c.judging.CompareAndSwap(false, true) {
		// In the background: it asks the region's brokers over HTTP and
		// writes the global store, which must not delay the step.
		c.judgedAt = time.Now()
		go func() {
			defer c.judging.Store(false)
			jctx, cancel := context.WithTimeout(sh.ctx, controlStepTimeout)
			defer cancel()
			sh.publishCaughtUp(jctx, ns, c)
		}()
	}
	in := failover.Input{Now: time.Now(), Regions: failover.StatusesOf(view, p, sh.caughtUpFunc(ctx, ns, c, view, committed.Record)), Committed: committed}
	if c.leaseID != 0 {
		in.Lease = failover.LocalLease{Epoch: c.epoch, RenewedAt: c.renewed, TTL: c.ttl}
	}
	out := c.core.Step(in)
	c.wake = out.Wake
	if out.Instruction.Kind != c.lastKind {
		sh.log.Warn("failover: instruction", "namespace", ns, "instruction", out.String())
		c.lastKind = out.Instruction.Kind
	}
	if out.Instruction.Kind == failover.Serve && c.leaseID != 0 && c.servedEpoch != c.epoch && sh.publishServing(ctx, ns, c) {
		c.servedEpoch = c.epoch
	}
	if out.ReleaseLease {
		sh.dropLease(ns, c)
	}
	if pr := out.Proposal; pr != nil {
		if err := sh.propose(ctx, ns, pr); err != nil {
			sh.log.Info("failover: proposal not committed", "namespace", ns, "proposal", pr.Kind.String(), "err", err)
		} else {
			sh.alert("failover-" + pr.Kind.String())
			// The next step (at once) acts on the new epoch: the new active
			// region acquires its lease without waiting for a tick.
			sh.nudgeControl()
		}
	}
	if out.AcquireLease && c.leaseID == 0 {
		sh.acquireLease(ctx, ns, c, committed.Record)
	}
}

// propose commits a proposal: the record goes from epoch From to From+1
// only if it is still at From.
func (sh *Shell) propose(ctx context.Context, ns string, pr *failover.Proposal) error {
	key := meta.FailoverKey + ns
	next := meta.FailoverRecord{Namespace: ns, Active: pr.NewActive, Epoch: pr.NewEpoch, Previous: pr.Previous, CatchUp: pr.CatchUp,
		SinceMs: time.Now().UnixMilli(), Reason: pr.Reason}
	v, _ := json.Marshal(next)
	if pr.From == 0 {
		if _, err := sh.cfg.GlobalStore.Create(ctx, key, v); err != nil {
			return err
		}
	} else {
		var kv cluster.KV
		err := quick(ctx, func(ctx context.Context) (err error) { kv, err = sh.cfg.GlobalStore.Get(ctx, key); return err })
		if err != nil {
			return err
		}
		var cur meta.FailoverRecord
		if err := json.Unmarshal(kv.Value, &cur); err != nil {
			return err
		}
		if cur.Epoch != pr.From {
			return fmt.Errorf("the record is at epoch %d, not %d", cur.Epoch, pr.From)
		}
		// In short attempts as well (see acquireLease): a repeat of a CAS
		// that went through fails its compare, and the next step reads
		// the committed record.
		if err := quick(ctx, func(ctx context.Context) error {
			_, err := sh.cfg.GlobalStore.CAS(ctx, key, v, kv.ModRevision)
			return err
		}); err != nil {
			return err
		}
	}
	sh.log.Warn("failover: committed", "namespace", ns, "kind", pr.Kind.String(), "active", pr.NewActive, "epoch", pr.NewEpoch, "previous", pr.Previous, "reason", pr.Reason)
	sh.fo.committed(next)
	return nil
}

// acquireLease grants an etcd lease and creates the lease key with it if
// the key is absent and the record still names this region at its epoch.
func (sh *Shell) acquireLease(ctx context.Context, ns string, c *nsControl, rec failover.Record) {
	if rec.Active != sh.cfg.Cluster || rec.Epoch == 0 {
		return
	}
	cli := sh.cfg.GlobalStore.Client()
	rules := sh.leaseRules()
	// Grant and the transaction go in short attempts too: right after a
	// region is paused, a third of the requests still go to its paused
	// global-store member until the client's keepalive drops it (a lease
	// granted by an attempt whose answer was lost expires unused; the
	// transaction's compares make a repeat harmless).
	var grant *clientv3.LeaseGrantResponse
	err := quick(ctx, func(ctx context.Context) (err error) {
		grant, err = cli.Grant(ctx, int64((rules.TTL+time.Second-1)/time.Second))
		return err
	})
	if err != nil {
		return
	}
	sent := time.Now()
	prefix := sh.cfg.GlobalStore.Prefix()
	var cur cluster.KV
	err = quick(ctx, func(ctx context.Context) (err error) {
		cur, err = sh.cfg.GlobalStore.Get(ctx, meta.FailoverKey+ns)
		return err
	})
	if err != nil {
		_, _ = cli.Revoke(context.Background(), grant.ID)
		return
	}
	var fr meta.FailoverRecord
	if json.Unmarshal(cur.Value, &fr) != nil || fr.Active != sh.cfg.Cluster || fr.Epoch != rec.Epoch {
		_, _ = cli.Revoke(context.Background(), grant.ID)
		return
	}
	lv, _ := json.Marshal(leaseRecord{Holder: sh.cfg.Cluster, Epoch: rec.Epoch})
	lk := prefix + failoverLeaseKey + ns
	var resp *clientv3.TxnResponse
	err = quick(ctx, func(ctx context.Context) (err error) {
		resp, err = cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(lk), "=", 0), clientv3.Compare(clientv3.ModRevision(prefix+meta.FailoverKey+ns), "=", cur.ModRevision)).
			Then(clientv3.OpPut(lk, string(lv), clientv3.WithLease(grant.ID))).Commit()
		return err
	})
	if err != nil || !resp.Succeeded {
		_, _ = cli.Revoke(context.Background(), grant.ID)
		return
	}
	c.leaseID, c.epoch, c.renewed, c.ttl = grant.ID, rec.Epoch, sent, time.Duration(grant.TTL)*time.Second
	sh.log.Warn("failover: region lease acquired", "namespace", ns, "epoch", rec.Epoch, "ttl", c.ttl)
	// The next step (at once) asks the Core whether to serve with it.
	sh.nudgeControl()
}

// publishServing tells the region's brokers until when they may
// acknowledge for the namespace, and reports whether it did.
func (sh *Shell) publishServing(ctx context.Context, ns string, c *nsControl) bool {
	deadline := failover.LeaseDeadline(c.renewed, c.ttl, sh.leaseRules())
	v, _ := json.Marshal(serving{Epoch: c.epoch, DeadlineNs: deadline.UnixNano()})
	if _, err := sh.cfg.Store.Put(ctx, failoverServingKey+ns, v); err != nil {
		sh.log.Warn("failover: serving deadline not published", "namespace", ns, "err", err)
		return false
	}
	return true
}

// dropLease stops the region serving the namespace, then revokes its
// lease.
func (sh *Shell) dropLease(ns string, c *nsControl) {
	if c.leaseID == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = sh.cfg.Store.Delete(ctx, failoverServingKey+ns)
	_, _ = sh.cfg.GlobalStore.Client().Revoke(ctx, c.leaseID)
	sh.log.Warn("failover: region lease released", "namespace", ns, "epoch", c.epoch)
	c.leaseID, c.epoch, c.renewed, c.servedEpoch = 0, 0, time.Time{}, 0
}
