package autorecovery

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func presentSet(ids ...string) func(string) bool {
	return func(id string) bool { return slices.Contains(ids, id) }
}

// "a bookie that is gone ... for longer than lostBookieRecoveryDelay is
// declared lost"; a restart within the delay is not.
func TestDetectorSingleLossWaitsForDelay(t *testing.T) {
	d := NewLossDetector(60 * time.Second)
	known := []string{"b1", "b2", "b3"}
	if lost, newly := d.Observe(t0, known, presentSet("b1", "b2", "b3")); lost != nil || newly != nil {
		t.Fatalf("all present: lost %v newly %v", lost, newly)
	}
	all := presentSet("b1", "b2")
	if lost, _ := d.Observe(t0.Add(time.Second), known, all); lost != nil {
		t.Fatalf("lost at once: %v", lost)
	}
	if lost, _ := d.Observe(t0.Add(60*time.Second), known, all); lost != nil {
		t.Fatalf("lost at 59s of absence: %v", lost)
	}
	lost, newly := d.Observe(t0.Add(61*time.Second), known, all)
	if !slices.Equal(lost, []string{"b3"}) || !slices.Equal(newly, []string{"b3"}) {
		t.Fatalf("at 60s of absence: lost %v newly %v", lost, newly)
	}
	if _, newly := d.Observe(t0.Add(62*time.Second), known, all); newly != nil {
		t.Fatalf("reported newly lost twice: %v", newly)
	}
	// It comes back: no longer lost.
	if lost, _ := d.Observe(t0.Add(63*time.Second), known, presentSet(known...)); lost != nil {
		t.Fatalf("back but lost: %v", lost)
	}
}

func TestDetectorRestartWithinDelayResetsClock(t *testing.T) {
	d := NewLossDetector(10 * time.Second)
	known := []string{"b1", "b2"}
	d.Observe(t0, known, presentSet("b1"))                        // b2 gone
	d.Observe(t0.Add(8*time.Second), known, presentSet(known...)) // back within the delay
	d.Observe(t0.Add(9*time.Second), known, presentSet("b1"))     // gone again: clock restarts
	if lost, _ := d.Observe(t0.Add(18*time.Second), known, presentSet("b1")); lost != nil {
		t.Fatalf("clock not reset by the return: %v", lost)
	}
	if lost, _ := d.Observe(t0.Add(19*time.Second), known, presentSet("b1")); !slices.Equal(lost, []string{"b2"}) {
		t.Fatalf("lost %v", lost)
	}
}

// "when several bookies are lost at once (a rack), the audit starts at once".
func TestDetectorSeveralAbsentAreLostAtOnce(t *testing.T) {
	d := NewLossDetector(time.Hour)
	known := []string{"b1", "b2", "b3", "b4"}
	if lost, _ := d.Observe(t0, known, presentSet("b1", "b2", "b3")); lost != nil {
		t.Fatalf("one absent: %v", lost)
	}
	// A second one goes within the first one's delay: both lost now.
	lost, newly := d.Observe(t0.Add(2*time.Second), known, presentSet("b1", "b2"))
	if !slices.Equal(lost, []string{"b3", "b4"}) || !slices.Equal(newly, []string{"b3", "b4"}) {
		t.Fatalf("lost %v newly %v", lost, newly)
	}
	// Already-lost bookies do not make a later single absence immediate.
	if _, newly := d.Observe(t0.Add(3*time.Second), known, presentSet("b1")); newly != nil {
		t.Fatalf("single new absence with two already lost was immediate: %v", newly)
	}
}

func TestDetectorForgetsUnknownBookies(t *testing.T) {
	d := NewLossDetector(0)
	if lost, _ := d.Observe(t0, []string{"b1", "b2"}, presentSet("b1")); !slices.Equal(lost, []string{"b2"}) {
		t.Fatalf("delay 0: lost %v", lost)
	}
	if lost, _ := d.Observe(t0.Add(time.Second), []string{"b1"}, presentSet("b1")); lost != nil {
		t.Fatalf("a bookie no ledger uses any more stays lost: %v", lost)
	}
}

func TestTokenBucket(t *testing.T) {
	b := NewTokenBucket(1000, 500) // 1000 B/s, burst 500
	if d := b.Take(t0, 500); d != 0 {
		t.Fatalf("burst: wait %s", d)
	}
	if d := b.Take(t0, 250); d != 250*time.Millisecond {
		t.Fatalf("over burst by 250 B at 1000 B/s: wait %s", d)
	}
	// One second later 1000 B accrued, capped at the burst: 500 - 250 debt.
	if d := b.Take(t0.Add(time.Second), 250); d != 0 {
		t.Fatalf("after refill: wait %s", d)
	}
	if d := b.Take(t0.Add(time.Second), 1250); d != time.Second {
		t.Fatalf("large take: wait %s", d)
	}
	if d := NewTokenBucket(0, 0).Take(t0, 1<<30); d != 0 {
		t.Fatalf("unlimited: wait %s", d)
	}
}

func ref(id, rk string) *metapb.BookieRef {
	return &metapb.BookieRef{Id: id, Addr: id + ":1", Region: "east", Rack: rk}
}

