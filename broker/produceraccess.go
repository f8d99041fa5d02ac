package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/broker/access"
	"github.com/meridian-mq/meridian/broker/meta"
)

// The topic's producer access modes (Shared, Exclusive, WaitForExclusive,
// ExclusiveWithFencing): the decisions are broker/access's core, held in
// Topic.access under t.mu; this file is its shell. Ordering contracts:
//
//   - a grant that moves the topic epoch is answered (PRODUCER_SUCCESS)
//     only after the epoch is persisted (epochProperty, in the managed
//     ledger's properties), so a producer fenced by a grant cannot come
//     back after a reload with an epoch the topic forgot it had passed;
//   - producers fenced by ExclusiveWithFencing are marked fenced under
//     t.mu in the same step as the grant, so no SEND of theirs is appended
//     after it (publishMetered checks the mark under t.mu); then they get
//     CLOSE_PRODUCER, and their reconnect, carrying the old epoch, is
//     refused with ProducerFenced (the Go client then closes them for
//     good);
//   - a queued (WaitForExclusive) producer's request stays open: it was
//     answered PRODUCER_SUCCESS with producer_ready=false, and its waiter
//     receives exactly one admitted — a grant, or an error — from
//     whichever takes it out of t.waiting.

// epochProperty is the managed-ledger property holding the topic epoch
// (the name Pulsar uses for the same property).
const epochProperty = "pulsar.topic.epoch"

// admission is what addProducer decided: granted (last, epoch), or queued
// (wait receives the outcome later).
type admission struct {
	admitted
	wait <-chan admitted
}

// admitted is a grant (or, with err, a refusal) of a producer.
type admitted struct {
	last     int64 // last sequence id persisted for its name
	epoch    uint64
	hasEpoch bool
	err      error
}

// waiter is a queued producer and where its outcome goes (buffered: one).
type waiter struct {
	p  *Producer
	ch chan admitted
}

// loadEpoch reads the persisted topic epoch into the core (load).
func (t *Topic) loadEpoch(ctx context.Context) error {
	v, ok, err := t.ml.Property(ctx, epochProperty)
	if err != nil {
		return err
	}
	if ok && v < 0 {
		return fmt.Errorf("topic epoch %d is negative", v)
	}
	t.mu.Lock()
	t.access = access.New(uint64(v), ok)
	t.mu.Unlock()
	return nil
}

// accessErr maps a refusal of the core to the protocol's errors.
func accessErr(t *Topic, err error) error {
	switch {
	case errors.Is(err, access.ErrFenced):
		return fmt.Errorf("%w: %s: %v", meta.ErrProducerFenced, t.name, err)
	case errors.Is(err, access.ErrBusy):
		return fmt.Errorf("%w: %s: %v", meta.ErrProducerBusy, t.name, err)
	}
	return fmt.Errorf("%w: %v", meta.ErrNotAllowed, err)
}

// addProducer registers p (granted), queues it (WaitForExclusive behind
// other producers) or refuses it. topicEpoch is the epoch the client was
// granted before, if it sent one. A grant that moved the epoch returns
// only once the epoch is persisted.
func (t *Topic) addProducer(ctx context.Context, p *Producer, topicEpoch *uint64) (admission, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return admission{}, fmt.Errorf("%w: %s is closing", meta.ErrTopicFenced, t.name)
	}
	if t.quotaErr != nil || t.rpoErr != nil {
		err := t.quotaErr
		if err == nil {
			err = t.rpoErr
		}
		t.mu.Unlock()
		return admission{}, err
	}
	if !underLimit(len(t.producers), t.b.cfg.MaxProducersPerTopic) {
		t.mu.Unlock()
		t.b.limitExceeded(limitProducersPerTopic)
		return admission{}, fmt.Errorf("%w: %s has reached the limit of %d producers", meta.ErrProducerBusy, t.name, t.b.cfg.MaxProducersPerTopic)
	}
	for q := range t.producers {
		if q.name == p.name {
			t.mu.Unlock()
			return admission{}, fmt.Errorf("%w: producer named %s already connected to %s", meta.ErrProducerBusy, p.name, t.name)
		}
	}
	t.producerKeys++
	p.key = access.ID(t.producerKeys)
	r := access.Request{ID: p.key, Mode: p.mode}
	if topicEpoch != nil {
		r.Epoch, r.HasEpoch = *topicEpoch, true
	}
	d := t.access.Add(r)
	switch d.Verdict {
	case access.Refused:
		t.mu.Unlock()
		return admission{}, accessErr(t, d.Err)
	case access.Queued:
		w := &waiter{p: p, ch: make(chan admitted, 1)}
		t.waiting[p.key] = w
		t.mu.Unlock()
		return admission{wait: w.ch}, nil
	}
	fenced := t.fenceLocked(d.Fenced)
	last := t.attachLocked(p)
	t.mu.Unlock()
	for _, q := range fenced {
		q.closeByBroker(nil)
	}
	if d.Persist {
		if err := t.persistEpoch(ctx); err != nil {
			t.removeProducer(p)
			return admission{}, fmt.Errorf("%w: persisting the topic epoch of %s: %v", meta.ErrServiceNotReady, t.name, err)
		}
	}
	return admission{admitted: admitted{last: last, epoch: d.Epoch, hasEpoch: d.HasEpoch}}, nil
}

