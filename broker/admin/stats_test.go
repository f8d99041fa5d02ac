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

// Both partitioned sums (persistent and non-persistent) add their
// partitions' rates and counters, recompute the average message size
// from the sums, and list a producer, which has one producer per
// partition under one name, once with its rates summed.
func TestPartitionedStatsFoldTrafficAndPublishers(t *testing.T) {
	part := func(rateIn, thrIn float64, in int64) Traffic {
		return Traffic{MsgRateIn: rateIn, MsgThroughputIn: thrIn, MsgRateOut: 1, MsgThroughputOut: 10,
			MsgInCounter: in, BytesInCounter: 100 * in, MsgOutCounter: 2, BytesOutCounter: 20}
	}
	want := Traffic{MsgRateIn: 30, MsgThroughputIn: 6000, AverageMsgSize: 200, MsgRateOut: 2, MsgThroughputOut: 20,
		MsgInCounter: 7, BytesInCounter: 700, MsgOutCounter: 4, BytesOutCounter: 40}
	pub := func(name string, rate, thr float64) PublisherStats {
		return PublisherStats{ProducerName: name, MsgRateIn: rate, MsgThroughputIn: thr}
	}

	p := PartitionedTopicStats{Subscriptions: map[string]SubscriptionStats{}, Replication: map[string]ReplicatorStats{}, Partitions: map[string]TopicStats{}}
	p.add("p0", TopicStats{Traffic: part(10, 1000, 3), Publishers: []PublisherStats{pub("a", 4, 400), pub("b", 6, 600)}}, true)
	p.add("p1", TopicStats{Traffic: part(20, 5000, 4), Publishers: []PublisherStats{pub("a", 20, 5000)}}, true)
	if p.Traffic != want {
		t.Errorf("persistent: %+v, want %+v", p.Traffic, want)
	}
	if len(p.Publishers) != 2 || p.Publishers[0].ProducerName != "a" || p.Publishers[0].MsgRateIn != 24 ||
		p.Publishers[0].AverageMsgSize != 5400.0/24 || p.Publishers[1].MsgRateIn != 6 {
		t.Errorf("persistent publishers: %+v", p.Publishers)
	}
	if len(p.Partitions) != 2 {
		t.Errorf("perPartition: %d partitions listed, want 2", len(p.Partitions))
	}

	np := NonPersistentPartitionedTopicStats{Partitions: map[string]NonPersistentTopicStats{}}
	np.Subscriptions = map[string]NonPersistentSubscriptionStats{}
	np.Replication = map[string]NonPersistentReplicatorStats{}
	np.add("p0", NonPersistentTopicStats{Traffic: part(10, 1000, 3), MsgDropCounter: 1,
		Publishers: []NonPersistentPublisherStats{{PublisherStats: pub("a", 4, 400), MsgDropRate: 1}}}, false)
	np.add("p1", NonPersistentTopicStats{Traffic: part(20, 5000, 4), MsgDropCounter: 2,
		Publishers: []NonPersistentPublisherStats{{PublisherStats: pub("a", 20, 5000), MsgDropRate: 2}}}, false)
	if np.Traffic != want || np.MsgDropCounter != 3 {
		t.Errorf("non-persistent: %+v drops %d, want %+v drops 3", np.Traffic, np.MsgDropCounter, want)
	}
	if len(np.Publishers) != 1 || np.Publishers[0].MsgRateIn != 24 || np.Publishers[0].MsgDropRate != 3 {
		t.Errorf("non-persistent publishers: %+v", np.Publishers)
	}
	if len(np.Partitions) != 0 {
		t.Errorf("perPartition false: %d partitions listed", len(np.Partitions))
	}
}
