package broker

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/admin"
	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/dispatch"
	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/replication"
	"github.com/meridian-mq/meridian/broker/security"
	"github.com/meridian-mq/meridian/internal/ratemeter"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/replicator"
	"google.golang.org/protobuf/proto"
)

// Non-persistent topics (non-persistent://tenant/ns/topic), as Pulsar's
// NonPersistentTopic (PIP-2): a message a producer sends is handed at once
// to the consumers connected now and is never written anywhere — no
// managed ledger, no bookie, no cursor, no etcd record of the topic. So:
//
//   - the producer's SEND is answered as soon as the message was handed to
//     the subscriptions (there is nothing to wait for: "never acknowledge
//     what is not fsynced" does not apply to a topic that promises no
//     storage; the application chose it by its name);
//   - a subscription exists only while it has consumers (every one is
//     non-durable): a consumer that subscribes later gets only messages
//     sent after it subscribed, whatever its initial position;
//   - each subscription picks a consumer for each message with the same
//     dispatch core as a persistent one (Exclusive, Failover's active
//     consumer, Shared round robin, Key_Shared by key hash); when that
//     consumer has no permits, is not ready, or its connection's output
//     queue is full (Pulsar: the channel is not writable), or the
//     subscription has no consumer at all, the message is dropped for that
//     subscription and counted (msgDropRate in the admin stats, the
//     meridian_broker_nonpersistent_dropped_messages_total metric);
//   - nothing is redelivered: acks and negative acks are accepted and
//     ignored (the core forgets each entry as it is sent), seek is refused;
//   - message ids are (ledger, n): ledger is the time in Unix ms the topic
//     was loaded here, n counts from 0 — ids issued after a reload or a
//     move to another broker sort above the earlier ones, so the client
//     never takes a new message for one it already acknowledged (Pulsar
//     issues (0, n), which restart from 0);
//   - the topic is owned through its namespace bundle like a persistent
//     one (lookup, redirects, hand-off and failover close its clients so
//     they look up again), and only the active region serves it;
//   - replicated best effort to the namespace's other regions, as
//     Pulsar's NonPersistentReplicator (broker/replication/nonpersistent.go):
//     a message a producer sent here is offered to one sender per remote
//     region, which ships it over the replication stream; the remote owner
//     dispatches it to its own consumers and stores nothing. What a sender
//     cannot send is dropped and counted (where="replication", and the
//     stats' replication section); nothing is resent;
//   - partitioned through the admin API (PUT
//     /admin/v2/non-persistent/{tenant}/{ns}/{topic}/partitions): the count
//     is kept apart from a persistent topic's of the same name; each
//     partition is a non-persistent topic as any other.
type npTopic struct {
	b      *Broker
	name   meta.TopicName
	pol    meta.Policies
	ledger uint64 // the ledger id of the ids this load issues: load time, Unix ms

	mu        sync.Mutex
	producers map[*npProducer]struct{}
	subs      map[string]*npSub
	// remotes: the best-effort senders to the namespace's other regions,
	// by region, started at the first message.
	remotes map[string]*npRemote
	next    uint64 // the entry id of the next message
	closed  bool
	// in meters the messages received from producers (admin stats).
	in ratemeter.Meter
}

// npProducer is one producer of a non-persistent topic, on a connection.
type npProducer struct {
	id    uint64
	name  string
	conn  *conn
	topic *npTopic
	in    ratemeter.Meter
	since time.Time
}

// npSub is a non-persistent topic's subscription: the dispatch core of its
// consumers, nothing stored.
type npSub struct {
	topic *npTopic
	name  string
	// out meters the messages sent, drop the messages dropped.
	out, drop ratemeter.Meter

	mu        sync.Mutex
	core      *dispatch.Core
	consumers map[dispatch.ID]*npConsumer
	nextKey   dispatch.ID
	gone      bool // its last consumer left: removed from the topic
}

// npConsumer is one consumer of a non-persistent subscription.
type npConsumer struct {
	id    uint64
	key   dispatch.ID
	conn  *conn
	sub   *npSub
	out   ratemeter.Meter
	since time.Time
}

// nonPersistentDomain is the domain of a non-persistent topic's name.
const nonPersistentDomain = "non-persistent"

// isNonPersistent reports whether a client's topic name is a
// non-persistent one (checked before parsing: the persistent path parses
// it again and keeps its own errors).
func isNonPersistent(topic string) bool {
	return strings.HasPrefix(topic, nonPersistentDomain+"://")
}

// npRegistry holds a broker's loaded non-persistent topics.
type npRegistry struct {
	b      *Broker
	mu     sync.Mutex
	topics map[string]*npTopic
	closed bool // the broker is closing: no more loads
}

