package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/broker/access"
	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/broker/replication"
	"github.com/meridian-mq/meridian/broker/security"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/ratemeter"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// Topic is a loaded topic: its managed ledger, producers, subscriptions
// and deduplication state. Safe for concurrent use.
type Topic struct {
	b    *Broker
	name meta.TopicName
	ml   *mledger.ManagedLedger
	pol  meta.Policies
	// store holds the topic's own records (its managed ledger's store: the
	// region's, or the global store for a stretched namespace).
	store *cluster.Store
	// bundle the topic was loaded under (a split may narrow it; the topic
	// stays on this broker unless its new bundle moves).
	bundle bundle

	mu        sync.Mutex
	producers map[*Producer]struct{}
	// access decides on producers' access modes (produceraccess.go);
	// waiting holds the queued (WaitForExclusive) ones; producerKeys
	// numbers producers for it. epochMu orders writes of the topic epoch.
	access       *access.Core
	waiting      map[access.ID]*waiter
	producerKeys uint64
	epochMu      sync.Mutex
	// consumers counts the consumers of all subscriptions (changed under
	// the subscription's lock), for MaxConsumersPerTopic.
	consumers atomic.Int64
	subs      map[string]*Subscription
	dedup     map[string]*dedupState
	sinceSnap int
	// nextDedupSweep: when the policy loop next looks for producer names
	// idle past DedupProducerInactivityTimeout (expireDedup).
	nextDedupSweep time.Time
	closed         bool
	lastBatch      int   // messages in the last entry appended (GET_LAST_MESSAGE_ID)
	quotaErr       error // set while a backlog quota blocks producers
	msgsIn         int64 // messages persisted since the topic was loaded
	// in meters the messages persisted (admin stats); lastPublishMs is
	// the broker's publish time of the last one.
	in            ratemeter.Meter
	lastPublishMs int64
	// perEntry: messages per entry dispatched (a moving average, as
	// math.Float64bits; 0 until the first), so a dispatch reads about as
	// many entries as its consumers have permits for (dispatch.EntriesFor).
	perEntry atomic.Uint64

	// Identity across regions (entry.go, replicator/doc.go), under mu and
	// moved only by append callbacks, in log order: the last local
	// sequence number persisted and the bytes of local entries, each
	// origin's highest sequence number persisted here, the position and
	// wire id of the last entry, and origin id → local position.
	localSeq   uint64
	localBytes int64
	applied    map[string]uint64
	lastPos    mledger.Position
	lastWire   mledger.Position
	index      originIndex

	// seqMu orders local sequence numbers with appends: a number is taken
	// and its entry handed to the managed ledger under it, so numbers
	// follow log order. nextSeq is the last number taken.
	seqMu   sync.Mutex
	nextSeq uint64
	// seqBroken: an append failed after its sequence number was taken, so
	// the numbers may have a hole; the topic unloads and the next load
	// recovers them from the log.
	seqBroken atomic.Bool

	// repl is the topic's replication state (broker/replication): its
	// senders and appliers, sync receipts, replicated subscriptions.
	repl *replication.Topic

	// The dedup snapshot (dedupsnap.go): a ledger snapshot of the
	// managed ledger, opened by load. Snapshots taken in append callbacks
	// are queued (snapNext, the latest only) and written one at a time by
	// one goroutine (snapBusy); snapMu orders every write, the final one
	// at unload included, and snapWritten is the position of the last one
	// written (an older one is never written after it). legacySnap: the
	// state came from the etcd record of earlier versions, deleted once a
	// snapshot is written. snapBytes: the size of the last snapshot read
	// or written (metrics).
	dedupSnap   *mledger.Snapshot
	snapQMu     sync.Mutex
	snapNext    *dedupSnapshot
	snapBusy    bool
	snapMu      sync.Mutex
	snapWritten mledger.Position
	legacySnap  bool
	snapBytes   atomic.Int64

	// loaded: what load found, for the "topic loaded" log line.
	loaded []any

	// A planned switchover's hold (switchover.go), under mu: heldSends
	// wait in arrival order; replaying: released sends are being appended,
	// so new ones queue behind them. admitting counts the sends the gate
	// let through and not answered yet (raised under mu).
	heldSends []func(drop bool)
	replaying bool
	admitting atomic.Int64
	// The RPO budget's gate (rpogate.go), under mu: rpoHeld holds sends
	// in heldSends as a switchover's hold does; rpoErr refuses producers.
	rpoHeld bool
	rpoErr  error

	// unloadHook, if set (tests), runs first in an unload's finish: a
	// hook that never returns is an unload that never finishes.
	unloadHook func()
}

