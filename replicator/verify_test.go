package replicator

import (
	"fmt"
	"slices"
	"testing"
)

// A region's log as the verifier's tests write it: the entries of one
// origin it holds, each with its origin id and content (the digest).
type heldLog struct {
	region  string
	entries []EntryDigest
}

// origin returns n entries of an origin whose ids are consecutive
// entries of ledger 10, rolling over to ledger 11 at seq 1500, with
// content digest seq*7919.
func originEntries(n uint64) []EntryDigest {
	out := make([]EntryDigest, 0, n)
	for s := uint64(1); s <= n; s++ {
		id := MessageID{Ledger: 10, Entry: int64(s - 1), Batch: -1}
		if s >= 1500 {
			id = MessageID{Ledger: 11, Entry: int64(s - 1500), Batch: -1}
		}
		out = append(out, EntryDigest{Seq: s, ID: id, Digest: s * 7919})
	}
	return out
}

func without(es []EntryDigest, from, to uint64) []EntryDigest {
	return slices.DeleteFunc(slices.Clone(es), func(e EntryDigest) bool { return e.Seq >= from && e.Seq <= to })
}

// held summarizes a log as a region's scan does (RunBuilder), its local
// positions in ledger 100+region length (any: only detail reads use them).
func (l heldLog) held() Held {
	var b RunBuilder
	for i, e := range l.entries {
		b.Add(e.Seq, e.ID, Position{Ledger: 500, Entry: int64(i)}, e.Digest)
	}
	return Held{Region: l.region, Runs: b.Runs()}
}

// detail answers a detail read from the log.
func (l heldLog) detail(req DetailRequest) []EntryDigest {
	var out []EntryDigest
	for _, e := range l.entries {
		if e.Seq >= req.From && e.Seq <= req.To {
			out = append(out, e)
		}
	}
	return out
}

// verify runs a verification of west against east to its end: the
// summaries, then the detail reads it asks for, then the report; it
// returns the report and the number of detail reads.
func verify(t *testing.T, cfg VerifyConfig, east, west heldLog) (RegionVerify, int) {
	t.Helper()
	v := NewVerify(cfg, east.held())
	v.Add(west.held())
	needs := v.Needs()
	logs := map[string]heldLog{"east": east, "west": west}
	for _, n := range needs {
		v.AddDetail(n.Region, n.Bucket, logs[n.Region].detail(n))
	}
	if again := v.Needs(); len(again) != 0 {
		t.Fatalf("detail reads still needed after they were given: %v", again)
	}
	r := v.Report()
	if len(r.Regions) != 1 {
		t.Fatalf("report of %d regions", len(r.Regions))
	}
	return r.Regions[0], len(needs)
}

func cfg(through uint64) VerifyConfig {
	return VerifyConfig{Origin: "east", Through: through, OriginFirst: 1}
}

func ranges(rs []VerifyRange) string {
	s := ""
	for _, r := range rs {
		s += fmt.Sprintf("[%d-%d %s..%s]", r.From, r.To, r.FirstID, r.LastID)
	}
	return s
}

func TestVerifyCleanReportsZeroAndReadsNoDetail(t *testing.T) {
	es := originEntries(3500)
	r, details := verify(t, cfg(3500), heldLog{"east", es}, heldLog{"west", es})
	if r.Compared != 3500 || r.MissingEntries+r.ExtraEntries+r.MismatchedEntries+r.TrimmedEntries+r.NotReplicatedEntries != 0 {
		t.Fatalf("clean: %+v", r)
	}
	if details != 0 {
		t.Fatalf("a clean comparison made %d detail reads, want none (each region's log read once)", details)
	}
}

