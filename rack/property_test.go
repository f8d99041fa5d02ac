package rack

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// This file checks Place and Replace against an oracle written from the
// rules in doc.go, not from the placer: a brute-force grader that enumerates
// every ack quorum of every write set, and brute-force placers that try every
// ensemble (or every replacement) of a small topology.

// --- the oracle -------------------------------------------------------------

// oracleUsable: may placement under p choose b at all?
func oracleUsable(p Policy, b Bookie) bool {
	if p.Enforce && b.Rack == "" {
		return false
	}
	if p.Kind == RegionAware {
		if b.Region == "" {
			return false
		}
		if len(p.Regions) > 0 && !slices.Contains(p.Regions, b.Region) {
			return false
		}
	}
	return true
}

// oracleWindow grades one write set by definition: count racks; enumerate
// every qa-subset and count its regions.
func oracleWindow(p Policy, ws []Bookie, qa int) Adherence {
	if p.Kind == RegionAware {
		for _, b := range ws {
			if !oracleUsable(Policy{Kind: RegionAware, Regions: p.Regions}, b) {
				return AdherenceFail
			}
		}
		n := p.MinRegionsForDurability
		durable := true
		forEachSubset(len(ws), qa, func(idx []int) bool {
			regions := map[string]bool{}
			for _, i := range idx {
				regions[ws[i].Region] = true
			}
			if len(regions) < n {
				durable = false
				return false
			}
			return true
		})
		if !durable {
			return AdherenceFail
		}
	}
	racks := map[string]bool{}
	labelled := true
	for _, b := range ws {
		racks[b.Region+"\x00"+b.Rack] = true
		if b.Rack == "" {
			labelled = false
		}
	}
	want := min(len(ws), p.MinRacksPerWriteQuorum)
	if len(racks) >= want && (labelled || !p.Enforce) {
		return AdherenceStrict
	}
	if p.Kind == RegionAware {
		return AdherenceSoft
	}
	return AdherenceFail
}

// forEachSubset calls f with every k-subset of 0..n-1 until f returns false.
func forEachSubset(n, k int, f func([]int) bool) {
	idx := make([]int, 0, k)
	var rec func(start int) bool
	rec = func(start int) bool {
		if len(idx) == k {
			return f(idx)
		}
		for i := start; i < n; i++ {
			idx = append(idx, i)
			if !rec(i + 1) {
				return false
			}
			idx = idx[:len(idx)-1]
		}
		return true
	}
	rec(0)
}

// oracleWindows grades the write sets (start positions) of ens.
func oracleWindows(p Policy, ens []Bookie, starts []int, qw, qa int) Adherence {
	worst := AdherenceStrict
	for _, s := range starts {
		ws := make([]Bookie, qw)
		for k := range qw {
			ws[k] = ens[(s+k)%len(ens)]
		}
		worst = min(worst, oracleWindow(p, ws, qa))
	}
	return worst
}

func oracleCheck(p Policy, ens []Bookie, qw, qa int) Adherence {
	ids := map[string]bool{}
	for _, b := range ens {
		if ids[b.ID] {
			return AdherenceFail
		}
		ids[b.ID] = true
	}
	starts := make([]int, len(ens))
	for i := range starts {
		starts[i] = i
	}
	return oracleWindows(p, ens, starts, qw, qa)
}

// oraclePlaceBest tries every ordered choice of e distinct usable bookies and
// returns the best adherence any reaches (-1 when fewer than e are usable).
func oraclePlaceBest(usable []Bookie, p Policy, e, qw, qa int) Adherence {
	if len(usable) < e {
		return -1
	}
	best := AdherenceFail
	ens := make([]Bookie, 0, e)
	used := make([]bool, len(usable))
	var rec func() bool
	rec = func() bool {
		if len(ens) == e {
			best = max(best, oracleCheck(p, ens, qw, qa))
			return best == AdherenceStrict
		}
		for i, b := range usable {
			if used[i] {
				continue
			}
			used[i] = true
			ens = append(ens, b)
			done := rec()
			ens = ens[:len(ens)-1]
			used[i] = false
			if done {
				return true
			}
		}
		return false
	}
	rec()
	return best
}

// --- random cases -------------------------------------------------------------

var regionNames = []string{"east", "west", "central", ""}

type genCase struct {
	all     []Bookie // every bookie ever known (labels)
	live    []Bookie
	p       Policy
	req     Request
	minimal bool // small enough for the brute-force placer
}