// dedupState is one producer name's deduplication state. Ordering
// contract: lastPersisted only moves when the managed ledger confirmed an
// entry, in append order, so a snapshot taken in a callback covers every
// entry up to that callback's position.
type dedupState struct {
	lastPushed    int64 // highest sequence id accepted for append
	lastPersisted int64 // highest sequence id persisted
	// connected counts the topic's producers of this name; idleSince is
	// when the last one left (or the state was loaded or last replicated
	// to): a name with none connected for DedupProducerInactivityTimeout
	// loses its state (expireDedup).
	connected  int
	idleSince  time.Time
	inflight   map[int64]*pendingPublish
	recent     []recentPos // ring of the last positions, to answer resends
	recentNext int         // where the ring writes next once full
}

type recentPos struct {
	seq, highest int64
	pos          mledger.Position
}

type pendingPublish struct {
	waiters []func(mledger.Position, error)
}

const recentPositions = 1024

func newTopic(b *Broker, tn meta.TopicName, ml *mledger.ManagedLedger, pol meta.Policies) *Topic {
	t := &Topic{
		b: b, name: tn, ml: ml, pol: pol, store: b.cfg.Store,
		producers: map[*Producer]struct{}{},
		access:    access.New(0, false),
		waiting:   map[access.ID]*waiter{},
		subs:      map[string]*Subscription{},
		dedup:     map[string]*dedupState{},
		applied:   map[string]uint64{},
		lastPos:   mledger.Position{Ledger: -1, Entry: -1},
		lastWire:  mledger.Position{Ledger: -1, Entry: -1},

		snapWritten: mledger.Position{Ledger: -1, Entry: -1},
	}
	t.repl = b.repl.NewTopic(tn, ml, replLog{t})
	return t
}

