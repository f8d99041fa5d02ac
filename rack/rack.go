package rack

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Bookie is a placement candidate: an identity and its location labels.
// Labels are compared as given; a rack is identified by the pair (Region,
// Rack), so rack "r1" in region "east" and rack "r1" in region "west" are two
// different racks.
type Bookie struct {
	ID     string // unique identity
	Region string // "" means unknown
	Rack   string // "" means unknown (BookKeeper's default rack)
}

// String prints "id region/rack", with "-" for an empty label.
func (b Bookie) String() string {
	return b.ID + " " + b.location()
}

func (b Bookie) location() string {
	return dash(b.Region) + "/" + dash(b.Rack)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// rackKey identifies a rack: the (Region, Rack) pair.
type rackKey struct{ region, rack string }

func (b Bookie) rackKey() rackKey { return rackKey{b.Region, b.Rack} }

// Kind selects the placement rule.
type Kind string

const (
	// RackAware spreads every write set over racks (BookKeeper's
	// RackawareEnsemblePlacementPolicy).
	RackAware Kind = "rack-aware"
	// RegionAware spreads the ensemble evenly over regions and guarantees that
	// every ack quorum spans MinRegionsForDurability regions, with rack
	// spreading inside that (BookKeeper's RegionAwareEnsemblePlacementPolicy).
	RegionAware Kind = "region-aware"
)

// Policy is a placement rule. The zero value is invalid (no Kind); start from
// DefaultPolicy. A Policy is a value: the package never modifies one.
type Policy struct {
	// Kind is RackAware or RegionAware. Required; "" is invalid.
	Kind Kind

	// MinRacksPerWriteQuorum: every write set must span at least
	// min(Qw, MinRacksPerWriteQuorum) distinct racks. DefaultPolicy sets 2:
	// no write quorum inside one rack, so losing a rack loses no entry. 0 or
	// 1 means no rack constraint; higher values need more racks alive.
	// Worked number: Qw=3 with 3 needs three racks in every write set; with
	// two racks alive, placement fails under Enforce. Applies to both kinds;
	// under RegionAware it is rack spreading on top of the region rule (hard
	// under Enforce, a preference without).
	MinRacksPerWriteQuorum int

	// Enforce: return an error rather than place an ensemble that breaks the
	// rule, and never choose a bookie whose Rack label is empty (BookKeeper
	// excludes the default rack under enforce). Without Enforce, place the
	// best ensemble possible and report AdherenceFail (or AdherenceSoft) when
	// it breaks the rule; unlabelled bookies are usable and all bookies with an
	// empty Rack in one region count as one rack. DefaultPolicy sets true: a
	// ledger that silently lands in one rack loses acknowledged data when that
	// rack dies; the price is failing ledger creation while racks are down.
	Enforce bool

	// Regions (RegionAware only): the regions ensembles spread over, no
	// duplicates or empty names. Empty means every non-empty region that has a
	// usable bookie. Bookies outside these regions (and bookies with an empty
	// Region) are never chosen by RegionAware placement. Must be empty for
	// RackAware.
	Regions []string

	// MinRegionsForDurability (RegionAware only): every subset of Qa bookies
	// of every write set spans at least this many regions (N), so an
	// acknowledged entry survives the loss of N-1 regions. 0 or 1 means no
	// region constraint (only even spreading); 2 is the usual value
	// (BookKeeper's default when regions are listed). Needs Qa >= N and
	// Qa > Qw - floor(Qw/N) (see Validate); worked numbers: Qw=3,N=2 → Qa=3;
	// Qw=6,N=2 → Qa>=4; Qw=6,N=3 → Qa>=5. Hard under Enforce, a preference
	// without. Must be 0 for RackAware.
	MinRegionsForDurability int
}

// DefaultPolicy returns rack-aware placement with MinRacksPerWriteQuorum 2 and
// Enforce true: no write set inside one rack, and a creation error rather
// than a ledger that would lose data with one rack.
func DefaultPolicy() Policy {
	return Policy{Kind: RackAware, MinRacksPerWriteQuorum: 2, Enforce: true}
}

// String prints the policy in the form the testdata files use.
func (p Policy) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "kind=%s min-racks=%d", p.Kind, p.MinRacksPerWriteQuorum)
	if p.Enforce {
		sb.WriteString(" enforce")
	}
	if p.Kind == RegionAware || len(p.Regions) > 0 || p.MinRegionsForDurability != 0 {
		fmt.Fprintf(&sb, " regions=(%s) min-regions=%d", strings.Join(p.Regions, ","), p.MinRegionsForDurability)
	}
	return sb.String()
}

