package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/dispatch"
	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/broker/security"
	"github.com/meridian-mq/meridian/internal/ratemeter"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// Consumer is one consumer of a subscription, on a connection.
type Consumer struct {
	id   uint64
	key  dispatch.ID // the consumer's name in the subscription's core
	conn *conn
	sub  *Subscription
	// out meters the messages sent to it; since is when it subscribed.
	out   ratemeter.Meter
	since time.Time
}

// has reports whether cs is one of the subscription's consumers.
func (s *Subscription) has(cs *Consumer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.consumers[cs.key] == cs
}

// Subscription dispatches a topic's entries to its consumers by type:
// Exclusive and Failover to the one active consumer, Shared round robin,
// Key_Shared by key hash (consistent hashing, auto-split). Which consumer
// gets what is decided by its dispatch.Core, driven under mu; this shell
// reads the entries, sends them and runs one dispatch goroutine per
// subscription; the connection goroutines only change state under mu and
// wake it.
type Subscription struct {
	topic   *Topic
	name    string
	cursor  *mledger.Cursor
	durable bool
	// out meters the messages dispatched (admin stats).
	out ratemeter.Meter

	mu        sync.Mutex
	core      *dispatch.Core
	consumers map[dispatch.ID]*Consumer // the core's consumers
	nextKey   dispatch.ID
	// seeking: a seek closed the consumers of this non-durable
	// subscription, which stays for them to come back (their cursor was
	// reset; a reader's seek by time is not in the start id it sends);
	// cleared when one joins.
	seeking bool
	// paused: a planned switchover holds dispatch (switchover.go); wake
	// resumes it once cleared.
	paused bool

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

	// dl is the delayed-delivery index's shell (delayed.go).
	dl delayedShell
}

func newSubscription(t *Topic, name string, typ pb.CommandSubscribe_SubType, cur *mledger.Cursor, durable bool) *Subscription {
	s := &Subscription{
		topic: t, name: name, cursor: cur, durable: durable,
		core:      dispatch.New(dispatch.SubType(typ), t.name.Partition),
		consumers: map[dispatch.ID]*Consumer{},
		wakeCh:    make(chan struct{}, 1),
		stopCh:    make(chan struct{}),
	}
	// Batches acknowledged in part before a restart or reload: their
	// redelivery carries only what is left of them.
	for _, b := range cur.BatchAcks() {
		s.core.RestoreBatchAck(dispatch.Position(b.Pos), b.Unacked)
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
	s.stopDelayed()
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
	return s.core.Len()
}

// subType is the subscription's type, as the protocol names it.
func (s *Subscription) subType() pb.CommandSubscribe_SubType {
	return pb.CommandSubscribe_SubType(s.core.Type())
}

func (s *Subscription) addConsumer(c *conn, m *pb.CommandSubscribe) (*Consumer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, fmt.Errorf("%w: subscription %s is closing", meta.ErrTopicFenced, s.name)
	}
	was := s.subType()
	switch err := s.core.Admit(dispatch.SubType(m.GetSubType())); {
	case errors.Is(err, dispatch.ErrTypeMismatch):
		return nil, fmt.Errorf("%w: subscription %s is %s, not %s", meta.ErrConsumerBusy, s.name, was, m.GetSubType())
	case errors.Is(err, dispatch.ErrExclusiveBusy):
		return nil, fmt.Errorf("%w: exclusive subscription %s already has a consumer", meta.ErrConsumerBusy, s.name)
	}
	if !s.holdsDelayed() && s.dl.idx != nil && s.dl.idx.Len() > 0 {
		// The first consumer of an Exclusive or Failover subscription that
		// was Shared (before a restart, or until its consumers left): these
		// types hold nothing back, so the cursor reads the held entries
		// again, in order (no other consumer: nothing is pending).
		s.clearDelayedLocked()
		s.core.Reset()
		s.cursor.Rewind()
	}
	cfg := s.topic.b.cfg
	if !underLimit(s.core.Len(), cfg.MaxConsumersPerSubscription) {
		s.topic.b.limitExceeded(limitConsumersPerSubscription)
		return nil, fmt.Errorf("%w: subscription %s has reached the limit of %d consumers", meta.ErrConsumerBusy, s.name, cfg.MaxConsumersPerSubscription)
	}
	if n := s.topic.consumers.Add(1); !underLimit(int(n-1), cfg.MaxConsumersPerTopic) {
		s.topic.consumers.Add(-1)
		s.topic.b.limitExceeded(limitConsumersPerTopic)
		return nil, fmt.Errorf("%w: %s has reached the limit of %d consumers", meta.ErrConsumerBusy, s.topic.name, cfg.MaxConsumersPerTopic)
	}
	s.seeking = false
	s.nextKey++
	cs := &Consumer{id: m.GetConsumerId(), key: s.nextKey, conn: c, sub: s, since: time.Now()}
	s.core.AddConsumer(dispatch.ConsumerInfo{ID: cs.key, ConsumerID: cs.id, Name: m.GetConsumerName(), Priority: m.GetPriorityLevel()})
	s.consumers[cs.key] = cs
	s.topic.b.metrics.consumers.Inc()
	return cs, nil
}