// load rebuilds the deduplication state: the last snapshot
// (dedupsnap.go), then a replay of every entry after it (their metadata
// carry producer name and sequence ids).
func (t *Topic) load(ctx context.Context) error {
	if err := t.loadEpoch(ctx); err != nil {
		return fmt.Errorf("topic epoch: %w", err)
	}
	from := t.ml.FirstPosition()
	snap, err := t.readSnapshot(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	if snap != nil {
		for name, p := range snap.Producers {
			if !keepsDedup(name) {
				continue // from before the limit: no producer of that name can connect
			}
			idle := now
			if p.IdleMs > 0 {
				idle = time.UnixMilli(p.IdleMs)
			}
			t.dedup[name] = &dedupState{lastPushed: p.Seq, lastPersisted: p.Seq, inflight: map[int64]*pendingPublish{}, idleSince: idle}
		}
		t.localSeq, t.localBytes = snap.LocalSeq, snap.LocalBytes
		for o, n := range snap.Applied {
			t.applied[o] = n
		}
		// A replicated topic replays everything retained: the origin-id
		// index is rebuilt from the entries (not persisted yet).
		if next := t.ml.Next(snap.Position); from.Less(next) && !t.replicated() {
			from = next
			// The snapshot covers the log up to its position: the next
			// snapshot (the one at unload, if nothing is appended) is at
			// least there, not at -1:-1 (which made the load after it
			// replay the whole log).
			t.lastPos, t.lastWire = snap.Position, snap.Position
		}
	}
	last := t.ml.LastConfirmed()
	replayed := 0
	start := time.Now()
	for !last.Less(from) {
		entries, err := t.ml.ReadEntries(ctx, from, 500, 8<<20)
		if err != nil {
			return fmt.Errorf("dedup replay from %s: %w", from, err)
		}
		if len(entries) == 0 {
			break
		}
		for _, e := range entries {
			d, err := entry.Decode(e.Data)
			if err != nil {
				continue
			}
			t.noteEntryLocked(e.Pos, d)
			m, err := entry.ParseMeta(e.Data)
			if err != nil || !keepsDedup(m.ProducerName) {
				continue
			}
			t.lastBatch = m.NumMessages
			replayed++
			if !m.Completes() {
				continue // a chunk before the last: no dedup point (publishMetered)
			}
			st := t.dedupFor(m.ProducerName)
			st.lastPushed = max(st.lastPushed, m.HighestSeqID)
			st.lastPersisted = max(st.lastPersisted, m.HighestSeqID)
			st.remember(m.SequenceID, m.HighestSeqID, e.Pos)
		}
		from = t.ml.Next(entries[len(entries)-1].Pos)
	}
	t.b.metrics.dedupReplayed.Add(float64(replayed))
	t.loaded = []any{"dedup_producers", len(t.dedup), "dedup_snapshot_bytes", t.snapBytes.Load(), "dedup_replayed_entries", replayed,
		"dedup_replay_took", time.Since(start).Round(time.Millisecond)}
	if snap != nil {
		t.loaded = append(t.loaded, "dedup_snapshot_position", snap.Position.String())
	}
	// A replicator's cursor knows the sequence number of the last local
	// entry it passed, which retention may have deleted since.
	for _, c := range t.ml.Cursors() {
		if replication.IsCursor(c.Name()) {
			if n := replication.CursorSeq(c.Properties()); n > t.localSeq {
				t.localSeq = n
			}
		}
	}
	t.nextSeq = t.localSeq
	// Every durable subscription stored with the topic is one of its
	// subscriptions from the load on, with consumers or not (as Pulsar's):
	// the admin API lists it and its backlog, TTL and backlog quotas apply
	// to it. (They appeared only once a consumer came back: after a
	// restart or an unload, a subscription nobody consumed was missing
	// from the stats and its messages never expired.)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.ml.Cursors() {
		if replication.IsCursor(c.Name()) || t.subs[c.Name()] != nil {
			continue
		}
		t.subs[c.Name()] = newSubscription(t, c.Name(), 0, c, true)
		t.b.metrics.subscriptions.Inc()
	}
	return nil
}

// noteEntryLocked records a persisted entry's identity: sequence numbers,
// the last position and its wire id, the origin-id index. Called in log
// order (load replay, append callbacks).
func (t *Topic) noteEntryLocked(pos mledger.Position, d entry.Decoded) {
	t.lastPos, t.lastWire = pos, pos
	if d.Origin.Region == "" {
		if d.Origin.Seq > t.localSeq {
			t.localSeq = d.Origin.Seq
		}
		t.localBytes += int64(len(d.Msg))
		return
	}
	if d.Origin.Seq > t.applied[d.Origin.Region] {
		t.applied[d.Origin.Region] = d.Origin.Seq
	}
	t.lastWire = d.Origin.ID
	t.index.add(d.Origin.ID, pos)
	t.repl.EntryArrived()
}

// replicated reports whether the topic's namespace spans several regions.
// Read at load (pol is set before the topic is shared).
func (t *Topic) replicated() bool { return len(t.pol.ReplicationClusters) > 1 }

// policies returns the namespace's policies as last read.
func (t *Topic) policies() meta.Policies {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pol
}

// wireID is the message id clients see for the entry at pos: a
// replicated entry keeps the id its origin region gave it.
func (t *Topic) wireID(pos mledger.Position, d entry.Decoded) mledger.Position {
	if d.Origin.Region != "" {
		return d.Origin.ID
	}
	return pos
}

// localPos maps a message id a client sent (an ack, a seek, a reader's
// start) to the local position: ids of entries replicated here name their
// origin's ledgers, which never collide with local ones (ledger ids come
// from the global allocator).
func (t *Topic) localPos(id mledger.Position) mledger.Position {
	if p, ok := t.index.lookup(id); ok {
		return p
	}
	return id
}

