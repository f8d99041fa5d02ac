package rack

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// Place chooses an ensemble of req.E distinct bookies from bookies (the live,
// writable ones; a repeated ID counts once) under policy p. It never chooses
// an excluded bookie, a bookie with an empty Rack under Enforce, or, for
// RegionAware, a bookie outside the region set.
//
// Entry e is written to positions (e+w) mod E for w in 0..Qw-1, so the rule
// must hold for all E write sets; Place checks them all.
//
// Under Enforce the result is AdherenceStrict or an error: *PlacementError
// (errors.Is ErrNotEnoughBookies) when no ensemble of the usable bookies meets
// the rule (the search is exhaustive, so this means none exists; it stops
// after searchBudget steps and says so, which tests never see at realistic
// sizes), or an error wrapping ErrInvalidPolicy from Validate. Without Enforce an ensemble is
// returned whenever E usable bookies exist, with its real Adherence.
//
// Among valid ensembles Place prefers: position 0 in req.LocalRack, then
// req.LocalRegion; RegionAware: region counts as even as capacity allows;
// within each write set as many distinct regions and racks as possible; racks
// used evenly. Remaining ties are broken with rng, so load spreads over
// equivalent bookies. rng must not be nil; Place is not safe for concurrent
// use of the same rng. The caller owns the returned slice.
func Place(bookies []Bookie, p Policy, req Request, rng *rand.Rand) ([]Bookie, Adherence, error) {
	if rng == nil {
		panic("rack: Place called with a nil *rand.Rand")
	}
	if err := p.Validate(req.E, req.Qw, req.Qa); err != nil {
		return nil, AdherenceFail, err
	}
	pl := newPool(bookies, p, req.Exclude, nil, req.E, rng)
	pl.readOnly = max(req.ReadOnly, 0)
	fail := func(format string, args ...any) ([]Bookie, Adherence, error) {
		return nil, AdherenceFail, &PlacementError{Op: "place", Usable: pl.total, Reason: fmt.Sprintf(format, args...)}
	}
	if pl.total < req.E {
		return fail("need %d bookies, only %s", req.E, pl.describeUsable())
	}
	minRacks, minRegions := p.minRacks(req.Qw), p.minRegions()
	if minRegions < 2 {
		minRegions = 0
	}
	if minRacks < 2 {
		minRacks = 0
	}
	if p.Enforce && minRacks > len(pl.racks) {
		return fail("need %d racks per write quorum, only %s usable bookies (%s)",
			minRacks, plural(len(pl.racks), "rack has", "racks have"), pl.describeRacks())
	}
	if p.Enforce && minRegions > len(pl.regions) {
		return fail("need %d regions for durability, only %s usable bookies (%s)",
			minRegions, plural(len(pl.regions), "region has", "regions have"), pl.describeRacks())
	}

	// Tiers of constraints, strictest first. Under Enforce only the tiers
	// that keep every rule are tried.
	type tier struct{ racks, durability, targets bool }
	var tiers []tier
	add := func(t tier) {
		t.racks = t.racks && minRacks > 0
		t.durability = t.durability && minRegions > 0
		t.targets = t.targets && p.Kind == RegionAware
		if !slices.Contains(tiers, t) {
			tiers = append(tiers, t)
		}
	}
	add(tier{racks: true, durability: true, targets: true})
	add(tier{racks: true, durability: true})
	if !p.Enforce {
		add(tier{durability: true, targets: true})
		add(tier{durability: true})
		add(tier{targets: true})
		add(tier{})
	}
	exhausted := false
	for _, t := range tiers {
		if (t.racks && minRacks > len(pl.racks)) || (t.durability && minRegions > len(pl.regions)) {
			continue
		}
		s := newSearcher(&pl, req, minRacks, minRegions, t.racks, t.durability, t.targets)
		if !s.run() {
			exhausted = exhausted || s.exhausted
			continue
		}
		ens := s.ensemble()
		a := Check(p, ens, req.Qw, req.Qa)
		if p.Enforce && a != AdherenceStrict {
			panic(fmt.Sprintf("rack: internal error: placed %v under %v with adherence %v", ens, p, a))
		}
		return ens, a, nil
	}
	var rule []string
	if minRacks > 0 {
		rule = append(rule, fmt.Sprintf("every write set (qw %d) on >= %d racks", req.Qw, minRacks))
	}
	if minRegions > 0 {
		rule = append(rule, fmt.Sprintf("every ack quorum (qa %d) in >= %d regions", req.Qa, minRegions))
	}
	if exhausted {
		return fail("gave up after %d search steps looking for an ensemble of %d that keeps %s; usable: %s",
			searchBudget, req.E, strings.Join(rule, " and "), pl.describeRacks())
	}
	return fail("no ensemble of %d keeps %s; usable: %s", req.E, strings.Join(rule, " and "), pl.describeRacks())
}

