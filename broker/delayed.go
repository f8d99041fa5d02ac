package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/broker/dispatch"
	"github.com/meridian-mq/meridian/broker/mledger"
)

// Delayed delivery: the shell of a subscription's delayed-delivery index
// (dispatch.Delayed; docs/broker.md, "Delayed delivery"). Under Shared and
// Key_Shared, an entry read from the cursor whose deliver_at_time (the
// producer's DeliverAfter / DeliverAt, in the outer metadata of a batch) is
// still ahead is held in the index instead of dispatched; when its time
// comes the index releases it into the core's replay and it is read again
// and sent. Exclusive and Failover deliver at once, as in Pulsar. Time is
// the broker's wall clock (deliver_at_time is absolute Unix ms).
//
// A durable subscription persists the index's sealed buckets as managed-
// ledger snapshots (mledger.OpenSnapshot) named
//
//	delayed/<escaped subscription>/list     the list of buckets
//	delayed/<escaped subscription>/b<id>    bucket <id>: set, segments
//
// A non-durable one (a reader) keeps its index in memory only: it starts
// from scratch when it reconnects anyway.
//
// All the index's I/O runs on the dispatch goroutine, one step at a time,
// between rounds (dispatch.Delayed's caller's duties); its state changes
// under the subscription's mutex.
type delayedShell struct {
	// Under Subscription.mu:
	idx     *dispatch.Delayed // nil until restored (first round)
	timer   *time.Timer       // wakes dispatch at the index's WakeAt
	timerAt int64
	// Of the dispatch goroutine:
	list    *mledger.Snapshot
	buckets map[uint64]*mledger.Snapshot
	retryAt time.Time // after an I/O failure, no I/O before then
}

// delayedRetry is the back-off after a failed snapshot read or write.
const delayedRetry = time.Second

// delayedCursorProperty is set (and flushed) on a subscription's cursor
// before its first bucket is persisted, so a load looks for persisted
// buckets (an etcd range read) only for subscriptions that ever had some:
// a broker loading 100,000 topics does not read 100,000 empty ranges.
const delayedCursorProperty = "meridian.delayedIndex"

func delayedPrefix(sub string) string { return "delayed/" + mledger.EscapeName(sub) + "/" }

func (s *Subscription) delayedConfig() dispatch.DelayedConfig {
	cfg := s.topic.b.cfg
	c := dispatch.DelayedConfig{BucketMax: cfg.DelayedBucketEntries, SegmentMax: cfg.DelayedSegmentEntries, MaxBuckets: cfg.DelayedMaxBuckets}
	if !s.durable {
		c.BucketMax = -1
	}
	return c
}

// holdsDelayed reports whether the subscription's type holds delayed
// entries (under mu).
func (s *Subscription) holdsDelayed() bool {
	t := s.core.Type()
	return t == dispatch.Shared || t == dispatch.KeyShared
}

// holdDelayed is called for an entry read from the cursor (not a replay)
// whose metadata has a deliver_at_time: it reports whether the entry is
// held (its time is ahead) rather than dispatched now.
func (s *Subscription) holdDelayed(p mledger.Position, atMs int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx := s.dl.idx
	if idx == nil || !s.holdsDelayed() || atMs <= time.Now().UnixMilli() {
		return false
	}
	idx.Add(dispatch.Position(p), atMs)
	return true
}