// lastIDs returns the last entry's position and the id clients know it by
// (LastConfirmed when nothing was appended since the load).
func (t *Topic) lastIDs() (pos, wire mledger.Position) {
	lc := t.ml.LastConfirmed()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lastPos == lc {
		return lc, t.lastWire
	}
	return lc, lc
}

func (t *Topic) dedupFor(name string) *dedupState {
	st := t.dedup[name]
	if st == nil {
		st = &dedupState{lastPushed: -1, lastPersisted: -1, inflight: map[int64]*pendingPublish{}, idleSince: time.Now()}
		t.dedup[name] = st
	}
	return st
}

// remember records an entry's sequence range, overwriting the oldest once
// the ring is full (constant work per publish).
func (st *dedupState) remember(seq, highest int64, pos mledger.Position) {
	r := recentPos{seq, highest, pos}
	if len(st.recent) < recentPositions {
		st.recent = append(st.recent, r)
		return
	}
	st.recent[st.recentNext] = r
	st.recentNext = (st.recentNext + 1) % recentPositions
}

// find returns the position of the entry holding seq, if remembered (a
// producer's sequence ranges do not overlap, so any match is the one).
func (st *dedupState) find(seq int64) (mledger.Position, bool) {
	for _, r := range st.recent {
		if r.seq <= seq && seq <= r.highest {
			return r.pos, true
		}
	}
	return mledger.Position{Ledger: -1, Entry: -1}, false
}

func (t *Topic) dedupEnabled() bool {
	return t.pol.Deduplication == nil || *t.pol.Deduplication
}

// producerLastSeq is the last persisted sequence id of p's name and the
// topic epoch (nil: none), if p is still one of the topic's producers.
func (t *Topic) producerLastSeq(p *Producer) (int64, *uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.producers[p]; !ok || t.closed || p.fenced {
		return 0, nil, false
	}
	var epoch *uint64
	if e, ok := t.access.Epoch(); ok {
		epoch = &e
	}
	return t.dedupFor(p.name).lastPersisted, epoch, true
}

// publish appends one SEND's entry, deduplicating by producer name and
// sequence id. cb runs once with the entry's position; for a resend of a
// persisted message it runs at once with the original position (or -1:-1
// when that is no longer remembered). completes is false for a chunk of
// a chunked message other than its last (entry.Meta.Completes): such a
// chunk is appended and answered with its own position, never
// deduplicated, and leaves the producer's sequence state alone — its
// sequence id is the whole message's, which only the last chunk records.
func (t *Topic) publish(producerName string, seq int64, numMsgs int, completes bool, fm entry.Framed, cb func(mledger.Position, error)) {
	t.publishMetered(nil, producerName, nil, seq, numMsgs, completes, fm, cb)
}

