package broker

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/broker/security"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// Consumer is one consumer of a subscription, on a connection.
type Consumer struct {
	id       uint64
	name     string
	conn     *conn
	sub      *Subscription
	priority int32
	ready    bool // SUCCESS sent: MESSAGE may follow once it has permits
	permits  int
	active   *bool // last ACTIVE_CONSUMER_CHANGE sent (Failover)
	// ring: this consumer's points on the Key_Shared hash ring, computed
	// once from its name and id.
	ring    [ringPoints]uint32
	unacked int
	// out meters the messages sent to it; since is when it subscribed.
	out   rateMeter
	since time.Time
}

// has reports whether cs is one of the subscription's consumers.
func (s *Subscription) has(cs *Consumer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.consumers {
		if c == cs {
			return true
		}
	}
	return false
}

// Subscription dispatches a topic's entries to its consumers by type:
// Exclusive and Failover to the one active consumer, Shared round robin,
// Key_Shared by key hash (consistent hashing, auto-split). One dispatch
// goroutine per subscription; the connection goroutines only change state
// under mu and wake it.
type Subscription struct {
	topic   *Topic
	name    string
	typ     pb.CommandSubscribe_SubType
	cursor  *mledger.Cursor
	durable bool
	// out meters the messages dispatched (admin stats).
	out rateMeter

	mu        sync.Mutex
	consumers []*Consumer
	rr        int
	// pending: dispatched, not yet acknowledged, by position → consumer.
	pending map[mledger.Position]*pendingEntry
	// replay: positions to send (again) before new entries: redeliveries,
	// entries held back, entries of consumers that went away.
	replay   map[mledger.Position]uint32 // → key hash (Key_Shared), else 0
	redelivs map[mledger.Position]uint32
	// batchAcks: batch-index acknowledgements of partly acknowledged
	// entries (bit set = acknowledged), not persisted: a restart redelivers
	// the whole batch and the client filters nothing; see the package doc.
	batchAcks map[mledger.Position][]uint64
	drain     map[uint32]*drainRef

	// The dispatch goroutine (run) runs only while it can make progress
	// or waits for new entries with permits to spend; wake starts it. A
	// subscription without permits (no consumer, or one that asked for
	// nothing) has none: an idle goroutine per subscription cost 100,000
	// idle topics a few hundred MB of stacks.
	wakeCh  chan struct{}
	stopCh  chan struct{}
	stopped bool
	running bool // under mu
	runWG   sync.WaitGroup
}

type pendingEntry struct {
	c    *Consumer
	size int    // messages in the entry
	hash uint32 // key hash (Key_Shared)
}

// drainRef (Key_Shared) records that a key hash has entries dispatched to
// c and not yet acknowledged: further entries of that hash go to c too (or
// wait) until they are all acknowledged, even if the hash now belongs to
// another consumer — so a key never has entries in two consumers' hands at
// once and its order holds when consumers join or leave (the "draining
// hashes" rule of Pulsar's PIP-379).
type drainRef struct {
	c *Consumer
	n int
}

func newSubscription(t *Topic, name string, typ pb.CommandSubscribe_SubType, cur *mledger.Cursor, durable bool) *Subscription {
	s := &Subscription{
		topic: t, name: name, typ: typ, cursor: cur, durable: durable,
		pending:   map[mledger.Position]*pendingEntry{},
		replay:    map[mledger.Position]uint32{},
		redelivs:  map[mledger.Position]uint32{},
		batchAcks: map[mledger.Position][]uint64{},
		drain:     map[uint32]*drainRef{},
		wakeCh:    make(chan struct{}, 1),
		stopCh:    make(chan struct{}),
	}
	s.wake()
	return s
}

// wake makes dispatch look again: it nudges the dispatch goroutine, or
// starts it. Called without s.mu held.
func (s *Subscription) wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	if !s.running {
		s.running = true
		s.runWG.Add(1)
		go s.run()
		return
	}
	// Under mu, so run, deciding under mu whether to leave, sees it.
	select {
	case s.wakeCh <- struct{}{}:
	default:
	}
}