func (c genCase) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "policy %v; e=%d qw=%d qa=%d exclude=%v local=%s/%s\nlive:", c.p, c.req.E, c.req.Qw, c.req.Qa,
		sortedKeys(c.req.Exclude), c.req.LocalRegion, c.req.LocalRack)
	for _, b := range c.live {
		fmt.Fprintf(&sb, " %v", b)
	}
	return sb.String()
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// genTopology makes up to maxRegions regions × racks × bookies. Empty region
// and rack labels appear sometimes.
func genTopology(r *rand.Rand, maxRegions, maxRacks, maxPerRack int) []Bookie {
	var out []Bookie
	nRegions := 1 + r.IntN(maxRegions)
	for g := range nRegions {
		region := regionNames[g%len(regionNames)]
		if r.IntN(12) == 0 {
			region = ""
		}
		for k := range 1 + r.IntN(maxRacks) {
			rk := fmt.Sprintf("k%d", k)
			if r.IntN(10) == 0 {
				rk = ""
			}
			for range r.IntN(maxPerRack + 1) {
				out = append(out, Bookie{ID: fmt.Sprintf("b%d", len(out)), Region: region, Rack: rk})
			}
		}
	}
	return out
}

func genPolicy(r *rand.Rand) Policy {
	p := Policy{Kind: RackAware, MinRacksPerWriteQuorum: r.IntN(5), Enforce: r.IntN(3) > 0}
	if r.IntN(2) == 0 {
		p.Kind = RegionAware
		p.MinRegionsForDurability = r.IntN(4)
		if r.IntN(3) == 0 {
			for _, g := range regionNames[:3] {
				if r.IntN(2) == 0 {
					p.Regions = append(p.Regions, g)
				}
			}
		}
	}
	if r.IntN(40) == 0 { // occasionally invalid
		p.Kind = Kind("bogus")
	}
	return p
}

// genQuorums picks e >= qw >= qa >= 1, mostly valid for p.
func genQuorums(r *rand.Rand, p Policy, maxE int) (e, qw, qa int) {
	e = 1 + r.IntN(maxE)
	qw = 1 + r.IntN(e)
	qa = 1 + r.IntN(qw)
	if n := p.MinRegionsForDurability; p.Kind == RegionAware && n >= 2 && r.IntN(5) > 0 {
		lo := max(n, qw-qw/n+1)
		if lo <= qw {
			qa = lo + r.IntN(qw-lo+1)
		}
	}
	if r.IntN(30) == 0 {
		qa = qw + 1 // invalid
	}
	return e, qw, qa
}

func genCaseSized(r *rand.Rand, maxRegions, maxRacks, maxPerRack, maxE int) genCase {
	var c genCase
	c.all = genTopology(r, maxRegions, maxRacks, maxPerRack)
	for _, b := range c.all {
		if r.IntN(8) > 0 {
			c.live = append(c.live, b)
		}
	}
	c.p = genPolicy(r)
	c.req.E, c.req.Qw, c.req.Qa = genQuorums(r, c.p, maxE)
	if r.IntN(3) == 0 && len(c.all) > 0 {
		c.req.Exclude = map[string]bool{}
		for range 1 + r.IntN(3) {
			c.req.Exclude[c.all[r.IntN(len(c.all))].ID] = true
		}
	}
	if r.IntN(2) == 0 && len(c.all) > 0 {
		b := c.all[r.IntN(len(c.all))]
		c.req.LocalRegion, c.req.LocalRack = b.Region, b.Rack
	}
	return c
}

func (c genCase) usable() []Bookie {
	var out []Bookie
	for _, b := range c.live {
		if !c.req.Exclude[b.ID] && oracleUsable(c.p, b) {
			out = append(out, b)
		}
	}
	return out
}

// --- Place ----------------------------------------------------------------------

