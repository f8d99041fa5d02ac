package replication

import (
	"testing"

	"github.com/meridian-mq/meridian/broker/meta"
)

// TestPositionsApplyFromTheActiveRegionAndAfterAPlannedMove: a region
// applies the active region's subscription positions and, once a planned
// move (CatchUp) made it active, the positions of the region the move took
// the namespace from — its consumers' last acknowledgements, which
// otherwise were dropped and redelivered after every switch-back.
func TestPositionsApplyFromTheActiveRegionAndAfterAPlannedMove(t *testing.T) {
	for _, c := range []struct {
		name        string
		rec         meta.FailoverRecord
		local, from string
		want        bool
	}{
		{"from the active region", meta.FailoverRecord{Active: "west", Previous: "east"}, "east", "west", true},
		{"a standby's positions", meta.FailoverRecord{Active: "west"}, "east", "north", false},
		{"the old active after a planned move here", meta.FailoverRecord{Active: "east", Previous: "west", CatchUp: true}, "east", "west", true},
		{"the old active after an unplanned move here", meta.FailoverRecord{Active: "east", Previous: "west"}, "east", "west", false},
		{"the old active after a planned move elsewhere", meta.FailoverRecord{Active: "north", Previous: "west", CatchUp: true}, "east", "west", false},
		{"a third region after a planned move here", meta.FailoverRecord{Active: "east", Previous: "west", CatchUp: true}, "east", "north", false},
	} {
		if got := positionsApply(c.rec, c.local, c.from); got != c.want {
			t.Errorf("%s: positionsApply(%+v, %s, %s) = %t, want %t", c.name, c.rec, c.local, c.from, got, c.want)
		}
	}
}
