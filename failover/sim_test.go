package failover

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// This file checks requirement (1) by simulation: never two regions told
// to serve an active-standby namespace at overlapping times, given that a
// region serves only while MayAcknowledge holds for its lease and a new
// holder acquires the lease only after the old one is gone from the store.
//
// A seeded world: three regions, each with its own Core, shell, monotonic
// clock (rate within ±1 % of real time, random offset) and health view
// (random, and different per observer); one global store with its own
// clock rate that expires the lease key by that clock; a network between
// each region and the store with random delays (a few long ones), random
// partitions, and processes that pause (messages queue) or crash (memory
// and lease lost). Every real tick, each running region steps its core; an
// ack is recorded when it is told to Serve. The checker: acks in real-time
// order never go back in epoch, one epoch has one region, and no two
// regions ack in the same tick.

const simTick = 10 * time.Millisecond

// simDefaultSeeds is lowered under -race (race_test.go).
var simDefaultSeeds = 10

var simSeeds = flag.Int("failover.sim-seeds", 0, "seeds for TestSimulationServeIntervalsNeverOverlap (0: 10, 4 under -race; a soak: 300)")

type simMsg struct {
	at     time.Duration // real delivery time
	region string
	toSt   bool // to the store (request) or to the region (response)
	kind   string
	epoch  uint64
	prop   Proposal
	sent   time.Time // the region's local time at send
	ok     bool
	state  Committed
}

type simRegion struct {
	name      string
	rate      float64
	offset    time.Duration
	core      *Core
	running   bool
	downUntil time.Duration
	paused    bool
	committed Committed
	lease     LocalLease
	acqSent   time.Time
	lastRenew time.Time
	lastRead  time.Time
	propSent  time.Time
	inbox     []simMsg
	view      map[string]string // region -> health word
	lagging   map[string]bool
	linkUp    bool
}

type simStore struct {
	rate    float64
	rec     Record
	holder  string
	epoch   uint64
	expires time.Duration // store clock
}

type simWorld struct {
	rng     *rand.Rand
	now     time.Duration
	policy  Policy
	truth   LeaseRules // what the clocks really do (drift bound used to draw rates)
	rules   LeaseRules // what the cores assume
	regions []*simRegion
	store   simStore
	net     []simMsg
	// checker state
	lastEpoch  uint64
	lastRegion string
	epochOwner map[uint64]string
	acks       int
	violation  string
	maxEpoch   uint64
	// manualOneIn: a region gets a manual command in 1 step out of this.
	manualOneIn int
}

var simBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (r *simRegion) local(real time.Duration) time.Time {
	return simBase.Add(r.offset + time.Duration(float64(real)*r.rate))
}

func newSimWorld(seed uint64, rules LeaseRules, drift float64, extreme bool) *simWorld {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := DefaultPolicy("east", "west", "north")
	p.SwitchBackDelay = []time.Duration{0, 5 * time.Second, 30 * time.Second}[rng.IntN(3)]
	p.LookupHold = 2 * time.Second
	w := &simWorld{rng: rng, policy: p, rules: rules, epochOwner: map[uint64]string{}, manualOneIn: 5000}
	rate := func() float64 {
		if extreme {
			return []float64{1 - drift, 1 + drift}[rng.IntN(2)]
		}
		return 1 - drift + 2*drift*rng.Float64()
	}
	w.store.rate = rate()
	for _, name := range p.Regions {
		r := &simRegion{name: name, rate: rate(), offset: time.Duration(rng.Int64N(int64(time.Hour))),
			running: true, linkUp: true, view: map[string]string{}, lagging: map[string]bool{}}
		for _, o := range p.Regions {
			r.view[o] = "ok"
		}
		w.restart(r)
		w.regions = append(w.regions, r)
	}
	return w
}

func (w *simWorld) restart(r *simRegion) {
	c, err := NewCore(Config{Region: r.name, Policy: w.policy, Lease: w.rules})
	if err != nil {
		panic(err)
	}
	r.core, r.committed, r.lease, r.inbox = c, Committed{}, LocalLease{}, nil
	r.acqSent, r.lastRenew, r.lastRead, r.propSent = time.Time{}, time.Time{}, time.Time{}, time.Time{}
}

func (w *simWorld) delay() time.Duration {
	if w.rng.IntN(20) == 0 {
		return time.Duration(w.rng.Int64N(int64(3 * time.Second)))
	}
	return time.Duration(w.rng.Int64N(int64(300 * time.Millisecond)))
}

func (w *simWorld) send(r *simRegion, m simMsg) {
	if !r.linkUp {
		return
	}
	m.region, m.toSt, m.at = r.name, true, w.now+w.delay()
	w.net = append(w.net, m)
}