func newNPRegistry(b *Broker) *npRegistry {
	return &npRegistry{b: b, topics: map[string]*npTopic{}}
}

// get returns the loaded non-persistent topic, loading it (no storage:
// the namespace's policies, the bundle's ownership) on first use.
func (r *npRegistry) get(ctx context.Context, name string) (*npTopic, error) {
	b := r.b
	tn, err := meta.ParseTopic(name)
	if err != nil {
		return nil, err
	}
	key := tn.String()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: broker closing", meta.ErrServiceNotReady)
	}
	if t := r.topics[key]; t != nil {
		r.mu.Unlock()
		return t, nil
	}
	r.mu.Unlock()
	pol, err := b.meta.GetPolicies(ctx, tn.NamespaceName())
	if err != nil {
		return nil, namespaceErr(tn.NamespaceName(), err)
	}
	if tn.Partition < 0 {
		if n, err := b.meta.Partitions(ctx, tn); err != nil {
			return nil, fmt.Errorf("%w: %v", meta.ErrServiceNotReady, err)
		} else if n > 0 {
			return nil, fmt.Errorf("%w: %s is partitioned (%d partitions): use its partitions", meta.ErrNotAllowed, tn, n)
		}
	}
	bd, err := b.bundleFor(ctx, pol, tn)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", meta.ErrServiceNotReady, err)
	}
	if mine, owner, err := b.ownershipFor(pol).acquire(ctx, bd); err != nil {
		return nil, fmt.Errorf("%w: bundle %s: %v", meta.ErrServiceNotReady, bd, err)
	} else if !mine {
		return nil, meta.NotOwnerError{OwnerAdminURL: owner.AdminURL, OwnerHTTPListeners: owner.HTTPListeners, Err: fmt.Errorf("%w: bundle %s is owned by %s", meta.ErrTopicFenced, bd, owner.ID)}
	}
	t := &npTopic{b: b, name: tn, pol: pol, ledger: uint64(time.Now().UnixMilli()),
		producers: map[*npProducer]struct{}{}, subs: map[string]*npSub{}, remotes: map[string]*npRemote{}}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("%w: broker closing", meta.ErrServiceNotReady)
	}
	if old := r.topics[key]; old != nil {
		return old, nil
	}
	r.topics[key] = t
	b.metrics.topics.Inc()
	b.log.Info("non-persistent topic loaded", "topic", key)
	return t, nil
}

// policies returns the namespace's policies: the watched copy, or those
// read at load.
func (t *npTopic) policies() meta.Policies {
	if pol, ok := t.b.meta.PoliciesHint(t.name.NamespaceName()); ok {
		return pol
	}
	return t.pol
}

// inBundle reports whether the topic's name hashes into bd (a split since
// the load may have narrowed the bundle it was loaded under).
func (t *npTopic) inBundle(bd bundle) bool {
	return bd.ns == t.name.NamespaceName() && bd.contains(crc32.ChecksumIEEE([]byte(t.name.String())))
}

// loaded returns the loaded non-persistent topics.
func (r *npRegistry) loaded() []*npTopic {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*npTopic, 0, len(r.topics))
	for _, t := range r.topics {
		out = append(out, t)
	}
	return out
}

// lookup returns the loaded topic named key (its String), or nil.
func (r *npRegistry) lookup(key string) *npTopic {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.topics[key]
}

// close closes the loaded non-persistent topics for which which is true,
// telling their clients to reconnect (to target when given).
func (r *npRegistry) close(which func(*npTopic) bool, target *BrokerInfo) {
	for _, t := range r.loaded() {
		if which(t) {
			t.close(target)
		}
	}
}

// closeAll closes every topic and refuses loads from now on (the broker
// is closing).
func (r *npRegistry) closeAll() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.close(func(*npTopic) bool { return true }, nil)
}

// close forgets the topic and sends its producers CLOSE_PRODUCER and its
// consumers CLOSE_CONSUMER: they look it up again (or go to target). The
// messages of a closed topic are gone, as everything of it.
func (t *npTopic) close(target *BrokerInfo) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	producers := make([]*npProducer, 0, len(t.producers))
	for p := range t.producers {
		producers = append(producers, p)
	}
	subs := make([]*npSub, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	remotes := t.remotes
	t.remotes = map[string]*npRemote{}
	t.mu.Unlock()
	for _, rm := range remotes {
		rm.s.Close()
	}
	r := t.b.np
	r.mu.Lock()
	if r.topics[t.name.String()] == t {
		delete(r.topics, t.name.String())
		t.b.metrics.topics.Dec()
	}
	r.mu.Unlock()
	for _, p := range producers {
		p.closeByBroker(target)
	}
	for _, s := range subs {
		s.closeConsumers(target)
	}
}

