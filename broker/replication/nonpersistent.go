package replication

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
	"github.com/meridian-mq/meridian/replicator/transport"
)

// Best-effort replication of non-persistent topics, as Pulsar's
// NonPersistentReplicator: a message is offered to one NPSender per
// remote region as it is dispatched locally; the sender ships it over the
// same replication stream as persistent topics (Hello with the
// non-persistent topic's name), and the remote owner hands it to its own
// non-persistent topic's subscriptions and acknowledges the batch at once.
// Nothing is stored on either side, and nothing is resent: a message the
// sender's queue has no room for (npQueueMessages), that arrives while
// the stream is down or being opened (no retry before npRedialDelay
// after a failed dial), or whose batch fails to send is dropped, and the
// caller's dropped callback counts it. The sequence numbers and stream
// fields of the batches mean nothing to the target (no record is kept).

// npQueueMessages bounds the entries waiting for a sender (about 1,000
// messages of 1 KiB: 1 MiB per topic and remote region at most).
const npQueueMessages = 1024

// npBatchMax bounds the entries of one batch.
const npBatchMax = 128

// npRedialDelay is how long a sender drops what it is offered after a
// failed dial before it dials again (a region that is down costs one dial
// a second, not one per message).
const npRedialDelay = time.Second

// NPSender ships one non-persistent topic's messages to one remote
// region, best effort. Safe for concurrent use.
type NPSender struct {
	svc           *Service
	topic, remote string
	q             chan npItem
	sent, dropped func(n int)
	cancel        context.CancelFunc
	done          chan struct{}
	connected     atomic.Bool
	// mu orders Offer with Close: nothing enters the queue once closed
	// is set, so the run's final drain counts everything.
	mu     sync.Mutex
	closed bool
}

type npItem struct {
	data      []byte // the entry (broker/entry format)
	n         int    // messages in it
	publishMs int64
}

// NewNPSender starts the sender of topic (non-persistent://...) to
// region remote. sent and dropped are called with the messages of each
// batch sent and of each message dropped (from the sender's goroutine or
// Offer's caller); they must not block.
func (svc *Service) NewNPSender(topic, remote string, sent, dropped func(n int)) *NPSender {
	ctx, cancel := context.WithCancel(svc.ctx)
	s := &NPSender{svc: svc, topic: topic, remote: remote, q: make(chan npItem, npQueueMessages),
		sent: sent, dropped: dropped, cancel: cancel, done: make(chan struct{})}
	go s.run(ctx)
	return s
}

// Offer queues an entry of n messages, or drops it when the queue is
// full. It never blocks. The sender owns data from now on.
func (s *NPSender) Offer(data []byte, n int, publishMs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.dropped(n)
		return
	}
	select {
	case s.q <- npItem{data: data, n: n, publishMs: publishMs}:
	default:
		s.dropped(n)
	}
}

// Connected reports whether the stream to the remote region is open.
func (s *NPSender) Connected() bool { return s.connected.Load() }

// Remote is the region the sender ships to.
func (s *NPSender) Remote() string { return s.remote }

// Close stops the sender; what it still holds is dropped (and counted).
func (s *NPSender) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	<-s.done
}

func (s *NPSender) run(ctx context.Context) {
	defer close(s.done)
	var st *transport.Stream
	defer func() {
		if st != nil {
			st.Close()
		}
		s.connected.Store(false)
		for {
			select {
			case it := <-s.q:
				s.dropped(it.n)
			default:
				return
			}
		}
	}()
	var retryAt time.Time
	var batchID, seq uint64
	for {
		var first npItem
		select {
		case <-ctx.Done():
			return
		case first = <-s.q:
		}
		items := []npItem{first}
	more:
		for len(items) < npBatchMax {
			select {
			case it := <-s.q:
				items = append(items, it)
			default:
				break more
			}
		}
		n := 0
		for _, it := range items {
			n += it.n
		}
		if st == nil && time.Now().After(retryAt) {
			var err error
			if st, err = s.open(ctx); err != nil {
				s.svc.log.Debug("non-persistent replication: dial failed; dropping until it succeeds", "topic", s.topic, "remote", s.remote, "err", err)
				retryAt = time.Now().Add(npRedialDelay)
				st = nil
			} else {
				s.connected.Store(true)
				go drainAcks(st)
			}
		}
		if st == nil {
			s.dropped(n)
			continue
		}
		batchID++
		b := replicator.Batch{ID: batchID, Origin: s.svc.cfg.Cluster, Entries: make([]replicator.Entry, len(items))}
		for i, it := range items {
			seq++
			b.Entries[i] = replicator.Entry{Origin: s.svc.cfg.Cluster, OriginSeq: seq, Data: it.data, PublishMs: it.publishMs}
		}
		if err := st.SendBatch(b); err != nil {
			s.svc.log.Debug("non-persistent replication: send failed", "topic", s.topic, "remote", s.remote, "err", err)
			st.Close()
			st = nil
			s.connected.Store(false)
			s.dropped(n)
			continue
		}
		s.sent(n)
	}
}

// drainAcks reads the target's acks (nothing is resent, so they only
// keep the stream's flow going) until the stream ends.
func drainAcks(st *transport.Stream) {
	for {
		if _, err := st.Recv(); err != nil {
			return
		}
	}
}

func (s *NPSender) open(ctx context.Context) (*transport.Stream, error) {
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	addrs, err := s.svc.endpoints(ectx, s.remote)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("list the endpoints of region %s: %w", s.remote, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("region %s has no registered broker", s.remote)
	}
	return s.svc.dialer.Open(ctx, addrs[rand.IntN(len(addrs))], transport.Hello{Source: s.svc.cfg.Cluster, Target: s.remote, Topic: s.topic})
}

// npTarget is a non-persistent topic's side of an incoming stream: each
// batch's entries go to deliver (the local topic's subscriptions) and
// the batch is acknowledged at once.
type npTarget struct {
	deliver func(origin string, entries []replicator.Entry)
}

func (t npTarget) ApplyBatch(b replicator.Batch, rq *transport.ReplyQueue) error {
	slot := rq.Push()
	t.deliver(b.Origin, b.Entries)
	slot.Done([]replicator.Ack{{Origin: b.Origin, BatchID: b.ID, Stream: b.Stream, Through: b.LastSeq()}}, nil)
	return nil
}

func (npTarget) FreshAck(a replicator.Ack) replicator.Ack { return a }

func (npTarget) ApplySubscription(context.Context, string, *replpb.SubscriptionUpdate) {}
