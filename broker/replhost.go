package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/broker/replication"
	"github.com/meridian-mq/meridian/replicator"
)

// The broker's side of geo-replication (broker/replication): the
// service's wiring, the broker as its Host, and a topic as its Log.

// newReplication returns the replication service over this broker.
func (b *Broker) newReplication() *replication.Service {
	cfg := replication.Config{
		Cluster: b.cfg.Cluster, BrokerID: b.cfg.BrokerID,
		Store: b.cfg.Store, GlobalStore: b.cfg.GlobalStore, Meta: b.meta,
		ListenAddr: b.cfg.ReplicationAddr, AdvertisedAddr: b.cfg.ReplicationAdvertisedAddr, Listeners: b.lst.byName,
		HTTPListeners: b.lst.http,
		AdminURL:      b.AdminURL(),
		OwnershipTTL:  b.cfg.OwnershipTTL,
		Faults:        b.cfg.ReplicationFaults,
		Verifier:      b.cfg.ReplicationVerifier,
		Metrics: replication.Metrics{Sent: b.metrics.replSent, Applied: b.metrics.replApplied, Duplicates: b.metrics.replDuplicates,
			Alerts: b.metrics.replAlerts, Orphans: b.metrics.orphans, Stages: b.metrics.replStages, StoreToStore: b.metrics.replStoreToStore},
		PeerHTTP: func(timeout time.Duration) *http.Client { return &http.Client{Timeout: timeout} },
		Logger:   b.log,
	}
	if b.guard != nil {
		cfg.ServerOptions, cfg.DialOptions = b.guard.GRPCServerOptions(), b.guard.GRPCDialOptions()
		cfg.Authorize, cfg.PeerHTTP = b.guard.ReplAuthorize, b.guard.PeerHTTP
	}
	return replication.NewService(cfg, replHost{b}, activeRegions{b})
}

// replHost is the broker as the replication service sees it.
type replHost struct{ b *Broker }

func (h replHost) Target(ctx context.Context, tn meta.TopicName, pol meta.Policies) (*replication.Topic, string, error) {
	t, redirect, err := h.b.replTarget(ctx, tn, pol)
	if t == nil {
		return nil, redirect, err
	}
	return t.repl, redirect, err
}

func (h replHost) NonPersistentTarget(ctx context.Context, tn meta.TopicName, pol meta.Policies) (func(string, []replicator.Entry), string, error) {
	bd, err := h.b.bundleFor(ctx, pol, tn)
	if err != nil {
		return nil, "", err
	}
	redirect := func() (string, error) {
		bi, ok, err := h.b.own.owner(ctx, bd)
		if err != nil || !ok || bi.ID == h.b.cfg.BrokerID || bi.ReplicationAddr == "" {
			return "", fmt.Errorf("bundle %s: no owner to redirect to (%v)", bd, err)
		}
		return bi.ReplicationAddr, nil
	}
	if bi, ok, err := h.b.own.owner(ctx, bd); err == nil && ok && bi.ID != h.b.cfg.BrokerID {
		a, err := redirect()
		return nil, a, err
	}
	t, err := h.b.np.get(ctx, tn.String())
	if errors.Is(err, meta.ErrTopicFenced) {
		if a, rerr := redirect(); rerr == nil {
			return nil, a, nil
		}
	}
	if err != nil {
		return nil, "", err
	}
	return t.deliverReplicated, "", nil
}

func (h replHost) Topic(ctx context.Context, name string) error {
	_, err := h.b.getTopic(ctx, name, false)
	return err
}

func (h replHost) Loaded(name string) bool {
	h.b.mu.Lock()
	_, loaded := h.b.topics[name]
	h.b.mu.Unlock()
	return loaded
}

func (h replHost) Topics() []*replication.Topic {
	ts := h.b.loadedTopics()
	out := make([]*replication.Topic, len(ts))
	for i, t := range ts {
		out[i] = t.repl
	}
	return out
}

func (h replHost) Serves(ctx context.Context, name string) (bool, error) {
	u, _, err := h.b.lookup(ctx, name, false, "")
	if err != nil {
		return false, err
	}
	return u == h.b.serverURL, nil
}

func (h replHost) Peers(ctx context.Context) ([]replication.Peer, error) {
	bs, err := h.b.own.brokers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]replication.Peer, len(bs))
	for i, p := range bs {
		out[i] = replication.Peer{ID: p.ID, AdminURL: p.AdminURL}
	}
	return out, nil
}

