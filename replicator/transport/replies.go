package transport

import (
	"sync"

	"github.com/meridian-mq/meridian/replicator"
)

// MaxPipelinedBatches bounds the batches of one replication stream whose
// writes are in flight on the target; the stream stops taking batches past
// it (the sender's own bound, MaxInflightBatches, is 8 by default).
const MaxPipelinedBatches = 64

// ReplyQueue sends a replication stream's replies in the order its
// batches arrived, although their writes complete later (pipelined
// apply): each batch pushes a slot on arrival and fills it when its write
// is persisted (or at once when it has nothing to write); the filled slots
// at the head are sent, in order. So an ack never overtakes the reply of
// an earlier batch, and an ack's Through only ever covers entries persisted
// with everything before them (the managed ledger persists in order).
//
// The first error (a failed write, a failed send) is kept: later replies
// are not sent, and Failed is closed so the stream's loop ends. After
// Close nothing is sent (the stream's handler has returned).
type ReplyQueue struct {
	send func(replicator.Ack) error

	mu      sync.Mutex
	cond    *sync.Cond // q shrank, sending ended, failed or closed
	q       []*ReplySlot
	sending bool // a goroutine is sending the head's replies
	closed  bool
	first   error
	failed  chan struct{} // closed with the first error
}

type ReplySlot struct {
	q      *ReplyQueue
	filled bool
	acks   []replicator.Ack
	err    error
}

func NewReplyQueue(send func(replicator.Ack) error) *ReplyQueue {
	rq := &ReplyQueue{send: send, failed: make(chan struct{})}
	rq.cond = sync.NewCond(&rq.mu)
	return rq
}

// Push adds the next batch's slot, first waiting while
// MaxPipelinedBatches are in flight.
func (rq *ReplyQueue) Push() *ReplySlot {
	s := &ReplySlot{q: rq}
	rq.mu.Lock()
	for len(rq.q) >= MaxPipelinedBatches && rq.first == nil && !rq.closed {
		rq.cond.Wait()
	}
	rq.q = append(rq.q, s)
	rq.mu.Unlock()
	return s
}

// Done fills the slot with its replies (sent in order) and, if err, the
// error that ends the stream after them.
func (s *ReplySlot) Done(acks []replicator.Ack, err error) {
	rq := s.q
	rq.mu.Lock()
	s.filled, s.acks, s.err = true, acks, err
	if rq.sending {
		rq.mu.Unlock()
		return // the goroutine sending sees it
	}
	rq.sending = true
	for len(rq.q) > 0 && rq.q[0].filled && rq.first == nil && !rq.closed {
		h := rq.q[0]
		rq.q[0] = nil
		rq.q = rq.q[1:]
		rq.cond.Broadcast()
		rq.mu.Unlock()
		var serr error
		for _, a := range h.acks {
			if serr = rq.send(a); serr != nil {
				break
			}
		}
		rq.mu.Lock()
		if e := firstNonNil(serr, h.err); e != nil && rq.first == nil {
			rq.first = e
			close(rq.failed)
		}
	}
	rq.sending = false
	rq.cond.Broadcast()
	rq.mu.Unlock()
}

func firstNonNil(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Wait blocks until every pushed slot is sent, or the queue failed.
func (rq *ReplyQueue) Wait() {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	for (len(rq.q) > 0 || rq.sending) && rq.first == nil && !rq.closed {
		rq.cond.Wait()
	}
}

// Close stops all sending and waits for a send in progress to end; the
// stream's handler calls it before it returns.
func (rq *ReplyQueue) Close() {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	rq.closed = true
	rq.cond.Broadcast()
	for rq.sending {
		rq.cond.Wait()
	}
}

// Failed is closed with the first error.
func (rq *ReplyQueue) Failed() <-chan struct{} { return rq.failed }

// Err is the first error, if any.
func (rq *ReplyQueue) Err() error {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	return rq.first
}
