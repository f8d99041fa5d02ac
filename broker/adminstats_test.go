package broker

import (
	"testing"

	"github.com/meridian-mq/meridian/broker/admin"
	"github.com/meridian-mq/meridian/broker/replication"
)

// Issue 29: a topic's stats carry Pulsar's replication section, one entry
// per remote region from the topic's sender to it, with the rates that
// region's entries arrive at.
func TestReplicatorStats(t *testing.T) {
	got := replicatorStats([]replication.Status{
		{Topic: "persistent://t/n/x", Remote: "east", Connected: true, Target: "10.0.0.2:6651", BacklogEntries: 42, SecondsBehind: 3.7, MsgRateOut: 12.5, MsgThroughputOut: 1250,
			MsgRateIn: 3.5, MsgThroughputIn: 350},
		{Topic: "persistent://t/n/x", Remote: "west", Connected: false, Target: "10.0.0.3:6651", BacklogEntries: 7},
	})
	want := map[string]admin.ReplicatorStats{
		"east": {Connected: true, ReplicationBacklog: 42, ReplicationDelayInSeconds: 3, OutboundConnection: "10.0.0.2:6651", MsgRateOut: 12.5, MsgThroughputOut: 1250,
			MsgRateIn: 3.5, MsgThroughputIn: 350},
		"west": {ReplicationBacklog: 7},
	}
	if len(got) != len(want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	for r, w := range want {
		if got[r] != w {
			t.Errorf("%s: %+v, want %+v", r, got[r], w)
		}
	}
	if m := replicatorStats(nil); m == nil || len(m) != 0 {
		t.Errorf("no senders: %v, want {} (Pulsar's empty replication)", m)
	}
}