// Quarantine appends the orphans (entries[idx]) to the quarantine topic
// name, as the messages they are (their producer's name and sequence ids
// kept), waits until every one is persisted and returns where each is.
func (h replHost) Quarantine(ctx context.Context, name string, entries []replicator.Entry, idx []int) ([]mledger.Position, error) {
	qt, err := h.b.getTopic(ctx, name, true)
	if err != nil {
		return nil, fmt.Errorf("quarantine topic %s: %w", name, err)
	}
	type result struct {
		k   int
		pos mledger.Position
		err error
	}
	results := make(chan result, len(idx))
	for k, i := range idx {
		e := entries[i]
		meta, err := entry.ParseMeta(entry.Encode(e.PublishMs, entry.Origin{}, e.Data))
		if err != nil {
			return nil, fmt.Errorf("orphan %d: %w", e.OriginSeq, err)
		}
		qt.publish(meta.ProducerName, meta.SequenceID, meta.NumMessages, meta.Completes(), entry.Unframed(e.Data), func(pos mledger.Position, err error) {
			if errors.Is(err, errDropSilently) {
				err = fmt.Errorf("quarantine topic %s closed", name)
			}
			results <- result{k, pos, err}
		})
	}
	pos := make([]mledger.Position, len(idx))
	var first error
	for range idx {
		r := <-results
		if r.err != nil && first == nil {
			first = r.err
		}
		pos[r.k] = r.pos
	}
	return pos, first
}

// Republish appends the orphan r (the message the quarantine topic holds
// at r.At) to its topic once (broker/replication/republish.go): by the
// producer name RepublishProducer(origin) and the sequence id
// RepublishSeq(originSeq), unless the topic's deduplication state says
// that name persisted that sequence id already (whatever the namespace's
// deduplication policy: this is the idempotence key). It returns once
// the new entry is persisted.
func (h replHost) Republish(ctx context.Context, r replication.RepublishRequest) (mledger.Position, bool, error) {
	none := mledger.Position{Ledger: -1, Entry: -1}
	qt, err := h.b.getTopic(ctx, r.Quarantine, false)
	if err != nil {
		return none, false, fmt.Errorf("quarantine topic %s: %w", r.Quarantine, err)
	}
	t, err := h.b.getTopic(ctx, r.Topic, false)
	if err != nil {
		return none, false, err
	}
	// What can never be republished first: an orphan passed over must
	// not look appended to the next call (nor this one's check below).
	seq, err := replication.RepublishSeq(r.OriginSeq)
	if err != nil {
		return none, false, fmt.Errorf("%w: %v", replication.ErrNotRepublishable, err)
	}
	es, err := qt.ml.ReadEntries(ctx, r.At, 1, 0)
	if err != nil {
		return none, false, fmt.Errorf("reading %s at %d:%d: %w", r.Quarantine, r.At.Ledger, r.At.Entry, err)
	}
	if len(es) == 0 || es[0].Pos != r.At {
		return none, false, fmt.Errorf("%w: %s no longer holds it at %d:%d (trimmed by its retention?)", replication.ErrNotRepublishable, r.Quarantine, r.At.Ledger, r.At.Entry)
	}
	d, err := entry.Decode(es[0].Data)
	if err != nil {
		return none, false, fmt.Errorf("%w: %s at %d:%d: %v", replication.ErrNotRepublishable, r.Quarantine, r.At.Ledger, r.At.Entry, err)
	}
	was, err := entry.ParseMeta(es[0].Data)
	if err != nil {
		return none, false, fmt.Errorf("%w: %s at %d:%d: %v", replication.ErrNotRepublishable, r.Quarantine, r.At.Ledger, r.At.Entry, err)
	}
	name := replication.RepublishProducer(r.Origin)
	msg, n, err := entry.Republish(d.Msg, name, seq, func(i, n int) map[string]string {
		id := r.OriginID
		if n > 1 && i >= 0 {
			id += ":" + strconv.Itoa(i)
		}
		return map[string]string{replication.PropOriginID: id, replication.PropOriginRegion: r.Origin, replication.PropOriginProducer: was.ProducerName}
	})
	if err != nil {
		return none, false, fmt.Errorf("%w: %s at %d:%d: %v", replication.ErrNotRepublishable, r.Quarantine, r.At.Ledger, r.At.Entry, err)
	}
	if at, ok := h.resentCopy(ctx, t, was, d.Msg); ok {
		return none, false, replication.ResentError{At: at, Producer: was.ProducerName, Seq: was.SequenceID}
	}
	t.mu.Lock()
	st := t.dedup[name]
	switch {
	case st != nil && st.lastPersisted >= seq:
		pos, _ := st.find(seq) // none when no longer remembered
		t.mu.Unlock()
		return pos, true, nil
	case st != nil && st.lastPushed >= seq:
		t.mu.Unlock()
		return none, false, fmt.Errorf("%w: orphan %s of %s is being appended already", meta.ErrServiceNotReady, r.OriginID, r.Topic)
	}
	t.mu.Unlock()
	type result struct {
		pos mledger.Position
		err error
	}
	done := make(chan result, 1)
	t.publish(name, seq, n, true, entry.Unframed(msg), func(pos mledger.Position, err error) {
		if errors.Is(err, errDropSilently) {
			err = fmt.Errorf("%w: %s closed", meta.ErrServiceNotReady, r.Topic)
		}
		done <- result{pos, err}
	})
	select {
	case res := <-done:
		return res.pos, false, res.err
	case <-ctx.Done():
		// Persisted or not, the next call knows (the dedup state).
		return none, false, fmt.Errorf("%w: orphan %s of %s: %v", meta.ErrServiceNotReady, r.OriginID, r.Topic, ctx.Err())
	}
}

