package replication

import (
	"context"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/proto/replpb"
)

// Replicated subscriptions: the active region sends its subscriptions'
// positions in ids that mean the same message everywhere; the standby
// applies them.

// subSyncEvery: how often a replicator sends its topic's subscription
// positions to the remote region (the target: 200 ms).
const subSyncEvery = 200 * time.Millisecond

// subResendEvery: how often an unchanged subscription position is sent
// again.
const subResendEvery = time.Second

// subSent is the last position sent of a subscription, and when.
type subSent struct {
	sig string
	at  time.Time
}

// maxSubAcked bounds the individually acknowledged entries one update
// carries (the rest follow once mark-delete passes them).
const maxSubAcked = 10000

// wireOfPos is the message id, valid in every region, of the entry at
// local position p.
func (t *Topic) wireOfPos(p mledger.Position) mledger.Position {
	if o, ok := t.log.OriginOf(p); ok {
		return o
	}
	return p
}

// lastEntryBefore returns the last stored entry before {ledger, 0}, if any.
func (t *Topic) lastEntryBefore(ledger int64) (mledger.Position, bool) {
	ls := t.ml.Ledgers()
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].ID < ledger && ls[i].Entries > 0 {
			return mledger.Position{Ledger: ls[i].ID, Entry: ls[i].Entries - 1}, true
		}
	}
	return mledger.Position{}, false
}

// subscriptionUpdates returns the positions of the topic's durable
// subscriptions that changed since last (updated in place), in ids that
// mean the same message in every region. Only the active region of an
// active-standby namespace sends them: that is where consumers are.
//
// An unchanged position is sent again every subResendEvery: the target
// applies only what it can translate, and the entries an update names may
// not have been replicated yet when it first arrived.
func (t *Topic) subscriptionUpdates(last map[string]subSent, now time.Time) []*replpb.SubscriptionUpdate {
	pol := t.policies()
	if !meta.ActiveStandby(pol) || t.svc.active.ActiveRegion(t.name.NamespaceName(), pol) != t.svc.cfg.Cluster {
		return nil
	}
	var out []*replpb.SubscriptionUpdate
	for _, c := range t.ml.Cursors() {
		if isReplCursor(c.Name()) || !c.Durable() {
			continue
		}
		u, sig, _, ok := t.positionUpdate(c)
		if !ok {
			continue // nothing acknowledged yet
		}
		if l := last[c.Name()]; l.sig == sig && now.Sub(l.at) < subResendEvery {
			continue
		}
		last[c.Name()] = subSent{sig: sig, at: now}
		out = append(out, u)
	}
	return out
}

// positionUpdate returns cursor c's position — its mark-delete position
// and individually acknowledged entries — in ids that mean the same
// message in every region, with a signature of it; complete is false
// when more than maxSubAcked entries are acknowledged individually (the
// update carries the first maxSubAcked); ok is false when nothing is
// acknowledged yet.
func (t *Topic) positionUpdate(c *mledger.Cursor) (u *replpb.SubscriptionUpdate, sig string, complete, ok bool) {
	md := c.MarkDeleted()
	if md.Entry < 0 {
		p, ok := t.lastEntryBefore(md.Ledger)
		if !ok {
			return nil, "", true, false
		}
		md = p
	}
	ranges := c.AckedRanges()
	sig = fmt.Sprint(md, ranges)
	w := t.wireOfPos(md)
	u = &replpb.SubscriptionUpdate{Name: c.Name(), MarkDelete: &replpb.MessageId{Ledger: w.Ledger, Entry: w.Entry, Batch: -1}}
	n := 0
	complete = true
	for _, r := range ranges {
		for p := r.From; !r.To.Less(p); p = t.ml.Next(p) {
			if n >= maxSubAcked {
				complete = false
				break
			}
			w := t.wireOfPos(p)
			u.Acked = append(u.Acked, &replpb.MessageId{Ledger: w.Ledger, Entry: w.Entry, Batch: -1})
			n++
			if p == r.To {
				break
			}
		}
	}
	return u, sig, complete, true
}

// pendingSubUpdate is a subscription update that named entries that had
// not arrived when it was applied.
type pendingSubUpdate struct {
	from string
	u    *replpb.SubscriptionUpdate
	n    uint64 // received n-th: a retry never replaces a newer update
}

// retryPendingSubscriptions applies again, shortly after replicated entries
// arrived, the updates that named entries not here yet. Without it such an
// update waited for its resend (subResendEvery, 1 s): when replication lags
// the 200 ms sync, every update names entries still in flight, and a
// region that died in between left a second of acknowledged messages to be
// delivered again in the new active region (the outage drills' duplicates).
func (t *Topic) retryPendingSubscriptions() {
	time.Sleep(20 * time.Millisecond) // gather the entries of a few batches
	t.subMu.Lock()
	pending := t.subPending
	t.subPending, t.subRetrying = nil, false
	t.subMu.Unlock()
	for _, p := range pending {
		ctx, cancel := context.WithTimeout(t.svc.ctx, 5*time.Second)
		t.applySubscriptionUpdate(ctx, p)
		cancel()
	}
}