// consumerReady is called once SUCCESS went out for cs.
func (s *Subscription) consumerReady(cs *Consumer) {
	s.mu.Lock()
	s.core.Ready(cs.key)
	s.mu.Unlock()
	s.updateActive()
	s.wake()
}

func (s *Subscription) removeConsumer(cs *Consumer) {
	s.mu.Lock()
	if s.consumers[cs.key] != cs {
		s.mu.Unlock()
		return
	}
	delete(s.consumers, cs.key)
	s.core.RemoveConsumer(cs.key) // what it had not acknowledged goes to the others
	s.topic.consumers.Add(-1)
	s.topic.b.metrics.consumers.Dec()
	unused := !s.durable && s.core.Len() == 0 && !s.seeking
	s.mu.Unlock()
	if unused {
		s.topic.dropNonDurable(s)
		return
	}
	s.updateActive()
	s.wake()
}

// dropNonDurable removes a non-durable subscription left without
// consumers, as Pulsar does: its cursor lives only as long as its
// consumers, so a consumer that subscribes again under the same name
// starts from its own start position (the latest message, or the
// start message id a reader sends), not from where the last one was.
// (Such subscriptions stayed, so a re-created non-durable consumer was
// sent old messages and every reader that ever closed left one behind.)
// It holds nothing: no record, and it never held back trimming.
func (t *Topic) dropNonDurable(s *Subscription) {
	t.mu.Lock()
	if t.subs[s.name] != s || s.consumerCount() > 0 {
		t.mu.Unlock()
		return
	}
	delete(t.subs, s.name)
	t.mu.Unlock()
	t.b.metrics.subscriptions.Dec()
	// Off the caller's goroutine (a connection's reader): stop waits for a
	// dispatch round.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.stop(ctx)
	}()
}

// closeConsumers sends CLOSE_CONSUMER to every consumer (after a seek, or
// when the topic closes) so clients reconnect — to target directly when
// given.
func (s *Subscription) closeConsumers(target *BrokerInfo) {
	s.mu.Lock()
	cs := s.consumersLocked()
	s.mu.Unlock()
	for _, c := range cs {
		c.conn.mu.Lock()
		if c.conn.consumers[c.id] == c {
			delete(c.conn.consumers, c.id)
		}
		c.conn.mu.Unlock()
		s.removeConsumer(c)
		cc := &pb.CommandCloseConsumer{ConsumerId: proto.Uint64(c.id), RequestId: proto.Uint64(0)}
		if u := c.conn.assignedURL(target); u != "" {
			cc.AssignedBrokerServiceUrl = proto.String(u)
			cc.AssignedBrokerServiceUrlTls = security.TLSURL(u)
		}
		c.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: cc})
	}
}

// consumersLocked returns the consumers in the order they joined.
func (s *Subscription) consumersLocked() []*Consumer {
	var out []*Consumer
	for _, st := range s.core.Consumers() {
		out = append(out, s.consumers[st.ID])
	}
	return out
}

func (s *Subscription) flow(cs *Consumer, permits int) {
	s.mu.Lock()
	s.core.Flow(cs.key, permits)
	s.mu.Unlock()
	s.updateActive()
	s.wake()
}

