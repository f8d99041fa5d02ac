package rack

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSearchCompleteInAnyOrder: the searcher finds a solution for every tier
// of constraints exactly when brute force does, even when candidates are
// tried in random order (so the pruning and the skipping of interchangeable
// racks carry completeness, not the heuristic that usually succeeds first).
func TestSearchCompleteInAnyOrder(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	found, refuted := 0, 0
	for i := range 3000 {
		// Many regions and racks of uneven sizes: what the symmetry keys
		// distinguish.
		var bookies []Bookie
		for g := range 1 + r.IntN(4) {
			for k := range 1 + r.IntN(3) {
				for range 1 + r.IntN(3) {
					bookies = append(bookies, Bookie{ID: fmt.Sprintf("b%d", len(bookies)), Region: fmt.Sprintf("g%d", g), Rack: fmt.Sprintf("k%d", k)})
				}
			}
		}
		r.Shuffle(len(bookies), func(i, j int) { bookies[i], bookies[j] = bookies[j], bookies[i] })
		bookies = bookies[:min(len(bookies), 2+r.IntN(6))]
		e := 1 + r.IntN(min(5, len(bookies)))
		qw := 1 + r.IntN(e)
		qa := 1 + r.IntN(qw)
		// Tight rules, for many refutations; minRacks as Place passes it.
		minRacks, minRegions := min(qw, 2+r.IntN(qw)), 2+r.IntN(qa)
		if minRacks < 2 {
			minRacks = 0
		}
		if minRegions < 2 {
			minRegions = 0
		}
		p := Policy{Kind: RegionAware, MinRacksPerWriteQuorum: minRacks, MinRegionsForDurability: minRegions}
		req := Request{E: e, Qw: qw, Qa: qa}
		racks, durability, targets := r.IntN(3) > 0, r.IntN(3) > 0, r.IntN(2) == 0
		if !racks {
			p.MinRacksPerWriteQuorum = 0
		}
		if !durability {
			p.MinRegionsForDurability = 0
		}

		pl := newPool(bookies, p, nil, nil, e, rand.New(rand.NewPCG(uint64(i), 0)))
		s := newSearcher(&pl, req, minRacks, minRegions, racks, durability, targets)
		s.shuffle = rand.New(rand.NewPCG(uint64(i), 1))
		got := s.run()
		if s.exhausted {
			t.Fatalf("seed %d case %d: budget exhausted after %d steps", seed, i, s.steps)
		}

		// Brute force over every ordered choice of e bookies.
		want := false
		ens := make([]Bookie, 0, e)
		used := make([]bool, len(bookies))
		var rec func()
		rec = func() {
			if want {
				return
			}
			if len(ens) == e {
				want = oracleCheck(p, ens, qw, qa) == AdherenceStrict && (s.targets == nil || regionCounts(ens, pl.regions, s.targets))
				return
			}
			for j, b := range bookies {
				if !used[j] {
					used[j] = true
					ens = append(ens, b)
					rec()
					ens = ens[:len(ens)-1]
					used[j] = false
				}
			}
		}
		rec()
		if got != want {
			t.Fatalf("seed %d case %d: search %v, brute force %v; e=%d qw=%d qa=%d racks=%v(%d) durability=%v(%d) targets=%v\n%v",
				seed, i, got, want, e, qw, qa, racks, minRacks, durability, minRegions, s.targets, bookies)
		}
		if got {
			if ens := s.ensemble(); oracleCheck(p, ens, qw, qa) != AdherenceStrict {
				t.Fatalf("seed %d case %d: search returned %v, which breaks the rule", seed, i, ens)
			}
			found++
		} else {
			refuted++
		}
	}
	if found < 300 || refuted < 300 {
		t.Fatalf("weak test: %d found, %d refuted", found, refuted)
	}
}

func regionCounts(ens []Bookie, regions []string, targets []int) bool {
	counts := make([]int, len(regions))
	for _, b := range ens {
		counts[slices.Index(regions, b.Region)]++
	}
	return slices.Equal(counts, targets)
}

