package replication

import (
	"slices"
	"testing"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/replicator"
)

// The old active region's entries are orphans whenever it published them:
// one it accepted after the new epoch was committed, before it learned of
// it, arrives as late as its tail (and its client may have sent it again
// to the new region). TestRepublishQuarantinedOrphansOnce met one: east's
// copy of the first message sent after a forced failover was appended to
// west's log beside the client's resent copy, under the quarantine policy.
func TestFindOrphansTakesThePreviousRegionsEntriesWheneverPublished(t *testing.T) {
	rec := meta.FailoverRecord{Active: "west", Previous: "east", SinceMs: 1000}
	entries := []replicator.Entry{
		{Origin: "east", PublishMs: 900},             // the tail before the move
		{Origin: "east", PublishMs: 1170},            // accepted before east learned
		{Origin: "east", PublishMs: 950, Skip: true}, // already kept aside
		{Origin: "south", PublishMs: 1200},           // another region's
	}
	if got := findOrphans(rec, entries); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("orphans %v, want [0 1]", got)
	}
}