// A closed ledger of two fragments; b3 is lost and was in both.
func twoFragmentLedger(state metapb.LedgerState) *metapb.LedgerMetadata {
	return &metapb.LedgerMetadata{
		LedgerId: 7, EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, State: state, LastEntryId: 19,
		Placement: &metapb.PlacementPolicy{Kind: "rack-aware", MinRacksPerWriteQuorum: 2, Enforce: true},
		Fragments: []*metapb.Fragment{
			{FirstEntryId: 0, Ensemble: []*metapb.BookieRef{ref("b1", "r1"), ref("b3", "r2"), ref("b5", "r3")}},
			{FirstEntryId: 10, Ensemble: []*metapb.BookieRef{ref("b3", "r2"), ref("b1", "r1"), ref("b5", "r3")}},
		},
	}
}

func TestPlanRepairs(t *testing.T) {
	lost := map[string]bool{"b3": true}
	m := twoFragmentLedger(metapb.LedgerState_CLOSED)
	got := PlanRepairs(m, lost)
	want := []FragmentRepair{{Index: 0, Positions: []int{1}, First: 0, Last: 9}, {Index: 1, Positions: []int{0}, First: 10, Last: 19}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i].Index != want[i].Index || !slices.Equal(got[i].Positions, want[i].Positions) || got[i].First != want[i].First || got[i].Last != want[i].Last {
			t.Fatalf("repair %d: got %+v want %+v", i, got[i], want[i])
		}
	}
	frags, found := Affected(m, lost)
	if !slices.Equal(frags, []int{0, 1}) || !slices.Equal(found, []string{"b3"}) {
		t.Fatalf("affected %v %v", frags, found)
	}
	// Open ledgers are left to their writer: never planned, never fenced.
	for _, st := range []metapb.LedgerState{metapb.LedgerState_OPEN, metapb.LedgerState_IN_RECOVERY} {
		if r := PlanRepairs(twoFragmentLedger(st), lost); r != nil {
			t.Fatalf("%s ledger planned: %+v", st, r)
		}
	}
}

// The copy moves exactly the entries the lost position stored (its write
// sets), from the other members of each write set.
func TestCopiesOfFollowsWriteSets(t *testing.T) {
	// E=3, Qw=2: entry e on positions e%3, (e+1)%3. Position 1 lost.
	var got []int64
	for e := int64(0); e < 6; e++ {
		c, ok := CopiesOf(e, 3, 2, []int{1})
		if !ok {
			continue
		}
		got = append(got, e)
		if !slices.Equal(c.Targets, []int{1}) || len(c.Sources) != 1 || c.Sources[0] == 1 {
			t.Fatalf("entry %d: %+v", e, c)
		}
	}
	if !slices.Equal(got, []int64{0, 1, 3, 4}) {
		t.Fatalf("entries on position 1: %v", got)
	}
	// Both members of a write set lost: no source (the copy must fail).
	if c, _ := CopiesOf(0, 3, 2, []int{0, 1}); len(c.Sources) != 0 || len(c.Targets) != 2 {
		t.Fatalf("%+v", c)
	}
}

// The replacement keeps the rack rule and prefers the lost bookie's rack
// (its labels come from the metadata, BookKeeper #2642).
func TestChooseReplacementsKeepsRackRule(t *testing.T) {
	cands := []rack.Bookie{
		{ID: "b1", Region: "east", Rack: "r1"}, {ID: "b2", Region: "east", Rack: "r1"},
		{ID: "b4", Region: "east", Rack: "r2"}, {ID: "b5", Region: "east", Rack: "r3"},
	}
	ens := []rack.Bookie{{ID: "b1", Region: "east", Rack: "r1"}, {ID: "b3", Region: "east", Rack: "r2"}, {ID: "b5", Region: "east", Rack: "r3"}}
	pol := rack.Policy{Kind: rack.RackAware, MinRacksPerWriteQuorum: 2, Enforce: true}
	for seed := range uint64(20) {
		out, err := ChooseReplacements(cands, pol, 3, 2, ens, []int{1}, map[string]bool{"b3": true}, rand.New(rand.NewPCG(seed, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if out[1].ID != "b4" {
			t.Fatalf("seed %d: replaced b3 (r2) by %v, want b4 (the other r2 bookie)", seed, out[1])
		}
		if ens[1].ID != "b3" {
			t.Fatal("input ensemble modified")
		}
	}
	// No candidate keeps the rule: an error, not a rule-breaking choice.
	if _, err := ChooseReplacements(cands[:2], pol, 2, 2, ens, []int{1}, map[string]bool{"b3": true}, rand.New(rand.NewPCG(1, 1))); err == nil {
		t.Fatal("replacement chosen although only r1 bookies are left")
	}
}

func TestMarkerMerge(t *testing.T) {
	a := Marker{LedgerID: 1, Lost: []string{"b2"}, Fragments: []int{0}}
	m, changed := a.merge(Marker{Lost: []string{"b1", "b2"}, Fragments: []int{2, 0}})
	if !changed || !slices.Equal(m.Lost, []string{"b1", "b2"}) || !slices.Equal(m.Fragments, []int{0, 2}) {
		t.Fatalf("%+v %v", m, changed)
	}
	if _, changed := m.merge(a); changed {
		t.Fatal("merging a subset changed the marker")
	}
	d, err := decodeMarker(m.encode())
	if err != nil || d.LedgerID != 1 || !slices.Equal(d.Lost, m.Lost) {
		t.Fatalf("round trip: %+v %v", d, err)
	}
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err == nil {
		t.Fatal("config without Store validated")
	}
	if d := DefaultConfig(); d.LostBookieDelay != 60*time.Second || d.ThrottleBytesPerSec != 50<<20 {
		t.Fatalf("defaults drifted from the documented ones: %+v", d)
	}
}