// createProducer admits a producer: only the active region serves the
// topic's namespace (as for a persistent topic, a standby region
// redirects).
func (r *npRegistry) createProducer(ctx context.Context, c *conn, m *pb.CommandProducer) (*npProducer, error) {
	b := r.b
	if err := meta.ValidProducerName(m.GetProducerName()); err != nil {
		return nil, err
	}
	t, err := r.get(ctx, m.GetTopic())
	if err != nil {
		return nil, err
	}
	if err := b.fo.CheckActive(ctx, t.name, t.policies()); err != nil {
		return nil, err
	}
	name := m.GetProducerName()
	if name == "" {
		name = b.newProducerName()
	}
	p := &npProducer{id: m.GetProducerId(), name: name, conn: c, topic: t, since: time.Now()}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("%w: %s is closing", meta.ErrServiceNotReady, t.name)
	}
	for o := range t.producers {
		if o.name == name {
			return nil, fmt.Errorf("%w: producer %s is already connected to %s", meta.ErrProducerBusy, name, t.name)
		}
	}
	t.producers[p] = struct{}{}
	b.metrics.producers.Inc()
	return p, nil
}

func (t *npTopic) removeProducer(p *npProducer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.producers[p]; ok {
		delete(t.producers, p)
		t.b.metrics.producers.Dec()
	}
}

// closeByBroker sends CLOSE_PRODUCER; SENDs the client has in flight are
// dropped without an answer (closedProducers), and it resends them once
// it reconnected.
func (p *npProducer) closeByBroker(target *BrokerInfo) {
	p.conn.mu.Lock()
	if p.conn.npProducers[p.id] == p {
		delete(p.conn.npProducers, p.id)
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

// publish hands one SEND's message to every subscription and answers it
// with the message's id. It runs on the connection's reader: nothing in
// it waits (a consumer whose connection cannot take more is skipped).
func (p *npProducer) publish(m *pb.CommandSend, fm entry.Framed) {
	t := p.topic
	now := time.Now()
	msg := fm.Msg()
	n := max(int(m.GetNumMessages()), 1)
	var key string
	stored := entry.EncodeFramed(now.UnixMilli(), entry.Origin{}, fm)
	if md, err := entry.ParseMeta(stored); err == nil {
		key, n = md.Key, max(md.NumMessages, 1)
	}
	pos, ok := t.dispatchAll(now, key, n, msg)
	if !ok {
		return // closed: no answer, the client resends after CLOSE_PRODUCER
	}
	p.in.Add(now, int64(n), int64(len(msg)))
	t.replicate(stored, n, now.UnixMilli())
	id := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(pos.Ledger)), EntryId: proto.Uint64(uint64(pos.Entry))}
	if t.name.Partition >= 0 {
		id.Partition = proto.Int32(int32(t.name.Partition))
	}
	p.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
		ProducerId: proto.Uint64(p.id), SequenceId: proto.Uint64(m.GetSequenceId()), MessageId: id}})
}

// dispatchAll hands a message of n messages to every subscription and
// returns the id it was given; false when the topic is closed.
func (t *npTopic) dispatchAll(now time.Time, key string, n int, msg []byte) (dispatch.Position, bool) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return dispatch.Position{}, false
	}
	pos := dispatch.Position{Ledger: int64(t.ledger), Entry: int64(t.next)}
	t.next++
	subs := make([]*npSub, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	t.in.Add(now, int64(n), int64(len(msg)))
	t.b.metrics.npMsgsIn.Add(float64(n))
	for _, s := range subs {
		s.dispatch(pos, key, n, now.UnixMilli(), msg)
	}
	return pos, true
}

// npRemote is a topic's best-effort sender to one remote region and its
// meters.
type npRemote struct {
	s         *replication.NPSender
	out, drop ratemeter.Meter
}

// replicate offers a message its producer sent here (never one that came
// from another region: no loops) to the sender of every other region of
// the namespace, starting the missing ones.
func (t *npTopic) replicate(stored []byte, n int, publishMs int64) {
	pol := t.policies()
	if len(pol.ReplicationClusters) < 2 || t.b.repl == nil {
		return
	}
	var to []*replication.NPSender
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	for _, r := range pol.ReplicationClusters {
		if r == t.b.cfg.Cluster {
			continue
		}
		rm := t.remotes[r]
		if rm == nil {
			rm = &npRemote{}
			rm.s = t.b.repl.NewNPSender(t.name.String(), r, func(n int) {
				rm.out.Add(time.Now(), int64(n), 0)
			}, func(n int) {
				rm.drop.Add(time.Now(), int64(n), 0)
				t.b.metrics.npDropped.WithLabelValues("replication").Add(float64(n))
			})
			t.remotes[r] = rm
		}
		to = append(to, rm.s)
	}
	t.mu.Unlock()
	for _, s := range to {
		s.Offer(stored, n, publishMs)
	}
}

