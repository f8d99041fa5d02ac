package admin

// The stats answers, in Pulsar's JSON (the field names of pulsaradmin's
// utils.TopicStats, PersistentTopicInternalStats, ManagedLedgerInfo and
// PartitionedTopicStats). Rates are per second over the broker's last
// stats interval (internal/ratemeter); counters count since the topic
// was loaded on this broker, as Pulsar's reset on an unload.

// Traffic is what every topic's stats and a partitioned topic's sum
// share: the rates and counters in and out. MsgInCounter counts the
// messages persisted (a non-persistent topic's: received) since the topic
// was loaded on this broker.
type Traffic struct {
	MsgRateIn        float64 `json:"msgRateIn"`
	MsgRateOut       float64 `json:"msgRateOut"`
	MsgThroughputIn  float64 `json:"msgThroughputIn"`
	MsgThroughputOut float64 `json:"msgThroughputOut"`
	AverageMsgSize   float64 `json:"averageMsgSize"`
	MsgInCounter     int64   `json:"msgInCounter"`
	BytesInCounter   int64   `json:"bytesInCounter"`
	MsgOutCounter    int64   `json:"msgOutCounter"`
	BytesOutCounter  int64   `json:"bytesOutCounter"`
}

// add sums o into t; the average message size is the sum's.
func (t *Traffic) add(o Traffic) {
	t.MsgRateIn += o.MsgRateIn
	t.MsgRateOut += o.MsgRateOut
	t.MsgThroughputIn += o.MsgThroughputIn
	t.MsgThroughputOut += o.MsgThroughputOut
	t.MsgInCounter += o.MsgInCounter
	t.BytesInCounter += o.BytesInCounter
	t.MsgOutCounter += o.MsgOutCounter
	t.BytesOutCounter += o.BytesOutCounter
	if t.MsgRateIn > 0 {
		t.AverageMsgSize = t.MsgThroughputIn / t.MsgRateIn
	}
}

// mergeByName folds x into the element of list that has its name, or
// appends it: a producer of a partitioned topic has one producer per
// partition, all with its name, listed once.
func mergeByName[T any](list []T, x T, name func(*T) string, fold func(into *T, x T)) []T {
	for i := range list {
		if name(&list[i]) == name(&x) {
			fold(&list[i], x)
			return list
		}
	}
	return append(list, x)
}

// addPublisher sums x's rates into p.
func (p *PublisherStats) addPublisher(x PublisherStats) {
	p.MsgRateIn += x.MsgRateIn
	p.MsgThroughputIn += x.MsgThroughputIn
	if p.MsgRateIn > 0 {
		p.AverageMsgSize = p.MsgThroughputIn / p.MsgRateIn
	}
}

func publisherName(p *PublisherStats) string { return p.ProducerName }

// TopicStats is GET .../stats.
type TopicStats struct {
	Traffic
	StorageSize int64 `json:"storageSize"`
	// BacklogSize estimates the bytes of the largest subscription backlog.
	BacklogSize          int64                        `json:"backlogSize"`
	Entries              int64                        `json:"entries"`
	Publishers           []PublisherStats             `json:"publishers"`
	Subscriptions        map[string]SubscriptionStats `json:"subscriptions"`
	Replication          map[string]ReplicatorStats   `json:"replication"`
	DeduplicationStatus  string                       `json:"deduplicationStatus"`
	LastPublishTimestamp int64                        `json:"lastPublishTimestamp,omitempty"`
}

// ReplicatorStats is TopicStats.replication[region]: the topic's sender
// to that region — its backlog, connection, delay and the rate it sends
// at (msgRateOut, msgThroughputOut) — and the rate this region persists
// that region's entries at (msgRateIn, msgThroughputIn; entries, a batch
// counting once, where Pulsar counts messages). msgRateExpired is not
// metered: 0 (see docs/admin.md).
type ReplicatorStats struct {
	Connected        bool    `json:"connected"`
	MsgRateIn        float64 `json:"msgRateIn"`
	MsgRateOut       float64 `json:"msgRateOut"`
	MsgThroughputIn  float64 `json:"msgThroughputIn"`
	MsgThroughputOut float64 `json:"msgThroughputOut"`
	MsgRateExpired   float64 `json:"msgRateExpired"`
	// ReplicationBacklog counts the entries not yet acknowledged by the
	// remote region.
	ReplicationBacklog        int64  `json:"replicationBacklog"`
	ReplicationDelayInSeconds int64  `json:"replicationDelayInSeconds"`
	InboundConnection         string `json:"inboundConnection"`
	InboundConnectedSince     string `json:"inboundConnectedSince"`
	OutboundConnection        string `json:"outboundConnection"`
	OutboundConnectedSince    string `json:"outboundConnectedSince"`
}

