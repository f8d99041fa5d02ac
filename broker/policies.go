package broker

import (
	"context"
	"time"

	"github.com/meridian-mq/meridian/broker/dispatch"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
)

// Namespace policies enforced on loaded topics: message TTL and backlog
// quotas. A broker-wide loop checks every loaded topic each
// PolicyCheckInterval (one goroutine for all topics, not one per topic).
//
//   - TTL: entries the broker published more than message_ttl_in_seconds
//     ago are acknowledged on every subscription (expired), by the broker's
//     publish time, never the client's clock.
//   - Backlog quota (limit in bytes of a subscription's backlog, estimated
//     as backlog entries × the topic's average entry size):
//     producer_request_hold refuses new producers and sends with
//     ProducerBlockedQuotaExceededError (the Go client keeps retrying);
//     producer_exception does the same with
//     ProducerBlockedQuotaExceededException (the client fails the pending
//     sends); consumer_backlog_eviction moves the slowest subscriptions
//     forward, dropping their oldest entries, so a consumer that fell far
//     behind cannot fill the region's disks.

// applyLedgerPolicies sets a namespace's persistence and retention on a
// topic's managed-ledger config. A stored value the admin API would refuse
// (meta.ValidatePersistence, meta.ValidateRetention: one written before
// they checked it, or into etcd by hand) is not applied — the broker's
// setting stays — and returned, so the topic still loads: a retention of
// max int64 minutes overflowed time.Duration and failed every topic load
// of the namespace.
func applyLedgerPolicies(mlc *mledger.Config, pol meta.Policies) (ignored []error) {
	if p := pol.Persistence; p != nil && p.EnsembleSize > 0 {
		if err := meta.ValidatePersistence(*p); err != nil {
			ignored = append(ignored, err)
		} else {
			mlc.EnsembleSize, mlc.WriteQuorum, mlc.AckQuorum = p.EnsembleSize, p.WriteQuorum, p.AckQuorum
		}
	}
	if r := pol.Retention; r != nil {
		if err := meta.ValidateRetention(*r); err != nil {
			return append(ignored, err)
		}
		mlc.RetentionTime = time.Duration(r.RetentionTimeInMinutes) * time.Minute
		if r.RetentionTimeInMinutes < 0 {
			mlc.RetentionTime = -1
		}
		mlc.RetentionSizeBytes = r.RetentionSizeInMB << 20
		if r.RetentionSizeInMB < 0 {
			mlc.RetentionSizeBytes = -1
		}
	}
	return ignored
}

func (b *Broker) policyLoop() {
	defer b.wg.Done()
	t := time.NewTicker(b.cfg.PolicyCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
			if b.policyTurned != nil {
				b.policyTurned()
			}
			mctx, mcancel := context.WithTimeout(b.ctx, 30*time.Second)
			b.maintainBundles(mctx)
			b.repl.LoadBacklogged(mctx)
			mcancel()
			// One read of each namespace's policies per pass, not one per
			// topic: a broker holding 100,000 topics of a namespace read
			// the same key 100,000 times every interval (make bench-scale:
			// an idle broker with 2,000 topics spent a quarter of a core
			// here).
			// One deadline for the pass, not a context and a timer per
			// topic (100,000 topics: the idle broker's top allocation); a
			// topic the pass did not reach in time is enforced by the next
			// (loadedTopics comes in map order, so not always last).
			pass := map[string]meta.Policies{}
			ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
			for _, tp := range b.loadedTopics() {
				if ctx.Err() != nil {
					break
				}
				now := time.Now()
				tp.enforcePolicies(ctx, now, pass)
				tp.expireDedup(now)
			}
			cancel()
		}
	}
}