func (w *simWorld) region(name string) *simRegion {
	for _, r := range w.regions {
		if r.name == name {
			return r
		}
	}
	panic(name)
}

// storeHandle applies a request at the store's clock and returns the reply.
func (w *simWorld) storeHandle(m simMsg) simMsg {
	st := &w.store
	now := time.Duration(float64(w.now) * st.rate)
	if st.holder != "" && now >= st.expires {
		st.holder, st.epoch = "", 0
	}
	ttl := w.rules.TTL
	resp := simMsg{region: m.region, kind: m.kind, epoch: m.epoch, sent: m.sent}
	switch m.kind {
	case "cas":
		if st.rec.Epoch == m.prop.From {
			st.rec = m.prop.Record(simBase)
			resp.ok = true
		}
	case "acquire":
		if st.holder == "" && st.rec.Active == m.region && st.rec.Epoch == m.epoch {
			st.holder, st.epoch, st.expires = m.region, m.epoch, now+ttl
			resp.ok = true
		}
	case "renew":
		if st.holder == m.region && st.epoch == m.epoch {
			st.expires = now + ttl
			resp.ok = true
		}
	case "revoke":
		if st.holder == m.region && st.epoch == m.epoch {
			st.holder, st.epoch = "", 0
		}
	}
	resp.state = Committed{Read: true, Record: st.rec, Lease: StoreLease{Holder: st.holder, Epoch: st.epoch}}
	return resp
}

func (w *simWorld) deliver() {
	keep, replies := w.net[:0], []simMsg(nil)
	for _, m := range w.net {
		if m.at > w.now {
			keep = append(keep, m)
			continue
		}
		r := w.region(m.region)
		if !r.linkUp { // partitioned: lost
			continue
		}
		if m.toSt {
			resp := w.storeHandle(m)
			resp.at = w.now + w.delay()
			replies = append(replies, resp)
			continue
		}
		if r.running {
			r.inbox = append(r.inbox, m)
		}
	}
	w.net = append(keep, replies...)
}

func (w *simWorld) handle(r *simRegion, m simMsg) {
	if m.state.Read && m.state.Record.Epoch >= r.committed.Record.Epoch {
		r.committed = m.state
	}
	switch m.kind {
	case "acquire":
		if m.ok && m.epoch == r.committed.Record.Epoch && !r.lease.Held() {
			r.lease = LocalLease{Epoch: m.epoch, RenewedAt: m.sent, TTL: w.rules.TTL}
			r.lastRenew = m.sent
		}
		r.acqSent = time.Time{}
	case "renew":
		if r.lease.Epoch == m.epoch && m.sent.After(r.lease.RenewedAt) {
			if m.ok {
				r.lease.RenewedAt = m.sent
			} else {
				r.lease = LocalLease{} // the store no longer has it
			}
		}
	case "cas":
		r.propSent = time.Time{}
	}
}

// perturb changes the world at random: links, processes, health views.
func (w *simWorld) perturb() {
	rng := w.rng
	for _, r := range w.regions {
		if rng.IntN(300) == 0 {
			r.linkUp = !r.linkUp
		}
		switch {
		case !r.running && w.now >= r.downUntil:
			r.running = true
			if !r.paused {
				w.restart(r)
			}
		case r.running && rng.IntN(3000) == 0:
			r.running, r.paused, r.downUntil = false, rng.IntN(2) == 0, w.now+time.Duration(rng.Int64N(int64(10*time.Second)))
		}
		for _, o := range w.policy.Regions {
			if rng.IntN(200) == 0 {
				r.view[o] = []string{"ok", "ok", "ok", "slow", "suspect", "failed", "failed", "probe-fail"}[rng.IntN(8)]
			}
			if rng.IntN(500) == 0 {
				r.lagging[o] = !r.lagging[o]
			}
		}
	}
}

func (w *simWorld) statuses(r *simRegion) []RegionStatus {
	var out []RegionStatus
	for _, o := range w.policy.Regions {
		s := RegionStatus{Name: o, ReplicationCaughtUp: !r.lagging[o]}
		switch r.view[o] {
		case "ok":
			s.Healthy, s.ProbeOK = true, true
		case "slow":
			s.Suspected, s.ProbeOK = true, true
		case "suspect":
			s.Suspected = true
		}
		out = append(out, s)
	}
	return out
}

