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
	got, waiting := PlanRepairs(m, lost)
	if waiting {
		t.Fatal("closed ledger reported waiting for its writer")
	}
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
	// A ledger that is not closed: its completed fragment is repaired, its
	// last fragment (the writer's) is left, and the plan says it waits.
	for _, st := range []metapb.LedgerState{metapb.LedgerState_OPEN, metapb.LedgerState_IN_RECOVERY} {
		r, waiting := PlanRepairs(twoFragmentLedger(st), lost)
		if len(r) != 1 || r[0].Index != 0 || r[0].Last != 9 || !waiting {
			t.Fatalf("%s ledger: planned %+v waiting %v; want fragment 0 only, waiting", st, r, waiting)
		}
	}
	// Only the last fragment affected: nothing to do yet, waiting.
	m = twoFragmentLedger(metapb.LedgerState_OPEN)
	if r, waiting := PlanRepairs(m, map[string]bool{"b9": true}); r != nil || waiting {
		t.Fatalf("unaffected: %+v %v", r, waiting)
	}
	m.Fragments[0].Ensemble[1] = ref("b4", "r2")
	if r, waiting := PlanRepairs(m, lost); r != nil || !waiting {
		t.Fatalf("only the open fragment affected: %+v %v", r, waiting)
	}
}

// "an open ledger whose writer is alive but idle must not be fenced ... only
// a ledger whose writer is gone is recovered first" (Pulsar #26074).
func TestDecideFencesOnlyWhenTheWriterIsGone(t *testing.T) {
	for _, c := range []struct {
		st   metapb.LedgerState
		w    WriterState
		want Action
	}{
		{metapb.LedgerState_CLOSED, WriterGone, ActRepair},
		{metapb.LedgerState_CLOSED, WriterUnknown, ActRepair},
		{metapb.LedgerState_OPEN, WriterAlive, ActRepairCompleted},
		{metapb.LedgerState_OPEN, WriterUnknown, ActRepairCompleted}, // no lease recorded, or etcd could not say
		{metapb.LedgerState_OPEN, WriterGone, ActRecover},
		{metapb.LedgerState_IN_RECOVERY, WriterUnknown, ActRecover}, // a recovery that may have died; recovery converges
	} {
		if got := Decide(c.st, c.w); got != c.want {
			t.Errorf("Decide(%s, %d) = %d, want %d", c.st, c.w, got, c.want)
		}
	}
}

func TestUnderReplicatedEntries(t *testing.T) {
	// E=3 Qw=2, write set of e: {e%3, (e+1)%3}. b3 is position 1 of
	// fragment 0 (entries 0..9): e%3 in {0, 1}: 0,1,3,4,6,7,9 = 7; and
	// position 0 of fragment 1 (10..19): e%3 in {0, 2}: 11,12,14,15,17,18 = 6.
	m := twoFragmentLedger(metapb.LedgerState_CLOSED)
	lost := map[string]bool{"b3": true}
	if got := UnderReplicatedEntries(m, lost); got != 13 {
		t.Fatalf("under-replicated entries %d, want 13", got)
	}
	// Open: the last fragment's end is unknown and not counted.
	if got := UnderReplicatedEntries(twoFragmentLedger(metapb.LedgerState_OPEN), lost); got != 7 {
		t.Fatalf("open ledger: %d, want 7 (fragment 0 only)", got)
	}
}

// The scrub's re-placement: after racks were relabelled so a fragment's
// members share one rack, FixPlacement replaces as few members as needed to
// meet the rule again.
func TestFixPlacementAfterRelabel(t *testing.T) {
	pol := rack.Policy{Kind: rack.RackAware, MinRacksPerWriteQuorum: 2, Enforce: true}
	ens := []rack.Bookie{{ID: "b1", Region: "east", Rack: "r1"}, {ID: "b2", Region: "east", Rack: "r1"}, {ID: "b3", Region: "east", Rack: "r1"}}
	if rack.Check(pol, ens, 3, 2) != rack.AdherenceFail {
		t.Fatal("test ensemble adheres")
	}
	cands := append(slices.Clone(ens), rack.Bookie{ID: "b4", Region: "east", Rack: "r2"}, rack.Bookie{ID: "b5", Region: "east", Rack: "r2"})
	for seed := range uint64(10) {
		out, pos, err := FixPlacement(cands, pol, 3, 2, ens, nil, rand.New(rand.NewPCG(seed, 2)))
		if err != nil {
			t.Fatal(err)
		}
		if len(pos) != 1 || rack.Check(pol, out, 3, 2) == rack.AdherenceFail {
			t.Fatalf("seed %d: replaced %v -> %v", seed, pos, out)
		}
		if out[pos[0]].Rack != "r2" {
			t.Fatalf("seed %d: replacement %v not on the other rack", seed, out[pos[0]])
		}
	}
	// Only r1 bookies: nothing can fix it.
	if _, _, err := FixPlacement(ens, pol, 3, 2, ens, nil, rand.New(rand.NewPCG(1, 2))); err == nil {
		t.Fatal("fixed with no other rack available")
	}
	// Misplaced reads current labels over the recorded ones.
	m := &metapb.LedgerMetadata{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, State: metapb.LedgerState_CLOSED,
		Placement: &metapb.PlacementPolicy{Kind: "rack-aware", MinRacksPerWriteQuorum: 2, Enforce: true},
		Fragments: []*metapb.Fragment{{Ensemble: []*metapb.BookieRef{ref("b1", "r1"), ref("b2", "r2"), ref("b3", "r3")}}}}
	if got := Misplaced(m, nil); got != nil {
		t.Fatalf("recorded labels: misplaced %v", got)
	}
	relabelled := func(id string) (rack.Bookie, bool) { return rack.Bookie{ID: id, Region: "east", Rack: "r1"}, true }
	if got := Misplaced(m, relabelled); !slices.Equal(got, []int{0}) {
		t.Fatalf("after relabel: misplaced %v", got)
	}
}

// Time to full replication runs from the first loss to the last marker gone.
func TestEpisode(t *testing.T) {
	var e episode
	e.observe(t0, 0)
	if !e.start.IsZero() || e.lastDuration != 0 {
		t.Fatal("episode without a loss")
	}
	e.begin(t0)
	e.observe(t0.Add(time.Second), 3)
	e.observe(t0.Add(2*time.Second), 1)
	e.begin(t0.Add(3 * time.Second)) // a second loss within the episode: same start
	e.observe(t0.Add(5*time.Second), 0)
	if e.lastDuration != 5*time.Second || !e.start.IsZero() {
		t.Fatalf("duration %s start %v", e.lastDuration, e.start)
	}
	// A loss that affected nothing: the episode closes without a figure.
	e.begin(t0.Add(10 * time.Second))
	e.observe(t0.Add(11*time.Second), 0)
	if e.lastDuration != 5*time.Second || !e.start.IsZero() {
		t.Fatalf("empty episode changed the figure: %s", e.lastDuration)
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