// publishMetered is publish from producer from (nil: not a client's) that
// also counts the persisted message on in (its producer's meter; nil:
// none). A fenced producer's SEND is dropped without an answer (its client
// is told to reconnect, and fails its pending sends when the reconnect is
// refused).
func (t *Topic) publishMetered(from *Producer, producerName string, in *ratemeter.Meter, seq int64, numMsgs int, completes bool, fm entry.Framed, cb func(mledger.Position, error)) {
	msg := fm.Msg()
	highest := seq + int64(max(numMsgs, 1)) - 1
	t.mu.Lock()
	if t.closed || (from != nil && from.fenced) {
		t.mu.Unlock()
		cb(mledger.Position{}, errDropSilently)
		return
	}
	if err := t.quotaErr; err != nil {
		t.mu.Unlock()
		cb(mledger.Position{}, err)
		return
	}
	// st is nil for a chunk before the last: as in Pulsar, it is stored
	// as often as it is sent (a resend after a reconnect stores it again;
	// the consumer drops the chunks it already holds).
	var st *dedupState
	if completes {
		st = t.dedup[producerName]
		if st == nil && !keepsDedup(producerName) {
			// A name no producer can connect with (a quarantined entry from
			// another region's older broker): stored, but no state kept.
			st = &dedupState{lastPushed: -1, lastPersisted: -1, inflight: map[int64]*pendingPublish{}}
		} else if st == nil {
			st = t.dedupFor(producerName)
		}
	}
	if st != nil && t.dedupEnabled() && highest <= st.lastPushed {
		if p, ok := st.inflight[seq]; ok {
			p.waiters = append(p.waiters, cb)
			t.mu.Unlock()
			t.b.metrics.dedupDropped.Inc()
			return
		}
		if highest <= st.lastPersisted {
			pos, _ := st.find(seq)
			t.mu.Unlock()
			t.b.metrics.dedupDropped.Inc()
			// Not known to be in the other regions yet (sync): answer
			// after everything tracked so far is.
			if t.repl.Hold(0, func() { cb(pos, nil) }) {
				return
			}
			cb(pos, nil)
			return
		}
	}
	pp := &pendingPublish{waiters: []func(mledger.Position, error){cb}}
	if st != nil {
		st.lastPushed = max(st.lastPushed, highest)
		st.inflight[seq] = pp
	}
	t.mu.Unlock()

	start := time.Now()
	t.seqMu.Lock()
	if t.seqBroken.Load() {
		t.seqMu.Unlock()
		t.mu.Lock()
		if st != nil {
			delete(st.inflight, seq)
			st.lastPushed = st.lastPersisted
		}
		t.mu.Unlock()
		cb(mledger.Position{}, errDropSilently)
		return
	}
	t.nextSeq++
	origin := entry.Origin{Seq: t.nextSeq}
	stored := entry.EncodeFramed(start.UnixMilli(), origin, fm)
	t.ml.AppendAsync(stored, func(pos mledger.Position, err error) {
		if err == nil {
			t.b.metrics.storageLatency.Observe(time.Since(start).Seconds())
		} else if !t.seqBroken.Swap(true) {
			// The sequence may have a hole now: reload to recover it from
			// the log (the client resends what was not acknowledged).
			t.b.log.Warn("append failed; reloading the topic", "topic", t.name.String(), "err", err)
			go t.close(context.Background())
		}
		t.mu.Lock()
		if st != nil {
			delete(st.inflight, seq)
		}
		var snap *dedupSnapshot
		if err == nil {
			t.noteEntryLocked(pos, entry.Decoded{Origin: origin, Msg: msg})
			if st != nil {
				st.lastPersisted = max(st.lastPersisted, highest)
				st.remember(seq, highest, pos)
				if st.connected == 0 {
					st.idleSince = time.Now() // a quarantined replicated entry (replhost.go)
				}
			}
			t.lastBatch = max(numMsgs, 1)
			t.msgsIn += int64(max(numMsgs, 1))
			t.lastPublishMs = start.UnixMilli()
			t.sinceSnap++
			if t.sinceSnap >= t.b.cfg.DedupSnapshotInterval {
				t.sinceSnap = 0
				snap = t.snapshotLocked(pos)
			}
		} else if st != nil {
			// Nothing after lastPersisted is known to be stored: accept the
			// client's resends.
			st.lastPushed = st.lastPersisted
		}
		waiters := pp.waiters
		t.mu.Unlock()
		if snap != nil {
			t.queueSnapshot(snap)
		}
		if err == nil {
			now := time.Now()
			t.repl.Persisted(pos, start, now) // before the senders wake for it
			t.in.Add(now, int64(max(numMsgs, 1)), int64(len(msg)))
			if in != nil {
				in.Add(now, int64(max(numMsgs, 1)), int64(len(msg)))
			}
			t.b.metrics.msgsIn.Add(float64(max(numMsgs, 1)))
			t.b.metrics.bytesIn.Add(float64(len(msg)))
			t.notifySubs()
			if t.repl.Hold(origin.Seq, func() {
				for _, w := range waiters {
					w(pos, nil)
				}
			}) {
				return
			}
		}
		for _, w := range waiters {
			w(pos, err)
		}
	})
	t.seqMu.Unlock()
}

func (t *Topic) lastEntryBatchSize() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastBatch
}