// checkPlace runs Place on c and returns what is wrong, or "". With brute,
// it also compares against the best adherence any ensemble reaches.
func checkPlace(c genCase, seed uint64, brute bool) string {
	ens, adh, err := Place(c.live, c.p, c.req, rand.New(rand.NewPCG(seed, 1)))
	validErr := c.p.Validate(c.req.E, c.req.Qw, c.req.Qa)
	if validErr != nil {
		if !errors.Is(err, ErrInvalidPolicy) {
			return fmt.Sprintf("invalid policy (%v) but Place returned %v, %v", validErr, ens, err)
		}
		return ""
	}
	usable := c.usable()
	best := Adherence(-2)
	if brute {
		best = oraclePlaceBest(usable, c.p, c.req.E, c.req.Qw, c.req.Qa)
	}
	if err != nil {
		var pe *PlacementError
		if !errors.Is(err, ErrNotEnoughBookies) || !errors.As(err, &pe) {
			return fmt.Sprintf("untyped error %v", err)
		}
		if len(usable) >= c.req.E && !c.p.Enforce {
			return fmt.Sprintf("best effort failed with %d usable bookies: %v", len(usable), err)
		}
		if best == AdherenceStrict {
			return fmt.Sprintf("brute force found a strict ensemble, Place said %v", err)
		}
		return ""
	}
	if len(ens) != c.req.E {
		return fmt.Sprintf("ensemble %v has %d members, want %d", ens, len(ens), c.req.E)
	}
	for _, b := range ens {
		if c.req.Exclude[b.ID] {
			return fmt.Sprintf("excluded %v chosen: %v", b, ens)
		}
		if !slices.Contains(usable, b) {
			return fmt.Sprintf("%v is not live and usable: %v", b, ens)
		}
	}
	want := oracleCheck(c.p, ens, c.req.Qw, c.req.Qa)
	if adh != want {
		return fmt.Sprintf("Place says %v, oracle says %v for %v", adh, want, ens)
	}
	if c.p.Enforce && adh != AdherenceStrict {
		return fmt.Sprintf("enforced Place returned %v: %v", adh, ens)
	}
	if brute && adh != best {
		return fmt.Sprintf("Place reached %v, brute force reaches %v: %v", adh, best, ens)
	}
	return ""
}

// smallCase: at most 7 live bookies drawn from a bigger topology, E <= 5,
// so brute force over every ensemble stays cheap.
func smallCase(r *rand.Rand) genCase {
	c := genCaseSized(r, 3, 3, 3, 5)
	r.Shuffle(len(c.live), func(i, j int) { c.live[i], c.live[j] = c.live[j], c.live[i] })
	c.live = c.live[:min(len(c.live), 3+r.IntN(5))]
	if r.IntN(4) > 0 { // mostly E within reach, so the rule decides
		c.req.E, c.req.Qw, c.req.Qa = genQuorums(r, c.p, max(1, min(5, len(c.usable()))))
	}
	return c
}

// TestPlaceMatchesBruteForce: on small topologies Place returns an ensemble
// that meets the rule exactly when one exists (Enforce), and the best
// adherence any ensemble reaches (without Enforce).
func TestPlaceMatchesBruteForce(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	n := 10000
	if testing.Short() {
		n = 1000
	}
	for i := range n {
		c := smallCase(r)
		if msg := checkPlace(c, uint64(i), true); msg != "" {
			t.Fatalf("seed %d case %d: %s\n%v", seed, i, msg, c)
		}
	}
}

// TestPlaceInvariantsLarge: realistic sizes (up to ~50 bookies, E <= 8): no
// duplicate, no excluded or unusable bookie, Adherence matches the oracle.
func TestPlaceInvariantsLarge(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		c := genCaseSized(r, 4, 4, 4, 8)
		if msg := checkPlace(c, uint64(i), false); msg != "" {
			t.Fatalf("seed %d case %d: %s\n%v", seed, i, msg, c)
		}
	}
}