// stop stops dispatch and flushes the cursor, waiting no longer than ctx
// (and 10 s for the flush): a dispatch round in a slow read must not hold
// an unload up. What is not flushed is redelivered, never lost.
func (s *Subscription) stop(ctx context.Context) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	close(s.stopCh)
	if !waitCtx(ctx, s.runWG.Wait) {
		s.topic.b.log.Warn("subscription stop: dispatch still running", "topic", s.topic.name.String(), "sub", s.name, "err", ctx.Err())
	}
	if s.durable {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = s.cursor.Flush(fctx)
	}
}

// waitCtx runs wait (a WaitGroup's Wait, a channel receive) and reports
// whether it returned before ctx ended; if not, it keeps running on its
// own goroutine.
func waitCtx(ctx context.Context, wait func()) bool {
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Subscription) consumerCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.consumers)
}

func (s *Subscription) addConsumer(c *conn, m *pb.CommandSubscribe) (*Consumer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, fmt.Errorf("%w: subscription %s is closing", meta.ErrTopicFenced, s.name)
	}
	if m.GetSubType() != s.typ {
		if len(s.consumers) > 0 {
			return nil, fmt.Errorf("%w: subscription %s is %s, not %s", meta.ErrConsumerBusy, s.name, s.typ, m.GetSubType())
		}
		s.typ = m.GetSubType()
	}
	if s.typ == pb.CommandSubscribe_Exclusive && len(s.consumers) > 0 {
		return nil, fmt.Errorf("%w: exclusive subscription %s already has a consumer", meta.ErrConsumerBusy, s.name)
	}
	cfg := s.topic.b.cfg
	if !underLimit(len(s.consumers), cfg.MaxConsumersPerSubscription) {
		s.topic.b.limitExceeded(limitConsumersPerSubscription)
		return nil, fmt.Errorf("%w: subscription %s has reached the limit of %d consumers", meta.ErrConsumerBusy, s.name, cfg.MaxConsumersPerSubscription)
	}
	if n := s.topic.consumers.Add(1); !underLimit(int(n-1), cfg.MaxConsumersPerTopic) {
		s.topic.consumers.Add(-1)
		s.topic.b.limitExceeded(limitConsumersPerTopic)
		return nil, fmt.Errorf("%w: %s has reached the limit of %d consumers", meta.ErrConsumerBusy, s.topic.name, cfg.MaxConsumersPerTopic)
	}
	cs := &Consumer{id: m.GetConsumerId(), name: m.GetConsumerName(), conn: c, sub: s, priority: m.GetPriorityLevel(), since: time.Now()}
	for i := range cs.ring {
		cs.ring[i] = hash32(fmt.Sprintf("%s#%d#%d", cs.name, cs.id, i))
	}
	s.consumers = append(s.consumers, cs)
	s.topic.b.metrics.consumers.Inc()
	return cs, nil
}

// olderReplayLocked reports whether an entry older than pos waits in
// replay that pos must not overtake: any, for Exclusive and Failover; one
// of the same key hash, for Key_Shared. (Replays can appear while a round
// runs — a consumer leaves — after the round took its snapshot of them.)
func (s *Subscription) olderReplayLocked(pos mledger.Position, h uint32) bool {
	switch s.typ {
	case pb.CommandSubscribe_Shared:
		return false
	case pb.CommandSubscribe_Key_Shared:
		for p, ph := range s.replay {
			if ph == h && p.Less(pos) {
				return true
			}
		}
		return false
	default:
		for p := range s.replay {
			if p.Less(pos) {
				return true
			}
		}
		return false
	}
}