// Validate checks the quorums (e >= qw >= qa >= 1) and that the policy can
// hold for them. For RegionAware with N = MinRegionsForDurability >= 2 it
// applies BookKeeper's rule: qa >= N, and qa > qw - floor(qw/N) (otherwise,
// with the write set spread over N regions, qa acks can land in N-1 regions);
// and N <= len(Regions) when Regions is set. Errors wrap ErrInvalidPolicy.
func (p Policy) Validate(e, qw, qa int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPolicy, fmt.Sprintf(format, args...))
	}
	switch p.Kind {
	case RackAware, RegionAware:
	default:
		return bad("unknown kind %q (want %q or %q)", p.Kind, RackAware, RegionAware)
	}
	if p.MinRacksPerWriteQuorum < 0 {
		return bad("min-racks %d is negative", p.MinRacksPerWriteQuorum)
	}
	if p.MinRegionsForDurability < 0 {
		return bad("min-regions %d is negative", p.MinRegionsForDurability)
	}
	if p.Kind == RackAware && (len(p.Regions) > 0 || p.MinRegionsForDurability != 0) {
		return bad("regions and min-regions apply only to %s, not %s", RegionAware, RackAware)
	}
	if qa < 1 {
		return bad("qa %d: an ack quorum needs at least 1 bookie", qa)
	}
	if qw < qa {
		return bad("qw %d < qa %d: cannot wait for more acks than writes", qw, qa)
	}
	if e < qw {
		return bad("e %d < qw %d: a write set cannot be larger than the ensemble", e, qw)
	}
	if p.Kind != RegionAware {
		return nil
	}
	seen := make(map[string]bool, len(p.Regions))
	for _, r := range p.Regions {
		if r == "" {
			return bad("regions contains an empty name")
		}
		if seen[r] {
			return bad("regions lists %q twice", r)
		}
		seen[r] = true
	}
	n := p.MinRegionsForDurability
	if n < 2 {
		return nil
	}
	if len(p.Regions) > 0 && n > len(p.Regions) {
		return bad("min-regions %d > %d regions listed (%s)", n, len(p.Regions), strings.Join(p.Regions, ","))
	}
	if qa < n {
		return bad("qa %d < min-regions %d: %d acks cannot span %d regions", qa, n, qa, n)
	}
	if need := qw - qw/n + 1; qa < need {
		where := "one region"
		if n > 2 {
			where = strconv.Itoa(n-1) + " regions"
		}
		return bad("an ack quorum of %d out of a write quorum of %d can land in %s; need qa >= %d for min-regions %d",
			qa, qw, where, need, n)
	}
	return nil
}

// minRacks is the effective rack requirement per write set: min(qw, M), at
// least 1.
func (p Policy) minRacks(qw int) int {
	m := p.MinRacksPerWriteQuorum
	if m > qw {
		m = qw
	}
	if m < 1 {
		m = 1
	}
	return m
}

// minRegions is the effective durability requirement; <= 1 means none.
func (p Policy) minRegions() int {
	if p.Kind != RegionAware {
		return 0
	}
	return p.MinRegionsForDurability
}

// inRegionSet reports whether region-aware placement may use a bookie in
// region r: a listed region, or any non-empty region when none are listed.
func (p Policy) inRegionSet(r string) bool {
	if r == "" {
		return false
	}
	if len(p.Regions) == 0 {
		return true
	}
	for _, x := range p.Regions {
		if x == r {
			return true
		}
	}
	return false
}

// Request is one placement request.
type Request struct {
	// E, Qw, Qa: ensemble size, write quorum, ack quorum (E >= Qw >= Qa >= 1).
	// Replace takes E from len(ensemble); Request.E must then be 0 or equal.
	E, Qw, Qa int
	// Exclude: bookie IDs never to choose (e.g. known-bad). Read only.
	Exclude map[string]bool
	// LocalRegion: prefer position 0 of a new ensemble in this region when a
	// valid ensemble allows it. Optional.
	LocalRegion string
	// LocalRack: prefer position 0 in rack (LocalRegion, LocalRack). Optional.
	LocalRack string
	// ReadOnly: how many live bookies the caller left out of the
	// candidates because they are registered read-only (full disk,
	// decommissioning). Only for error messages: "0 usable (4 live, 4
	// read-only)" says why, where "0 usable (0 live)" did not.
	ReadOnly int
}

// Adherence says how well an ensemble meets its policy.
type Adherence int

const (
	// AdherenceFail: the rule is broken (RackAware: some write set spans too
	// few racks; RegionAware: some ack quorum spans too few regions, or a
	// member lies outside the region set).
	AdherenceFail Adherence = iota
	// AdherenceSoft: RegionAware only: the durability rule holds but the rack
	// rule does not (only possible without Enforce).
	AdherenceSoft
	// AdherenceStrict: every rule holds.
	AdherenceStrict
)

func (a Adherence) String() string {
	switch a {
	case AdherenceFail:
		return "FAIL"
	case AdherenceSoft:
		return "SOFT"
	case AdherenceStrict:
		return "STRICT"
	}
	return "Adherence(" + strconv.Itoa(int(a)) + ")"
}

// ErrNotEnoughBookies: the usable bookies cannot form (or repair) an ensemble
// under the policy. The caller may retry when more bookies are live; it must
// not lower the policy silently. The concrete error is *PlacementError.
var ErrNotEnoughBookies = errors.New("rack: not enough bookies")

// ErrInvalidPolicy: the policy or quorums are wrong; retrying cannot help.
var ErrInvalidPolicy = errors.New("rack: invalid policy")

// PlacementError says why Place or Replace found no acceptable bookie.
// errors.Is(err, ErrNotEnoughBookies) holds for it.
type PlacementError struct {
	Op     string // "place" or "replace"
	Usable int    // bookies usable for this request after exclusions and label/region filtering
	Reason string // what was missing, e.g. "need 2 racks per write quorum, only 1 rack has usable bookies"
}

func (e *PlacementError) Error() string {
	return ErrNotEnoughBookies.Error() + ": " + e.Op + ": " + e.Reason
}

// Unwrap returns ErrNotEnoughBookies.
func (e *PlacementError) Unwrap() error { return ErrNotEnoughBookies }

func plural(n int, one, many string) string {
	if n == 1 {
		return strconv.Itoa(n) + " " + one
	}
	return strconv.Itoa(n) + " " + many
}