// deliverReplicated hands entries from region origin to the
// subscriptions (the replication service's target, nothing stored, not
// replicated further).
func (t *npTopic) deliverReplicated(origin string, entries []replicator.Entry) {
	for _, e := range entries {
		d, err := entry.Decode(e.Data)
		if err != nil {
			continue
		}
		n, key := 1, ""
		if md, err := entry.ParseMeta(e.Data); err == nil {
			n, key = max(md.NumMessages, 1), md.Key
		}
		if _, ok := t.dispatchAll(time.Now(), key, n, d.Msg); !ok {
			return
		}
	}
}

// dispatch sends one message of n messages (a batch) to the consumer the
// core picks, or drops it. The core forgets the entry at once: nothing is
// kept for redelivery, so pending and replay stay empty.
func (s *npSub) dispatch(pos dispatch.Position, key string, n int, publishMs int64, msg []byte) {
	s.mu.Lock()
	o := dispatch.Hold
	var c *npConsumer
	if r := s.core.StartRound(); r != nil {
		d, oc := s.core.Read(r, dispatch.Entry{Pos: pos, Key: key, NumMessages: n})
		o = oc
		if o == dispatch.Deliver {
			s.core.Ack([]dispatch.Ack{{Pos: pos}})
			c = s.consumers[d.Consumer]
		} else {
			s.core.ReplayGone(pos)
		}
	}
	s.mu.Unlock()
	if c == nil || c.conn.outputFull() {
		s.dropped(n)
		return
	}
	part := s.topic.name.Partition
	id := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(pos.Ledger)), EntryId: proto.Uint64(uint64(pos.Entry))}
	if part >= 0 {
		id.Partition = proto.Int32(int32(part))
	}
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{
		ConsumerId: proto.Uint64(c.id), MessageId: id, RedeliveryCount: proto.Uint32(0)}}
	if err := c.conn.sendMessage(cmd, publishMs, msg); err != nil {
		s.topic.b.log.Error("encode MESSAGE", "err", err)
		s.dropped(n)
		return
	}
	now := time.Now()
	s.out.Add(now, int64(n), int64(len(msg)))
	c.out.Add(now, int64(n), int64(len(msg)))
	s.topic.b.metrics.msgsOut.Inc()
}

// dropped counts n messages the subscription could not take.
func (s *npSub) dropped(n int) {
	s.drop.Add(time.Now(), int64(n), 0)
	s.topic.b.metrics.npDropped.WithLabelValues("subscription").Add(float64(n))
}

// subscribe adds a consumer, creating the subscription if needed. Every
// subscription of a non-persistent topic is non-durable: it starts now.
func (r *npRegistry) subscribe(ctx context.Context, c *conn, m *pb.CommandSubscribe) (*npConsumer, error) {
	b := r.b
	name := m.GetSubscription()
	if err := meta.ValidSubscription(name); err != nil {
		return nil, err
	}
	t, err := r.get(ctx, m.GetTopic())
	if err != nil {
		return nil, err
	}
	if err := b.fo.CheckActive(ctx, t.name, t.policies()); err != nil {
		return nil, err
	}
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, fmt.Errorf("%w: %s is closing", meta.ErrServiceNotReady, t.name)
		}
		s := t.subs[name]
		if s == nil {
			s = &npSub{topic: t, name: name, core: dispatch.New(dispatch.SubType(m.GetSubType()), t.name.Partition),
				consumers: map[dispatch.ID]*npConsumer{}}
			t.subs[name] = s
			b.metrics.subscriptions.Inc()
		}
		t.mu.Unlock()
		cs, err, gone := s.addConsumer(c, m)
		if gone {
			continue // its last consumer left meanwhile: a new one
		}
		return cs, err
	}
}