// dropPendingLocked forgets a dispatched entry (acknowledged, or going
// back to replay) and its hold on its key hash.
func (s *Subscription) dropPendingLocked(pos mledger.Position) {
	pe := s.pending[pos]
	if pe == nil {
		return
	}
	delete(s.pending, pos)
	if d := s.drain[pe.hash]; d != nil && d.c == pe.c {
		if d.n--; d.n <= 0 {
			delete(s.drain, pe.hash)
		}
	}
}

// consumerReady is called once SUCCESS went out for cs.
func (s *Subscription) consumerReady(cs *Consumer) {
	s.mu.Lock()
	cs.ready = true
	s.mu.Unlock()
	s.updateActive()
	s.wake()
}

func (s *Subscription) removeConsumer(cs *Consumer) {
	s.mu.Lock()
	idx := -1
	for i, c := range s.consumers {
		if c == cs {
			idx = i
		}
	}
	if idx < 0 {
		s.mu.Unlock()
		return
	}
	s.consumers = append(s.consumers[:idx], s.consumers[idx+1:]...)
	s.topic.consumers.Add(-1)
	s.topic.b.metrics.consumers.Dec()
	// Whatever it had not acknowledged goes to the others.
	for pos, pe := range s.pending {
		if pe.c == cs {
			s.dropPendingLocked(pos)
			s.replay[pos] = pe.hash
		}
	}
	for h, d := range s.drain {
		if d.c == cs {
			delete(s.drain, h)
		}
	}
	s.mu.Unlock()
	s.updateActive()
	s.wake()
}

// closeConsumers sends CLOSE_CONSUMER to every consumer (after a seek, or
// when the topic closes) so clients reconnect — to target directly when
// given.
func (s *Subscription) closeConsumers(target string) {
	s.mu.Lock()
	cs := append([]*Consumer(nil), s.consumers...)
	s.mu.Unlock()
	for _, c := range cs {
		c.conn.mu.Lock()
		if c.conn.consumers[c.id] == c {
			delete(c.conn.consumers, c.id)
		}
		c.conn.mu.Unlock()
		s.removeConsumer(c)
		cc := &pb.CommandCloseConsumer{ConsumerId: proto.Uint64(c.id), RequestId: proto.Uint64(0)}
		if target != "" {
			cc.AssignedBrokerServiceUrl = proto.String(target)
			cc.AssignedBrokerServiceUrlTls = security.TLSURL(target)
		}
		c.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: cc})
	}
}

func (s *Subscription) flow(cs *Consumer, permits int) {
	s.mu.Lock()
	cs.permits += permits
	s.mu.Unlock()
	s.updateActive()
	s.wake()
}

// activeLocked returns the consumer that receives everything under
// Exclusive and Failover: consumers sorted by priority level, then name;
// for partition i the (i mod n)-th, else the first.
func (s *Subscription) activeLocked() *Consumer {
	if len(s.consumers) == 0 {
		return nil
	}
	if s.typ == pb.CommandSubscribe_Exclusive {
		return s.consumers[0]
	}
	sorted := append([]*Consumer(nil), s.consumers...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].priority != sorted[j].priority {
			return sorted[i].priority < sorted[j].priority
		}
		return sorted[i].name < sorted[j].name
	})
	i := 0
	if p := s.topic.name.Partition; p > 0 {
		i = p % len(sorted)
	}
	return sorted[i]
}

// updateActive sends ACTIVE_CONSUMER_CHANGE (Failover) to consumers whose
// state changed.
func (s *Subscription) updateActive() {
	if s.typ != pb.CommandSubscribe_Failover {
		return
	}
	s.mu.Lock()
	act := s.activeLocked()
	type note struct {
		c      *Consumer
		active bool
	}
	var notes []note
	for _, c := range s.consumers {
		if !c.ready {
			continue
		}
		a := c == act
		if c.active == nil || *c.active != a {
			c.active = &a
			notes = append(notes, note{c, a})
		}
	}
	s.mu.Unlock()
	for _, n := range notes {
		n.c.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_ACTIVE_CONSUMER_CHANGE.Enum(), ActiveConsumerChange: &pb.CommandActiveConsumerChange{
			ConsumerId: proto.Uint64(n.c.id), IsActive: proto.Bool(n.active)}})
	}
}

