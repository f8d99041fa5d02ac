package drill

import "testing"

// Each region numbers its ledgers from its own etcd's revisions, so the
// two copies of a topic can hold the same id: a receipt in such a ledger
// has no region, rather than the first one sampled (which made drills
// count region switches of the acknowledgements that did not happen).
func TestLedgerRegionsLeaveAnIdBothRegionsHoldUnknown(t *testing.T) {
	m := ledgerRegions{}
	const topic = "persistent://public/dr/orders"
	m.note(topic, "east", []int64{7, 12})
	m.note(topic, "west", []int64{9, 12})
	m.note(topic, "east", []int64{7, 12, 30}) // sampled again, as the run does
	m.note("persistent://public/dr/other", "west", []int64{7})

	for _, c := range []struct {
		topic string
		id    int64
		want  string
	}{
		{topic, 7, "east"},
		{topic, 9, "west"},
		{topic, 30, "east"},
		{topic, 12, ""},                             // both regions' copies hold 12
		{"public/dr/orders", 7, "east"},             // spelt without the scheme
		{"persistent://public/dr/other", 7, "west"}, // another topic's 7
		{topic, 99, ""},
	} {
		if got := m[ledgerKey{topicKey(c.topic), c.id}]; got != c.want {
			t.Errorf("%s ledger %d: region %q, want %q", c.topic, c.id, got, c.want)
		}
	}
	if got := topicKey("orders"); got != "public/default/orders" {
		t.Errorf("topicKey(orders) = %q", got)
	}
}