// updateActive sends ACTIVE_CONSUMER_CHANGE (Failover) to consumers whose
// state changed.
func (s *Subscription) updateActive() {
	s.mu.Lock()
	notes := s.core.ActiveChanges()
	to := make([]*Consumer, len(notes))
	for i, n := range notes {
		to[i] = s.consumers[n.Consumer]
	}
	s.mu.Unlock()
	for i, n := range notes {
		to[i].conn.send(&pb.BaseCommand{Type: pb.BaseCommand_ACTIVE_CONSUMER_CHANGE.Enum(), ActiveConsumerChange: &pb.CommandActiveConsumerChange{
			ConsumerId: proto.Uint64(to[i].id), IsActive: proto.Bool(n.Active)}})
	}
}

// ack handles ACK: individual or cumulative, with batch-index acks when
// ack_set is present. A batch acknowledged only in part is recorded on the
// cursor (SetBatchAck), persisted with it, so after a reconnect or a
// restart only its unacknowledged messages are redelivered.
func (s *Subscription) ack(cs *Consumer, m *pb.CommandAck) {
	if m.GetAckType() == pb.CommandAck_Cumulative {
		if len(m.MessageId) == 0 {
			return
		}
		id := m.MessageId[0]
		at := dispatch.Position(s.topic.localPos(positionOf(id)))
		s.mu.Lock()
		p, ok := s.core.AckCumulative(at, id.AckSet)
		partial := s.core.BatchAckSet(at)
		s.mu.Unlock()
		if ok {
			s.cursor.AckCumulative(mledger.Position(p))
		}
		if partial != nil {
			s.cursor.SetBatchAck(mledger.Position(at), partial)
		}
		s.afterAck()
		return
	}
	acks := make([]dispatch.Ack, len(m.MessageId))
	for i, id := range m.MessageId {
		acks[i] = dispatch.Ack{Pos: dispatch.Position(s.topic.localPos(positionOf(id))), AckSet: id.AckSet}
	}
	s.mu.Lock()
	full := s.core.Ack(acks)
	var partial []mledger.BatchAck
	for _, a := range acks {
		if len(a.AckSet) > 0 {
			if set := s.core.BatchAckSet(a.Pos); set != nil {
				partial = append(partial, mledger.BatchAck{Pos: mledger.Position(a.Pos), Unacked: set})
			}
		}
	}
	s.mu.Unlock()
	for _, b := range partial {
		s.cursor.SetBatchAck(b.Pos, b.Unacked)
	}
	if len(full) > 0 {
		ps := make([]mledger.Position, len(full))
		for i, p := range full {
			ps[i] = mledger.Position(p)
		}
		s.cursor.Ack(ps...)
		s.afterAck()
	}
}

// afterAck wakes dispatch: acknowledgements free key hashes and permits.
func (s *Subscription) afterAck() { s.wake() }