// ack handles ACK: individual (with batch-index acks when ack_set is
// present) or cumulative.
func (s *Subscription) ack(cs *Consumer, m *pb.CommandAck) {
	s.mu.Lock()
	var full []mledger.Position
	if m.GetAckType() == pb.CommandAck_Cumulative {
		if len(m.MessageId) == 0 {
			s.mu.Unlock()
			return
		}
		p := s.topic.localPos(positionOf(m.MessageId[0]))
		if m.MessageId[0].AckSet != nil && len(m.MessageId[0].AckSet) > 0 {
			// Cumulative ack inside a batch: everything before this entry.
			p = mledger.Position{Ledger: p.Ledger, Entry: p.Entry - 1}
		}
		for pos := range s.pending {
			if !p.Less(pos) {
				s.dropPendingLocked(pos)
				delete(s.redelivs, pos)
				delete(s.batchAcks, pos)
			}
		}
		for pos := range s.replay {
			if !p.Less(pos) {
				delete(s.replay, pos)
			}
		}
		s.mu.Unlock()
		if p.Entry >= 0 {
			s.cursor.AckCumulative(p)
		}
		s.afterAck()
		return
	}
	for _, id := range m.MessageId {
		p := s.topic.localPos(positionOf(id))
		if len(id.AckSet) > 0 {
			pe := s.pending[p]
			if pe == nil || !s.batchAckLocked(p, id.AckSet, pe.size) {
				continue
			}
		}
		s.dropPendingLocked(p)
		delete(s.replay, p)
		delete(s.redelivs, p)
		delete(s.batchAcks, p)
		full = append(full, p)
	}
	s.mu.Unlock()
	if len(full) > 0 {
		s.cursor.Ack(full...)
		s.afterAck()
	}
}

// batchAckLocked records a batch-index ack. ack_set has a bit SET for each
// index still unacknowledged (Java BitSet long words); it reports whether
// every index of the entry is now acknowledged.
func (s *Subscription) batchAckLocked(p mledger.Position, ackSet []int64, size int) bool {
	acked := s.batchAcks[p]
	if acked == nil {
		acked = make([]uint64, (size+63)/64)
		s.batchAcks[p] = acked
	}
	all := true
	for i := 0; i < size; i++ {
		w, bit := i/64, uint(i%64)
		stillUnacked := w < len(ackSet) && uint64(ackSet[w])&(1<<bit) != 0
		if !stillUnacked {
			acked[w] |= 1 << bit
		}
		if acked[w]&(1<<bit) == 0 {
			all = false
		}
	}
	return all
}

// afterAck wakes dispatch: acknowledgements free key hashes and permits.
func (s *Subscription) afterAck() { s.wake() }

// redeliver handles REDELIVER_UNACKNOWLEDGED_MESSAGES (negative acks): the
// listed entries (all of cs's unacknowledged ones if none listed) are sent
// again.
func (s *Subscription) redeliver(cs *Consumer, ids []*pb.MessageIdData) {
	s.mu.Lock()
	if len(ids) == 0 {
		for pos, pe := range s.pending {
			if pe.c == cs {
				s.dropPendingLocked(pos)
				s.replay[pos] = pe.hash
			}
		}
	}
	for _, id := range ids {
		p := s.topic.localPos(positionOf(id))
		if pe := s.pending[p]; pe != nil && pe.c == cs {
			s.dropPendingLocked(p)
			s.replay[p] = pe.hash
		}
	}
	s.mu.Unlock()
	s.wake()
}