func (s *npSub) addConsumer(c *conn, m *pb.CommandSubscribe) (cs *npConsumer, err error, gone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return nil, nil, true
	}
	was := pb.CommandSubscribe_SubType(s.core.Type())
	switch err := s.core.Admit(dispatch.SubType(m.GetSubType())); {
	case errors.Is(err, dispatch.ErrTypeMismatch):
		return nil, fmt.Errorf("%w: subscription %s is %s, not %s", meta.ErrConsumerBusy, s.name, was, m.GetSubType()), false
	case errors.Is(err, dispatch.ErrExclusiveBusy):
		return nil, fmt.Errorf("%w: exclusive subscription %s already has a consumer", meta.ErrConsumerBusy, s.name), false
	}
	cfg := s.topic.b.cfg
	if !underLimit(s.core.Len(), cfg.MaxConsumersPerSubscription) {
		s.topic.b.limitExceeded(limitConsumersPerSubscription)
		return nil, fmt.Errorf("%w: subscription %s has reached the limit of %d consumers", meta.ErrConsumerBusy, s.name, cfg.MaxConsumersPerSubscription), false
	}
	s.nextKey++
	cs = &npConsumer{id: m.GetConsumerId(), key: s.nextKey, conn: c, sub: s, since: time.Now()}
	s.core.AddConsumer(dispatch.ConsumerInfo{ID: cs.key, ConsumerID: cs.id, Name: m.GetConsumerName(), Priority: m.GetPriorityLevel()})
	// Ready at once: nothing goes to it before its FLOW, which the client
	// sends after SUCCESS, on the same connection as the SENDs it may
	// precede (readiness set after SUCCESS could miss a message sent
	// between the two).
	s.core.Ready(cs.key)
	s.consumers[cs.key] = cs
	s.topic.b.metrics.consumers.Inc()
	return cs, nil, false
}

// ready is called once SUCCESS went out for cs: Failover's
// ACTIVE_CONSUMER_CHANGE follow it.
func (s *npSub) ready(*npConsumer) { s.updateActive() }

func (s *npSub) flow(cs *npConsumer, permits int) {
	s.mu.Lock()
	s.core.Flow(cs.key, permits)
	s.mu.Unlock()
	s.updateActive()
}

// removeConsumer removes cs; the subscription goes with its last
// consumer.
func (s *npSub) removeConsumer(cs *npConsumer) {
	s.mu.Lock()
	if s.consumers[cs.key] != cs {
		s.mu.Unlock()
		return
	}
	delete(s.consumers, cs.key)
	s.core.RemoveConsumer(cs.key)
	s.topic.b.metrics.consumers.Dec()
	last := s.core.Len() == 0
	if last {
		s.gone = true
	}
	s.mu.Unlock()
	if !last {
		s.updateActive()
		return
	}
	t := s.topic
	t.mu.Lock()
	if t.subs[s.name] == s {
		delete(t.subs, s.name)
		t.b.metrics.subscriptions.Dec()
	}
	t.mu.Unlock()
}

// updateActive sends ACTIVE_CONSUMER_CHANGE (Failover).
func (s *npSub) updateActive() {
	s.mu.Lock()
	notes := s.core.ActiveChanges()
	to := make([]*npConsumer, len(notes))
	for i, n := range notes {
		to[i] = s.consumers[n.Consumer]
	}
	s.mu.Unlock()
	for i, n := range notes {
		if to[i] == nil {
			continue
		}
		to[i].conn.send(&pb.BaseCommand{Type: pb.BaseCommand_ACTIVE_CONSUMER_CHANGE.Enum(), ActiveConsumerChange: &pb.CommandActiveConsumerChange{
			ConsumerId: proto.Uint64(to[i].id), IsActive: proto.Bool(n.Active)}})
	}
}