// redeliver handles REDELIVER_UNACKNOWLEDGED_MESSAGES (negative acks): the
// listed entries (all of cs's unacknowledged ones if none listed) are sent
// again.
func (s *Subscription) redeliver(cs *Consumer, ids []*pb.MessageIdData) {
	ps := make([]dispatch.Position, len(ids))
	for i, id := range ids {
		ps[i] = dispatch.Position(s.topic.localPos(positionOf(id)))
	}
	s.mu.Lock()
	s.core.Redeliver(cs.key, ps)
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
	s.core.Reset()
	s.clearDelayedLocked()
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

type delivery struct {
	c       *Consumer
	pos     mledger.Position
	entry   []byte
	redeliv uint32
	ackSet  []int64
	n       int // messages in the entry
}

// dispatchOnce runs one round of the core: replays first (in position
// order), then new entries. It reports whether it should run again at
// once, and whether it read the log up to its end (so only a new entry can
// give it work).
func (s *Subscription) dispatchOnce() (more, caughtUp bool) {
	s.mu.Lock()
	if s.stopped || s.paused {
		s.mu.Unlock()
		return false, false
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30e9)
	defer cancel()
	canRead, dueLeft := s.delayedStep(ctx)
	s.mu.Lock()
	r := s.core.StartRound()
	s.mu.Unlock()
	if r == nil {
		return false, false
	}

	var out []delivery
	for p, ok := r.NextReplay(); ok; p, ok = r.NextReplay() {
		mp := mledger.Position(p)
		es, err := s.topic.ml.ReadEntries(ctx, mp, 1, 0)
		if err != nil {
			s.topic.b.log.Warn("replay read failed; retrying", "topic", s.topic.name.String(), "sub", s.name, "pos", mp.String(), "err", err)
			time.AfterFunc(100*time.Millisecond, s.wake)
			r.ReplayFailed()
			continue
		}
		if len(es) == 0 || es[0].Pos != mp {
			s.mu.Lock()
			s.core.ReplayGone(p) // trimmed: nothing to deliver
			s.mu.Unlock()
			continue
		}
		if d, ok := s.offer(r, es[0], true); ok {
			out = append(out, d)
		}
	}
	s.mu.Lock()
	n := s.core.ToRead(r, math.Float64frombits(s.topic.perEntry.Load()))
	s.mu.Unlock()
	if !canRead {
		n = 0 // the delayed index is not restored yet: it retries
	}
	if n > 0 {
		es, err := s.cursor.ReadEntries(ctx, n, 4<<20)
		if err != nil {
			// Nothing may wait on a read error: try again shortly.
			s.topic.b.log.Warn("dispatch read failed; retrying", "topic", s.topic.name.String(), "sub", s.name, "err", err)
			time.AfterFunc(100*time.Millisecond, s.wake)
		}
		for _, e := range es {
			if s.cursor.IsAcked(e.Pos) {
				continue
			}
			if d, ok := s.offer(r, e, false); ok {
				out = append(out, d)
			}
		}
		more = len(es) > 0
		caughtUp = len(es) == 0 && err == nil
	}
	s.deliver(out)
	// Entries whose time came wait for room in replay: another round.
	return more || (dueLeft && len(out) > 0), caughtUp
}

// offer hands an entry read for round r (a replay, or a new entry) to the
// core and returns what to send, if anything.
func (s *Subscription) offer(r *dispatch.Round, e mledger.Entry, replay bool) (delivery, bool) {
	m, err := entry.ParseMeta(e.Data)
	if !replay && err == nil && m.DeliverAtMs > 0 && s.holdDelayed(e.Pos, m.DeliverAtMs) {
		return delivery{}, false // held until its time (delayed.go)
	}
	de := dispatch.Entry{Pos: dispatch.Position(e.Pos), Key: m.Key, NumMessages: m.NumMessages, Undecodable: err != nil}
	s.mu.Lock()
	var d dispatch.Delivery
	var o dispatch.Outcome
	if replay {
		d, o = s.core.Replayed(r, de)
	} else {
		d, o = s.core.Read(r, de)
	}
	c := s.consumers[d.Consumer]
	s.mu.Unlock()
	switch o {
	case dispatch.Discard:
		s.topic.b.log.Error("undecodable stored entry skipped", "topic", s.topic.name.String(), "pos", e.Pos.String(), "err", err)
		s.cursor.Ack(e.Pos)
	case dispatch.Deliver:
		s.topic.sawEntry(d.NumMessages)
		return delivery{c: c, pos: e.Pos, entry: e.Data, redeliv: d.RedeliveryCount, ackSet: d.AckSet, n: d.NumMessages}, true
	}
	return delivery{}, false
}

// sawEntry folds the messages of a dispatched entry into perEntry, the
// messages per entry a dispatch round sizes its reads by
// (dispatch.EntriesFor).
func (t *Topic) sawEntry(n int) {
	t.perEntry.Store(math.Float64bits(dispatch.Average(math.Float64frombits(t.perEntry.Load()), n)))
}

func (s *Subscription) deliver(out []delivery) {
	part := s.topic.name.Partition
	var now time.Time // taken once, at the first replicated entry
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
		if de.Origin.Region != "" && d.redeliv == 0 {
			if now.IsZero() {
				now = time.Now()
			}
			s.topic.repl.Dispatched(d.pos, now) // the replication's last stage
		}
	}
}
