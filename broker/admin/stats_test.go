package admin

import "testing"

// A partitioned topic's replication section folds its partitions' per
// region: backlogs add up, the delay is the largest, connected only if
// every partition's sender is.
func TestPartitionedStatsFoldReplication(t *testing.T) {
	p := PartitionedTopicStats{Subscriptions: map[string]SubscriptionStats{}, Replication: map[string]ReplicatorStats{}, Partitions: map[string]TopicStats{}}
	p.add("p0", TopicStats{Replication: map[string]ReplicatorStats{"east": {Connected: true, ReplicationBacklog: 5, ReplicationDelayInSeconds: 2, OutboundConnection: "e:1"}}}, false)
	p.add("p1", TopicStats{Replication: map[string]ReplicatorStats{"east": {Connected: false, ReplicationBacklog: 7, ReplicationDelayInSeconds: 9}}}, false)
	p.add("p2", TopicStats{Replication: map[string]ReplicatorStats{"east": {Connected: true, ReplicationBacklog: 1, ReplicationDelayInSeconds: 4}}}, false)
	want := ReplicatorStats{Connected: false, ReplicationBacklog: 13, ReplicationDelayInSeconds: 9, OutboundConnection: "e:1"}
	if got := p.Replication["east"]; got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
}