// PublisherStats is one producer of TopicStats.
type PublisherStats struct {
	AccessMode      string  `json:"accessMode"` // Shared or Exclusive
	MsgRateIn       float64 `json:"msgRateIn"`
	MsgThroughputIn float64 `json:"msgThroughputIn"`
	AverageMsgSize  float64 `json:"averageMsgSize"`
	ProducerName    string  `json:"producerName"`
	ProducerID      uint64  `json:"producerId"`
	Address         string  `json:"address"`
	ConnectedSince  string  `json:"connectedSince"`
	ClientVersion   string  `json:"clientVersion"`
}

// SubscriptionStats is one subscription of TopicStats.
type SubscriptionStats struct {
	Type             string  `json:"type"`
	MsgRateOut       float64 `json:"msgRateOut"`
	MsgThroughputOut float64 `json:"msgThroughputOut"`
	MsgOutCounter    int64   `json:"msgOutCounter"`
	BytesOutCounter  int64   `json:"bytesOutCounter"`
	// MsgBacklog counts entries (a batch is one), as Meridian's cursors do.
	MsgBacklog          int64 `json:"msgBacklog"`
	MsgBacklogNoDelayed int64 `json:"msgBacklogNoDelayed"`
	// MsgDelayed: entries held by the delayed-delivery index (Shared and
	// Key_Shared) until their deliver_at_time; DelayedIndexBytes: the
	// index's memory, about (its persisted buckets not counted).
	MsgDelayed        int64 `json:"msgDelayed"`
	DelayedIndexBytes int64 `json:"delayedMessageIndexSizeInBytes"`
	// DelayedIndexBuckets (Meridian's): the index's sealed buckets now;
	// DelayedIndexMerges: the merges of buckets since the subscription
	// was loaded (docs/broker.md, "Delayed delivery").
	DelayedIndexBuckets                int             `json:"delayedIndexBuckets"`
	DelayedIndexMerges                 int64           `json:"delayedIndexBucketMerges"`
	BacklogSize                        int64           `json:"backlogSize"`
	UnackedMessages                    int             `json:"unackedMessages"`
	IsDurable                          bool            `json:"isDurable"`
	IsReplicated                       bool            `json:"isReplicated"`
	ActiveConsumerName                 string          `json:"activeConsumerName,omitempty"`
	NonContiguousDeletedMessagesRanges int             `json:"nonContiguousDeletedMessagesRanges"`
	MarkDelete                         string          `json:"markDeletePosition"`
	ReadPosition                       string          `json:"readPosition"`
	Consumers                          []ConsumerStats `json:"consumers"`
}

// ConsumerStats is one consumer of SubscriptionStats.
type ConsumerStats struct {
	ConsumerName     string  `json:"consumerName"`
	MsgRateOut       float64 `json:"msgRateOut"`
	MsgThroughputOut float64 `json:"msgThroughputOut"`
	MsgOutCounter    int64   `json:"msgOutCounter"`
	BytesOutCounter  int64   `json:"bytesOutCounter"`
	AvailablePermit  int     `json:"availablePermits"`
	UnackedMessages  int     `json:"unackedMessages"`
	Address          string  `json:"address"`
	ConnectedSince   string  `json:"connectedSince"`
	ClientVersion    string  `json:"clientVersion"`
}