// delayedStep runs on the dispatch goroutine before each round: it
// restores the index on the first round, does the index's pending I/O,
// releases the entries whose time came (at most what a round or two can
// send) into the core's replay, and arms the wake-up timer. It reports
// whether the round may read new entries from the cursor (not while the
// index is not restored: it must know what it holds first), and whether
// entries whose time came are left for another round.
func (s *Subscription) delayedStep(ctx context.Context) (canRead, dueLeft bool) {
	s.mu.Lock()
	restored := s.dl.idx != nil
	s.mu.Unlock()
	if !restored {
		if time.Now().Before(s.dl.retryAt) {
			return false, false
		}
		if err := s.restoreDelayed(ctx); err != nil {
			s.topic.b.log.Warn("delayed-delivery index not restored; retrying", "topic", s.topic.name.String(), "sub", s.name, "err", err)
			s.delayedBackoff()
			return false, false
		}
	}
	s.delayedIO(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	idx := s.dl.idx
	now := time.Now().UnixMilli()
	if !s.holdsDelayed() && s.core.Len() > 0 {
		// Exclusive or Failover hold nothing back (addConsumer cleared the
		// index and rewound the cursor; this is a safety net).
		now = 1<<63 - 1
	}
	if room := 2*dispatch.RoundMax - s.core.Replays(); room > 0 && idx.Len() > 0 {
		due := idx.Due(now, room)
		keep := due[:0]
		for _, p := range due {
			if !s.cursor.IsAcked(mledger.Position(p)) {
				keep = append(keep, p)
			}
		}
		s.core.Release(keep)
	}
	at, ok := idx.WakeAt()
	dueLeft = ok && at <= now
	if ok && !dueLeft {
		s.armDelayedLocked(at)
	}
	return idx.Ready(), dueLeft
}

// delayedBackoff defers the index's I/O after a failure, and wakes
// dispatch then.
func (s *Subscription) delayedBackoff() {
	s.dl.retryAt = time.Now().Add(delayedRetry)
	s.mu.Lock()
	s.armDelayedLocked(s.dl.retryAt.UnixMilli())
	s.mu.Unlock()
}

// armDelayedLocked makes dispatch wake at atMs (Unix ms), unless a timer
// already wakes it earlier.
func (s *Subscription) armDelayedLocked(atMs int64) {
	now := time.Now().UnixMilli()
	if s.dl.timer != nil && s.dl.timerAt > now && s.dl.timerAt <= atMs {
		return
	}
	if s.dl.timer != nil {
		s.dl.timer.Stop()
	}
	s.dl.timerAt = atMs
	s.dl.timer = time.AfterFunc(time.Duration(max(0, atMs-now))*time.Millisecond, s.wake)
}

// restoreDelayed builds the index: from the persisted list (durable
// subscriptions), deleting the buckets it does not name (a crash between a
// bucket's write and the list's), then loading the buckets' sets. Under
// Exclusive and Failover whatever was persisted is cleared: those types
// read everything from the cursor.
func (s *Subscription) restoreDelayed(ctx context.Context) error {
	idx := dispatch.NewDelayed(s.delayedConfig())
	if s.durable && s.cursor.Properties()[delayedCursorProperty] != 0 {
		prefix := delayedPrefix(s.name)
		names, err := s.topic.ml.ListSnapshots(ctx, prefix)
		if err != nil {
			return err
		}
		if len(names) > 0 {
			if s.dl.list == nil {
				if s.dl.list, err = s.topic.ml.OpenSnapshot(ctx, prefix+"list", mledger.SnapshotOptions{}); err != nil {
					return err
				}
			}
			data, _, err := s.dl.list.Read(ctx)
			switch {
			case errors.Is(err, mledger.ErrNoSnapshot):
				data = nil
			case errors.Is(err, mledger.ErrSnapshotCorrupt):
				s.topic.b.log.Warn("delayed-delivery list corrupt; its buckets are dropped and the log read again", "topic", s.topic.name.String(), "sub", s.name, "err", err)
				data = nil
			case err != nil:
				return err
			}
			if err := idx.Restore(data); err != nil {
				s.topic.b.log.Warn("delayed-delivery list unreadable; its buckets are dropped and the log read again", "topic", s.topic.name.String(), "sub", s.name, "err", err)
				idx = dispatch.NewDelayed(s.delayedConfig())
			}
			for _, name := range names {
				id, ok := bucketID(prefix, name)
				if !ok || idx.Referenced(id) {
					continue
				}
				if err := s.deleteBucket(ctx, id); err != nil {
					return err
				}
			}
		}
	}
	s.mu.Lock()
	// A subscription loaded with the topic has no type until its first
	// consumer comes (addConsumer clears the index if it is Exclusive or
	// Failover); one whose consumers are Exclusive or Failover already
	// reads everything from the cursor. Nothing was read yet: no rewind.
	if s.core.Len() > 0 && !s.holdsDelayed() {
		idx.Clear()
	}
	s.dl.idx = idx
	held := idx.Len()
	s.mu.Unlock()
	if held > 0 {
		s.topic.b.log.Info("delayed-delivery index restored", "topic", s.topic.name.String(), "sub", s.name, "held", held, "buckets", idx.Buckets())
	}
	return nil
}

func bucketID(prefix, name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"b")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(rest, 10, 64)
	return id, err == nil
}