// setPendingSubscription records (or, with incomplete false, forgets) the
// latest update of p's subscription that named entries not here yet,
// unless a newer update of it is pending already.
func (t *Topic) setPendingSubscription(p pendingSubUpdate, incomplete bool) {
	t.subMu.Lock()
	defer t.subMu.Unlock()
	if cur, ok := t.subPending[p.u.Name]; ok && cur.n > p.n {
		return
	}
	if !incomplete {
		delete(t.subPending, p.u.Name)
		return
	}
	if t.subPending == nil {
		t.subPending = map[string]pendingSubUpdate{}
	}
	t.subPending[p.u.Name] = p
}

// applySubscription moves the local subscription to the position another
// region's update names, as far as the ids translate here; an update that
// names entries not arrived yet is applied again as they arrive
// (retryPendingSubscriptions). Only for an active-standby namespace, from
// its active region.
func (t *Topic) applySubscription(ctx context.Context, from string, u *replpb.SubscriptionUpdate) {
	if u.Name == "" {
		return
	}
	t.subMu.Lock()
	t.subRecv++
	n := t.subRecv
	t.subMu.Unlock()
	t.applySubscriptionUpdate(ctx, pendingSubUpdate{from: from, u: u, n: n})
}

// positionsApply reports whether region from's subscription positions
// apply in region local under the namespace's failover record rec: from is
// the active region, or local is active after a planned move (CatchUp)
// from region from. The old active region's last updates (sent before it
// learned of the move) and those of its that waited here for entries still
// in flight when the move committed carry its consumers' last
// acknowledgements; ignored, a switch-back redelivered everything
// acknowledged since the last position that had translated — 15 s of
// messages when the link lagged (TestFailbackQuarantinesOrphans, issue 32).
// Applying them is safe: a position only moves forward, to messages the
// application acknowledged, and never while consumers are attached here.
func positionsApply(rec meta.FailoverRecord, local, from string) bool {
	if from == rec.Active {
		return true
	}
	return rec.CatchUp && rec.Active == local && rec.Previous == from
}

func (t *Topic) applySubscriptionUpdate(ctx context.Context, p pendingSubUpdate) {
	from, u := p.from, p.u
	// The one place a region's cursor moves without a local consumer's
	// ack: when a message is acknowledged and never delivered, this line
	// (at debug level) says whether a remote position skipped it.
	decision, before, after := "", mledger.Position{}, mledger.Position{}
	mdOK, nAcked := false, 0
	defer func() {
		t.svc.log.Debug("replication: subscription update", "topic", t.name.String(), "subscription", u.Name, "from", from,
			"decision", decision, "remote_mark_delete", fmt.Sprintf("%d:%d", u.MarkDelete.GetLedger(), u.MarkDelete.GetEntry()),
			"translated", mdOK, "acked", nAcked, "acked_named", len(u.Acked), "mark_delete_before", before.String(), "mark_delete", after.String())
	}()
	pol := t.policies()
	if !meta.ActiveStandby(pol) || isReplCursor(u.Name) ||
		!positionsApply(t.svc.active.Record(t.name.NamespaceName(), pol), t.svc.cfg.Cluster, from) {
		decision = "ignored: not from the active region"
		t.setPendingSubscription(p, false)
		return
	}
	translate := func(id *replpb.MessageId) (mledger.Position, bool) {
		p := mledger.Position{Ledger: id.GetLedger(), Entry: id.GetEntry()}
		if l, ok := t.log.LocalOf(p); ok {
			return l, true
		}
		// An entry that originated here keeps its local id.
		for _, l := range t.ml.Ledgers() {
			if l.ID == p.Ledger {
				return p, p.Entry >= 0 && p.Entry < l.Entries
			}
		}
		return mledger.Position{}, false
	}
	md, mdOK := translate(u.MarkDelete)
	var acked []mledger.Position
	for _, id := range u.Acked {
		if p, ok := translate(id); ok {
			acked = append(acked, p)
		}
	}
	nAcked = len(acked)
	if t.log.HasConsumers(u.Name) {
		decision = "ignored: consumers here"
		t.setPendingSubscription(p, false)
		return // consumers here own this position now
	}
	t.setPendingSubscription(p, !mdOK || len(acked) < len(u.Acked))
	if !mdOK && len(acked) == 0 {
		decision = "pending: nothing translates yet"
		return
	}
	cur, err := t.ml.OpenCursor(ctx, u.Name, mledger.Earliest)
	if err != nil {
		decision = "failed: " + err.Error()
		return
	}
	decision, before = "applied", cur.MarkDeleted()
	if mdOK {
		cur.AckCumulative(md)
	}
	if len(acked) > 0 {
		cur.Ack(acked...)
	}
	after = cur.MarkDeleted()
}