// closeConsumers sends CLOSE_CONSUMER to every consumer.
func (s *npSub) closeConsumers(target *BrokerInfo) {
	s.mu.Lock()
	var cs []*npConsumer
	for _, st := range s.core.Consumers() {
		cs = append(cs, s.consumers[st.ID])
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.conn.mu.Lock()
		if c.conn.npConsumers[c.id] == c {
			delete(c.conn.npConsumers, c.id)
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

// The connection's side: the commands of non-persistent producers and
// consumers (handlers.go sends them here).

func (c *conn) npProducer(id uint64) *npProducer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.npProducers[id]
}

func (c *conn) npConsumer(id uint64) *npConsumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.npConsumers[id]
}

// handleNPProducer creates a non-persistent producer (after beginRequest).
func (c *conn) handleNPProducer(m *pb.CommandProducer) {
	id := m.GetProducerId()
	if old := c.npProducer(id); old != nil {
		// Asked again after the client's earlier request timed out.
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
			RequestId: proto.Uint64(m.GetRequestId()), ProducerName: proto.String(old.name), LastSequenceId: proto.Int64(-1), ProducerReady: proto.Bool(true)}})
		c.endRequest()
		return
	}
	c.mu.Lock()
	if _, busy := c.pendingProduce[id]; busy {
		c.mu.Unlock()
		c.sendError(m.GetRequestId(), fmt.Errorf("%w: producer %d is being created on this connection", meta.ErrServiceNotReady, id))
		c.endRequest()
		return
	}
	done := make(chan struct{})
	c.pendingProduce[id] = done
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			delete(c.pendingProduce, id)
			c.mu.Unlock()
			close(done)
			c.endRequest()
		}()
		ctx, cancel := c.ctx()
		defer cancel()
		if err := c.authorizeTopic(ctx, m.GetTopic(), security.OpProduce); err != nil {
			c.sendError(m.GetRequestId(), err)
			return
		}
		if mode := m.GetProducerAccessMode(); mode != pb.ProducerAccessMode_Shared {
			c.sendError(m.GetRequestId(), fmt.Errorf("%w: access mode %s is not supported on a non-persistent topic", meta.ErrNotAllowed, mode))
			return
		}
		p, err := c.b.np.createProducer(ctx, c, m)
		if err != nil {
			c.sendError(m.GetRequestId(), err)
			return
		}
		c.mu.Lock()
		if c.npProducers[id] != nil || c.producers[id] != nil {
			c.mu.Unlock()
			p.topic.removeProducer(p)
			c.sendError(m.GetRequestId(), fmt.Errorf("%w: producer id %d already in use on this connection", meta.ErrProducerBusy, id))
			return
		}
		select {
		case <-c.closed:
			c.mu.Unlock()
			p.topic.removeProducer(p)
			return
		default:
		}
		c.npProducers[id] = p
		delete(c.closedProducers, id)
		c.mu.Unlock()
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
			RequestId: proto.Uint64(m.GetRequestId()), ProducerName: proto.String(p.name), LastSequenceId: proto.Int64(-1), ProducerReady: proto.Bool(true)}})
	}()
}

// handleNPSend checks and publishes one SEND of a non-persistent
// producer; false closes the connection.
func (c *conn) handleNPSend(p *npProducer, m *pb.CommandSend, f *codec.Frame) bool {
	if err := codec.VerifyChecksum(f.Payload); err != nil {
		c.b.metrics.rejectedFrames.Inc()
		c.peerLog(slog.LevelWarn, "closing connection: message checksum mismatch", "producer", p.name, "err", err)
		return false
	}
	if len(f.Payload) > c.b.cfg.MaxMessageSize+codec.FramePadding {
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
			ProducerId: proto.Uint64(p.id), SequenceId: proto.Uint64(m.GetSequenceId()), Error: pb.ServerError_NotAllowedError.Enum(), Message: proto.String("message too large")}})
		return true
	}
	buf, off := f.PayloadRoom()
	p.publish(m, entry.Framed{Buf: buf, Off: off})
	return true
}

// handleNPSubscribe subscribes a non-persistent consumer (after
// beginRequest).
func (c *conn) handleNPSubscribe(m *pb.CommandSubscribe) {
	id := m.GetConsumerId()
	if old := c.npConsumer(id); old != nil && old.sub.name == m.GetSubscription() {
		c.sendSuccess(m.GetRequestId())
		c.endRequest()
		return
	}
	c.mu.Lock()
	if c.pendingSub[id] {
		c.mu.Unlock()
		c.sendError(m.GetRequestId(), fmt.Errorf("%w: consumer %d is subscribing on this connection", meta.ErrServiceNotReady, id))
		c.endRequest()
		return
	}
	c.pendingSub[id] = true
	c.mu.Unlock()
	go func() {
		defer c.endRequest()
		defer func() {
			c.mu.Lock()
			delete(c.pendingSub, id)
			c.mu.Unlock()
		}()
		ctx, cancel := c.ctx()
		defer cancel()
		if err := c.authorizeTopic(ctx, m.GetTopic(), security.OpConsume); err != nil {
			c.sendError(m.GetRequestId(), err)
			return
		}
		cs, err := c.b.np.subscribe(ctx, c, m)
		if err != nil {
			c.sendError(m.GetRequestId(), err)
			return
		}
		c.mu.Lock()
		if c.npConsumers[id] != nil || c.consumers[id] != nil {
			c.mu.Unlock()
			cs.sub.removeConsumer(cs)
			c.sendError(m.GetRequestId(), fmt.Errorf("%w: consumer id %d already in use", meta.ErrConsumerBusy, id))
			return
		}
		select {
		case <-c.closed:
			c.mu.Unlock()
			cs.sub.removeConsumer(cs)
			return
		default:
		}
		c.npConsumers[id] = cs
		c.mu.Unlock()
		c.sendSuccess(m.GetRequestId())
		cs.sub.ready(cs)
	}()
}

