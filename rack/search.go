package rack

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
)

// searcher finds a rack for every position by depth-first search with
// pruning; bookies of one rack are interchangeable for every rule, so it
// searches over racks, not bookies.
//
// Two levels. The durability rule and region targets depend only on which
// region each position is in, and the rack rule is bounded by it (a write
// set holding c bookies of a region with k racks gets at most min(c, k)
// racks there). So after each rack choice the search asks whether the
// sequence of regions so far can still be completed (regionDFS, memoized by
// that prefix): a cheap, exact refutation of the region-level rules that
// would otherwise surface only once whole write sets are filled. (Without
// it, refuting E=8 Qw=7 Qa=6 over 3 regions of 20 racks took minutes.)
type searcher struct {
	pl                 *pool
	e, qw, qa          int
	minRacks           int // 0: no rack rule
	minRegions         int // 0: no durability rule
	racks, durability  bool
	targets            []int // per region count, summing to e; nil: none
	localRack, localRg int   // -1: none
	capacity           []int // per rack: min(bookies, e)

	assign     []int // rack per position
	rackUsed   []int
	regionUsed []int
	// Symmetry keys (see run): for a rack unused so far, whose region is
	// unused (symFresh) or used (symRegion).
	symFresh, symRegion []string

	regionCnt []int // scratch, all zero between uses

	// Region level (see regionDFS).
	seq         []int           // region per position, for positions assigned so far
	regionCap   []int           // per region: sum of its racks' capacity
	regionRacks []int           // per region: number of racks
	regionShape []string        // per region: capacity, racks, target
	memo        map[string]bool // region prefix → can be completed

	// steps counts dfs and regionDFS calls; past budget the search gives up
	// (exhausted) rather than hang a caller on a pathological topology.
	steps, budget int
	exhausted     bool

	// shuffle is a test hook: when set, candidates are tried in random
	// order instead of best first, to show that completeness does not
	// depend on the heuristic.
	shuffle *rand.Rand
}

func newSearcher(pl *pool, req Request, minRacks, minRegions int, racks, durability, targets bool) *searcher {
	s := &searcher{
		pl: pl, e: req.E, qw: req.Qw, qa: req.Qa,
		minRacks: minRacks, minRegions: minRegions, racks: racks, durability: durability,
		localRack: -1, localRg: -1, budget: searchBudget,
		assign:     make([]int, req.E),
		rackUsed:   make([]int, len(pl.racks)),
		regionUsed: make([]int, len(pl.regions)),
		regionCnt:  make([]int, len(pl.regions)),
		capacity:   make([]int, len(pl.racks)),
	}
	for i, r := range pl.racks {
		s.capacity[i] = min(len(r.bookies), req.E)
		if req.LocalRack != "" && r.key == (rackKey{req.LocalRegion, req.LocalRack}) {
			s.localRack = i
		}
	}
	if req.LocalRegion != "" {
		s.localRg = slices.Index(pl.regions, req.LocalRegion)
	}
	if targets {
		s.targets = s.balancedTargets()
	}
	s.symmetryKeys()
	s.seq = make([]int, req.E)
	s.regionCap = make([]int, len(pl.regions))
	s.regionRacks = make([]int, len(pl.regions))
	s.regionShape = make([]string, len(pl.regions))
	s.memo = map[string]bool{}
	for i, r := range pl.racks {
		s.regionCap[r.region] += s.capacity[i]
		s.regionRacks[r.region]++
	}
	for g := range s.regionShape {
		t := -1
		if s.targets != nil {
			t = s.targets[g]
		}
		s.regionShape[g] = fmt.Sprint(s.regionCap[g], s.regionRacks[g], t)
	}
	return s
}

// balancedTargets spreads e over the regions as evenly as their capacity
// allows (counts differ by at most one except where a region is full); the
// extra ones go to the local region first, then to random regions.
func (s *searcher) balancedTargets() []int {
	capRg := make([]int, len(s.pl.regions))
	for i, r := range s.pl.racks {
		capRg[r.region] += s.capacity[i]
	}
	t := make([]int, len(capRg))
	for range s.e {
		best := -1
		for g := range t {
			if t[g] >= capRg[g] {
				continue
			}
			if best < 0 || cmp.Or(
				cmp.Compare(t[g], t[best]),
				cmp.Compare(s.notLocalRg(g), s.notLocalRg(best)),
				cmp.Compare(s.pl.regionTie[g], s.pl.regionTie[best])) < 0 {
				best = g
			}
		}
		t[best]++ // pool.total >= e, so some region has room
	}
	return t
}

func (s *searcher) notLocalRg(g int) int {
	if g == s.localRg {
		return 0
	}
	return 1
}