// refreshPolicies re-reads the namespace's policies (they may change
// while the topic is loaded), once per namespace per pass: pass holds
// what this pass of the policy loop read already (nil: read anyway).
func (t *Topic) refreshPolicies(ctx context.Context, pass map[string]meta.Policies) meta.Policies {
	ns := t.name.NamespaceName()
	p, ok := pass[ns]
	if !ok {
		var err error
		if p, err = t.b.meta.GetPolicies(ctx, ns); err == nil {
			ok = true
			if pass != nil {
				pass[ns] = p
			}
		}
	}
	if ok {
		t.mu.Lock()
		t.pol = p
		t.mu.Unlock()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pol
}

func (t *Topic) enforcePolicies(ctx context.Context, now time.Time, pass map[string]meta.Policies) {
	pol := t.refreshPolicies(ctx, pass)
	t.repl.Sync(ctx)
	// Retention by time must also expire on a topic nobody writes to.
	if err := t.ml.Trim(ctx); err != nil {
		t.b.log.Debug("trim", "topic", t.name.String(), "err", err)
	}
	// A stored TTL out of range is not applied (meta.MessageTTL): its
	// Duration would overflow and expire everything.
	if ttl := meta.MessageTTL(pol.MessageTTLInSeconds); ttl > 0 {
		cutoff := now.Add(-ttl).UnixMilli()
		for _, s := range t.subscriptions() {
			t.expire(ctx, s, cutoff)
		}
	}
	q, ok := pol.BacklogQuotas["destination_storage"]
	limit := q.SizeLimit()
	if !ok || limit <= 0 {
		t.setQuotaBlocked(nil)
		return
	}
	over := false
	for _, s := range t.subscriptions() {
		if t.backlogBytes(s) <= limit {
			continue
		}
		over = true
		if q.Policy == "consumer_backlog_eviction" {
			t.evict(s, limit)
		}
	}
	switch {
	case !over || q.Policy == "consumer_backlog_eviction":
		t.setQuotaBlocked(nil)
	case q.Policy == "producer_exception":
		t.setQuotaBlocked(meta.ErrQuotaException)
	default:
		t.setQuotaBlocked(meta.ErrQuotaHold)
	}
}

func (t *Topic) setQuotaBlocked(err error) {
	t.mu.Lock()
	t.quotaErr = err
	t.mu.Unlock()
}

// avgEntryBytes is the topic's average stored entry size.
func (t *Topic) avgEntryBytes() int64 {
	n := t.ml.NumberOfEntries()
	if n <= 0 {
		return 0
	}
	return t.ml.TotalSizeBytes() / n
}

func (t *Topic) backlogBytes(s *Subscription) int64 {
	return s.cursor.Backlog() * t.avgEntryBytes()
}

// expire acknowledges every entry published before cutoffMs.
func (t *Topic) expire(ctx context.Context, s *Subscription, cutoffMs int64) {
	from := t.ml.Next(s.cursor.MarkDeleted())
	p, err := t.findByPublishTimeFrom(ctx, from, cutoffMs)
	if err != nil || !from.Less(p) {
		return
	}
	last := t.positionBefore(p)
	s.cursor.AckCumulative(last)
	s.forgetThrough(last)
	s.afterAck()
}

// evict moves s forward so its backlog fits in limit bytes.
func (t *Topic) evict(s *Subscription, limit int64) {
	avg := t.avgEntryBytes()
	if avg <= 0 {
		return
	}
	skip := s.cursor.Backlog() - limit/avg
	if skip <= 0 {
		return
	}
	target := t.advance(s.cursor.MarkDeleted(), skip)
	s.cursor.AckCumulative(target)
	s.forgetThrough(target)
	s.afterAck()
	t.b.log.Warn("backlog quota: evicted the oldest entries of a subscription", "topic", t.name.String(), "subscription", s.name, "entries", skip)
}

// advance returns the position n entries after p, using the ledgers'
// entry counts (no reads).
func (t *Topic) advance(p mledger.Position, n int64) mledger.Position {
	for _, l := range t.ml.Ledgers() {
		if l.ID < p.Ledger || l.Entries == 0 {
			continue
		}
		first := int64(0)
		if l.ID == p.Ledger {
			first = p.Entry + 1
		}
		avail := l.Entries - first
		if avail <= 0 {
			continue
		}
		if n <= avail {
			return mledger.Position{Ledger: l.ID, Entry: first + n - 1}
		}
		n -= avail
	}
	return t.ml.LastConfirmed()
}

// positionBefore returns the last stored position before p.
func (t *Topic) positionBefore(p mledger.Position) mledger.Position {
	if p.Entry > 0 {
		return mledger.Position{Ledger: p.Ledger, Entry: p.Entry - 1}
	}
	prev := mledger.Position{Ledger: p.Ledger, Entry: -1}
	for _, l := range t.ml.Ledgers() {
		if l.ID < p.Ledger && l.Entries > 0 {
			prev = mledger.Position{Ledger: l.ID, Entry: l.Entries - 1}
		}
	}
	return prev
}

// forgetThrough drops dispatch state of entries at or before p (acked by
// TTL or eviction).
func (s *Subscription) forgetThrough(p mledger.Position) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.core.ForgetThrough(dispatch.Position(p))
	if rp := s.cursor.ReadPosition(); !p.Less(rp) {
		s.cursor.SetReadPosition(s.topic.ml.Next(p))
	}
}