func TestVerifyMissingRangeWithOriginIDs(t *testing.T) {
	es := originEntries(3500)
	// West lacks 990..1010 (across a bucket boundary) and 1495..1505
	// (across the origin's rollover).
	r, _ := verify(t, cfg(3500), heldLog{"east", es}, heldLog{"west", without(without(es, 990, 1010), 1495, 1505)})
	if got, want := ranges(r.Missing), "[990-1010 10:989..10:1009][1495-1505 10:1494..11:5]"; got != want {
		t.Fatalf("missing %s, want %s", got, want)
	}
	if r.MissingEntries != 32 || r.Compared != 3500-32 || r.MismatchedEntries+r.ExtraEntries != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestVerifyTailNotYetReceivedIsMissingAndAboveThroughIsNotCompared(t *testing.T) {
	es := originEntries(2000)
	r, _ := verify(t, cfg(2000), heldLog{"east", es}, heldLog{"west", es[:1900]})
	if got, want := ranges(r.Missing), "[1901-2000 11:401..11:500]"; got != want {
		t.Fatalf("missing %s, want %s", got, want)
	}
	// Through 1950: west's entries above it (received after the
	// origin's scan) are neither compared nor extra.
	r, _ = verify(t, cfg(1950), heldLog{"east", es[:1950]}, heldLog{"west", es})
	if r.Compared != 1950 || r.ExtraEntries+r.MissingEntries != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestVerifyMismatchFoundByDigestThenPinnedByDetail(t *testing.T) {
	es := originEntries(3500)
	altered := slices.Clone(es)
	altered[2499].Digest ^= 1 // seq 2500
	r, details := verify(t, cfg(3500), heldLog{"east", es}, heldLog{"west", altered})
	if got, want := ranges(r.Mismatched), "[2500-2500 11:1000..11:1000]"; got != want {
		t.Fatalf("mismatched %s, want %s", got, want)
	}
	if details != 2 {
		t.Fatalf("%d detail reads, want 2 (the differing bucket in each region)", details)
	}
	if r.Compared != 3500 || r.MissingEntries != 0 {
		t.Fatalf("%+v", r)
	}
	// An entry with another origin id at the same sequence number is a
	// mismatch too.
	moved := slices.Clone(es)
	moved[9].ID.Entry = 77
	if r, _ := verify(t, cfg(3500), heldLog{"east", es}, heldLog{"west", moved}); r.MismatchedEntries != 1 {
		t.Fatalf("a different origin id: %+v", r)
	}
}

func TestVerifyMismatchBesideMissingInOneBucket(t *testing.T) {
	es := originEntries(1000)
	w := without(es, 100, 110)
	w[500].Digest++ // seq 512
	r, _ := verify(t, cfg(1000), heldLog{"east", es}, heldLog{"west", w})
	if ranges(r.Missing) != "[100-110 10:99..10:109]" || ranges(r.Mismatched) != "[512-512 10:511..10:511]" {
		t.Fatalf("missing %s mismatched %s", ranges(r.Missing), ranges(r.Mismatched))
	}
}

func TestVerifyTrimmedIsNotMissing(t *testing.T) {
	es := originEntries(3000)
	// West's retention trimmed everything below 1200: trimmed by west.
	r, _ := verify(t, cfg(3000), heldLog{"east", es}, heldLog{"west", es[1199:]})
	if r.MissingEntries != 0 || len(r.Trimmed) != 1 || r.Trimmed[0].Side != "west" || r.Trimmed[0].From != 1 || r.Trimmed[0].To != 1199 {
		t.Fatalf("%+v", r)
	}
	// East's retention trimmed below 800: what west still holds there is
	// trimmed by east, not extra.
	c := cfg(3000)
	c.OriginFirst = 800
	r, _ = verify(t, c, heldLog{"east", es[799:]}, heldLog{"west", es})
	if r.ExtraEntries != 0 || len(r.Trimmed) != 1 || r.Trimmed[0].Side != "east" || r.Trimmed[0].To != 799 || r.TrimmedEntries != 799 {
		t.Fatalf("%+v", r)
	}
}

func TestVerifyBelowStreamBaseIsNotReplicated(t *testing.T) {
	es := originEntries(3000)
	c := cfg(3000)
	c.Bases = map[string]uint64{"west": 1500} // startAt latest at 1500, or a resync
	r, _ := verify(t, c, heldLog{"east", es}, heldLog{"west", es[1500:]})
	if r.MissingEntries+r.TrimmedEntries != 0 || ranges(r.NotReplicated) != "[1-1500 10:0..11:0]" {
		t.Fatalf("%+v %s", r, ranges(r.NotReplicated))
	}
}

func TestVerifyExtraEntriesAreOrphans(t *testing.T) {
	es := originEntries(2000)
	// East lost 1200..1300 (its log truncated and restored, say); west
	// still holds them.
	r, _ := verify(t, cfg(2000), heldLog{"east", without(es, 1200, 1300)}, heldLog{"west", es})
	if ranges(r.Extra) != "[1200-1300 10:1199..10:1299]" || r.ExtraEntries != 101 || r.MissingEntries != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestVerifyRegionWithNothing(t *testing.T) {
	es := originEntries(50)
	r, details := verify(t, cfg(50), heldLog{"east", es}, heldLog{"west", nil})
	if ranges(r.Missing) != "[1-50 10:0..10:49]" || details != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestRunBuilderSplitsAtBucketsAndIDGaps(t *testing.T) {
	var b RunBuilder
	for s := uint64(995); s <= 1005; s++ {
		b.Add(s, MessageID{Ledger: 1, Entry: int64(s)}, Position{}, 1)
	}
	b.Add(1006, MessageID{Ledger: 1, Entry: 2000}, Position{}, 1) // another origin's entries came between
	got := ""
	for _, r := range b.Runs() {
		got += fmt.Sprintf("[%d-%d %d]", r.From, r.To, r.Digest)
	}
	if want := "[995-1000 6][1001-1005 5][1006-1006 1]"; got != want {
		t.Fatalf("runs %s, want %s", got, want)
	}
}