// TestPlaceHardCases: exhaustive search on realistic sizes where the answer
// is known, including infeasible ones the search must refute.
func TestPlaceHardCases(t *testing.T) {
	grid := func(regions, racks, per int) []Bookie {
		var out []Bookie
		for g := range regions {
			for k := range racks {
				for range per {
					out = append(out, Bookie{ID: fmt.Sprintf("b%d", len(out)), Region: fmt.Sprintf("g%d", g), Rack: fmt.Sprintf("k%d", k)})
				}
			}
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		bookies []Bookie
		p       Policy
		e, w, a int
		ok      bool
	}{
		// C_8 with every 5 consecutive distinct needs 8 racks (5 does not divide 8).
		{"ring-8-5-needs-8-racks", grid(1, 7, 7), Policy{Kind: RackAware, MinRacksPerWriteQuorum: 5, Enforce: true}, 8, 5, 3, false},
		{"ring-8-5-with-8-racks", grid(1, 8, 6), Policy{Kind: RackAware, MinRacksPerWriteQuorum: 5, Enforce: true}, 8, 5, 3, true},
		{"ring-8-4-with-4-racks", grid(1, 4, 12), Policy{Kind: RackAware, MinRacksPerWriteQuorum: 4, Enforce: true}, 8, 4, 2, true},
		{"ring-7-4-with-4-racks", grid(1, 4, 12), Policy{Kind: RackAware, MinRacksPerWriteQuorum: 4, Enforce: true}, 7, 4, 2, false},
		// Region-aware, 2 regions, N=2, Qw=4 Qa=3: each write set needs 2+2.
		{"regions-8-4-3", grid(2, 3, 8), Policy{Kind: RegionAware, MinRacksPerWriteQuorum: 2, Enforce: true, MinRegionsForDurability: 2}, 8, 4, 3, true},
		// Odd E with 2 regions and E=Qw... E=7 Qw=4 Qa=3: every 4 consecutive hold <= 2 per region; a 7-ring cannot alternate.
		{"regions-7-4-3-two-regions", grid(2, 3, 8), Policy{Kind: RegionAware, MinRacksPerWriteQuorum: 2, Enforce: true, MinRegionsForDurability: 2}, 7, 4, 3, false},
		{"regions-7-4-3-three-regions", grid(3, 3, 5), Policy{Kind: RegionAware, MinRacksPerWriteQuorum: 2, Enforce: true, MinRegionsForDurability: 2}, 7, 4, 3, true},
		// E=8 Qw=6 Qa=5 N=3: any 2 regions hold <= 4 of every 6-window, so
		// every region holds >= 2 of every window: 3 regions would need 3 each.
		{"regions-8-6-5-n3-three-regions", grid(3, 3, 4), Policy{Kind: RegionAware, MinRacksPerWriteQuorum: 3, Enforce: true, MinRegionsForDurability: 3}, 8, 6, 5, false},
		{"regions-8-6-5-n3", grid(4, 3, 4), Policy{Kind: RegionAware, MinRacksPerWriteQuorum: 3, Enforce: true, MinRegionsForDurability: 3}, 8, 6, 5, true},
		{"regions-8-6-5-n3-two-regions", append(grid(2, 3, 4), Bookie{ID: "x", Region: "g2", Rack: "k0"}), Policy{Kind: RegionAware, MinRacksPerWriteQuorum: 3, Enforce: true, MinRegionsForDurability: 3}, 8, 6, 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ens, adh, err := Place(tc.bookies, tc.p, Request{E: tc.e, Qw: tc.w, Qa: tc.a}, rand.New(rand.NewPCG(1, 2)))
			if tc.ok != (err == nil) {
				t.Fatalf("want ok=%v, got %v %v %v", tc.ok, ens, adh, err)
			}
			if err != nil && !errors.Is(err, ErrNotEnoughBookies) {
				t.Fatalf("untyped error %v", err)
			}
			if err == nil && oracleCheck(tc.p, ens, tc.w, tc.a) != AdherenceStrict {
				t.Fatalf("oracle rejects %v", ens)
			}
		})
	}
}

// TestPlaceSpreadsLoad: rng breaks ties, so over many seeds every bookie of a
// symmetric topology is chosen, and the same seed gives the same ensemble.
func TestPlaceSpreadsLoad(t *testing.T) {
	var bookies []Bookie
	for k := range 3 {
		for j := range 3 {
			bookies = append(bookies, Bookie{ID: fmt.Sprintf("k%d-%d", k, j), Region: "east", Rack: fmt.Sprintf("k%d", k)})
		}
	}
	req := Request{E: 3, Qw: 2, Qa: 2}
	chosen := map[string]int{}
	first := map[string]int{}
	for seed := range uint64(300) {
		ens, _, err := Place(bookies, DefaultPolicy(), req, rand.New(rand.NewPCG(seed, 0)))
		if err != nil {
			t.Fatal(err)
		}
		again, _, _ := Place(bookies, DefaultPolicy(), req, rand.New(rand.NewPCG(seed, 0)))
		if !slices.Equal(ens, again) {
			t.Fatalf("seed %d: %v then %v", seed, ens, again)
		}
		for _, b := range ens {
			chosen[b.ID]++
		}
		first[ens[0].Rack]++
	}
	for _, b := range bookies {
		if chosen[b.ID] < 30 {
			t.Errorf("%v chosen %d times of 300 ensembles; want roughly 100", b, chosen[b.ID])
		}
	}
	if len(first) != 3 {
		t.Errorf("position 0 racks: %v", first)
	}
}