// pool is the usable bookies of one request, grouped by rack.
type pool struct {
	racks     []poolRack // sorted by (region, rack)
	regions   []string   // regions of racks, sorted; poolRack.region indexes it
	regionTie []uint64   // random tie-breaker per region
	total     int        // usable bookies

	// Why bookies were not usable, for error messages.
	live, readOnly, excluded, unlabelled, outside int
}

type poolRack struct {
	key     rackKey
	region  int      // index into pool.regions
	bookies []Bookie // usable, in random order
	tie     uint64   // random tie-breaker
}

// newPool filters bookies: first occurrence of an ID only, not in exclude or
// skip, usable under p. It shuffles each rack's bookies with rng.
func newPool(bookies []Bookie, p Policy, exclude, skip map[string]bool, e int, rng *rand.Rand) pool {
	var pl pool
	seen := make(map[string]bool, len(bookies))
	byRack := make(map[rackKey][]Bookie)
	var keys []rackKey
	for _, b := range bookies {
		if seen[b.ID] {
			continue
		}
		seen[b.ID] = true
		pl.live++
		switch {
		case exclude[b.ID] || skip[b.ID]:
			pl.excluded++
			continue
		case p.Enforce && b.Rack == "":
			pl.unlabelled++
			continue
		case p.Kind == RegionAware && !p.inRegionSet(b.Region):
			pl.outside++
			continue
		}
		k := b.rackKey()
		if _, ok := byRack[k]; !ok {
			keys = append(keys, k)
		}
		byRack[k] = append(byRack[k], b)
		pl.total++
	}
	slices.SortFunc(keys, func(a, b rackKey) int {
		return cmp.Or(cmp.Compare(a.region, b.region), cmp.Compare(a.rack, b.rack))
	})
	for _, k := range keys {
		if n := len(pl.regions); n == 0 || pl.regions[n-1] != k.region {
			pl.regions = append(pl.regions, k.region)
			pl.regionTie = append(pl.regionTie, rng.Uint64())
		}
		bs := byRack[k]
		rng.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
		pl.racks = append(pl.racks, poolRack{key: k, region: len(pl.regions) - 1, bookies: bs, tie: rng.Uint64()})
	}
	return pl
}

func (pl *pool) describeUsable() string {
	s := fmt.Sprintf("%d usable (%d live", pl.total, pl.live+pl.readOnly)
	if pl.readOnly > 0 {
		s += fmt.Sprintf(", %d read-only", pl.readOnly)
	}
	if pl.excluded > 0 {
		s += fmt.Sprintf(", %d excluded or already in the ensemble", pl.excluded)
	}
	if pl.unlabelled > 0 {
		s += fmt.Sprintf(", %d without a rack label under enforce", pl.unlabelled)
	}
	if pl.outside > 0 {
		s += fmt.Sprintf(", %d outside the region set", pl.outside)
	}
	return s + ")"
}

func (pl *pool) describeRacks() string {
	if len(pl.racks) == 0 {
		return "no usable bookies"
	}
	parts := make([]string, len(pl.racks))
	for i, r := range pl.racks {
		parts[i] = dash(r.key.region) + "/" + dash(r.key.rack) + "=" + strconv.Itoa(len(r.bookies))
	}
	return strings.Join(parts, " ")
}
