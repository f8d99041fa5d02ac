package broker_test

import (
	"testing"

	"github.com/meridian-mq/meridian/broker"
)

// Issue 28: an ensemble change that breaks an enforced rack rule (no bookie
// kept it) is counted where the broker's metrics are.
func TestBrokerExportsReplacementsBreakingPlacement(t *testing.T) {
	const name = "meridian_broker_ensemble_replacements_breaking_placement_total"
	if !broker.MetricNamesForTest()[name] {
		t.Fatalf("the broker's registry has no %s", name)
	}
}
