package replication

import (
	"testing"
)

// TestPlanRepublishOrdersOncePerOrigin: the quarantined orphans of each
// topic come in the order they must be appended (origin, then origin
// sequence number) whatever the order of their records; one listed twice
// (kept aside twice) comes once, naming both records, and takes the new
// id either record holds; orphans replicated late (no quarantine topic)
// and other topics (with a topic filter) are left out.
func TestPlanRepublishOrdersOncePerOrigin(t *testing.T) {
	const ta, tb = "persistent://p/ns/a", "persistent://p/ns/b"
	batches := []storedBatch{
		{key: "k3", ob: OrphanBatch{Topic: ta, Origin: "east", Quarantine: ta + "-orphans", Orphans: []Orphan{{OriginID: "5:0", OriginSeq: 30, QuarantineID: "9:2"}, {OriginID: "5:1", OriginSeq: 31, QuarantineID: "9:3"}}}},
		{key: "k1", ob: OrphanBatch{Topic: ta, Origin: "east", Quarantine: ta + "-orphans", Orphans: []Orphan{{OriginID: "4:7", OriginSeq: 10, QuarantineID: "9:0"}}}},
		// The same orphan kept aside again, its first record marked.
		{key: "k4", ob: OrphanBatch{Topic: ta, Origin: "east", Quarantine: ta + "-orphans", Orphans: []Orphan{{OriginID: "5:1", OriginSeq: 31, QuarantineID: "9:4", RepublishedID: "12:0"}}}},
		{key: "k2", ob: OrphanBatch{Topic: ta, Origin: "central", Quarantine: ta + "-orphans", Orphans: []Orphan{{OriginID: "2:2", OriginSeq: 99, QuarantineID: "9:1"}}}},
		{key: "k5", ob: OrphanBatch{Topic: ta, Origin: "east", Orphans: []Orphan{{OriginID: "6:0", OriginSeq: 40}}}}, // replicated late
		{key: "k6", ob: OrphanBatch{Topic: tb, Origin: "east", Quarantine: tb + "-orphans", Orphans: []Orphan{{OriginID: "7:0", OriginSeq: 3, QuarantineID: "8:0"}}}},
	}
	plan := planRepublish(batches, "")
	if len(plan) != 2 || len(plan[tb]) != 1 {
		t.Fatalf("plan by topic: %v", plan)
	}
	var got []string
	for _, it := range plan[ta] {
		got = append(got, it.Origin+"/"+it.Orphan.OriginID)
	}
	want := []string{"central/2:2", "east/4:7", "east/5:0", "east/5:1"}
	if len(got) != len(want) {
		t.Fatalf("plan for %s: %v, want %v", ta, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("plan for %s: %v, want %v", ta, got, want)
		}
	}
	twice := plan[ta][3]
	if len(twice.keys) != 2 || twice.keys[0] != "k3" || twice.keys[1] != "k4" || twice.Orphan.RepublishedID != "12:0" {
		t.Fatalf("the orphan listed twice: %+v", twice)
	}
	if only := planRepublish(batches, tb); len(only) != 1 || len(only[tb]) != 1 {
		t.Fatalf("plan for %s only: %v", tb, only)
	}
}

// TestMarkRepublishedLeavesMarkedAlone: the new ids go on the orphans of
// the record not marked yet; a record with nothing new is unchanged (no
// write).
func TestMarkRepublishedLeavesMarkedAlone(t *testing.T) {
	ob := OrphanBatch{Origin: "east", Orphans: []Orphan{{OriginSeq: 1}, {OriginSeq: 2, RepublishedID: "3:3", RepublishedMs: 5}, {OriginSeq: 4}}}
	if !markRepublished(&ob, map[string]string{"east/1": "9:0", "east/2": "9:1", "west/4": "9:2"}, 77) {
		t.Fatal("nothing marked")
	}
	if o := ob.Orphans; o[0].RepublishedID != "9:0" || o[0].RepublishedMs != 77 || o[1].RepublishedID != "3:3" || o[1].RepublishedMs != 5 || o[2].RepublishedID != "" {
		t.Fatalf("marked %+v", o)
	}
	if markRepublished(&ob, map[string]string{"east/2": "9:1"}, 78) {
		t.Fatal("a marked orphan was marked again")
	}
}

// TestRepublishSeqSpacesBatches: a republished orphan's sequence ids
// (seq .. seq+n-1 for a batch of n < 2^20) stay below the next origin
// sequence number's; 0 and numbers past the range are refused.
func TestRepublishSeqSpacesBatches(t *testing.T) {
	a, err := RepublishSeq(7)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RepublishSeq(8)
	if err != nil {
		t.Fatal(err)
	}
	if a+(1<<20)-1 >= b {
		t.Fatalf("RepublishSeq(7) = %d, RepublishSeq(8) = %d: a batch of 2^20-1 messages overlaps", a, b)
	}
	for _, bad := range []uint64{0, 1 << 43} {
		if _, err := RepublishSeq(bad); err == nil {
			t.Fatalf("RepublishSeq(%d) accepted", bad)
		}
	}
}