// seekTo resets the cursor (Seek by id); consumers are closed afterwards
// by the caller.
func (s *Subscription) seekTo(ctx context.Context, p mledger.Position, _ bool) error {
	if p.Ledger < 0 {
		p = s.topic.ml.FirstPosition()
	}
	s.mu.Lock()
	s.pending = map[mledger.Position]*pendingEntry{}
	s.replay = map[mledger.Position]uint32{}
	s.batchAcks = map[mledger.Position][]uint64{}
	s.drain = map[uint32]*drainRef{}
	s.mu.Unlock()
	return s.cursor.ResetTo(ctx, p)
}

// seekTime resets the cursor to the first entry the broker published at
// or after ms (the broker's clock, never the client's).
func (s *Subscription) seekTime(ctx context.Context, ms int64) error {
	p, err := s.topic.findByPublishTime(ctx, ms)
	if err != nil {
		return err
	}
	return s.seekTo(ctx, p, false)
}

func (s *Subscription) run() {
	defer s.runWG.Done()
	for {
		notify := s.topic.ml.Notify(s.readHorizon())
		more, caughtUp := s.dispatchOnce()
		if more {
			continue
		}
		// Wait for new entries only when dispatch read everything there is;
		// otherwise (no permits, or entries held back) only a FLOW, an ack
		// or a consumer change can let it progress — waiting on Notify then
		// would wake at once, forever, with a backlog. Each of those wakes
		// dispatch, which starts this goroutine again: leave, unless a wake
		// came meanwhile.
		if !caughtUp {
			s.mu.Lock()
			select {
			case <-s.wakeCh:
				s.mu.Unlock()
				continue
			default:
			}
			s.running = false
			s.mu.Unlock()
			return
		}
		select {
		case <-s.stopCh:
			return
		case <-s.wakeCh:
		case <-notify:
		}
	}
}

// readHorizon is the position just before the cursor's read position:
// Notify(readHorizon) fires when an entry dispatch has not read yet lands.
func (s *Subscription) readHorizon() mledger.Position {
	p := s.cursor.ReadPosition()
	return mledger.Position{Ledger: p.Ledger, Entry: p.Entry - 1}
}

// chooseLocked picks the consumer for an entry with key, or nil if it must
// wait (no permits, or held back).
func (s *Subscription) chooseLocked(pos mledger.Position, key string) *Consumer {
	switch s.typ {
	case pb.CommandSubscribe_Exclusive, pb.CommandSubscribe_Failover:
		c := s.activeLocked()
		if c == nil || !c.ready || c.permits <= 0 {
			return nil
		}
		return c
	case pb.CommandSubscribe_Shared:
		n := len(s.consumers)
		for i := 0; i < n; i++ {
			c := s.consumers[(s.rr+i)%n]
			if c.ready && c.permits > 0 {
				s.rr = (s.rr + i + 1) % n
				return c
			}
		}
		return nil
	default: // Key_Shared: the consumer draining this hash, else its owner
		c := s.keyOwnerLocked(key)
		if d := s.drain[hash32(key)]; d != nil {
			c = d.c
		}
		if c == nil || !c.ready || c.permits <= 0 {
			return nil
		}
		return c
	}
}

// ringPoints is how many points each consumer has on the hash ring.
const ringPoints = 100

// keyOwnerLocked maps a key to a consumer by consistent hashing
// (ringPoints per consumer): adding a consumer moves only the keys it takes.
func (s *Subscription) keyOwnerLocked(key string) *Consumer {
	if len(s.consumers) == 0 {
		return nil
	}
	h := hash32(key)
	var best *Consumer
	var bestPoint uint32
	var first *Consumer
	var firstPoint uint32
	for _, c := range s.consumers {
		for _, pt := range c.ring {
			if first == nil || pt < firstPoint {
				first, firstPoint = c, pt
			}
			if pt >= h && (best == nil || pt < bestPoint) {
				best, bestPoint = c, pt
			}
		}
	}
	if best == nil {
		return first
	}
	return best
}