// symmetryKeys: two racks not used so far are interchangeable (swapping
// their bookies maps solutions to solutions) when they have the same
// capacity and, if regions matter, lie in the same region or in two unused
// regions with the same shape (rack capacities and target). So once one
// failed at a search node, the others with its key are skipped.
func (s *searcher) symmetryKeys() {
	n := len(s.pl.racks)
	s.symFresh, s.symRegion = make([]string, n), make([]string, n)
	regionsMatter := s.durability || s.targets != nil
	shape := make([]string, len(s.pl.regions))
	if regionsMatter {
		caps := make([][]int, len(s.pl.regions))
		for i, r := range s.pl.racks {
			caps[r.region] = append(caps[r.region], s.capacity[i])
		}
		for g, c := range caps {
			slices.Sort(c)
			t := -1
			if s.targets != nil {
				t = s.targets[g]
			}
			shape[g] = fmt.Sprint(c, t)
		}
	}
	for i, r := range s.pl.racks {
		c := strconv.Itoa(s.capacity[i])
		if !regionsMatter {
			s.symFresh[i], s.symRegion[i] = "c"+c, "c"+c
			continue
		}
		s.symFresh[i] = "s" + shape[r.region] + "|" + c
		s.symRegion[i] = "g" + strconv.Itoa(r.region) + "|" + c
	}
}

func (s *searcher) run() bool {
	if s.racks && s.minRacks > len(s.pl.racks) {
		return false
	}
	if s.durability && s.minRegions >= 2 {
		// A write set's n-1 fullest regions hold <= qa-1, so the
		// (n-1)-th fullest holds <= (qa-1)/(n-1), and so does each of the
		// other R-n+1 regions, which must hold the remaining >= qw-qa+1.
		n, r := s.minRegions, len(s.pl.regions)
		if n > r || s.qw-s.qa+1 > (r-n+1)*((s.qa-1)/(n-1)) {
			return false
		}
	}
	return s.dfs(0)
}

func (s *searcher) dfs(i int) bool {
	if i == s.e {
		return true
	}
	if s.tick() {
		return false
	}
	var failed []string
	for _, r := range s.order(i) {
		g := s.pl.racks[r].region
		key := ""
		if s.rackUsed[r] == 0 {
			key = s.symFresh[r]
			if s.regionUsed[g] > 0 {
				key = s.symRegion[r]
			}
			if slices.Contains(failed, key) {
				continue
			}
		}
		s.assign[i] = r
		s.seq[i] = g
		s.rackUsed[r]++
		s.regionUsed[g]++
		if s.ok(i) && s.regionDFS(i+1) && s.dfs(i+1) {
			return true
		}
		s.rackUsed[r]--
		s.regionUsed[g]--
		if key != "" {
			failed = append(failed, key)
		}
	}
	return false
}

// regionDFS reports whether regions can be given to positions i..e-1,
// after seq[0..i-1], so that region capacity and targets, the durability
// rule and the region-level bound of the rack rule hold. Memoized by the
// prefix; unused regions of the same shape are interchangeable.
func (s *searcher) regionDFS(i int) bool {
	if i == s.e || (!s.racks && !s.durability) {
		return true // capacity and targets alone: pool.total >= e and targets fit
	}
	key := make([]byte, 2*i) // region indices, 16 bits each
	for j := range i {
		key[2*j], key[2*j+1] = byte(s.seq[j]), byte(s.seq[j]>>8)
	}
	if v, ok := s.memo[string(key)]; ok {
		return v
	}
	if s.tick() {
		return false // not memoized: the answer is unknown
	}
	var failed []string
	res := false
	for g := range s.pl.regions {
		if s.regionUsed[g] >= s.regionCap[g] || (s.targets != nil && s.regionUsed[g] >= s.targets[g]) {
			continue
		}
		fresh := s.regionUsed[g] == 0
		if fresh && slices.Contains(failed, s.regionShape[g]) {
			continue
		}
		s.seq[i] = g
		s.regionUsed[g]++
		res = s.regionOK(i) && s.regionDFS(i+1)
		s.regionUsed[g]--
		if res {
			break
		}
		if fresh {
			failed = append(failed, s.regionShape[g])
		}
	}
	if !s.exhausted {
		s.memo[string(key)] = res
	}
	return res
}

// searchBudget bounds the search steps of one tier: about a second. Random
// and adversarial topologies of up to 50 bookies with E <= 8 need well under
// 10^5 steps even to prove that no ensemble exists.
const searchBudget = 1 << 22

// tick counts a step and reports whether the budget is exhausted.
func (s *searcher) tick() bool {
	if s.exhausted {
		return true
	}
	s.steps++
	if s.steps > s.budget {
		s.exhausted = true
	}
	return s.exhausted
}