// resentCopy returns where topic t holds the copy of an orphan (its
// metadata was, its message msg) that the orphan's producer sent again
// to this region: the deduplication state of its producer name remembers
// an entry holding its sequence id, and that entry's message is the
// orphan's (entry.SameMessage). Only with deduplication on, where one
// producer name's sequence ids name one message each; false whenever in
// doubt (the orphan is then republished).
func (h replHost) resentCopy(ctx context.Context, t *Topic, was entry.Meta, msg []byte) (mledger.Position, bool) {
	if was.ProducerName == "" || was.NumChunks > 1 {
		return mledger.Position{}, false
	}
	t.mu.Lock()
	st := t.dedup[was.ProducerName]
	var at mledger.Position
	found := false
	if st != nil && t.dedupEnabled() {
		at, found = st.find(was.SequenceID)
	}
	t.mu.Unlock()
	if !found {
		return mledger.Position{}, false
	}
	es, err := t.ml.ReadEntries(ctx, at, 1, 0)
	if err != nil || len(es) == 0 || es[0].Pos != at {
		return mledger.Position{}, false
	}
	d, err := entry.Decode(es[0].Data)
	if err != nil || !entry.SameMessage(d.Msg, msg) {
		return mledger.Position{}, false
	}
	return at, true
}

// activeRegions is the failover shell as replication sees it: read when
// asked, since the shell starts after the replication service.
type activeRegions struct{ b *Broker }

func (a activeRegions) ActiveRegion(ns string, pol meta.Policies) string {
	return a.b.fo.ActiveRegion(ns, pol)
}

func (a activeRegions) Record(ns string, pol meta.Policies) meta.FailoverRecord {
	return a.b.fo.Record(ns, pol)
}

func (a activeRegions) FailedOver(ns string, pol meta.Policies) meta.FailoverRecord {
	return a.b.fo.FailedOver(ns, pol)
}

func (a activeRegions) RegionDown(region string) bool { return a.b.fo.RegionDown(region) }

// replLog is a topic as replication sees it (replication.Log).
type replLog struct{ t *Topic }

func (l replLog) Policies() meta.Policies { return l.t.policies() }

func (l replLog) End() (mledger.Position, uint64, int64) {
	t := l.t
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastPos, t.localSeq, t.localBytes
}

func (l replLog) Applied(origin string) uint64 {
	t := l.t
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.applied[origin]
}

func (l replLog) AppendReplicated(entries []replicator.Entry, done func(error)) {
	l.t.appendReplicated(entries, done)
}

