package replication

import (
	"maps"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
)

// The RPO budget's decision (rpo.go): a counted region over the budget
// closes the gate with the namespace's action; a region declared failed
// is not counted, and stays out until it is back under the budget.
func TestRPOVerdict(t *testing.T) {
	hold := rpoBudget{maxLag: 2 * time.Second, action: RPOHold}
	refuse := rpoBudget{maxLag: 2 * time.Second, action: RPORefuse}
	bytes := rpoBudget{maxBytes: 1000, action: RPOHold}
	none := func(string) bool { return false }
	downEast := func(r string) bool { return r == "east" }
	st := func(remote string, behind float64, b int64) Status {
		return Status{Remote: remote, SecondsBehind: behind, BacklogBytes: b}
	}
	for _, tc := range []struct {
		name   string
		b      rpoBudget
		sts    []Status
		prev   map[string]string
		down   func(string) bool
		gate   RPOGate
		states map[string]string
	}{
		{"no budget", rpoBudget{}, []Status{st("east", 10, 0)}, nil, none, RPOOpen, map[string]string{}},
		{"under", hold, []Status{st("east", 1.9, 0)}, nil, none, RPOOpen, map[string]string{"east": RPOUnder}},
		{"at the budget is under", hold, []Status{st("east", 2, 0)}, nil, none, RPOOpen, map[string]string{"east": RPOUnder}},
		{"over: hold", hold, []Status{st("east", 2.1, 0)}, nil, none, RPOHold, map[string]string{"east": RPOExceeded}},
		{"over: refuse", refuse, []Status{st("east", 2.1, 0)}, nil, none, RPORefuse, map[string]string{"east": RPOExceeded}},
		{"bytes over", bytes, []Status{st("east", 100, 1001)}, nil, none, RPOHold, map[string]string{"east": RPOExceeded}},
		{"one of two over", hold, []Status{st("east", 0, 0), st("north", 3, 0)}, nil, none, RPOHold, map[string]string{"east": RPOUnder, "north": RPOExceeded}},
		{"declared failed: suspended", hold, []Status{st("east", 30, 0)}, nil, downEast, RPOOpen, map[string]string{"east": RPOSuspended}},
		{"failed one does not hide another", hold, []Status{st("east", 30, 0), st("north", 3, 0)}, nil, downEast, RPOHold, map[string]string{"east": RPOSuspended, "north": RPOExceeded}},
		{"back, not caught up: still suspended", hold, []Status{st("east", 30, 0)}, map[string]string{"east": RPOSuspended}, none, RPOOpen, map[string]string{"east": RPOSuspended}},
		{"back and caught up: counted", hold, []Status{st("east", 0.5, 0)}, map[string]string{"east": RPOSuspended}, none, RPOOpen, map[string]string{"east": RPOUnder}},
	} {
		gate, states := rpoVerdict(tc.b, tc.sts, tc.prev, tc.down)
		if gate != tc.gate || !maps.Equal(states, tc.states) {
			t.Errorf("%s: gate %v, states %v; want %v, %v", tc.name, gate, states, tc.gate, tc.states)
		}
	}
}

// budgetOf reads the policy: hold by default, refuse when asked, none
// without a limit.
func TestRPOBudgetOf(t *testing.T) {
	pol := func(rp *meta.ReplicationPolicy) meta.Policies { return meta.Policies{Replication: rp} }
	if b := budgetOf(pol(nil)); b.set() {
		t.Errorf("no policy: %+v, want no budget", b)
	}
	if b := budgetOf(pol(&meta.ReplicationPolicy{MaxLagAction: meta.LagRefuse})); b.set() {
		t.Errorf("an action alone: %+v, want no budget", b)
	}
	if b := budgetOf(pol(&meta.ReplicationPolicy{MaxLagMs: 1500})); b.maxLag != 1500*time.Millisecond || b.action != RPOHold {
		t.Errorf("1500 ms: %+v, want 1.5 s, hold", b)
	}
	if b := budgetOf(pol(&meta.ReplicationPolicy{MaxLagBytes: 10, MaxLagAction: meta.LagRefuse})); b.maxBytes != 10 || b.action != RPORefuse {
		t.Errorf("10 bytes refuse: %+v", b)
	}
}
