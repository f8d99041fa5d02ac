package transport

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/replicator"
)

func ack(id uint64) replicator.Ack { return replicator.Ack{BatchID: id, Through: id} }

// The replies of a pipelined replication stream go back in the order the
// batches arrived, however the writes complete: an ack never overtakes
// the reply of an earlier batch.
func TestReplyQueueSendsInArrivalOrder(t *testing.T) {
	var mu sync.Mutex
	var sent []uint64
	rq := NewReplyQueue(func(a replicator.Ack) error {
		mu.Lock()
		sent = append(sent, a.BatchID)
		mu.Unlock()
		return nil
	})
	s := make([]*ReplySlot, 5)
	for i := range s {
		s[i] = rq.Push()
	}
	// Writes complete out of order: 3, 1, 4, then 0 (1 is now sendable
	// behind 0), then 2.
	s[3].Done([]replicator.Ack{ack(3)}, nil)
	s[1].Done([]replicator.Ack{ack(1)}, nil)
	s[4].Done(nil, nil) // a batch with nothing to reply
	if len(sent) != 0 {
		t.Fatalf("sent %v before batch 0's reply", sent)
	}
	s[0].Done([]replicator.Ack{ack(0)}, nil)
	if want := []uint64{0, 1}; !equalU(sent, want) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
	s[2].Done([]replicator.Ack{{BatchID: 2, ResendFrom: 7}, ack(2)}, nil)
	rq.Wait()
	if want := []uint64{0, 1, 2, 2, 3}; !equalU(sent, want) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
}

// A failed write sends the replies before it, then ends the stream:
// nothing after it is acknowledged.
func TestReplyQueueStopsAtTheFirstFailure(t *testing.T) {
	var sent []uint64
	rq := NewReplyQueue(func(a replicator.Ack) error { sent = append(sent, a.BatchID); return nil })
	a, b, c := rq.Push(), rq.Push(), rq.Push()
	c.Done([]replicator.Ack{ack(2)}, nil)
	boom := errors.New("write failed")
	b.Done([]replicator.Ack{{BatchID: 1, Through: 0}}, boom) // a reply due before the failure
	a.Done([]replicator.Ack{ack(0)}, nil)
	select {
	case <-rq.Failed():
	default:
		t.Fatal("the queue did not fail")
	}
	if !errors.Is(rq.Err(), boom) {
		t.Fatalf("err %v", rq.Err())
	}
	if want := []uint64{0, 1}; !equalU(sent, want) {
		t.Fatalf("sent %v, want %v (nothing after the failed write)", sent, want)
	}
}

// After close (the stream's handler returned) nothing is sent, and push
// no longer waits for room.
func TestReplyQueueClosed(t *testing.T) {
	n := 0
	rq := NewReplyQueue(func(replicator.Ack) error { n++; return nil })
	s := rq.Push()
	rq.Close()
	s.Done([]replicator.Ack{ack(0)}, nil)
	if n != 0 {
		t.Fatalf("%d replies sent after close", n)
	}
	for range MaxPipelinedBatches + 1 {
		rq.Push()
	}
}

// Push waits while MaxPipelinedBatches writes are in flight, and goes on
// once the head's reply is sent.
func TestReplyQueueBoundsThePipeline(t *testing.T) {
	rq := NewReplyQueue(func(replicator.Ack) error { return nil })
	var slots []*ReplySlot
	for range MaxPipelinedBatches {
		slots = append(slots, rq.Push())
	}
	pushed := make(chan struct{})
	go func() { rq.Push(); close(pushed) }()
	select {
	case <-pushed:
		t.Fatal("push did not wait with the pipeline full")
	case <-time.After(50 * time.Millisecond):
	}
	slots[0].Done(nil, nil)
	select {
	case <-pushed:
	case <-time.After(10 * time.Second):
		t.Fatal("push still waiting after the head completed")
	}
}

func equalU(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