// regionOK checks, after seq[0..i] is set, every write set containing i at
// region level: durability as in ok, and the regions' rack counts can still
// reach minRacks.
func (s *searcher) regionOK(i int) bool {
	var buf [16]int
	for w := range s.qw {
		start := (i - w + s.e) % s.e
		filled := buf[:0]
		unfilled := 0
		for k := range s.qw {
			if pos := (start + k) % s.e; pos <= i {
				filled = append(filled, s.seq[pos])
			} else {
				unfilled++
			}
		}
		for _, g := range filled {
			s.regionCnt[g]++
		}
		var cbuf [16]int
		counts := cbuf[:0]
		racks := unfilled
		for _, g := range filled {
			if c := s.regionCnt[g]; c > 0 {
				counts = append(counts, c)
				racks += min(c, s.regionRacks[g])
				s.regionCnt[g] = 0
			}
		}
		if s.racks && racks < s.minRacks {
			return false
		}
		// Every qa-subset spanning minRegions regions needs the write set
		// itself to span them.
		if s.durability && (topSum(counts, s.minRegions-1) > s.qa-1 || len(counts)+unfilled < s.minRegions) {
			return false
		}
	}
	return true
}

// order returns the racks that may take position i (capacity and region
// target left), best first: position 0 in the local rack, then the local
// region; fewest members of the same region, then the same rack, among the
// positions sharing a write set with i; least used region relative to its
// target; least used rack; random.
func (s *searcher) order(i int) []int {
	nbRack := make([]int, len(s.pl.racks))
	nbRegion := make([]int, len(s.pl.regions))
	for j := range i {
		if d := (i - j + s.e) % s.e; d < s.qw || s.e-d < s.qw {
			r := s.assign[j]
			nbRack[r]++
			nbRegion[s.pl.racks[r].region]++
		}
	}
	var out []int
	for r := range s.pl.racks {
		g := s.pl.racks[r].region
		if s.rackUsed[r] >= s.capacity[r] || (s.targets != nil && s.regionUsed[g] >= s.targets[g]) {
			continue
		}
		out = append(out, r)
	}
	local := func(r int) int {
		switch {
		case i > 0:
			return 0
		case r == s.localRack:
			return 0
		case s.pl.racks[r].region == s.localRg:
			return 1
		}
		return 2
	}
	regionLoad := func(g int) int {
		if s.targets != nil {
			return s.regionUsed[g] - s.targets[g]
		}
		return s.regionUsed[g]
	}
	slices.SortFunc(out, func(a, b int) int {
		ga, gb := s.pl.racks[a].region, s.pl.racks[b].region
		return cmp.Or(
			cmp.Compare(local(a), local(b)),
			cmp.Compare(nbRegion[ga], nbRegion[gb]),
			cmp.Compare(nbRack[a], nbRack[b]),
			cmp.Compare(regionLoad(ga), regionLoad(gb)),
			cmp.Compare(s.rackUsed[a], s.rackUsed[b]),
			cmp.Compare(s.pl.racks[a].tie, s.pl.racks[b].tie),
		)
	})
	if s.shuffle != nil {
		s.shuffle.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	return out
}

// ok checks, after positions 0..i are assigned, every write set containing
// i: the rack rule can still be met (distinct racks so far plus unassigned
// positions >= minRacks) and the durability rule is not already broken (the
// n-1 fullest regions hold <= qa-1; counts only grow).
func (s *searcher) ok(i int) bool {
	if !s.racks && !s.durability {
		return true
	}
	var members [16]int
	for w := range s.qw {
		start := (i - w + s.e) % s.e
		filled := members[:0]
		unfilled := 0
		for k := range s.qw {
			pos := (start + k) % s.e
			if pos > i {
				unfilled++
				continue
			}
			filled = append(filled, s.assign[pos])
		}
		if s.racks {
			distinct := 0
			for a, r := range filled {
				if !slices.Contains(filled[:a], r) {
					distinct++
				}
			}
			if distinct+unfilled < s.minRacks {
				return false
			}
		}
		if s.durability && !s.durableSoFar(filled) {
			return false
		}
	}
	return true
}

func (s *searcher) durableSoFar(filled []int) bool {
	for _, r := range filled {
		s.regionCnt[s.pl.racks[r].region]++
	}
	var buf [16]int
	counts := buf[:0]
	for _, r := range filled {
		g := s.pl.racks[r].region
		if s.regionCnt[g] > 0 {
			counts = append(counts, s.regionCnt[g])
			s.regionCnt[g] = 0
		}
	}
	return topSum(counts, s.minRegions-1) <= s.qa-1
}

// ensemble turns the rack assignment into bookies, taking each rack's
// (shuffled) bookies in turn.
func (s *searcher) ensemble() []Bookie {
	next := make([]int, len(s.pl.racks))
	out := make([]Bookie, s.e)
	for i, r := range s.assign {
		out[i] = s.pl.racks[r].bookies[next[r]]
		next[r]++
	}
	return out
}