func (t *Topic) notifySubs() {
	t.mu.Lock()
	subs := make([]*Subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	for _, s := range subs {
		s.wake()
	}
	t.repl.Wake()
}

// subscribe adds a consumer to (creating if needed) a subscription.
func (t *Topic) subscribe(ctx context.Context, c *conn, m *pb.CommandSubscribe) (*Consumer, error) {
	name := m.GetSubscription()
	if err := meta.ValidSubscription(name); err != nil {
		return nil, err
	}
	durable := m.Durable == nil || m.GetDurable()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: %s is closing", meta.ErrTopicFenced, t.name)
	}
	s := t.subs[name]
	t.mu.Unlock()
	if s == nil {
		var cur *mledger.Cursor
		if durable {
			initial := mledger.Latest
			if m.GetInitialPosition() == pb.CommandSubscribe_Earliest {
				initial = mledger.Earliest
			}
			var err error
			cur, err = t.ml.OpenCursor(ctx, name, initial)
			if err != nil {
				return nil, fmt.Errorf("%w: cursor %s: %v", meta.ErrServiceNotReady, name, err)
			}
		} else {
			cur = t.ml.NewNonDurableCursor(t.startPosition(m))
		}
		t.mu.Lock()
		if existing := t.subs[name]; existing != nil {
			s = existing
		} else {
			s = newSubscription(t, name, m.GetSubType(), cur, durable)
			t.subs[name] = s
			t.b.metrics.subscriptions.Inc()
		}
		t.mu.Unlock()
	}
	return s.addConsumer(c, m)
}

// ensureInitialSubscription creates the durable subscription name at the
// earliest position unless the topic has it (a producer's
// initial_subscription_name, as Pulsar's: the Go client's dead-letter
// producer asks for one, so what it writes is kept for a consumer that
// subscribes later).
func (t *Topic) ensureInitialSubscription(ctx context.Context, name string) error {
	if err := meta.ValidSubscription(name); err != nil {
		return err
	}
	t.mu.Lock()
	closed, s := t.closed, t.subs[name]
	t.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: %s is closing", meta.ErrTopicFenced, t.name)
	}
	if s != nil {
		return nil
	}
	cur, err := t.ml.OpenCursor(ctx, name, mledger.Earliest)
	if err != nil {
		return fmt.Errorf("%w: initial subscription %s: %v", meta.ErrServiceNotReady, name, err)
	}
	t.mu.Lock()
	if t.subs[name] == nil {
		t.subs[name] = newSubscription(t, name, 0, cur, true)
		t.b.metrics.subscriptions.Inc()
	}
	t.mu.Unlock()
	return nil
}

// startPosition is a non-durable (reader) subscription's first position.
// MessageIds name entries; the reader filters below its start id itself.
func (t *Topic) startPosition(m *pb.CommandSubscribe) mledger.Position {
	id := m.GetStartMessageId()
	if id == nil {
		if m.GetInitialPosition() == pb.CommandSubscribe_Earliest {
			return mledger.Earliest
		}
		return mledger.Latest
	}
	l, e := int64(id.GetLedgerId()), int64(id.GetEntryId())
	switch {
	case l < 0 || e < 0 && l <= 0:
		return mledger.Earliest
	case uint64(id.GetLedgerId()) == 1<<63-1 || l == int64(^uint64(0)>>1):
		return mledger.Latest
	}
	// Start AT the entry holding the message: the client discards what is
	// at or before its start id (or before it, for inclusive readers).
	return t.localPos(mledger.Position{Ledger: l, Entry: e})
}

// unsubscribe deletes the subscription if cs is its only consumer.
func (t *Topic) unsubscribe(ctx context.Context, cs *Consumer) error {
	s := cs.sub
	if n := s.consumerCount(); n > 1 {
		return fmt.Errorf("%w: subscription %s has %d consumers", meta.ErrConsumerBusy, s.name, n)
	}
	s.removeConsumer(cs)
	err := t.deleteSubscription(ctx, s.name)
	if errors.Is(err, meta.ErrNotFound) && !s.durable {
		return nil // its last consumer's leaving removed it (dropNonDurable)
	}
	return err
}