// TestPlaceLocalFirst: position 0 lands in the local rack, or the local
// region, whenever a valid ensemble allows it.
func TestPlaceLocalFirst(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	checked := 0
	for i := range 2000 {
		c := smallCase(r)
		if len(c.usable()) > 7 || c.p.Validate(c.req.E, c.req.Qw, c.req.Qa) != nil || c.req.LocalRegion == "" {
			continue
		}
		c.p.Enforce = true
		ens, _, err := Place(c.live, c.p, c.req, rand.New(rand.NewPCG(uint64(i), 0)))
		if err != nil {
			continue
		}
		checked++
		// Could a strict ensemble start in the local rack / region?
		can := func(match func(Bookie) bool) bool {
			for _, b := range c.usable() {
				if !match(b) {
					continue
				}
				rest := slices.DeleteFunc(slices.Clone(c.usable()), func(x Bookie) bool { return x == b })
				if startsWith(b, rest, c.p, c.req) {
					return true
				}
			}
			return false
		}
		inRack := func(b Bookie) bool { return b.Region == c.req.LocalRegion && b.Rack == c.req.LocalRack }
		inRegion := func(b Bookie) bool { return b.Region == c.req.LocalRegion }
		switch {
		case can(inRack) && !inRack(ens[0]):
			t.Fatalf("seed %d case %d: %v could start in the local rack\n%v", seed, i, ens, c)
		case !can(inRack) && can(inRegion) && !inRegion(ens[0]):
			t.Fatalf("seed %d case %d: %v could start in the local region\n%v", seed, i, ens, c)
		}
	}
	t.Logf("checked %d", checked)
	if checked < 200 {
		t.Fatalf("weak test: %d cases checked", checked)
	}
}

// startsWith: is there a strict ensemble with first at position 0?
func startsWith(first Bookie, rest []Bookie, p Policy, req Request) bool {
	ens := []Bookie{first}
	used := make([]bool, len(rest))
	var rec func() bool
	rec = func() bool {
		if len(ens) == req.E {
			return oracleCheck(p, ens, req.Qw, req.Qa) == AdherenceStrict
		}
		for i, b := range rest {
			if used[i] {
				continue
			}
			used[i] = true
			ens = append(ens, b)
			ok := rec()
			ens = ens[:len(ens)-1]
			used[i] = false
			if ok {
				return true
			}
		}
		return false
	}
	return rec()
}

// --- Replace ------------------------------------------------------------------

// checkReplace builds an ensemble (placed, or drawn at random from every known
// bookie, so possibly anomalous and with members no longer live), fails
// position idx, and checks Replace against brute force over all candidates.
func checkReplace(c genCase, r *rand.Rand, seed uint64) string {
	e := c.req.E
	if len(c.all) < e {
		return ""
	}
	var ens []Bookie
	if r.IntN(2) == 0 {
		placed, _, err := Place(c.all, c.p, Request{E: e, Qw: c.req.Qw, Qa: c.req.Qa}, r)
		if err == nil {
			ens = placed
		}
	}
	if ens == nil {
		perm := r.Perm(len(c.all))
		for _, i := range perm[:e] {
			ens = append(ens, c.all[i])
		}
	}
	idx := r.IntN(e)
	failed := ens[idx]
	live := c.live
	if r.IntN(2) == 0 { // the failed bookie left the cluster (#2642)
		live = slices.DeleteFunc(slices.Clone(live), func(b Bookie) bool { return b.ID == failed.ID })
	}
	req := c.req
	if r.IntN(2) == 0 {
		req.E = 0
	}
	b, adh, err := Replace(live, c.p, req, slices.Clone(ens), idx, rand.New(rand.NewPCG(seed, 3)))
	if c.p.Validate(e, c.req.Qw, c.req.Qa) != nil {
		if !errors.Is(err, ErrInvalidPolicy) {
			return fmt.Sprintf("invalid policy but Replace returned %v, %v", b, err)
		}
		return ""
	}

	// Brute force: grade every candidate on the write sets containing idx.
	var starts []int
	for s := range e {
		if (idx-s+e)%e < c.req.Qw {
			starts = append(starts, s)
		}
	}
	best := Adherence(-1)
	grade := map[string]Adherence{}
	var cands []Bookie
	for _, x := range live {
		if c.req.Exclude[x.ID] || !oracleUsable(c.p, x) || slices.ContainsFunc(ens, func(m Bookie) bool { return m.ID == x.ID }) {
			continue
		}
		trial := slices.Clone(ens)
		trial[idx] = x
		g := oracleWindows(c.p, trial, starts, c.req.Qw, c.req.Qa)
		grade[x.ID] = g
		cands = append(cands, x)
		best = max(best, g)
	}
	ctx := fmt.Sprintf("ensemble %v idx %d", ens, idx)
	if err != nil {
		var pe *PlacementError
		if !errors.Is(err, ErrNotEnoughBookies) || !errors.As(err, &pe) {
			return fmt.Sprintf("%s: untyped error %v", ctx, err)
		}
		if len(cands) > 0 && (!c.p.Enforce || best == AdherenceStrict) {
			return fmt.Sprintf("%s: error %v but brute force has %v (best %v)", ctx, err, cands, best)
		}
		return ""
	}
	g, ok := grade[b.ID]
	switch {
	case !ok:
		return fmt.Sprintf("%s: chose %v, not a usable live non-member (candidates %v)", ctx, b, cands)
	case g != best:
		return fmt.Sprintf("%s: chose %v keeping %v, brute force keeps %v", ctx, b, g, best)
	case c.p.Enforce && g != AdherenceStrict:
		return fmt.Sprintf("%s: enforced but chose %v keeping %v", ctx, b, g)
	}
	trial := slices.Clone(ens)
	trial[idx] = b
	if want := oracleCheck(c.p, trial, c.req.Qw, c.req.Qa); adh != want {
		return fmt.Sprintf("%s: Replace says %v, oracle says %v", ctx, adh, want)
	}
	// Locality among the best: same rack, then same region.
	has := func(match func(Bookie) bool) bool {
		return slices.ContainsFunc(cands, func(x Bookie) bool { return grade[x.ID] == best && match(x) })
	}
	sameRack := func(x Bookie) bool { return x.Region == failed.Region && x.Rack == failed.Rack }
	sameRegion := func(x Bookie) bool { return x.Region == failed.Region }
	if has(sameRack) && !sameRack(b) {
		return fmt.Sprintf("%s: chose %v though the failed bookie's rack had a candidate", ctx, b)
	}
	if has(sameRegion) && !sameRegion(b) {
		return fmt.Sprintf("%s: chose %v though the failed bookie's region had a candidate", ctx, b)
	}
	return ""
}

