package failover

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestPolicyDefaults(t *testing.T) {
	p := DefaultPolicy("east", "west")
	const want = "mode=active-standby regions=east,west failover-delay=2s switch-back=30s lookup-hold=5s catch-up=true"
	if p.String() != want {
		t.Fatalf("DefaultPolicy:\n got %s\nwant %s", p, want)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Policy{Mode: ActiveStandby}).Validate(); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("no regions: %v", err)
	}
	if _, err := NewCore(Config{Policy: p, Lease: DefaultLeaseRules()}); err == nil {
		t.Fatal("NewCore without a region: no error")
	}
}

func randomStatus(rng *rand.Rand, name string, words ...string) RegionStatus {
	s := RegionStatus{Name: name, ReplicationCaughtUp: rng.IntN(2) == 0}
	switch words[rng.IntN(len(words))] {
	case "ok":
		s.Healthy, s.ProbeOK = true, true
	case "slow":
		s.Suspected, s.ProbeOK = true, true
	case "suspect":
		s.Suspected = true
	case "probe-fail": // alive, but writes fail
	case "failed":
	}
	return s
}

// Requirement (2): health that flaps, with every bad stretch shorter than
// FailoverDelay, never moves the active region: not from a standby (whose
// store shows no lease for the active region; the lease TTL is made long so
// only gossip decides), not from the active region seeing itself flap.
func TestFlappingNeverMoves(t *testing.T) {
	rules := LeaseRules{TTL: time.Hour, RenewEvery: time.Second, MaxDriftRate: 0.01}
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		p := DefaultPolicy("east", "west", "north")
		local := []string{"east", "west"}[seed%2]
		c, err := NewCore(Config{Region: local, Policy: p, Lease: rules})
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		badSince := time.Time{}
		for step := 0; step < 2000; step++ {
			now = now.Add(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
			east := randomStatus(rng, "east", "ok", "slow", "suspect", "failed", "probe-fail")
			if east.Condition() != Up {
				if badSince.IsZero() {
					badSince = now
				}
				if now.Sub(badSince) >= p.FailoverDelay { // too long: force up
					east = RegionStatus{Name: "east", Healthy: true}
					badSince = time.Time{}
				}
			} else {
				badSince = time.Time{}
			}
			out := c.Step(Input{
				Now:       now,
				Regions:   []RegionStatus{east, randomStatus(rng, "west", "ok", "failed"), randomStatus(rng, "north", "ok", "failed")},
				Committed: Committed{Read: true, Record: Record{Active: "east", Epoch: 3}},
				Lease:     LocalLease{Epoch: 3, RenewedAt: now, TTL: rules.TTL}, // ignored by a standby
			})
			if out.Proposal != nil {
				t.Fatalf("seed %d step %d (%s): flapping moved the namespace: %v", seed, step, local, out)
			}
		}
	}
}

// Requirement (3): a slow region (suspected, write probes OK) is never
// failed over, even with its lease gone from the store.
func TestSlowRegionNotFailedOver(t *testing.T) {
	p := DefaultPolicy("east", "west")
	c, _ := NewCore(Config{Region: "west", Policy: p, Lease: DefaultLeaseRules()})
	for i := range 1000 {
		out := c.Step(Input{
			Now:       t0.Add(time.Duration(i) * time.Second),
			Regions:   []RegionStatus{{Name: "east", Suspected: true, ProbeOK: true}, {Name: "west", Healthy: true}},
			Committed: Committed{Read: true, Record: Record{Active: "east", Epoch: 3}, Lease: StoreLease{Holder: "east", Epoch: 3}},
		})
		if out.Proposal != nil || out.Instruction.Kind != Redirect || out.Instruction.To != "east" {
			t.Fatalf("at %ds: %v", i, out)
		}
	}
}

// Requirement (6): active-active serves everywhere and proposes nothing,
// whatever happens.
func TestActiveActiveNeverProposes(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	p := DefaultPolicy("east", "west")
	p.Mode = ActiveActive
	c, _ := NewCore(Config{Region: "east", Policy: p, Lease: DefaultLeaseRules()})
	for i := range 5000 {
		in := Input{
			Now:       t0.Add(time.Duration(i) * 100 * time.Millisecond),
			Regions:   []RegionStatus{randomStatus(rng, "east", "ok", "failed", "suspect"), randomStatus(rng, "west", "ok", "failed")},
			Committed: Committed{Read: rng.IntN(2) == 0, Record: Record{Active: "west", Epoch: uint64(rng.IntN(3))}},
		}
		if rng.IntN(10) == 0 {
			in.Command = &Command{To: "west"}
		}
		out := c.Step(in)
		if out.Proposal != nil || out.AcquireLease || out.Instruction.Kind != Serve || (in.Command != nil) != (out.Refused != nil) {
			t.Fatalf("step %d: %v", i, out)
		}
	}
}

// Requirement (5): a returning region never gets the role back before
// SwitchBackDelay has passed since it came back and since the epoch began,
// nor before it caught up; with SwitchBackDelay 0, never.
func TestSwitchBackWaits(t *testing.T) {
	for _, sb := range []time.Duration{0, 30 * time.Second} {
		for seed := uint64(1); seed <= 50; seed++ {
			rng := rand.New(rand.NewPCG(seed, 5))
			p := DefaultPolicy("east", "west")
			p.SwitchBackDelay = sb
			rules := DefaultLeaseRules()
			c, _ := NewCore(Config{Region: "west", Policy: p, Lease: rules})
			now, upSince := t0, time.Time{}
			epochAt := t0
			for step := 0; step < 3000; step++ {
				now = now.Add(time.Duration(rng.Int64N(int64(time.Second))))
				east := randomStatus(rng, "east", "ok", "ok", "ok", "ok", "ok", "ok", "failed", "slow")
				if east.Condition() == Up {
					if upSince.IsZero() {
						upSince = now
					}
				} else {
					upSince = time.Time{}
				}
				out := c.Step(Input{
					Now:       now,
					Regions:   []RegionStatus{east, {Name: "west", Healthy: true}},
					Committed: Committed{Read: true, Record: Record{Active: "west", Epoch: 4, Previous: "east"}, Lease: StoreLease{Holder: "west", Epoch: 4}},
					Lease:     LocalLease{Epoch: 4, RenewedAt: now, TTL: rules.TTL},
				})
				if out.Proposal == nil {
					continue
				}
				switch {
				case sb == 0:
					t.Fatalf("switch-back 0 switched back: %v", out)
				case now.Sub(upSince) < sb || now.Sub(epochAt) < sb || !east.ReplicationCaughtUp:
					t.Fatalf("seed %d: switched back early: up %s, epoch %s, caught up %t: %v", seed, now.Sub(upSince), now.Sub(epochAt), east.ReplicationCaughtUp, out)
				case out.Proposal.Kind != SwitchBack || out.Proposal.NewActive != "east" || !out.Proposal.CatchUp:
					t.Fatalf("unexpected proposal %v", out)
				}
			}
		}
	}
}
