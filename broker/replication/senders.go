package replication

import (
	"context"
	"fmt"
	"slices"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/replicator"
)

// The source side of a topic: its senders, one per remote region,
// started and stopped as the namespace's regions change.

// syncReplication starts a sender for every remote region of the
// namespace that has none and stops (and deletes the cursor of) those no
// longer listed. Called after load and when policies change.
func (t *Topic) syncReplication(ctx context.Context) {
	pol := t.policies()
	if t.log.Closed() {
		return
	}
	t.refreshSync()
	eff := pol.Effective()
	want := map[string]bool{}
	if len(pol.ReplicationClusters) > 1 && slices.Contains(pol.ReplicationClusters, t.svc.cfg.Cluster) && eff.Mode != meta.ReplicationStretched {
		for _, r := range pol.ReplicationClusters {
			if r != t.svc.cfg.Cluster {
				want[r] = true
			}
		}
	}
	for remote := range want {
		t.svc.replLimiter(t.name.NamespaceName(), remote, eff.RateBytesPerSecond) // a changed rate applies at once
	}
	r := t.replState()
	r.mu.Lock()
	var stop []*replSender
	for name, s := range r.senders {
		if !want[name] {
			stop = append(stop, s)
			delete(r.senders, name)
		}
	}
	var start []string
	for name := range want {
		if r.senders[name] == nil {
			start = append(start, name)
		}
	}
	r.mu.Unlock()
	for _, s := range stop {
		s.stop()
		if err := t.ml.DeleteCursor(ctx, replCursorPrefix+s.remote); err != nil {
			t.svc.log.Warn("replication cursor not deleted", "topic", t.name.String(), "remote", s.remote, "err", err)
		}
		t.svc.log.Info("replication stopped: region removed from the namespace", "topic", t.name.String(), "remote", s.remote)
	}
	for _, name := range start {
		s, err := t.newReplSender(ctx, name, eff)
		if err != nil {
			t.svc.log.Warn("replicator not started", "topic", t.name.String(), "remote", name, "err", err)
			continue
		}
		r.mu.Lock()
		if r.senders[name] != nil || t.log.Closed() {
			r.mu.Unlock()
			s.cancel() // never run: stop would wait for a goroutine that never started
			continue
		}
		r.senders[name] = s
		r.mu.Unlock()
		cursor := s.s.Status().Cursor // read before run owns the core
		if ss := t.syncState(); ss != nil {
			ss.acked(name, cursor.Seq)
		}
		go s.run()
		t.svc.log.Info("replicator started", "topic", t.name.String(), "remote", name, "cursor", cursor.String())
	}
	// The senders sleep until their next deadline or an input: the new
	// policies are one (an active-standby namespace's senders send the
	// subscriptions' positions).
	t.wakeSenders()
}

// stopReplication stops every sender (on unload; their cursors stay).
func (t *Topic) stopReplication(ctx context.Context) {
	t.mu.Lock()
	r := t.repl
	t.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	senders := make([]*replSender, 0, len(r.senders))
	for _, s := range r.senders {
		senders = append(senders, s)
	}
	r.senders = map[string]*replSender{}
	r.mu.Unlock()
	for _, s := range senders {
		s.stopWithin(ctx)
	}
}

// wakeSenders tells the senders the log grew.
func (t *Topic) wakeSenders() {
	t.mu.Lock()
	r := t.repl
	t.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.senders {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (t *Topic) logEnd() replicator.LogEnd {
	last, seq, bytes := t.log.End()
	return replicator.LogEnd{Pos: toReplPos(last), Seq: seq, Bytes: bytes}
}

// policies returns the namespace's policies as the topic last read them.
func (t *Topic) policies() meta.Policies { return t.log.Policies() }

func (t *Topic) newReplSender(ctx context.Context, remote string, eff meta.ReplicationPolicy) (*replSender, error) {
	cur, err := t.ml.OpenCursor(ctx, replCursorPrefix+remote, mledger.Earliest)
	if err != nil {
		return nil, err
	}
	props := cur.Properties()
	var c replicator.Cursor
	if props[propStream] == 0 {
		c, err = t.initialReplCursor(ctx, eff)
		if err != nil {
			return nil, err
		}
		cur.AckCumulativeWith(toMLPos(c.Pos), cursorProps(c))
		if err := cur.Flush(ctx); err != nil {
			return nil, fmt.Errorf("persist the new replication cursor: %w", err)
		}
	} else {
		c = replicator.Cursor{Pos: toReplPos(cur.MarkDeleted()), Seq: uint64(props[propSeq]), Bytes: props[propBytes],
			Stream: uint64(props[propStream]), Base: uint64(props[propBase])}
	}
	rs, err := t.newSender(remote, t.senderConfig(remote, eff), c, &topicLog{t: t, cur: cur}, t.dialRemote(remote))
	if err != nil {
		return nil, err
	}
	// The backlog marker is set before anything is sent and cleared only
	// once the remote region caught up, so a crash at any moment leaves it
	// for the next owner's loader (loadBacklogged).
	if err := rs.tlog.SetBacklogged(ctx, true); err != nil {
		rs.cancel()
		return nil, fmt.Errorf("set the replication backlog marker: %w", err)
	}
	rs.marked = true
	rs.publishStatus(rs.clock.Now())
	return rs, nil
}

// senderConfig is the sender configuration towards remote under the
// namespace's replication policy: its rate limit and backlog quota.
func (t *Topic) senderConfig(remote string, eff meta.ReplicationPolicy) replicator.SenderConfig {
	cfg := replicator.DefaultSenderConfig(t.svc.cfg.Cluster, remote)
	cfg.Limiter = t.svc.replLimiter(t.name.NamespaceName(), remote, eff.RateBytesPerSecond)
	if eff.BacklogQuotaBytes > 0 {
		cfg.Quota.MaxBytes = eff.BacklogQuotaBytes
	}
	return cfg
}
