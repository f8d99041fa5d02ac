package replication

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
	"github.com/meridian-mq/meridian/replicator/transport"
)

// A sender's topic: what the sender shell reads and writes outside its
// goroutine's state — the log, its durable cursor, the subscriptions'
// positions and the backlog marker — behind senderLog, and the stream to
// the remote region behind a dial function, so that the shell is tested
// without a managed ledger, a store or a socket.

// senderLog is a topic as one sender sees it. Called from the sender's
// goroutine only.
type senderLog interface {
	// End is the log's end.
	End() replicator.LogEnd
	// Read reads what req asks for (replicator's step 4); cursorSeq is the
	// cursor's sequence number, to tell a log whose first local entries
	// were trimmed.
	Read(ctx context.Context, req replicator.ReadRequest, cursorSeq uint64) ([]replicator.Entry, error)
	// SaveCursor records c as the cursor (persisted lazily); FlushCursor
	// persists it now.
	SaveCursor(c replicator.Cursor)
	FlushCursor(ctx context.Context) error
	// HoldRetention says whether the cursor holds back trimming.
	HoldRetention(hold bool)
	// Start is where a new stream under eff starts (initialReplCursor).
	Start(ctx context.Context, eff meta.ReplicationPolicy) (replicator.Cursor, error)
	// Subscriptions returns the subscriptions' positions that changed
	// since last (updated in place) or were not sent for subResendEvery.
	Subscriptions(last map[string]subSent, now time.Time) []*replpb.SubscriptionUpdate
	// SetBacklogged sets (true) or clears the topic's backlog marker.
	SetBacklogged(ctx context.Context, backlogged bool) error
}

// topicLog is a loaded topic's senderLog: its managed ledger, the
// sender's cursor on it, the region's store.
type topicLog struct {
	t   *Topic
	cur *mledger.Cursor
}

func (l *topicLog) End() replicator.LogEnd { return l.t.logEnd() }

func (l *topicLog) SaveCursor(c replicator.Cursor) {
	l.cur.AckCumulativeWith(toMLPos(c.Pos), cursorProps(c))
}

func (l *topicLog) FlushCursor(ctx context.Context) error { return l.cur.Flush(ctx) }

func (l *topicLog) HoldRetention(hold bool) { l.cur.SetHoldsRetention(hold) }

func (l *topicLog) Start(ctx context.Context, eff meta.ReplicationPolicy) (replicator.Cursor, error) {
	return l.t.initialReplCursor(ctx, eff)
}

func (l *topicLog) Subscriptions(last map[string]subSent, now time.Time) []*replpb.SubscriptionUpdate {
	return l.t.subscriptionUpdates(last, now)
}

func (l *topicLog) SetBacklogged(ctx context.Context, backlogged bool) error {
	key := backlogMarker(l.t.name.String())
	if backlogged {
		_, err := l.t.svc.cfg.Store.Put(ctx, key, nil)
		return err
	}
	return l.t.svc.cfg.Store.Delete(ctx, key)
}

func (l *topicLog) Read(ctx context.Context, req replicator.ReadRequest, cursorSeq uint64) ([]replicator.Entry, error) {
	ml := l.t.ml
	after := toMLPos(req.After)
	if after != mledger.Earliest && !slices.ContainsFunc(ml.Ledgers(), func(l mledger.LedgerInfo) bool { return l.ID == after.Ledger }) {
		// The ledger the cursor is in was deleted: retention trimmed
		// entries the region had not received (the cursor had stopped
		// holding them, over its backlog quota).
		return nil, fmt.Errorf("%w: ledger %d of %s", replicator.ErrTrimmed, after.Ledger, l.t.name)
	}
	es, err := ml.ReadEntries(ctx, ml.Next(after), req.MaxEntries, req.MaxBytes)
	out := make([]replicator.Entry, 0, len(es))
	local := l.t.svc.cfg.Cluster
	readNs := l.t.svc.clock.Now().UnixNano()
	for i, e := range es {
		d, derr := entry.Decode(e.Data)
		if i == 0 && after == mledger.Earliest && derr == nil && d.Origin.Region == "" && d.Origin.Seq > cursorSeq+1 {
			// From the start of the log, and its first local entries are
			// gone: trimmed before the region received them.
			return nil, fmt.Errorf("%w: %s starts at local sequence number %d", replicator.ErrTrimmed, l.t.name, d.Origin.Seq)
		}
		re := replicator.Entry{Pos: toReplPos(e.Pos)}
		switch {
		case derr != nil:
			re.Origin = "?" // unreadable: passed over, never sent
		case d.Origin.Region == "":
			re.Origin, re.OriginSeq, re.PublishMs, re.Data = local, d.Origin.Seq, d.PublishMs, d.Msg
			re.OriginID = replicator.MessageID{Ledger: e.Pos.Ledger, Entry: e.Pos.Entry, Batch: -1}
			appended, persisted := l.t.stamps.get(e.Pos)
			re.Stamps = replicator.Stamps{Appended: appended, Persisted: persisted, Read: readNs}
		default:
			re.Origin, re.OriginSeq, re.PublishMs = d.Origin.Region, d.Origin.Seq, d.PublishMs
			re.OriginID = replicator.MessageID{Ledger: d.Origin.ID.Ledger, Entry: d.Origin.ID.Entry, Batch: -1}
		}
		out = append(out, re)
	}
	return out, err
}

// dialRemote returns the sender's dial towards remote: a stream to the
// topic's owner there, through any registered broker of that region,
// following at most a few redirects.
func (t *Topic) dialRemote(remote string) func(ctx context.Context) (stream, error) {
	return func(ctx context.Context) (stream, error) {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		addrs, err := t.svc.endpoints(ectx, remote)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("list the endpoints of region %s: %w", remote, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("region %s has no registered broker", remote)
		}
		cs, err := t.svc.dialer.Open(ctx, addrs[rand.IntN(len(addrs))],
			transport.Hello{Source: t.svc.cfg.Cluster, Target: remote, Topic: t.name.String()})
		if err != nil {
			return nil, err
		}
		return cs, nil
	}
}