// hash32 is FNV-1a finished with a 64-bit mixer (splitmix64's), so short,
// similar keys and consumer names spread evenly over the ring.
func hash32(s string) uint32 {
	h := fnv.New64a()
	h.Write([]byte(s))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return uint32(x >> 32)
}

type delivery struct {
	c       *Consumer
	pos     mledger.Position
	entry   []byte
	redeliv uint32
	ackSet  []int64
	n       int // messages in the entry
}

// dispatchOnce sends what it can: replays first (in position order), then
// new entries. It reports whether it should run again at once, and whether
// it read the log up to its end (so only a new entry can give it work).
func (s *Subscription) dispatchOnce() (more, caughtUp bool) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return false, false
	}
	single := s.typ == pb.CommandSubscribe_Exclusive || s.typ == pb.CommandSubscribe_Failover
	permits := 0
	if single {
		if a := s.activeLocked(); a != nil && a.ready && a.permits > 0 {
			permits = a.permits
		}
	} else {
		for _, c := range s.consumers {
			if c.ready && c.permits > 0 {
				permits += c.permits
			}
		}
	}
	if permits == 0 {
		s.mu.Unlock()
		return false, false
	}
	replay := make([]mledger.Position, 0, len(s.replay))
	for p := range s.replay {
		replay = append(replay, p)
	}
	s.mu.Unlock()
	sort.Slice(replay, func(i, j int) bool { return replay[i].Less(replay[j]) })

	ctx, cancel := context.WithTimeout(context.Background(), 30e9)
	defer cancel()
	var out []delivery
	blocked := map[uint32]bool{} // Key_Shared: key hashes with a held-back replay: no newer entry may pass it
	heldAll := false
	sent := 0
	for _, p := range replay {
		if sent >= 100 {
			break
		}
		es, err := s.topic.ml.ReadEntries(ctx, p, 1, 0)
		if err != nil {
			s.topic.b.log.Warn("replay read failed; retrying", "topic", s.topic.name.String(), "sub", s.name, "pos", p.String(), "err", err)
			time.AfterFunc(100*time.Millisecond, s.wake)
			heldAll = true
			if single {
				break
			}
			continue
		}
		if len(es) == 0 || es[0].Pos != p {
			s.mu.Lock()
			delete(s.replay, p) // trimmed: nothing to deliver
			s.mu.Unlock()
			continue
		}
		d, ok := s.assign(es[0], true, blocked)
		if !ok {
			heldAll = true
			if single {
				break // one consumer: never pass a held entry
			}
			continue
		}
		out = append(out, d)
		sent++
	}
	if sent < 100 && (s.typ == pb.CommandSubscribe_Shared || s.typ == pb.CommandSubscribe_Key_Shared || !heldAll) {
		es, err := s.cursor.ReadEntries(ctx, min(100-sent, s.topic.toRead(permits)), 4<<20)
		if err != nil {
			// Nothing may wait on a read error: try again shortly.
			s.topic.b.log.Warn("dispatch read failed; retrying", "topic", s.topic.name.String(), "sub", s.name, "err", err)
			time.AfterFunc(100*time.Millisecond, s.wake)
		}
		stalled := false
		for _, e := range es {
			if s.cursor.IsAcked(e.Pos) {
				continue
			}
			if stalled {
				s.mu.Lock()
				s.replay[e.Pos] = 0
				s.mu.Unlock()
				continue
			}
			d, ok := s.assign(e, false, blocked)
			if ok {
				out = append(out, d)
			} else if single {
				stalled = true // keep order: the rest waits behind it
			}
		}
		more = len(es) > 0
		caughtUp = len(es) == 0 && err == nil
	}
	s.deliver(out)
	return more, caughtUp
}