// attachLocked makes p one of the topic's producers and returns the last
// sequence id persisted for its name.
func (t *Topic) attachLocked(p *Producer) int64 {
	t.producers[p] = struct{}{}
	t.b.metrics.producers.Inc()
	st := t.dedupFor(p.name)
	st.connected++
	return st.lastPersisted
}

// fenceLocked takes the producers the core fenced off the topic: granted
// ones are marked fenced (their SENDs are no longer appended) and
// returned, for the caller to close outside t.mu; queued ones are refused.
func (t *Topic) fenceLocked(ids []access.ID) []*Producer {
	var out []*Producer
	for _, id := range ids {
		if w := t.waiting[id]; w != nil {
			delete(t.waiting, id)
			w.ch <- admitted{err: fmt.Errorf("%w: %s: fenced out by an ExclusiveWithFencing producer", meta.ErrProducerFenced, t.name)}
			continue
		}
		for q := range t.producers {
			if q.key == id {
				q.fenced = true
				out = append(out, q)
			}
		}
	}
	return out
}

// removeProducer takes p off the topic, granted or queued (a queued one's
// waiter is told), and grants exclusive access to the next queued
// producer once none is left.
func (t *Topic) removeProducer(p *Producer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.producers[p]; ok {
		delete(t.producers, p)
		t.b.metrics.producers.Dec()
		if st := t.dedup[p.name]; st != nil && st.connected > 0 {
			if st.connected--; st.connected == 0 {
				st.idleSince = time.Now()
			}
		}
	} else if w := t.waiting[p.key]; w != nil && w.p == p {
		delete(t.waiting, p.key)
		w.ch <- admitted{err: fmt.Errorf("%w: producer %s left before it was granted exclusive access", meta.ErrNotAllowed, p.name)}
	} else {
		return
	}
	if t.access == nil {
		return
	}
	for _, pr := range t.access.Remove(p.key) {
		w := t.waiting[pr.ID]
		if w == nil {
			continue // cannot be: every queued producer has a waiter
		}
		delete(t.waiting, pr.ID)
		if !pr.Granted {
			w.ch <- admitted{err: fmt.Errorf("%w: %s: the topic epoch moved past the producer's while it waited", meta.ErrProducerFenced, t.name)}
			continue
		}
		got := admitted{last: t.attachLocked(w.p), epoch: pr.Epoch, hasEpoch: true}
		if !pr.Persist {
			w.ch <- got
			continue
		}
		go func() {
			ctx, cancel := context.WithTimeout(t.b.ctx, 30*time.Second)
			defer cancel()
			if err := t.persistEpoch(ctx); err != nil {
				t.removeProducer(w.p)
				got = admitted{err: fmt.Errorf("%w: persisting the topic epoch of %s: %v", meta.ErrServiceNotReady, t.name, err)}
			}
			w.ch <- got
		}()
	}
}

// persistEpoch writes the core's current epoch, if it moved past the one
// last written (epochMu orders the writes, so a later grant's epoch is
// never overwritten by an earlier one's).
func (t *Topic) persistEpoch(ctx context.Context) error {
	t.epochMu.Lock()
	defer t.epochMu.Unlock()
	t.mu.Lock()
	e, ok := t.access.Epoch()
	t.mu.Unlock()
	if !ok {
		return nil
	}
	return t.ml.SetProperty(ctx, epochProperty, int64(e))
}

// refuseWaitingLocked refuses every queued producer (the topic unloads,
// or the region stops serving its namespace) with a retriable error, and
// takes them out of the core's queue.
func (t *Topic) refuseWaitingLocked() {
	for id, w := range t.waiting {
		delete(t.waiting, id)
		t.access.Remove(id) // queued: nothing is promoted
		w.ch <- admitted{err: fmt.Errorf("%w: %s is closing or moving: look it up again", meta.ErrTopicFenced, t.name)}
	}
}