func (l replLog) Closed() bool {
	t := l.t
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

func (l replLog) OriginOf(p mledger.Position) (mledger.Position, bool) { return l.t.index.origin(p) }
func (l replLog) LocalOf(id mledger.Position) (mledger.Position, bool) { return l.t.index.lookup(id) }

func (l replLog) HasConsumers(sub string) bool {
	s := l.t.subscription(sub)
	if s == nil {
		return false
	}
	return s.consumerCount() > 0
}

func (l replLog) SetRPOGate(g replication.RPOGate) { l.t.setRPOGate(g) }

func (l replLog) InBundle(ctx context.Context, tn meta.TopicName) (bool, error) {
	bd, err := l.t.b.bundleFor(ctx, l.t.policies(), tn)
	if err != nil {
		return false, err
	}
	return bd == l.t.bundle, nil
}

// replTarget returns the loaded topic when this broker owns (or now
// acquires) it, or the replication address of the broker that owns it.
// replTargetRedirect returns the replication address of bd's owner in
// this region, for a sender that reached this broker instead; an unowned
// bundle this broker just handed to another by a balancing move
// (ownership.handOff) is the target's.
func (b *Broker) replTargetRedirect(ctx context.Context, bd bundle) (string, error) {
	bi, ok, err := b.own.owner(ctx, bd)
	if err == nil && !ok {
		bi, ok = b.own.handedTo(bd)
	}
	if err != nil || !ok || bi.ID == b.cfg.BrokerID || bi.ReplicationAddr == "" {
		return "", fmt.Errorf("bundle %s: no owner to redirect to (%v)", bd, err)
	}
	return bi.ReplicationAddr, nil
}

func (b *Broker) replTarget(ctx context.Context, tn meta.TopicName, pol meta.Policies) (*Topic, string, error) {
	bd, err := b.bundleFor(ctx, pol, tn)
	if err != nil {
		return nil, "", err
	}
	redirect := func() (string, error) { return b.replTargetRedirect(ctx, bd) }
	if bi, ok, err := b.own.owner(ctx, bd); err == nil && ok && bi.ID != b.cfg.BrokerID {
		a, err := redirect()
		return nil, a, err
	}
	if _, ok := b.own.handedTo(bd); ok {
		if a, err := redirect(); err == nil {
			return nil, a, nil
		}
	}
	t, err := b.getTopic(ctx, tn.String(), true)
	if errors.Is(err, meta.ErrTopicFenced) {
		a, rerr := redirect()
		if rerr == nil {
			return nil, a, nil
		}
	}
	return t, "", err
}

// appendReplicated appends entries from another region, in order, and
// calls done once every one is persisted or failed (with the first
// failure), on the managed ledger's delivery goroutine, or at once when
// nothing is to be written or the topic is closing. It does not wait. If
// one fails the topic reloads (the entries before it may be stored; the
// next load rebuilds each origin's record from the log, so nothing is
// stored twice).
func (t *Topic) appendReplicated(entries []replicator.Entry, done func(error)) {
	n := 0
	for i := range entries {
		if !entries[i].Skip {
			n++
		}
	}
	if n == 0 {
		done(nil)
		return
	}
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		done(fmt.Errorf("%w: %s is closing", meta.ErrTopicFenced, t.name))
		return
	}
	var remaining atomic.Int32
	remaining.Store(int32(n))
	var firstErr error
	var errMu sync.Mutex
	for i := range entries {
		e := &entries[i]
		if e.Skip {
			continue
		}
		o := entry.Origin{Region: e.Origin, Seq: e.OriginSeq, ID: mledger.Position{Ledger: e.OriginID.Ledger, Entry: e.OriginID.Entry}}
		payload := entry.Encode(e.PublishMs, o, e.Data)
		msg := e.Data
		handed := time.Now()
		t.ml.AppendAsync(payload, func(pos mledger.Position, err error) {
			if err == nil {
				t.repl.ReplicatedPersisted(e, pos, handed, time.Now()) // before dispatch reads it
				meta, merr := entry.ParseMeta(payload)
				t.mu.Lock()
				t.noteEntryLocked(pos, entry.Decoded{Origin: o, Msg: msg})
				if merr == nil && keepsDedup(meta.ProducerName) {
					t.lastBatch = meta.NumMessages
				}
				if merr == nil && keepsDedup(meta.ProducerName) && meta.Completes() {
					// The producer's sequence ids travel with its entries: a
					// producer that fails over here and resends is deduplicated
					// (against a chunked message's last chunk: the chunks
					// before it share its sequence id).
					st := t.dedupFor(meta.ProducerName)
					if st.connected == 0 {
						st.idleSince = time.Now()
					}
					st.lastPushed = max(st.lastPushed, meta.HighestSeqID)
					st.lastPersisted = max(st.lastPersisted, meta.HighestSeqID)
					st.remember(meta.SequenceID, meta.HighestSeqID, pos)
				}
				t.mu.Unlock()
				t.notifySubs()
			} else {
				errMu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				errMu.Unlock()
				if !t.seqBroken.Swap(true) {
					t.b.log.Warn("replicated append failed; reloading the topic", "topic", t.name.String(), "err", err)
					go t.close(context.Background())
				}
			}
			if remaining.Add(-1) == 0 {
				errMu.Lock()
				err := firstErr
				errMu.Unlock()
				done(err)
			}
		})
	}
}