// TestSearchSteps bounds the work of the search on realistic topologies (up
// to 50 bookies, E <= 8) and on adversarial ones (racks of all-different
// sizes, rings that need more racks or regions than exist), counted in steps
// rather than time so it is deterministic. The bound is far below
// searchBudget: the budget is a guard, never the answer, at these sizes.
func TestSearchSteps(t *testing.T) {
	const maxSteps = 1 << 17
	most := 0
	defer func() { t.Logf("most steps: %d", most) }()
	run := func(name string, bookies []Bookie, p Policy, req Request) {
		t.Helper()
		pl := newPool(bookies, p, nil, nil, req.E, rand.New(rand.NewPCG(1, 0)))
		minRacks, minRegions := p.minRacks(req.Qw), p.minRegions()
		if minRacks < 2 {
			minRacks = 0
		}
		if minRegions < 2 {
			minRegions = 0
		}
		for _, targets := range []bool{true, false} {
			s := newSearcher(&pl, req, minRacks, minRegions, minRacks > 0, minRegions > 0, targets && p.Kind == RegionAware)
			s.run()
			most = max(most, s.steps)
			if s.steps > maxSteps {
				t.Errorf("%s: %d steps (targets %v)", name, s.steps, targets)
			}
		}
	}
	uneven := func(regions, racks int) []Bookie {
		var out []Bookie
		for g := range regions {
			for k := range racks {
				for range 1 + (g*racks+k)%7 {
					out = append(out, Bookie{ID: fmt.Sprintf("b%d", len(out)), Region: fmt.Sprintf("g%d", g), Rack: fmt.Sprintf("k%d", k)})
				}
			}
		}
		return out
	}
	for _, tc := range []struct{ regions, racks, e, qw, qa, m, n int }{
		{1, 7, 8, 5, 3, 5, 0}, // ring of 8, windows of 5: needs 8 racks
		{1, 7, 8, 6, 3, 6, 0},
		{1, 7, 8, 7, 3, 7, 0},
		{2, 4, 8, 5, 3, 5, 0},
		{2, 3, 8, 5, 5, 5, 2},
		{2, 3, 7, 4, 3, 4, 2},
		{3, 3, 8, 7, 6, 7, 3}, // every region needs 3 of 8
		{3, 7, 8, 7, 6, 5, 3},
		{4, 2, 8, 7, 6, 7, 3},
		{2, 7, 8, 8, 5, 8, 2},
		{5, 3, 8, 8, 7, 8, 4},
	} {
		p := Policy{Kind: RackAware, MinRacksPerWriteQuorum: tc.m, Enforce: true}
		if tc.regions > 1 {
			p = Policy{Kind: RegionAware, MinRacksPerWriteQuorum: tc.m, Enforce: true, MinRegionsForDurability: tc.n}
		}
		run(fmt.Sprint(tc), uneven(tc.regions, tc.racks), p, Request{E: tc.e, Qw: tc.qw, Qa: tc.qa})
	}
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	for i := range 2000 {
		var bookies []Bookie
		nRegions, nRacks := 1+r.IntN(5), 1+r.IntN(12)
		for range 10 + r.IntN(41) {
			bookies = append(bookies, Bookie{ID: fmt.Sprintf("b%d", len(bookies)), Region: fmt.Sprintf("g%d", r.IntN(nRegions)), Rack: fmt.Sprintf("k%d", r.IntN(nRacks))})
		}
		e := 1 + r.IntN(8)
		qw := 1 + r.IntN(e)
		qa := 1 + r.IntN(qw)
		p := Policy{Kind: RackAware, MinRacksPerWriteQuorum: r.IntN(qw + 1), Enforce: true}
		if r.IntN(2) == 0 {
			p.Kind, p.MinRegionsForDurability = RegionAware, r.IntN(qa+1)
		}
		run(fmt.Sprintf("seed %d case %d", seed, i), bookies, p, Request{E: e, Qw: qw, Qa: qa})
	}
}

// TestSearchBudget: past its budget the search stops and says so.
func TestSearchBudget(t *testing.T) {
	var bookies []Bookie
	for k := range 7 {
		for range k + 1 {
			bookies = append(bookies, Bookie{ID: fmt.Sprintf("b%d", len(bookies)), Region: "g", Rack: fmt.Sprintf("k%d", k)})
		}
	}
	pl := newPool(bookies, DefaultPolicy(), nil, nil, 8, rand.New(rand.NewPCG(1, 0)))
	s := newSearcher(&pl, Request{E: 8, Qw: 5, Qa: 3}, 5, 0, true, false, false)
	s.budget = 100
	if s.run() || !s.exhausted || s.steps != 101 {
		t.Fatalf("run with budget 100: exhausted %v after %d steps", s.exhausted, s.steps)
	}
}