func (t *Topic) deleteSubscription(ctx context.Context, name string) error {
	t.mu.Lock()
	s := t.subs[name]
	delete(t.subs, name)
	t.mu.Unlock()
	if s == nil {
		return fmt.Errorf("%w: subscription %s", meta.ErrNotFound, name)
	}
	s.stop(ctx)
	t.b.metrics.subscriptions.Dec()
	if err := s.deleteDelayed(ctx); err != nil {
		t.b.log.Warn("delayed-delivery index of a deleted subscription not deleted; its snapshots stay until the topic is deleted", "topic", t.name.String(), "sub", name, "err", err)
	}
	if s.durable {
		return t.ml.DeleteCursor(ctx, name)
	}
	return nil
}

// errDropSilently: the topic is closing; the SEND gets no answer, so the
// client keeps it pending and resends it to the next owner after
// CLOSE_PRODUCER (a SEND_ERROR would make the Go client drop the whole
// connection).
var errDropSilently = errors.New("topic closing: send dropped for the client to resend")

// close closes the topic without a hand-off target: its clients look up
// again.
func (t *Topic) close(ctx context.Context) error {
	notify, err := t.unload(ctx)
	notify(nil)
	return err
}

// unload stops the topic, in this order: stop accepting sends (they are
// left unanswered for the client to resend), stop dispatch, let pending
// appends complete and close the managed ledger (cursors flushed), write
// the dedup snapshot. It returns the function that then tells the clients
// to reconnect: call it only after the bundle is released, so the new
// owner can take it when they arrive. Its waits end with ctx (its locks
// aside: moveBundle does not wait for it past ctx).
func (t *Topic) unload(ctx context.Context) (notify func(target *BrokerInfo), err error) {
	notify, finish := t.beginUnload()
	if finish == nil {
		return notify, nil
	}
	return notify, finish(ctx)
}

// beginUnload stops accepting sends and subscriptions and returns the
// function telling the topic's clients to reconnect, and finish, which
// does the rest of unload (nil if the topic was closed already). The
// notification does not depend on finish: a hand-off whose finish did not
// end in time still releases the bundle and points the clients at the new
// owner (moveBundle).
func (t *Topic) beginUnload() (notify func(target *BrokerInfo), finish func(context.Context) error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return func(*BrokerInfo) {}, nil
	}
	t.closed = true
	producers := make([]*Producer, 0, len(t.producers))
	for p := range t.producers {
		producers = append(producers, p)
	}
	subs := make([]*Subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.refuseWaitingLocked()
	t.mu.Unlock()
	notify = func(target *BrokerInfo) {
		for _, p := range producers {
			p.closeByBroker(target)
		}
		for _, s := range subs {
			s.closeConsumers(target)
		}
	}
	finish = func(ctx context.Context) error {
		if t.unloadHook != nil {
			t.unloadHook()
		}
		for _, s := range subs {
			s.stop(ctx)
		}
		t.repl.Stop(ctx)
		err := t.ml.Close(ctx)
		t.mu.Lock()
		snap := t.snapshotLocked(t.lastPos)
		t.mu.Unlock()
		if err == nil {
			t.writeSnapshot(ctx, snap)
		}
		t.b.forgetTopic(t)
		return err
	}
	return notify, finish
}

// Producer is one producer on a connection.
type Producer struct {
	id    uint64
	name  string
	conn  *conn
	topic *Topic
	mode  access.Mode
	key   access.ID // its name in the topic's access core
	// fenced: an ExclusiveWithFencing producer took the topic over; its
	// SENDs are dropped. Under the topic's mu.
	fenced        bool
	schemaVersion []byte
	pending       chan struct{} // bounds SENDs not yet persisted
	// in meters its messages persisted; since is when it was created.
	in    ratemeter.Meter
	since time.Time
}

// publish handles one SEND; receipts go back in send order because the
// managed ledger completes appends in order.
func (p *Producer) publish(m *pb.CommandSend, msg entry.Framed) {
	p.pending <- struct{}{} // back-pressure: blocks the connection's reader when full
	seq := m.GetSequenceId()
	n := int(m.GetNumMessages())
	// A chunk is marked by its SEND (is_chunk, as Pulsar's broker reads
	// it): only then is the metadata parsed, to tell the last chunk.
	completes := !m.GetIsChunk() || entry.CompletesMessage(msg.Msg())
	// A planned switchover's hold (switchover.go): the send waits, in
	// order; dropped unanswered when the namespace moved (the client
	// resends it in the new active region).
	if p.topic.gateSend(func(drop bool) {
		if drop {
			<-p.pending
			return
		}
		p.topic.admitting.Add(1)
		p.admitted(m, seq, n, completes, msg)
	}) {
		return
	}
	p.admitted(m, seq, n, completes, msg)
}