// TestReplaceMatchesBruteForce: the replacement is a usable live non-member,
// keeps every write set containing the position within the rule whenever some
// candidate can (and errors under Enforce only when none can), prefers the
// failed bookie's rack, then its region, even when the failed bookie is gone.
func TestReplaceMatchesBruteForce(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	n := 10000
	if testing.Short() {
		n = 1000
	}
	for i := range n {
		c := genCaseSized(r, 4, 4, 3, 7)
		if msg := checkReplace(c, r, uint64(i)); msg != "" {
			t.Fatalf("seed %d case %d: %s\n%v", seed, i, msg, c)
		}
	}
}

// TestReplaceKeepsFailedLabels is BookKeeper #2642: the failed bookie left the
// cluster; its recorded rack still decides where the replacement goes.
func TestReplaceKeepsFailedLabels(t *testing.T) {
	live := []Bookie{
		{"a2", "east", "r1"}, {"b1", "east", "r2"}, {"b2", "east", "r2"},
		{"c1", "west", "r9"}, {"c2", "west", "r9"},
	}
	ens := []Bookie{{"a1", "east", "r1"}, {"b1", "east", "r2"}, {"c1", "west", "r9"}}
	for seed := range uint64(50) {
		b, adh, err := Replace(live, DefaultPolicy(), Request{Qw: 2, Qa: 2}, ens, 0, rand.New(rand.NewPCG(seed, 0)))
		if err != nil || b.ID != "a2" || adh != AdherenceStrict {
			t.Fatalf("seed %d: got %v %v %v, want a2 (same rack as the departed a1)", seed, b, adh, err)
		}
	}
}

// --- fuzz -----------------------------------------------------------------------