// handleNPConsumerCommand answers a consumer command for a non-persistent
// consumer; false when id is not one (the persistent path handles it).
func (c *conn) handleNPConsumerCommand(cmd *pb.BaseCommand) bool {
	switch cmd.GetType() {
	case pb.BaseCommand_FLOW:
		cs := c.npConsumer(cmd.GetFlow().GetConsumerId())
		if cs == nil {
			return false
		}
		cs.sub.flow(cs, int(cmd.GetFlow().GetMessagePermits()))
	case pb.BaseCommand_ACK:
		m := cmd.GetAck()
		if c.npConsumer(m.GetConsumerId()) == nil {
			return false
		}
		// Nothing is kept to acknowledge.
		if m.RequestId != nil {
			c.send(&pb.BaseCommand{Type: pb.BaseCommand_ACK_RESPONSE.Enum(), AckResponse: &pb.CommandAckResponse{
				ConsumerId: proto.Uint64(m.GetConsumerId()), RequestId: m.RequestId}})
		}
	case pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		// Nothing is kept to redeliver.
		return c.npConsumer(cmd.GetRedeliverUnacknowledgedMessages().GetConsumerId()) != nil
	case pb.BaseCommand_CLOSE_CONSUMER:
		m := cmd.GetCloseConsumer()
		c.mu.Lock()
		cs := c.npConsumers[m.GetConsumerId()]
		delete(c.npConsumers, m.GetConsumerId())
		c.mu.Unlock()
		if cs == nil {
			return false
		}
		cs.sub.removeConsumer(cs)
		c.sendSuccess(m.GetRequestId())
	case pb.BaseCommand_UNSUBSCRIBE:
		m := cmd.GetUnsubscribe()
		cs := c.npConsumer(m.GetConsumerId())
		if cs == nil {
			return false
		}
		cs.sub.mu.Lock()
		n := cs.sub.core.Len()
		cs.sub.mu.Unlock()
		if n > 1 {
			c.sendError(m.GetRequestId(), fmt.Errorf("%w: subscription %s has %d consumers", meta.ErrConsumerBusy, cs.sub.name, n))
			return true
		}
		c.mu.Lock()
		delete(c.npConsumers, m.GetConsumerId())
		c.mu.Unlock()
		cs.sub.removeConsumer(cs)
		c.sendSuccess(m.GetRequestId())
	case pb.BaseCommand_SEEK:
		m := cmd.GetSeek()
		if c.npConsumer(m.GetConsumerId()) == nil {
			return false
		}
		c.sendError(m.GetRequestId(), fmt.Errorf("%w: seek on a non-persistent topic (nothing is stored to seek to)", meta.ErrNotAllowed))
	case pb.BaseCommand_GET_LAST_MESSAGE_ID:
		m := cmd.GetGetLastMessageId()
		cs := c.npConsumer(m.GetConsumerId())
		if cs == nil {
			return false
		}
		t := cs.sub.topic
		t.mu.Lock()
		id := &pb.MessageIdData{LedgerId: proto.Uint64(t.ledger), EntryId: proto.Uint64(t.next - 1)}
		if t.next == 0 {
			id = &pb.MessageIdData{LedgerId: proto.Uint64(t.ledger), EntryId: proto.Uint64(^uint64(0))} // -1: none
		}
		t.mu.Unlock()
		if part := t.name.Partition; part >= 0 {
			id.Partition = proto.Int32(int32(part))
		}
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE.Enum(), GetLastMessageIdResponse: &pb.CommandGetLastMessageIdResponse{
			RequestId: proto.Uint64(m.GetRequestId()), LastMessageId: id}})
	default:
		return false
	}
	return true
}

// outputFull reports whether the connection's output queue is over its
// bound: a non-persistent message for it is dropped rather than queued
// (Pulsar's "channel not writable").
func (c *conn) outputFull() bool {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	return c.outBytes > maxQueuedOutputBytes
}