// admitted appends a SEND the switchover gate let through (counted in
// topic.admitting until answered).
func (p *Producer) admitted(m *pb.CommandSend, seq uint64, n int, completes bool, msg entry.Framed) {
	p.topic.publishMetered(p, p.name, &p.in, int64(seq), n, completes, msg, func(pos mledger.Position, err error) {
		<-p.pending
		p.topic.admitting.Add(-1)
		if errors.Is(err, errDropSilently) {
			return
		}
		if err == nil && p.topic.b.fo.Auto() && !p.topic.b.fo.MayServe(p.topic.name.NamespaceName(), p.topic.policies()) {
			// The self-fence: this region's lease may have run out, so
			// another region may be acknowledging now. The entry is stored
			// here (and replicates), but its receipt must come from the
			// active region: the client resends there.
			err = fmt.Errorf("%w: region %s may not acknowledge for namespace %s now", meta.ErrServiceNotReady, p.topic.b.cfg.Cluster, p.topic.name.NamespaceName())
		}
		if err != nil {
			p.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
				ProducerId: proto.Uint64(p.id), SequenceId: proto.Uint64(seq), Error: serverError(err).Enum(), Message: proto.String(err.Error())}})
			return
		}
		id := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(pos.Ledger)), EntryId: proto.Uint64(uint64(pos.Entry))}
		if p.topic.name.Partition >= 0 {
			id.Partition = proto.Int32(int32(p.topic.name.Partition))
		}
		p.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
			ProducerId: proto.Uint64(p.id), SequenceId: proto.Uint64(seq), MessageId: id}})
	})
}

// closeByBroker tells the client to reconnect (CLOSE_PRODUCER), to target
// directly when given (assignedBrokerServiceUrl, in the client's
// listener: no lookup). The SENDs the
// client has in flight meanwhile find no producer: the connection
// remembers the id as closed by the broker, so handleSend drops them
// without an answer (the client resends them once it has reconnected)
// rather than refusing them.
func (p *Producer) closeByBroker(target *BrokerInfo) {
	p.conn.mu.Lock()
	if p.conn.producers[p.id] == p {
		delete(p.conn.producers, p.id)
		p.conn.closedProducers[p.id] = struct{}{}
	}
	p.conn.mu.Unlock()
	p.topic.removeProducer(p)
	cp := &pb.CommandCloseProducer{ProducerId: proto.Uint64(p.id), RequestId: proto.Uint64(0)}
	if u := p.conn.assignedURL(target); u != "" {
		cp.AssignedBrokerServiceUrl = proto.String(u)
		cp.AssignedBrokerServiceUrlTls = security.TLSURL(u)
	}
	p.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: cp})
}

// findByPublishTime returns the first entry the broker published at or
// after ms; past the end, the position after the last entry.
func (t *Topic) findByPublishTime(ctx context.Context, ms int64) (mledger.Position, error) {
	return t.findByPublishTimeFrom(ctx, t.ml.FirstPosition(), ms)
}

func (t *Topic) findByPublishTimeFrom(ctx context.Context, from mledger.Position, ms int64) (mledger.Position, error) {
	last := t.ml.LastConfirmed()
	for !last.Less(from) {
		entries, err := t.ml.ReadEntries(ctx, from, 500, 8<<20)
		if err != nil {
			return mledger.Position{}, err
		}
		if len(entries) == 0 {
			break
		}
		for _, e := range entries {
			if d, err := entry.Decode(e.Data); err == nil && d.PublishMs >= ms {
				return e.Pos, nil
			}
		}
		from = t.ml.Next(entries[len(entries)-1].Pos)
	}
	return t.ml.Next(last), nil
}