// FuzzPlace decodes a topology from bytes (per byte: bits 0-1 region, 2-3
// rack, 0 meaning an empty label; bit 4 excluded; bit 5 dead) and asserts the
// Place invariants, against brute force when small, plus Replace's.
func FuzzPlace(f *testing.F) {
	f.Add(uint64(1), []byte{0x05, 0x09, 0x0d, 0x06, 0x0a}, uint8(3), uint8(3), uint8(2), uint8(0x01), uint8(2), uint8(0))
	f.Add(uint64(2), []byte{0x05, 0x05, 0x05, 0x05}, uint8(3), uint8(3), uint8(2), uint8(0x01), uint8(2), uint8(0))
	f.Add(uint64(3), []byte{0x05, 0x06, 0x07, 0x09, 0x0a, 0x0b}, uint8(6), uint8(6), uint8(4), uint8(0x03), uint8(2), uint8(2))
	f.Add(uint64(4), []byte{0x05, 0x15, 0x26, 0x09, 0x0a, 0x00, 0x04}, uint8(4), uint8(2), uint8(2), uint8(0x02), uint8(3), uint8(2))
	f.Add(uint64(5), []byte{0x05, 0x09, 0x0d, 0x06, 0x0a, 0x0e, 0x07}, uint8(5), uint8(3), uint8(3), uint8(0x07), uint8(3), uint8(2))
	f.Add(uint64(6), []byte{}, uint8(1), uint8(1), uint8(1), uint8(0), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, seed uint64, topo []byte, e, qw, qa, flags, minRacks, minRegions uint8) {
		if len(topo) > 12 {
			topo = topo[:12]
		}
		var c genCase
		c.req.Exclude = map[string]bool{}
		for i, x := range topo {
			b := Bookie{ID: fmt.Sprintf("b%d", i)}
			if g := x & 3; g > 0 {
				b.Region = regionNames[g-1]
			}
			if k := (x >> 2) & 3; k > 0 {
				b.Rack = fmt.Sprintf("k%d", k)
			}
			if x&0x10 != 0 {
				c.req.Exclude[b.ID] = true
			}
			c.all = append(c.all, b)
			if x&0x20 == 0 {
				c.live = append(c.live, b)
			}
		}
		c.p = Policy{Kind: RackAware, Enforce: flags&1 != 0, MinRacksPerWriteQuorum: int(minRacks % 6)}
		if flags&2 != 0 {
			c.p.Kind = RegionAware
			c.p.MinRegionsForDurability = int(minRegions % 4)
			if flags&4 != 0 {
				c.p.Regions = []string{"east", "west"}
			}
		}
		c.req.E, c.req.Qw, c.req.Qa = int(e%9), int(qw%9), int(qa%9)
		small := len(c.usable()) <= 7 && c.req.E <= 5
		if msg := checkPlace(c, seed, small); msg != "" {
			t.Fatalf("%s\n%v", msg, c)
		}
		if c.req.E >= 1 {
			if msg := checkReplace(c, rand.New(rand.NewPCG(seed, 9)), seed); msg != "" {
				t.Fatalf("%s\n%v", msg, c)
			}
		}
	})
}

// --- small API facts ----------------------------------------------------------

func TestDefaultPolicy(t *testing.T) {
	p := DefaultPolicy()
	want := Policy{Kind: RackAware, MinRacksPerWriteQuorum: 2, Enforce: true}
	if p.Kind != want.Kind || p.MinRacksPerWriteQuorum != 2 || !p.Enforce || p.Regions != nil || p.MinRegionsForDurability != 0 {
		t.Fatalf("DefaultPolicy() = %+v, want %+v", p, want)
	}
	if got := p.String(); got != "kind=rack-aware min-racks=2 enforce" {
		t.Fatalf("DefaultPolicy().String() = %q", got)
	}
	if err := p.Validate(3, 3, 2); err != nil {
		t.Fatal(err)
	}
}

func TestAdherenceString(t *testing.T) {
	for a, want := range map[Adherence]string{AdherenceFail: "FAIL", AdherenceSoft: "SOFT", AdherenceStrict: "STRICT", 7: "Adherence(7)"} {
		if a.String() != want {
			t.Errorf("%d: %q, want %q", int(a), a.String(), want)
		}
	}
	if !(AdherenceFail < AdherenceSoft && AdherenceSoft < AdherenceStrict) {
		t.Error("adherence levels must be ordered")
	}
}

func TestPlacementErrorIs(t *testing.T) {
	_, _, err := Place([]Bookie{{"a", "east", "r1"}}, DefaultPolicy(), Request{E: 3, Qw: 2, Qa: 2}, rand.New(rand.NewPCG(0, 0)))
	var pe *PlacementError
	if !errors.Is(err, ErrNotEnoughBookies) || !errors.As(err, &pe) || pe.Op != "place" || pe.Usable != 1 {
		t.Fatalf("got %#v", err)
	}
	if errors.Is(err, ErrInvalidPolicy) {
		t.Fatal("a placement error is not an invalid policy")
	}
	if want := "rack: not enough bookies: place: need 3 bookies, only 1 usable (1 live)"; err.Error() != want {
		t.Fatalf("%q, want %q", err.Error(), want)
	}
	// Read-only bookies the caller left out count among the live ones.
	_, _, err = Place(nil, DefaultPolicy(), Request{E: 3, Qw: 3, Qa: 2, ReadOnly: 4}, rand.New(rand.NewPCG(0, 0)))
	if want := "rack: not enough bookies: place: need 3 bookies, only 0 usable (4 live, 4 read-only)"; err == nil || err.Error() != want {
		t.Fatalf("%v, want %q", err, want)
	}
}

