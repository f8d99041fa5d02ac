package rack

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Replace chooses a bookie for position idx of ensemble, whose member failed.
// ensemble carries the labels of every member as recorded with the ensemble,
// including the failed one even when it has left bookies: its location still
// guides the choice (BookKeeper #2642 lost it and fell back to random
// placement). E is len(ensemble); req.E must be 0 or equal to it, and idx a
// valid position (otherwise Replace panics: a caller bug).
//
// The result is never a member of ensemble, never excluded, and comes from
// bookies under the same usability rules as Place. No other position changes.
// Candidates are ranked:
//  1. keeps every write set containing idx within the rule (for RegionAware
//     without Enforce: durability before racks);
//  2. same rack as the failed bookie, then same region, then elsewhere;
//  3. fewest members of its region, then of its rack, among the positions
//     sharing a write set with idx; RegionAware: least used region;
//  4. random (rng).
//
// Under Enforce, when no candidate keeps every write set containing idx
// within the rule, Replace returns *PlacementError (errors.Is
// ErrNotEnoughBookies) — also when the surviving members already break it
// there, which no replacement can fix. Without Enforce it returns the best
// candidate. The Adherence returned is Check of the whole new ensemble, so it
// also reflects write sets not containing idx.
func Replace(bookies []Bookie, p Policy, req Request, ensemble []Bookie, idx int, rng *rand.Rand) (Bookie, Adherence, error) {
	if rng == nil {
		panic("rack: Replace called with a nil *rand.Rand")
	}
	if idx < 0 || idx >= len(ensemble) {
		panic(fmt.Sprintf("rack: Replace position %d outside an ensemble of %d", idx, len(ensemble)))
	}
	e := len(ensemble)
	if req.E != 0 && req.E != e {
		panic(fmt.Sprintf("rack: Replace with req.E %d for an ensemble of %d", req.E, e))
	}
	if err := p.Validate(e, req.Qw, req.Qa); err != nil {
		return Bookie{}, AdherenceFail, err
	}
	members := make(map[string]bool, e)
	for _, b := range ensemble {
		members[b.ID] = true
	}
	pl := newPool(bookies, p, req.Exclude, members, e, rng)
	pl.readOnly = max(req.ReadOnly, 0)
	fail := func(format string, args ...any) (Bookie, Adherence, error) {
		return Bookie{}, AdherenceFail, &PlacementError{Op: "replace", Usable: pl.total, Reason: fmt.Sprintf(format, args...)}
	}
	if pl.total == 0 {
		return fail("position %d (%s): no usable bookie outside the ensemble: %s",
			idx, ensemble[idx], pl.describeUsable())
	}

	failed := ensemble[idx]
	var starts []int // write sets containing idx
	for w := range req.Qw {
		if s := (idx - w + e) % e; !slices.Contains(starts, s) {
			starts = append(starts, s)
		}
	}
	trial := slices.Clone(ensemble)
	level := func(b Bookie) Adherence {
		trial[idx] = b
		worst := AdherenceStrict
		for _, s := range starts {
			worst = min(worst, windowAdherence(p, writeSet(trial, s, req.Qw), req.Qa))
		}
		return worst
	}
	var nbRack []rackKey // neighbours: positions sharing a write set with idx
	var nbRegion, allRegion []string
	for j, b := range ensemble {
		if j == idx {
			continue
		}
		allRegion = append(allRegion, b.Region)
		if d := (idx - j + e) % e; d < req.Qw || e-d < req.Qw {
			nbRack = append(nbRack, b.rackKey())
			nbRegion = append(nbRegion, b.Region)
		}
	}
	count := func(xs []string, x string) int {
		n := 0
		for _, y := range xs {
			if y == x {
				n++
			}
		}
		return n
	}

	// Bookies of one rack are equivalent for every criterion but the random
	// one, and each rack's bookies are already shuffled: rank racks.
	type cand struct {
		r                  *poolRack
		level              Adherence
		loc                int
		nbRg, nbRk, rgLoad int
	}
	cands := make([]cand, len(pl.racks))
	for i := range pl.racks {
		r := &pl.racks[i]
		c := cand{r: r, level: level(r.bookies[0]), loc: 2}
		switch {
		case r.key == failed.rackKey():
			c.loc = 0
		case r.key.region == failed.Region:
			c.loc = 1
		}
		if p.Kind == RegionAware {
			c.nbRg = count(nbRegion, r.key.region)
			c.rgLoad = count(allRegion, r.key.region)
		}
		for _, k := range nbRack {
			if k == r.key {
				c.nbRk++
			}
		}
		cands[i] = c
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(
			cmp.Compare(b.level, a.level),
			cmp.Compare(a.loc, b.loc),
			cmp.Compare(a.nbRg, b.nbRg),
			cmp.Compare(a.nbRk, b.nbRk),
			cmp.Compare(a.rgLoad, b.rgLoad),
			cmp.Compare(a.r.tie, b.r.tie),
		)
	})
	best := cands[0]
	if p.Enforce && best.level != AdherenceStrict {
		return fail("position %d (%s): no usable bookie keeps every write set containing it within %s: %s; usable: %s",
			idx, failed, ruleString(p, req.Qw, req.Qa), firstBroken(p, trial, starts, idx, best.r.bookies[0], req), pl.describeRacks())
	}
	chosen := best.r.bookies[0]
	trial[idx] = chosen
	return chosen, Check(p, trial, req.Qw, req.Qa), nil
}

// ruleString states the hard rule of p for error messages.
func ruleString(p Policy, qw, qa int) string {
	parts := []string{fmt.Sprintf("the rule (>= %d racks per write set of %d", p.minRacks(qw), qw)}
	if n := p.minRegions(); n >= 2 {
		parts = append(parts, fmt.Sprintf("every %d acks in >= %d regions", qa, n))
	}
	return strings.Join(parts, ", ") + ")"
}

// firstBroken describes the first write set containing idx that breaks the
// rule with b at idx: the locations of the other members.
func firstBroken(p Policy, trial []Bookie, starts []int, idx int, b Bookie, req Request) string {
	trial[idx] = b
	for _, s := range starts {
		ws := writeSet(trial, s, req.Qw)
		if windowAdherence(p, ws, req.Qa) == AdherenceStrict {
			continue
		}
		var locs []string
		for k := range req.Qw {
			if (s+k)%len(trial) != idx {
				locs = append(locs, ws[k].location())
			}
		}
		return fmt.Sprintf("write set at %d has the other members on %s", s, strings.Join(locs, " "))
	}
	return "no write set broken"
}