// InternalStats is GET .../internalStats: the topic's storage in this
// region, oldest ledger first, and its durable cursors.
type InternalStats struct {
	EntriesAddedCounter        int64                  `json:"entriesAddedCounter"`
	NumberOfEntries            int64                  `json:"numberOfEntries"`
	TotalSize                  int64                  `json:"totalSize"`
	CurrentLedgerEntries       int64                  `json:"currentLedgerEntries"`
	CurrentLedgerSize          int64                  `json:"currentLedgerSize"`
	LastLedgerCreatedTimestamp string                 `json:"lastLedgerCreatedTimestamp"`
	LastConfirmedEntry         string                 `json:"lastConfirmedEntry"`
	State                      string                 `json:"state"`
	Ledgers                    []LedgerStatsItem      `json:"ledgers"`
	Cursors                    map[string]CursorStats `json:"cursors"`
}

// LedgerStatsItem is one ledger of InternalStats.
type LedgerStatsItem struct {
	LedgerID  int64 `json:"ledgerId"`
	Entries   int64 `json:"entries"`
	Size      int64 `json:"size"`
	Timestamp int64 `json:"timestamp"` // when it was closed (ms); 0 while open
	Offloaded bool  `json:"offloaded"`
}

// CursorStats is one cursor of InternalStats. Positions print as
// "ledger:entry"; IndividuallyDeletedMessages as Pulsar's range set,
// "[(3:1..3:4], (3:6..3:7]]" (each range open below, closed above).
type CursorStats struct {
	MarkDeletePosition                       string           `json:"markDeletePosition"`
	ReadPosition                             string           `json:"readPosition"`
	WaitingReadOp                            bool             `json:"waitingReadOp"`
	PendingReadOps                           int              `json:"pendingReadOps"`
	MessagesConsumedCounter                  int64            `json:"messagesConsumedCounter"`
	CursorLedger                             int64            `json:"cursorLedger"` // -1: cursors live in etcd, not in ledgers
	CursorLedgerLastEntry                    int64            `json:"cursorLedgerLastEntry"`
	IndividuallyDeletedMessages              string           `json:"individuallyDeletedMessages"`
	State                                    string           `json:"state"`
	NumberOfEntriesSinceFirstNotAckedMessage int64            `json:"numberOfEntriesSinceFirstNotAckedMessage"`
	TotalNonContiguousDeletedMessagesRange   int              `json:"totalNonContiguousDeletedMessagesRange"`
	Properties                               map[string]int64 `json:"properties"`
}

// ManagedLedgerInfo is GET .../internal-info: the managed ledger's stored
// records.
type ManagedLedgerInfo struct {
	Version          int                     `json:"version"`
	CreationDate     string                  `json:"creationDate"`
	ModificationDate string                  `json:"modificationData"` // sic: Pulsar's name
	Ledgers          []ManagedLedgerInfoItem `json:"ledgers"`
	Cursors          map[string]CursorInfo   `json:"cursors"`
}

// ManagedLedgerInfoItem is one ledger of ManagedLedgerInfo.
type ManagedLedgerInfoItem struct {
	LedgerID  int64 `json:"ledgerId"`
	Entries   int64 `json:"entries"`
	Size      int64 `json:"size"`
	Timestamp int64 `json:"timestamp"`
	Offloaded bool  `json:"isOffloaded"`
}

// CursorInfo is one cursor of ManagedLedgerInfo.
type CursorInfo struct {
	Version                   int                `json:"version"`
	CursorsLedgerID           int64              `json:"cursorsLedgerId"`
	MarkDelete                PositionInfo       `json:"markDelete"`
	IndividualDeletedMessages []MessageRangeInfo `json:"individualDeletedMessages"`
	Properties                map[string]int64   `json:"properties"`
}

// PositionInfo is a position of ManagedLedgerInfo.
type PositionInfo struct {
	LedgerID int64 `json:"ledgerId"`
	EntryID  int64 `json:"entryId"`
}

// MessageRangeInfo is an individually acknowledged range (from exclusive,
// to inclusive, as Pulsar's).
type MessageRangeInfo struct {
	From      PositionInfo `json:"from"`
	To        PositionInfo `json:"to"`
	Offloaded bool         `json:"offloaded"`
}

