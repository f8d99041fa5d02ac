package broker

import (
	"fmt"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/broker/admin"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/broker/replication"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

// The admin API's stats of a loaded topic, in Pulsar's shapes
// (broker/admin/stats.go): rates from the rate meters of the topic, its
// producers, subscriptions and consumers; counters since the topic was
// loaded here.

// countOut counts an entry of n messages and size bytes sent to c.
func (s *Subscription) countOut(c *Consumer, n, size int) {
	now := time.Now()
	s.out.Add(now, int64(n), int64(size))
	c.out.Add(now, int64(n), int64(size))
}

// pulsarTime formats a time as Pulsar's stats do (connectedSince).
func pulsarTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// idString prints a position as Pulsar prints one: "ledger:entry".
func idString(p mledger.Position) string { return fmt.Sprintf("%d:%d", p.Ledger, p.Entry) }

func subTypeName(t pb.CommandSubscribe_SubType) string {
	switch t {
	case pb.CommandSubscribe_Exclusive:
		return "Exclusive"
	case pb.CommandSubscribe_Shared:
		return "Shared"
	case pb.CommandSubscribe_Failover:
		return "Failover"
	case pb.CommandSubscribe_Key_Shared:
		return "Key_Shared"
	}
	return t.String()
}

// replicatorStats is Pulsar's replication section of a topic's stats:
// its sender to each remote region, and what arrives from that region.
func replicatorStats(sts []replication.Status) map[string]admin.ReplicatorStats {
	out := map[string]admin.ReplicatorStats{}
	for _, s := range sts {
		rs := admin.ReplicatorStats{Connected: s.Connected, ReplicationBacklog: s.BacklogEntries,
			ReplicationDelayInSeconds: int64(s.SecondsBehind), MsgRateOut: s.MsgRateOut, MsgThroughputOut: s.MsgThroughputOut,
			MsgRateIn: s.MsgRateIn, MsgThroughputIn: s.MsgThroughputIn}
		if s.Connected {
			rs.OutboundConnection = s.Target
		}
		out[s.Remote] = rs
	}
	return out
}

func (t *Topic) stats() admin.TopicStats {
	now := time.Now()
	sts := t.repl.Status()
	st := admin.TopicStats{StorageSize: t.ml.TotalSizeBytes(), Entries: t.ml.NumberOfEntries(), Publishers: []admin.PublisherStats{},
		Subscriptions: map[string]admin.SubscriptionStats{}, Replication: replicatorStats(sts), DeduplicationStatus: "Disabled"}
	if t.dedupEnabled() {
		st.DeduplicationStatus = "Enabled"
	}
	st.MsgRateIn, st.MsgThroughputIn = t.in.Rate(now)
	_, st.BytesInCounter = t.in.Totals()
	// What the remote regions' origins persist here counts in the topic's
	// rates and counters too, as in Pulsar, whose replicator is one of
	// the remote topic's producers: a standby region's topic shows the
	// rate it takes in (a batch counts as one message here).
	var replIn int64
	for _, s := range sts {
		st.MsgRateIn += s.MsgRateIn
		st.MsgThroughputIn += s.MsgThroughputIn
		replIn += s.MsgInCounter
		st.BytesInCounter += s.BytesInCounter
	}
	if st.MsgRateIn > 0 {
		st.AverageMsgSize = st.MsgThroughputIn / st.MsgRateIn
	}
	t.mu.Lock()
	for p := range t.producers {
		ps := admin.PublisherStats{AccessMode: p.mode.String(), ProducerName: p.name, ProducerID: p.id, Address: p.conn.nc.RemoteAddr().String(),
			ClientVersion: p.conn.clientVersion, ConnectedSince: pulsarTime(p.since)}
		ps.MsgRateIn, ps.MsgThroughputIn = p.in.Rate(now)
		if ps.MsgRateIn > 0 {
			ps.AverageMsgSize = ps.MsgThroughputIn / ps.MsgRateIn
		}
		st.Publishers = append(st.Publishers, ps)
	}
	subs := make([]*Subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	st.MsgInCounter = t.msgsIn + replIn
	st.LastPublishTimestamp = t.lastPublishMs
	t.mu.Unlock()
	avg := t.avgEntryBytes()
	for _, s := range subs {
		s.mu.Lock()
		typ := s.subType()
		ss := admin.SubscriptionStats{Type: subTypeName(typ), UnackedMessages: s.core.Pending(), Consumers: []admin.ConsumerStats{},
			IsDurable: s.durable}
		active, hasActive := s.core.Active()
		hasActive = hasActive && (typ == pb.CommandSubscribe_Exclusive || typ == pb.CommandSubscribe_Failover)
		unacked := s.core.Unacked()
		ss.MsgDelayed, ss.DelayedIndexBytes, ss.DelayedIndexBuckets, ss.DelayedIndexMerges = s.delayedStatsLocked()
		for _, cv := range s.core.Consumers() {
			if hasActive && cv.ID == active {
				ss.ActiveConsumerName = cv.Name
			}
			c := s.consumers[cv.ID]
			cs := admin.ConsumerStats{ConsumerName: cv.Name, AvailablePermit: cv.Permits, Address: c.conn.nc.RemoteAddr().String(),
				ClientVersion: c.conn.clientVersion, ConnectedSince: pulsarTime(c.since), UnackedMessages: unacked[cv.ID]}
			cs.MsgRateOut, cs.MsgThroughputOut = c.out.Rate(now)
			cs.MsgOutCounter, cs.BytesOutCounter = c.out.Totals()
			ss.Consumers = append(ss.Consumers, cs)
		}
		s.mu.Unlock()
		ss.MsgRateOut, ss.MsgThroughputOut = s.out.Rate(now)
		ss.MsgOutCounter, ss.BytesOutCounter = s.out.Totals()
		ss.MsgBacklog = s.cursor.Backlog()
		// Held entries are not acknowledged: part of the backlog.
		ss.MsgBacklogNoDelayed = max(0, ss.MsgBacklog-ss.MsgDelayed)
		ss.BacklogSize = ss.MsgBacklog * avg
		ss.NonContiguousDeletedMessagesRanges = len(s.cursor.AckedRanges())
		ss.MarkDelete = s.cursor.MarkDeleted().String()
		ss.ReadPosition = s.cursor.ReadPosition().String()
		st.MsgRateOut += ss.MsgRateOut
		st.MsgThroughputOut += ss.MsgThroughputOut
		st.MsgOutCounter += ss.MsgOutCounter
		st.BytesOutCounter += ss.BytesOutCounter
		st.BacklogSize = max(st.BacklogSize, ss.BacklogSize)
		st.Subscriptions[s.name] = ss
	}
	return st
}

// rangeSet prints acknowledged ranges as Pulsar's individuallyDeletedMessages:
// "[(L:a..L:b], ...]", each range open below (the position before its
// first entry) and closed above.
func rangeSet(rs []mledger.Range) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("(%d:%d..%s]", r.From.Ledger, r.From.Entry-1, idString(r.To))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func (t *Topic) internalStats() admin.InternalStats {
	st := admin.InternalStats{NumberOfEntries: t.ml.NumberOfEntries(), TotalSize: t.ml.TotalSizeBytes(), LastConfirmedEntry: idString(t.ml.LastConfirmed()),
		State: "LedgerOpened", Ledgers: []admin.LedgerStatsItem{}, Cursors: map[string]admin.CursorStats{}}
	t.mu.Lock()
	st.EntriesAddedCounter = t.msgsIn
	t.mu.Unlock()
	ls := t.ml.Ledgers()
	for _, l := range ls {
		item := admin.LedgerStatsItem{LedgerID: l.ID, Entries: l.Entries, Size: l.SizeBytes}
		if !l.ClosedAt.IsZero() {
			item.Timestamp = l.ClosedAt.UnixMilli()
		}
		st.Ledgers = append(st.Ledgers, item)
	}
	if len(ls) > 0 {
		last := ls[len(ls)-1]
		if !last.Closed {
			st.CurrentLedgerEntries, st.CurrentLedgerSize = last.Entries, last.SizeBytes
		}
		st.LastLedgerCreatedTimestamp = pulsarTime(last.CreatedAt)
	}
	// Counted per subscription: what it dispatched.
	out := map[string]int64{}
	for _, s := range t.subscriptions() {
		out[s.name], _ = s.out.Totals()
	}
	for _, c := range t.ml.Cursors() {
		acked := c.AckedRanges()
		md := c.MarkDeleted()
		cs := admin.CursorStats{
			MarkDeletePosition: idString(md), ReadPosition: idString(c.ReadPosition()), MessagesConsumedCounter: out[c.Name()],
			CursorLedger: -1, CursorLedgerLastEntry: -1, IndividuallyDeletedMessages: rangeSet(acked), State: "Open",
			TotalNonContiguousDeletedMessagesRange: len(acked), Properties: c.Properties(),
		}
		if cs.Properties == nil {
			cs.Properties = map[string]int64{}
		}
		// Entries from the first unacknowledged one to the end.
		cs.NumberOfEntriesSinceFirstNotAckedMessage = c.Backlog()
		for _, r := range acked {
			cs.NumberOfEntriesSinceFirstNotAckedMessage += rangeLen(ls, r)
		}
		st.Cursors[c.Name()] = cs
	}
	return st
}

// rangeLen counts the entries of a closed range over the ledgers ls.
func rangeLen(ls []mledger.LedgerInfo, r mledger.Range) int64 {
	var n int64
	for _, l := range ls {
		if l.ID < r.From.Ledger || l.ID > r.To.Ledger || l.Entries == 0 {
			continue
		}
		lo, hi := int64(0), l.Entries-1
		if l.ID == r.From.Ledger {
			lo = max(lo, r.From.Entry)
		}
		if l.ID == r.To.Ledger {
			hi = min(hi, r.To.Entry)
		}
		if hi >= lo {
			n += hi - lo + 1
		}
	}
	return n
}

func (t *Topic) internalInfo() admin.ManagedLedgerInfo {
	info := admin.ManagedLedgerInfo{Version: 1, Ledgers: []admin.ManagedLedgerInfoItem{}, Cursors: map[string]admin.CursorInfo{}}
	ls := t.ml.Ledgers()
	for _, l := range ls {
		item := admin.ManagedLedgerInfoItem{LedgerID: l.ID, Entries: l.Entries, Size: l.SizeBytes}
		if !l.ClosedAt.IsZero() {
			item.Timestamp = l.ClosedAt.UnixMilli()
		}
		info.Ledgers = append(info.Ledgers, item)
	}
	if len(ls) > 0 {
		info.CreationDate = pulsarTime(ls[0].CreatedAt)
		info.ModificationDate = pulsarTime(ls[len(ls)-1].CreatedAt)
	}
	for _, c := range t.ml.Cursors() {
		md := c.MarkDeleted()
		ci := admin.CursorInfo{Version: 1, CursorsLedgerID: -1, MarkDelete: admin.PositionInfo{LedgerID: md.Ledger, EntryID: md.Entry},
			IndividualDeletedMessages: []admin.MessageRangeInfo{}, Properties: c.Properties()}
		for _, r := range c.AckedRanges() {
			ci.IndividualDeletedMessages = append(ci.IndividualDeletedMessages, admin.MessageRangeInfo{
				From: admin.PositionInfo{LedgerID: r.From.Ledger, EntryID: r.From.Entry - 1},
				To:   admin.PositionInfo{LedgerID: r.To.Ledger, EntryID: r.To.Entry}})
		}
		if ci.Properties == nil {
			ci.Properties = map[string]int64{}
		}
		info.Cursors[c.Name()] = ci
	}
	return info
}