func (s *Subscription) bucketSnapshot(ctx context.Context, id uint64) (*mledger.Snapshot, error) {
	if b := s.dl.buckets[id]; b != nil {
		return b, nil
	}
	b, err := s.topic.ml.OpenSnapshot(ctx, fmt.Sprintf("%sb%d", delayedPrefix(s.name), id), mledger.SnapshotOptions{InlineMaxBytes: -1})
	if err != nil {
		return nil, err
	}
	if s.dl.buckets == nil {
		s.dl.buckets = map[uint64]*mledger.Snapshot{}
	}
	s.dl.buckets[id] = b
	return b, nil
}

func (s *Subscription) deleteBucket(ctx context.Context, id uint64) error {
	b, err := s.bucketSnapshot(ctx, id)
	if err == nil {
		err = b.Delete(ctx)
	}
	if err == nil {
		delete(s.dl.buckets, id)
	}
	return err
}

// delayedIO does what the index asks (dispatch.Delayed.Work), in order,
// until it asks nothing or something fails (then it backs off).
func (s *Subscription) delayedIO(ctx context.Context) {
	if !s.durable || time.Now().Before(s.dl.retryAt) {
		return
	}
	log := s.topic.b.log.With("topic", s.topic.name.String(), "sub", s.name)
	for range 1000 {
		s.mu.Lock()
		w := s.dl.idx.Work(time.Now().UnixMilli())
		s.mu.Unlock()
		if w.Empty() {
			return
		}
		failed := false
		if len(w.Seal) > 0 && s.cursor.Properties()[delayedCursorProperty] == 0 {
			// Mark the cursor before the first bucket exists (see
			// delayedCursorProperty).
			s.cursor.SetProperty(delayedCursorProperty, 1)
			if err := s.cursor.Flush(ctx); err != nil {
				log.Warn("cursor not marked as having a delayed-delivery index; retrying", "err", err)
				s.cursor.SetProperty(delayedCursorProperty, 0)
				s.mu.Lock()
				for _, sw := range w.Seal {
					s.dl.idx.Sealed(w.Gen, sw.Bucket, false)
				}
				s.mu.Unlock()
				s.delayedBackoff()
				return
			}
		}
		for _, sw := range w.Seal {
			b, err := s.bucketSnapshot(ctx, sw.Bucket)
			if err == nil {
				_, err = b.WriteSegments(ctx, sw.Segments)
			}
			if err != nil {
				log.Warn("delayed-delivery bucket not persisted; kept in memory, retrying", "bucket", sw.Bucket, "err", err)
				failed = true
			}
			s.mu.Lock()
			s.dl.idx.Sealed(w.Gen, sw.Bucket, err == nil)
			s.mu.Unlock()
		}
		if w.List != nil && !failed {
			var err error
			if s.dl.list == nil {
				s.dl.list, err = s.topic.ml.OpenSnapshot(ctx, delayedPrefix(s.name)+"list", mledger.SnapshotOptions{})
			}
			if err == nil {
				_, err = s.dl.list.Write(ctx, w.List)
			}
			if err != nil {
				log.Warn("delayed-delivery list not written; retrying", "err", err)
				failed = true
			} else {
				s.mu.Lock()
				s.dl.idx.ListWritten(w.ListVersion)
				s.mu.Unlock()
			}
		}
		for _, id := range w.Delete {
			// Every entry of the bucket was released, or it was dropped:
			// a bucket not deleted now is garbage the next restore deletes.
			if err := s.deleteBucket(ctx, id); err != nil {
				log.Warn("delayed-delivery bucket not deleted; the next load deletes it", "bucket", id, "err", err)
			}
		}
		for _, ref := range w.Load {
			var data []byte
			b, err := s.bucketSnapshot(ctx, ref.Bucket)
			if err == nil {
				data, err = b.ReadSegment(ctx, ref.Entry)
			}
			corrupt := errors.Is(err, mledger.ErrSnapshotCorrupt) || errors.Is(err, mledger.ErrNoSnapshot)
			s.mu.Lock()
			var rewind bool
			if err == nil {
				rewind = s.dl.idx.Loaded(w.Gen, ref, data)
			} else {
				rewind = s.dl.idx.LoadFailed(w.Gen, ref, corrupt)
			}
			s.mu.Unlock()
			if err != nil && !corrupt {
				log.Warn("delayed-delivery segment not loaded; retrying", "bucket", ref.Bucket, "entry", ref.Entry, "err", err)
				failed = true
			}
			if rewind {
				// Its entries are read from the log again (and held again).
				log.Error("delayed-delivery bucket unreadable; its entries are read from the log again", "bucket", ref.Bucket, "entry", ref.Entry, "err", err)
				s.cursor.Rewind()
			}
		}
		if w.Merge != nil && !s.mergeDelayed(ctx, log, w.Gen, w.Merge) {
			failed = true
		}
		if failed {
			s.delayedBackoff()
			return
		}
	}
}