// PartitionedTopicStats is GET .../partitioned-stats: the partitions'
// stats summed (subscriptions and publishers merged), and each
// partition's with perPartition=true.
type PartitionedTopicStats struct {
	Traffic
	StorageSize   int64                        `json:"storageSize"`
	BacklogSize   int64                        `json:"backlogSize"`
	Publishers    []PublisherStats             `json:"publishers"`
	Subscriptions map[string]SubscriptionStats `json:"subscriptions"`
	Replication   map[string]ReplicatorStats   `json:"replication"`
	Metadata      struct {
		Partitions int `json:"partitions"`
	} `json:"metadata"`
	Partitions map[string]TopicStats `json:"partitions"`
}

// add folds one partition's stats into the sum.
func (p *PartitionedTopicStats) add(name string, st TopicStats, perPartition bool) {
	p.Traffic.add(st.Traffic)
	p.StorageSize += st.StorageSize
	p.BacklogSize += st.BacklogSize
	for _, ps := range st.Publishers {
		p.Publishers = mergeByName(p.Publishers, ps, publisherName, (*PublisherStats).addPublisher)
	}
	for sub, ss := range st.Subscriptions {
		agg, ok := p.Subscriptions[sub]
		if !ok {
			agg = SubscriptionStats{Type: ss.Type, IsDurable: ss.IsDurable, IsReplicated: ss.IsReplicated, Consumers: []ConsumerStats{}}
		}
		agg.MsgRateOut += ss.MsgRateOut
		agg.MsgThroughputOut += ss.MsgThroughputOut
		agg.MsgOutCounter += ss.MsgOutCounter
		agg.BytesOutCounter += ss.BytesOutCounter
		agg.MsgBacklog += ss.MsgBacklog
		agg.MsgBacklogNoDelayed += ss.MsgBacklogNoDelayed
		agg.MsgDelayed += ss.MsgDelayed
		agg.DelayedIndexBytes += ss.DelayedIndexBytes
		agg.BacklogSize += ss.BacklogSize
		agg.UnackedMessages += ss.UnackedMessages
		agg.NonContiguousDeletedMessagesRanges += ss.NonContiguousDeletedMessagesRanges
		agg.Consumers = append(agg.Consumers, ss.Consumers...)
		p.Subscriptions[sub] = agg
	}
	// A region's sender per partition: backlogs add up, the delay is the
	// largest, connected only if every partition's sender is.
	for region, rs := range st.Replication {
		agg, ok := p.Replication[region]
		if !ok {
			agg = ReplicatorStats{Connected: true, OutboundConnection: rs.OutboundConnection}
		}
		agg.Connected = agg.Connected && rs.Connected
		agg.MsgRateIn += rs.MsgRateIn
		agg.MsgRateOut += rs.MsgRateOut
		agg.MsgThroughputIn += rs.MsgThroughputIn
		agg.MsgThroughputOut += rs.MsgThroughputOut
		agg.MsgRateExpired += rs.MsgRateExpired
		agg.ReplicationBacklog += rs.ReplicationBacklog
		agg.ReplicationDelayInSeconds = max(agg.ReplicationDelayInSeconds, rs.ReplicationDelayInSeconds)
		p.Replication[region] = agg
	}
	if perPartition {
		p.Partitions[name] = st
	}
}

// NonPersistentTopicStats is GET /admin/v2/non-persistent/.../stats, as
// Pulsar's NonPersistentTopicStats: no storage, backlog or cursor
// positions; msgDropRate on the topic (its publishers' and
// subscriptions' together), each publisher (always 0: a SEND is never
// dropped before it reaches the subscriptions) and each subscription
// (messages it could not take: no consumer, none with permits, a full
// connection). msgDropCounter is Meridian's: the drops since the topic
// was loaded, as the other counters count.
type NonPersistentTopicStats struct {
	Traffic
	MsgDropRate    float64                                   `json:"msgDropRate"`
	MsgDropCounter int64                                     `json:"msgDropCounter"`
	Publishers     []NonPersistentPublisherStats             `json:"publishers"`
	Subscriptions  map[string]NonPersistentSubscriptionStats `json:"subscriptions"`
	// Replication: the best-effort sender to each remote region, once
	// the first message was offered to it.
	Replication map[string]NonPersistentReplicatorStats `json:"replication"`
}