func (w *simWorld) stepRegion(r *simRegion, acked map[string]uint64) {
	local := r.local(w.now)
	for _, m := range r.inbox {
		w.handle(r, m)
	}
	r.inbox = nil
	if local.Sub(r.lastRead) >= 200*time.Millisecond {
		r.lastRead = local
		w.send(r, simMsg{kind: "read", sent: local})
	}
	if r.lease.Held() && local.Sub(r.lastRenew) >= w.rules.RenewEvery {
		r.lastRenew = local
		w.send(r, simMsg{kind: "renew", epoch: r.lease.Epoch, sent: local})
	}
	in := Input{Now: local, Regions: w.statuses(r), Committed: r.committed, Lease: r.lease}
	if w.rng.IntN(w.manualOneIn) == 0 {
		in.Command = &Command{To: w.policy.Regions[w.rng.IntN(3)]}
	}
	out := r.core.Step(in)
	if out.Instruction.Kind == Serve {
		acked[r.name] = r.committed.Record.Epoch
	}
	if out.ReleaseLease {
		w.send(r, simMsg{kind: "revoke", epoch: r.lease.Epoch, sent: local})
		r.lease = LocalLease{}
	}
	if out.AcquireLease && (r.acqSent.IsZero() || local.Sub(r.acqSent) > 50*time.Millisecond) {
		r.acqSent = local
		w.send(r, simMsg{kind: "acquire", epoch: r.committed.Record.Epoch, sent: local})
	}
	if out.Proposal != nil && (r.propSent.IsZero() || local.Sub(r.propSent) > 2*time.Second) {
		r.propSent = local
		w.send(r, simMsg{kind: "cas", prop: *out.Proposal, sent: local})
	}
}

func (w *simWorld) check(acked map[string]uint64) {
	if len(acked) > 1 {
		w.violation = fmt.Sprintf("at %s regions %v all serve", w.now, acked)
		return
	}
	for region, epoch := range acked {
		w.acks++
		if owner, ok := w.epochOwner[epoch]; ok && owner != region {
			w.violation = fmt.Sprintf("at %s %s serves epoch %d, which %s served", w.now, region, epoch, owner)
		}
		w.epochOwner[epoch] = region
		if epoch < w.lastEpoch {
			w.violation = fmt.Sprintf("at %s %s serves epoch %d after %s served epoch %d", w.now, region, epoch, w.lastRegion, w.lastEpoch)
		}
		w.lastEpoch, w.lastRegion = epoch, region
	}
}

func (w *simWorld) run(d time.Duration) {
	for w.now = 0; w.now < d && w.violation == ""; w.now += simTick {
		w.perturb()
		w.deliver()
		acked := map[string]uint64{}
		for _, i := range w.rng.Perm(len(w.regions)) {
			if r := w.regions[i]; r.running {
				w.stepRegion(r, acked)
			}
		}
		w.check(acked)
		w.maxEpoch = max(w.maxEpoch, w.store.rec.Epoch)
	}
}

func simRules() LeaseRules {
	return LeaseRules{TTL: 3 * time.Second, RenewEvery: time.Second, MaxDriftRate: 0.01, Margin: 50 * time.Millisecond}
}

// TestSimulationServeIntervalsNeverOverlap is requirement (1).
func TestSimulationServeIntervalsNeverOverlap(t *testing.T) {
	seeds, dur := *simSeeds, 4*time.Minute
	if seeds == 0 {
		seeds = simDefaultSeeds
	}
	if testing.Short() {
		seeds = min(seeds, 4)
	}
	var acks, epochs int
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		w := newSimWorld(seed, simRules(), 0.01, seed%2 == 0)
		w.run(dur)
		if w.violation != "" {
			t.Fatalf("seed %d: %s", seed, w.violation)
		}
		acks += w.acks
		epochs += int(w.maxEpoch)
	}
	// The world must have moved for the check to mean anything.
	if epochs < seeds*5 || acks < seeds*int(dur/simTick)/10 {
		t.Fatalf("too little happened: %d epochs, %d serving ticks over %d seeds", epochs, acks, seeds)
	}
	t.Logf("%d seeds × %s: %d epochs committed, %d serving ticks, no overlap", seeds, dur, epochs, acks)
}

// TestSimulationCatchesUnsafeLeaseRules shows the simulation has teeth:
// cores that assume clocks do not drift and keep no margin, in a world
// whose clocks drift by 1 %, are caught serving at the same time.
func TestSimulationCatchesUnsafeLeaseRules(t *testing.T) {
	unsafe := simRules()
	unsafe.MaxDriftRate, unsafe.Margin = 0, 0
	for seed := uint64(1); seed <= 40; seed++ {
		w := newSimWorld(seed, unsafe, 0.05, true)
		w.manualOneIn = 300
		w.run(5 * time.Minute)
		if w.violation != "" {
			t.Logf("seed %d: caught as expected: %s", seed, w.violation)
			return
		}
	}
	t.Fatal("no overlap found with unsafe lease rules: the simulation cannot see the hazard it is meant to rule out")
}