// stats is the admin API's view of the topic (admin.NonPersistentTopicStats).
func (t *npTopic) stats() admin.NonPersistentTopicStats {
	now := time.Now()
	st := admin.NonPersistentTopicStats{Publishers: []admin.NonPersistentPublisherStats{},
		Subscriptions: map[string]admin.NonPersistentSubscriptionStats{}, Replication: map[string]admin.NonPersistentReplicatorStats{}}
	st.MsgRateIn, st.MsgThroughputIn = t.in.Rate(now)
	if st.MsgRateIn > 0 {
		st.AverageMsgSize = st.MsgThroughputIn / st.MsgRateIn
	}
	st.MsgInCounter, st.BytesInCounter = t.in.Totals()
	t.mu.Lock()
	for p := range t.producers {
		ps := admin.NonPersistentPublisherStats{PublisherStats: admin.PublisherStats{AccessMode: "Shared", ProducerName: p.name, ProducerID: p.id,
			Address: p.conn.nc.RemoteAddr().String(), ClientVersion: p.conn.clientVersion, ConnectedSince: pulsarTime(p.since)}}
		ps.MsgRateIn, ps.MsgThroughputIn = p.in.Rate(now)
		if ps.MsgRateIn > 0 {
			ps.AverageMsgSize = ps.MsgThroughputIn / ps.MsgRateIn
		}
		st.Publishers = append(st.Publishers, ps)
	}
	subs := make([]*npSub, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	for r, rm := range t.remotes {
		rs := admin.NonPersistentReplicatorStats{Connected: rm.s.Connected()}
		rs.MsgRateOut, _ = rm.out.Rate(now)
		rs.MsgOutCounter, _ = rm.out.Totals()
		rs.MsgDropRate, _ = rm.drop.Rate(now)
		rs.MsgDropCounter, _ = rm.drop.Totals()
		st.Replication[r] = rs
	}
	t.mu.Unlock()
	for _, s := range subs {
		ss := admin.NonPersistentSubscriptionStats{Consumers: []admin.ConsumerStats{}}
		s.mu.Lock()
		typ := pb.CommandSubscribe_SubType(s.core.Type())
		ss.Type = subTypeName(typ)
		active, hasActive := s.core.Active()
		hasActive = hasActive && (typ == pb.CommandSubscribe_Exclusive || typ == pb.CommandSubscribe_Failover)
		for _, cv := range s.core.Consumers() {
			if hasActive && cv.ID == active {
				ss.ActiveConsumerName = cv.Name
			}
			c := s.consumers[cv.ID]
			cs := admin.ConsumerStats{ConsumerName: cv.Name, AvailablePermit: cv.Permits, Address: c.conn.nc.RemoteAddr().String(),
				ClientVersion: c.conn.clientVersion, ConnectedSince: pulsarTime(c.since)}
			cs.MsgRateOut, cs.MsgThroughputOut = c.out.Rate(now)
			cs.MsgOutCounter, cs.BytesOutCounter = c.out.Totals()
			ss.Consumers = append(ss.Consumers, cs)
		}
		s.mu.Unlock()
		ss.MsgRateOut, ss.MsgThroughputOut = s.out.Rate(now)
		ss.MsgOutCounter, ss.BytesOutCounter = s.out.Totals()
		ss.MsgDropRate, _ = s.drop.Rate(now)
		ss.MsgDropCounter, _ = s.drop.Totals()
		st.MsgRateOut += ss.MsgRateOut
		st.MsgThroughputOut += ss.MsgThroughputOut
		st.MsgOutCounter += ss.MsgOutCounter
		st.BytesOutCounter += ss.BytesOutCounter
		st.MsgDropRate += ss.MsgDropRate
		st.MsgDropCounter += ss.MsgDropCounter
		st.Subscriptions[s.name] = ss
	}
	return st
}

func (a adminBroker) NonPersistentTopics(ns string) []string {
	out := []string{}
	for _, t := range a.b.np.loaded() {
		if t.name.NamespaceName() == ns {
			out = append(out, t.name.String())
		}
	}
	slices.Sort(out)
	return out
}

func (a adminBroker) NonPersistentStats(ctx context.Context, tn meta.TopicName) (admin.NonPersistentTopicStats, error) {
	if t := a.b.np.lookup(tn.String()); t != nil {
		return t.stats(), nil
	}
	bi, err := a.Lookup(ctx, tn, "")
	if err != nil {
		return admin.NonPersistentTopicStats{}, err
	}
	if bi.ID != "" && bi.ID != a.b.cfg.BrokerID && bi.AdminURL != "" {
		return admin.NonPersistentTopicStats{}, meta.NotOwnerError{OwnerAdminURL: bi.AdminURL, OwnerHTTPListeners: bi.HTTPListeners, Err: fmt.Errorf("%w: %s is served by %s", meta.ErrTopicFenced, tn, bi.ID)}
	}
	return admin.NonPersistentTopicStats{}, fmt.Errorf("%w: %s (a non-persistent topic exists while it has producers or consumers)", meta.ErrTopicNotFound, tn)
}