// toRead is how many entries to read for permits messages: permits ÷ the
// messages per entry seen so far, rounded up (the last entry may take the
// permits below zero, as Pulsar's dispatcher allows), and one entry while
// none was seen. Reading more than the permits cover would stall the rest
// of the read behind the first entry the consumer has no room for, and
// each stalled entry is read again, alone, when permits come (replay).
// Pulsar sizes its reads the same way (the consumer's
// avgMessagesPerEntry in its dispatchers).
func (t *Topic) toRead(permits int) int {
	avg := math.Float64frombits(t.perEntry.Load())
	if avg <= 0 {
		return 1
	}
	return max(1, int(math.Ceil(float64(permits)/avg)))
}

// sawEntry folds the messages of a dispatched entry into perEntry.
func (t *Topic) sawEntry(n int) {
	if n <= 0 {
		return
	}
	avg := math.Float64frombits(t.perEntry.Load())
	if avg <= 0 {
		avg = float64(n)
	} else {
		avg += (float64(n) - avg) / 8
	}
	t.perEntry.Store(math.Float64bits(avg))
}

// assign picks a consumer for an entry and records it as pending, or
// queues it for replay.
func (s *Subscription) assign(e mledger.Entry, fromReplay bool, blocked map[uint32]bool) (delivery, bool) {
	m, err := entry.ParseMeta(e.Data)
	if err != nil {
		s.topic.b.log.Error("undecodable stored entry skipped", "topic", s.topic.name.String(), "pos", e.Pos.String(), "err", err)
		s.cursor.Ack(e.Pos)
		return delivery{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, gone := s.pending[e.Pos]; gone && !fromReplay {
		return delivery{}, false
	}
	// blocked holds the key hashes (Key_Shared) with an older entry held
	// back in this round: nothing newer of that key may pass it.
	h := uint32(0)
	if s.typ == pb.CommandSubscribe_Key_Shared {
		h = hash32(m.Key)
	}
	c := s.chooseLocked(e.Pos, m.Key)
	if c == nil || (s.typ == pb.CommandSubscribe_Key_Shared && blocked[h]) || (!fromReplay && s.olderReplayLocked(e.Pos, h)) {
		s.replay[e.Pos] = h
		if s.typ == pb.CommandSubscribe_Key_Shared {
			blocked[h] = true
		}
		return delivery{}, false
	}
	delete(s.replay, e.Pos)
	c.permits -= m.NumMessages
	s.topic.sawEntry(m.NumMessages)
	s.pending[e.Pos] = &pendingEntry{c: c, size: m.NumMessages, hash: h}
	if s.typ == pb.CommandSubscribe_Key_Shared {
		d := s.drain[h]
		if d == nil {
			d = &drainRef{c: c}
			s.drain[h] = d
		}
		d.n++
	}
	d := delivery{c: c, pos: e.Pos, entry: e.Data, n: m.NumMessages}
	if fromReplay {
		s.redelivs[e.Pos]++
		d.redeliv = s.redelivs[e.Pos]
	}
	if acked := s.batchAcks[e.Pos]; acked != nil {
		// Tell the client which indexes are still unacknowledged.
		set := make([]int64, len(acked))
		for i := range acked {
			set[i] = int64(^acked[i])
		}
		d.ackSet = set
	}
	return d, true
}

func (s *Subscription) deliver(out []delivery) {
	part := s.topic.name.Partition
	for _, d := range out {
		de, err := entry.Decode(d.entry)
		if err != nil {
			continue
		}
		w := s.topic.wireID(d.pos, de)
		id := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(w.Ledger)), EntryId: proto.Uint64(uint64(w.Entry))}
		if part >= 0 {
			id.Partition = proto.Int32(int32(part))
		}
		cmd := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{
			ConsumerId: proto.Uint64(d.c.id), MessageId: id, RedeliveryCount: proto.Uint32(d.redeliv), AckSet: d.ackSet,
		}}
		if err := d.c.conn.sendMessage(cmd, de.PublishMs, de.Msg); err != nil {
			s.topic.b.log.Error("encode MESSAGE", "err", err)
			continue
		}
		s.topic.b.metrics.msgsOut.Inc()
		s.countOut(d.c, d.n, len(de.Msg))
	}
}