// TestCheckFixedCases pins Check on hand-made ensembles.
func TestCheckFixedCases(t *testing.T) {
	e1, e2, e3 := Bookie{"e1", "east", "r1"}, Bookie{"e2", "east", "r1"}, Bookie{"e3", "east", "r2"}
	w1, c1 := Bookie{"w1", "west", "r1"}, Bookie{"c1", "central", "r1"}
	region := Policy{Kind: RegionAware, MinRacksPerWriteQuorum: 2, Enforce: true, MinRegionsForDurability: 2}
	for _, tc := range []struct {
		p       Policy
		ens     []Bookie
		qw, qa  int
		want    Adherence
		comment string
	}{
		{DefaultPolicy(), []Bookie{e1, e2, e3}, 3, 2, AdherenceStrict, "two racks in the one write set"},
		{DefaultPolicy(), []Bookie{e1, e2, e3}, 2, 2, AdherenceFail, "write set {e1,e2} is one rack"},
		{DefaultPolicy(), []Bookie{e1, e1, e3}, 3, 2, AdherenceFail, "duplicate"},
		{DefaultPolicy(), []Bookie{e1, {"x", "east", ""}, e3}, 3, 2, AdherenceFail, "unlabelled under enforce"},
		{Policy{Kind: RackAware, MinRacksPerWriteQuorum: 2}, []Bookie{e1, {"x", "east", ""}, e2}, 3, 2, AdherenceStrict, "unlabelled is a rack without enforce"},
		{DefaultPolicy(), []Bookie{e1, e3}, 3, 2, AdherenceFail, "invalid quorums"},
		{region, []Bookie{e1, e3, w1}, 3, 3, AdherenceStrict, "2 regions, qa=qw"},
		{region, []Bookie{e1, e3, w1, c1}, 3, 3, AdherenceStrict, "every write set in 2 regions"},
		{region, []Bookie{e1, e3, e2, w1}, 3, 3, AdherenceFail, "write set {e1,e3,e2} in one region"},
		{region, []Bookie{e1, e3, w1, {"x", "", "r1"}}, 3, 3, AdherenceFail, "member without a region"},
		{Policy{Kind: RegionAware, MinRacksPerWriteQuorum: 3, MinRegionsForDurability: 2}, []Bookie{e1, e2, w1}, 3, 3, AdherenceSoft, "durable, racks short"},
	} {
		if got := Check(tc.p, tc.ens, tc.qw, tc.qa); got != tc.want {
			t.Errorf("%s: Check = %v, want %v", tc.comment, got, tc.want)
		}
		if got := oracleCheck(tc.p, tc.ens, tc.qw, tc.qa); got != tc.want && tc.p.Validate(len(tc.ens), tc.qw, tc.qa) == nil {
			t.Errorf("%s: oracle = %v, want %v", tc.comment, got, tc.want)
		}
	}
}

// TestCheckMatchesOracle compares Check with the oracle on random ensembles.
func TestCheckMatchesOracle(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	for i := range 3000 {
		c := genCaseSized(r, 4, 3, 3, 7)
		if len(c.all) < c.req.E || c.p.Validate(c.req.E, c.req.Qw, c.req.Qa) != nil {
			continue
		}
		var ens []Bookie
		for _, j := range r.Perm(len(c.all))[:c.req.E] {
			ens = append(ens, c.all[j])
		}
		if got, want := Check(c.p, ens, c.req.Qw, c.req.Qa), oracleCheck(c.p, ens, c.req.Qw, c.req.Qa); got != want {
			t.Fatalf("seed %d case %d: Check %v, oracle %v for %v\n%v", seed, i, got, want, ens, c)
		}
	}
}

// TestReadOrderProperty: a permutation; classes in order; stable inside.
func TestReadOrderProperty(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	for i := range 1000 {
		ws := genTopology(r, 3, 3, 2)
		if len(ws) == 0 {
			continue
		}
		reader := ws[r.IntN(len(ws))]
		down := map[string]bool{}
		for _, b := range ws {
			if r.IntN(4) == 0 {
				down[b.ID] = true
			}
		}
		class := func(b Bookie) int {
			switch {
			case down[b.ID]:
				return 3
			case b.Region == reader.Region && reader.Rack != "" && b.Rack == reader.Rack:
				return 0
			case b.Region == reader.Region:
				return 1
			}
			return 2
		}
		order := ReadOrder(ws, reader.Region, reader.Rack, down)
		if len(order) != len(ws) {
			t.Fatalf("seed %d case %d: %v", seed, i, order)
		}
		seen := map[int]bool{}
		for k, j := range order {
			if seen[j] || j < 0 || j >= len(ws) {
				t.Fatalf("seed %d case %d: not a permutation: %v", seed, i, order)
			}
			seen[j] = true
			if k > 0 {
				prev := order[k-1]
				if class(ws[prev]) > class(ws[j]) || (class(ws[prev]) == class(ws[j]) && prev > j) {
					t.Fatalf("seed %d case %d: %v out of order for reader %v down %v: %v", seed, i, order, reader, down, ws)
				}
			}
		}
	}
}