// mergeDelayed reads the segments a merge of buckets needs and hands them
// to the index (dispatch.Delayed.Merged), which seals the merged bucket;
// the next Work writes it. It reports false after a failed read (the
// merge is abandoned; back off).
func (s *Subscription) mergeDelayed(ctx context.Context, log *slog.Logger, gen uint64, m *dispatch.MergeWork) bool {
	data := make([][]byte, len(m.Read))
	for i, ref := range m.Read {
		b, err := s.bucketSnapshot(ctx, ref.Bucket)
		if err == nil {
			data[i], err = b.ReadSegment(ctx, ref.Entry)
		}
		if err != nil {
			corrupt := errors.Is(err, mledger.ErrSnapshotCorrupt) || errors.Is(err, mledger.ErrNoSnapshot)
			s.mu.Lock()
			rewind := s.dl.idx.MergeFailed(gen, ref, corrupt)
			s.mu.Unlock()
			if rewind {
				log.Error("delayed-delivery bucket unreadable; its entries are read from the log again", "bucket", ref.Bucket, "entry", ref.Entry, "err", err)
				s.cursor.Rewind()
				return true
			}
			log.Warn("delayed-delivery buckets not merged; retrying", "buckets", m.Buckets, "err", err)
			return false
		}
	}
	s.mu.Lock()
	rewind := s.dl.idx.Merged(gen, data)
	buckets, merges := s.dl.idx.Buckets(), s.dl.idx.Merges()
	s.mu.Unlock()
	if rewind {
		log.Error("delayed-delivery bucket unreadable while merging; its entries are read from the log again", "buckets", m.Buckets)
		s.cursor.Rewind()
		return true
	}
	log.Info("delayed-delivery buckets merged", "merged", m.Buckets, "segments", len(m.Read), "buckets", buckets, "merges", merges)
	return true
}

// clearDelayedLocked forgets the index (a seek; the subscription became
// Exclusive or Failover): the caller rewinds or resets the cursor. The
// persisted buckets are deleted by the next round's I/O.
func (s *Subscription) clearDelayedLocked() {
	if s.dl.idx != nil {
		s.dl.idx.Clear()
	}
}

// stopDelayed stops the wake-up timer (the subscription stops).
func (s *Subscription) stopDelayed() {
	s.mu.Lock()
	if s.dl.timer != nil {
		s.dl.timer.Stop()
	}
	s.mu.Unlock()
}

// deleteDelayed deletes the subscription's persisted index (the
// subscription is deleted; it has stopped).
func (s *Subscription) deleteDelayed(ctx context.Context) error {
	if !s.durable || s.cursor.Properties()[delayedCursorProperty] == 0 {
		return nil
	}
	names, err := s.topic.ml.ListSnapshots(ctx, delayedPrefix(s.name))
	if err != nil {
		return err
	}
	for _, name := range names {
		sn, err := s.topic.ml.OpenSnapshot(ctx, name, mledger.SnapshotOptions{})
		if err == nil {
			err = sn.Delete(ctx)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// delayedStatsLocked returns the entries held, the index's memory (about),
// its sealed buckets and the merges it did since the subscription loaded.
func (s *Subscription) delayedStatsLocked() (held, bytes int64, buckets int, merges int64) {
	if s.dl.idx == nil {
		return 0, 0, 0, 0
	}
	return s.dl.idx.Len(), s.dl.idx.MemoryBytes(), s.dl.idx.Buckets(), s.dl.idx.Merges()
}