// NonPersistentPartitionedTopicStats is GET
// /admin/v2/non-persistent/.../partitioned-stats, as Pulsar's
// NonPersistentPartitionedTopicStats: the partitions' stats summed (a
// producer, which has one producer per partition under one name, listed
// once; subscriptions and remote regions merged by name), and each
// partition's with perPartition=true. A partition not loaded (no producer
// or consumer) has no stats and adds nothing.
type NonPersistentPartitionedTopicStats struct {
	NonPersistentTopicStats
	Metadata struct {
		Partitions int `json:"partitions"`
	} `json:"metadata"`
	Partitions map[string]NonPersistentTopicStats `json:"partitions"`
}

// add folds one partition's stats into the sum.
func (p *NonPersistentPartitionedTopicStats) add(name string, st NonPersistentTopicStats, perPartition bool) {
	p.Traffic.add(st.Traffic)
	p.MsgDropRate += st.MsgDropRate
	p.MsgDropCounter += st.MsgDropCounter
	for _, ps := range st.Publishers {
		p.Publishers = mergeByName(p.Publishers, ps,
			func(q *NonPersistentPublisherStats) string { return q.ProducerName },
			func(q *NonPersistentPublisherStats, x NonPersistentPublisherStats) {
				q.addPublisher(x.PublisherStats)
				q.MsgDropRate += x.MsgDropRate
			})
	}
	for sub, ss := range st.Subscriptions {
		agg, ok := p.Subscriptions[sub]
		if !ok {
			agg = NonPersistentSubscriptionStats{Type: ss.Type, IsDurable: ss.IsDurable, Consumers: []ConsumerStats{}}
		}
		agg.MsgRateOut += ss.MsgRateOut
		agg.MsgThroughputOut += ss.MsgThroughputOut
		agg.MsgOutCounter += ss.MsgOutCounter
		agg.BytesOutCounter += ss.BytesOutCounter
		agg.MsgDropRate += ss.MsgDropRate
		agg.MsgDropCounter += ss.MsgDropCounter
		agg.Consumers = append(agg.Consumers, ss.Consumers...)
		p.Subscriptions[sub] = agg
	}
	// A region's sender per partition: connected only if every
	// partition's is.
	for region, rs := range st.Replication {
		agg, ok := p.Replication[region]
		if !ok {
			agg = NonPersistentReplicatorStats{Connected: true}
		}
		agg.Connected = agg.Connected && rs.Connected
		agg.MsgRateOut += rs.MsgRateOut
		agg.MsgOutCounter += rs.MsgOutCounter
		agg.MsgDropRate += rs.MsgDropRate
		agg.MsgDropCounter += rs.MsgDropCounter
		p.Replication[region] = agg
	}
	if perPartition {
		p.Partitions[name] = st
	}
}

// NonPersistentReplicatorStats is one remote region of
// NonPersistentTopicStats, as Pulsar's NonPersistentReplicatorStats:
// what was sent there, what was dropped (never sent: the sender's queue
// full, the stream down, a send failed), and whether the stream is open.
// The counters are Meridian's.
type NonPersistentReplicatorStats struct {
	Connected      bool    `json:"connected"`
	MsgRateOut     float64 `json:"msgRateOut"`
	MsgOutCounter  int64   `json:"msgOutCounter"`
	MsgDropRate    float64 `json:"msgDropRate"`
	MsgDropCounter int64   `json:"msgDropCounter"`
}

// NonPersistentPublisherStats is one producer of NonPersistentTopicStats.
type NonPersistentPublisherStats struct {
	PublisherStats
	MsgDropRate float64 `json:"msgDropRate"`
}

// NonPersistentSubscriptionStats is one subscription of
// NonPersistentTopicStats (every one is non-durable).
type NonPersistentSubscriptionStats struct {
	Type               string          `json:"type"`
	MsgRateOut         float64         `json:"msgRateOut"`
	MsgThroughputOut   float64         `json:"msgThroughputOut"`
	MsgOutCounter      int64           `json:"msgOutCounter"`
	BytesOutCounter    int64           `json:"bytesOutCounter"`
	MsgDropRate        float64         `json:"msgDropRate"`
	MsgDropCounter     int64           `json:"msgDropCounter"`
	IsDurable          bool            `json:"isDurable"`
	ActiveConsumerName string          `json:"activeConsumerName,omitempty"`
	Consumers          []ConsumerStats `json:"consumers"`
}
