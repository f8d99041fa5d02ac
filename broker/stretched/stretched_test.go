package stretched

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/rack"
)

func stretchedOptions(regions ...string) ledger.CreateOptions {
	return ledger.CreateOptions{EnsembleSize: stretchedEnsemble, WriteQuorum: stretchedQw, AckQuorum: stretchedQa,
		Placement: rack.Policy{Kind: rack.RegionAware, Regions: regions, MinRegionsForDurability: 2, MinRacksPerWriteQuorum: 2, Enforce: true},
		Custom:    map[string]string{"managed-ledger": "public/str/persistent/t"}}
}

var regionalQuorums = degradedQuorums{e: 3, qw: 3, qa: 2, minRacks: 2, enforce: true}

// Nothing gone, or a region the namespace does not use: the options are
// the namespace's, untouched.
func TestDegradePlacementNothingGone(t *testing.T) {
	o := stretchedOptions("east", "west")
	for _, gone := range []map[string]bool{nil, {"south": true}} {
		got, left := degradePlacement(o, gone, regionalQuorums)
		if left != nil || got.EnsembleSize != 4 || got.AckQuorum != 3 || !slices.Equal(got.Placement.Regions, []string{"east", "west"}) ||
			got.Custom[stretchedDegradedKey] != "" {
			t.Fatalf("gone %v: got %+v left %v, want the options unchanged", gone, got, left)
		}
	}
}

// Two regions, one gone: the ledger goes degraded — the regional quorums
// and rack rule inside the survivor, marked in its metadata — and the
// caller's options are not modified.
func TestDegradePlacementTwoRegionsOneGone(t *testing.T) {
	o := stretchedOptions("east", "west")
	got, left := degradePlacement(o, map[string]bool{"west": true}, regionalQuorums)
	if !slices.Equal(left, []string{"west"}) {
		t.Fatalf("left %v, want [west]", left)
	}
	if got.EnsembleSize != 3 || got.WriteQuorum != 3 || got.AckQuorum != 2 {
		t.Fatalf("quorums %d/%d/%d, want 3/3/2", got.EnsembleSize, got.WriteQuorum, got.AckQuorum)
	}
	p := got.Placement
	if p.Kind != rack.RegionAware || !slices.Equal(p.Regions, []string{"east"}) || p.MinRegionsForDurability != 0 || p.MinRacksPerWriteQuorum != 2 || !p.Enforce {
		t.Fatalf("placement %v, want region-aware over east only, 2 racks per write set, enforced", p)
	}
	if got.Custom[stretchedDegradedKey] != "west" || got.Custom["managed-ledger"] != "public/str/persistent/t" {
		t.Fatalf("custom %v", got.Custom)
	}
	if o.Custom[stretchedDegradedKey] != "" || o.EnsembleSize != 4 || !slices.Equal(o.Placement.Regions, []string{"east", "west"}) {
		t.Fatalf("the caller's options were modified: %+v", o)
	}
	// The degraded options place on the survivor's bookies only, on two
	// racks, even while the lost region's registrations linger.
	bookies := []rack.Bookie{{ID: "e1", Region: "east", Rack: "r1"}, {ID: "e2", Region: "east", Rack: "r2"}, {ID: "e3", Region: "east", Rack: "r3"},
		{ID: "w1", Region: "west", Rack: "r1"}, {ID: "w2", Region: "west", Rack: "r2"}}
	ens, a, err := rack.Place(bookies, got.Placement, rack.Request{E: got.EnsembleSize, Qw: got.WriteQuorum, Qa: got.AckQuorum}, rand.New(rand.NewPCG(1, 2)))
	if err != nil || a != rack.AdherenceStrict {
		t.Fatalf("place: %v %v", a, err)
	}
	for _, b := range ens {
		if b.Region != "east" {
			t.Fatalf("degraded ensemble %v uses %s", ens, b)
		}
	}
	// The namespace's own options cannot be placed without west.
	if _, _, err := rack.Place(bookies[:3], o.Placement, rack.Request{E: o.EnsembleSize, Qw: o.WriteQuorum, Qa: o.AckQuorum}, rand.New(rand.NewPCG(1, 2))); err == nil {
		t.Fatal("the two-region placement succeeded with east's bookies only")
	}
}

// Three regions, one gone: two survivors still keep the two-region rule,
// so only the region set shrinks; nothing is degraded.
func TestDegradePlacementThreeRegionsOneGone(t *testing.T) {
	o := stretchedOptions("east", "west", "south")
	got, left := degradePlacement(o, map[string]bool{"south": true}, regionalQuorums)
	if !slices.Equal(left, []string{"south"}) {
		t.Fatalf("left %v", left)
	}
	if got.EnsembleSize != 4 || got.AckQuorum != 3 || got.Placement.MinRegionsForDurability != 2 ||
		!slices.Equal(got.Placement.Regions, []string{"east", "west"}) || got.Custom[stretchedDegradedKey] != "" {
		t.Fatalf("got %+v, want the namespace's quorums over east and west, not degraded", got)
	}
}

// Every region gone, or a placement that is not region-aware: unchanged
// (there is nothing to place on, or nothing stretched about it).
func TestDegradePlacementNoSurvivorOrNotRegionAware(t *testing.T) {
	o := stretchedOptions("east", "west")
	if got, left := degradePlacement(o, map[string]bool{"east": true, "west": true}, regionalQuorums); left != nil || got.EnsembleSize != 4 {
		t.Fatalf("no survivor: got %+v left %v", got, left)
	}
	r := ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Placement: rack.DefaultPolicy()}
	if got, left := degradePlacement(r, map[string]bool{"west": true}, regionalQuorums); left != nil || got.Placement.Kind != rack.RackAware {
		t.Fatalf("rack-aware: got %+v left %v", got, left)
	}
}

// The rule: gone only with no mirrored bookies, gossip down, and the
// region known to this broker (seen, or declared failed).
func TestRegionGone(t *testing.T) {
	for _, c := range []struct {
		mirrored         int
		down, known, out bool
	}{
		{0, true, true, true},
		{1, true, true, false},   // a registration is still renewed: the region writes the global store
		{0, false, true, false},  // gossip still has it up or suspect
		{0, true, false, false},  // never seen: not started yet, not lost
		{-1, true, true, false},  // not watched yet
		{3, false, true, false},  // healthy
		{0, false, false, false}, // nothing known
	} {
		if got := regionGone(c.mirrored, c.down, c.known); got != c.out {
			t.Errorf("regionGone(%d, down=%v, known=%v) = %v, want %v", c.mirrored, c.down, c.known, got, c.out)
		}
	}
}
