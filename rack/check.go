package rack

import (
	"slices"
	"sort"
)

// Check reports whether an existing ensemble adheres to the policy for write
// quorum qw and ack quorum qa, E = len(ensemble), over all E round-robin write
// sets. It needs no live-bookie list: the ensemble carries its labels. An
// ensemble with a duplicate ID, or quorums that fail Validate, is
// AdherenceFail.
//
// RackAware: AdherenceStrict when every write set spans >= min(qw,
// MinRacksPerWriteQuorum) racks (and, under Enforce, holds no bookie with an
// empty Rack); otherwise AdherenceFail.
//
// RegionAware: AdherenceFail when a member lies outside the region set (see
// Policy.Regions) or some write set has a qa-subset spanning fewer than
// MinRegionsForDurability regions; otherwise AdherenceStrict when the rack
// rule above also holds, AdherenceSoft when it does not. (BookKeeper's
// region-aware check always answered strict, issue #1898.)
func Check(p Policy, ensemble []Bookie, qw, qa int) Adherence {
	if p.Validate(len(ensemble), qw, qa) != nil {
		return AdherenceFail
	}
	seen := make(map[string]bool, len(ensemble))
	for _, b := range ensemble {
		if seen[b.ID] {
			return AdherenceFail
		}
		seen[b.ID] = true
	}
	worst := AdherenceStrict
	for s := range ensemble {
		if a := windowAdherence(p, writeSet(ensemble, s, qw), qa); a < worst {
			worst = a
		}
	}
	return worst
}

// writeSet returns the members of the write set starting at position s:
// positions s, s+1, ..., s+qw-1 mod E. Entry e is written to the write set
// starting at e mod E.
func writeSet(ensemble []Bookie, s, qw int) []Bookie {
	out := make([]Bookie, qw)
	for k := range qw {
		out[k] = ensemble[(s+k)%len(ensemble)]
	}
	return out
}

// windowAdherence grades one write set.
func windowAdherence(p Policy, ws []Bookie, qa int) Adherence {
	if p.Kind == RegionAware {
		for _, b := range ws {
			if !p.inRegionSet(b.Region) {
				return AdherenceFail
			}
		}
		if !durable(ws, qa, p.minRegions()) {
			return AdherenceFail
		}
	}
	if racksOK(p, ws) {
		return AdherenceStrict
	}
	if p.Kind == RegionAware {
		return AdherenceSoft
	}
	return AdherenceFail
}

// racksOK: ws spans >= min(qw, MinRacksPerWriteQuorum) racks and, under
// Enforce, has no bookie with an empty Rack.
func racksOK(p Policy, ws []Bookie) bool {
	racks := make(map[rackKey]bool, len(ws))
	for _, b := range ws {
		if p.Enforce && b.Rack == "" {
			return false
		}
		racks[b.rackKey()] = true
	}
	return len(racks) >= p.minRacks(len(ws))
}

// durable: every qa-subset of ws spans >= n regions. Equivalently the n-1
// regions holding the most members of ws hold at most qa-1 of them (the
// largest qa-subset confined to n-1 regions takes from those).
func durable(ws []Bookie, qa, n int) bool {
	if n <= 1 {
		return true
	}
	counts := make(map[string]int, len(ws))
	for _, b := range ws {
		counts[b.Region]++
	}
	return topSum(mapValues(counts), n-1) <= qa-1
}

func mapValues(m map[string]int) []int {
	out := make([]int, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// topSum returns the sum of the k largest values (all of them if fewer).
// It sorts vals.
func topSum(vals []int, k int) int {
	sort.Sort(sort.Reverse(sort.IntSlice(vals)))
	sum := 0
	for i := 0; i < k && i < len(vals); i++ {
		sum += vals[i]
	}
	return sum
}

// ReadOrder returns the indices 0..len(writeSet)-1 in the order a reader at
// (localRegion, localRack) should try them: first bookies in the reader's rack
// (same region and same rack, localRack non-empty), then the rest of the
// reader's region, then other regions, then the bookies in down (by ID).
// The order is stable within each class. The caller owns the result.
func ReadOrder(writeSet []Bookie, localRegion, localRack string, down map[string]bool) []int {
	class := func(b Bookie) int {
		switch {
		case down[b.ID]:
			return 3
		case b.Region == localRegion && localRack != "" && b.Rack == localRack:
			return 0
		case b.Region == localRegion:
			return 1
		}
		return 2
	}
	out := make([]int, len(writeSet))
	for i := range out {
		out[i] = i
	}
	slices.SortStableFunc(out, func(a, b int) int {
		return class(writeSet[a]) - class(writeSet[b])
	})
	return out
}
