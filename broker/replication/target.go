package replication

import (
	"context"
	"fmt"
	"github.com/meridian-mq/meridian/broker/codec"
	"slices"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/internal/ratemeter"
	"github.com/meridian-mq/meridian/replicator"
	"github.com/meridian-mq/meridian/replicator/transport"
)

// The target side: one Applier per (topic, origin region); a batch's
// entries are appended through the topic and acknowledged in arrival
// order once persisted.

type applierSlot struct {
	// order is held while a batch is received and its write handed to the
	// managed ledger, so writes reach the log in handout order.
	order sync.Mutex
	// mu guards a and broken; the write callbacks take it (never order).
	mu sync.Mutex
	a  *replicator.Applier
	// broken: a write failed; the writes handed out after it are void.
	broken bool
	// in meters the origin's entries persisted here (the stats'
	// replication.<origin>.msgRateIn and msgThroughputIn: entries, a
	// batch counting once, and their bytes), on the service's clock.
	in ratemeter.Meter
}

// topicRepl is a topic's replication state.
type topicRepl struct {
	mu       sync.Mutex
	appliers map[string]*applierSlot
	senders  map[string]*replSender
}

func (t *Topic) replState() *topicRepl {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.repl == nil {
		t.repl = &topicRepl{appliers: map[string]*applierSlot{}, senders: map[string]*replSender{}}
	}
	return t.repl
}

func (t *Topic) applierFor(origin string) (*applierSlot, error) {
	r := t.replState()
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.appliers[origin]; s != nil {
		return s, nil
	}
	through := t.log.Applied(origin)
	a, err := replicator.NewApplier(t.svc.cfg.Cluster, replicator.State{Origin: origin, Through: through})
	if err != nil {
		return nil, err
	}
	s := &applierSlot{a: a}
	r.appliers[origin] = s
	return s, nil
}

// freshAck raises a reply's Through to what the origin's applier holds
// durable when the reply is sent: a reply computed when its batch arrived
// (a duplicate, a nack) may be sent after the writes of earlier batches
// were persisted, and must not report less than the acks before it.
func (t *Topic) freshAck(a replicator.Ack) replicator.Ack {
	r := t.replState()
	r.mu.Lock()
	slot := r.appliers[a.Origin]
	r.mu.Unlock()
	if slot == nil {
		return a
	}
	slot.mu.Lock()
	d := slot.a.State()
	slot.mu.Unlock()
	if d.Stream == a.Stream && d.Through > a.Through {
		a.Through = d.Through
	}
	return a
}

// applyBatch applies one batch from an origin region: it queues the
// batch's replies on rq, in arrival order, and hands the batch's write to
// the managed ledger without waiting for it; the write's ack is released
// when it is persisted. Batches of one origin are received and handed to
// the log one at a time (slot.order), so the writes reach the log in the
// order the applier handed them out, and the managed ledger persists them
// in that order. An error is the stream's end (a malformed batch, or a
// write that could not be started).
func (t *Topic) applyBatch(b replicator.Batch, rq *transport.ReplyQueue) error {
	if err := checkMessages(b); err != nil {
		// Nothing of the batch is stored, nothing acknowledged: the
		// stream ends, the sender sends it again, and replication stays
		// behind (and alerts) for as long as the origin sends these
		// bytes — never garbage in this region's log for its consumers.
		t.svc.log.Error("replication: refused a batch whose entries are not Pulsar messages", "topic", t.name.String(), "origin", b.Origin, "batch", b.ID, "err", err)
		return err
	}
	slot, err := t.applierFor(b.Origin)
	if err != nil {
		return err
	}
	slot.order.Lock()
	defer slot.order.Unlock()
	slot.mu.Lock()
	if slot.broken {
		// An earlier write of this applier failed: the ones after it are
		// void (PersistFailed); the topic is reloading.
		slot.mu.Unlock()
		return fmt.Errorf("%w: %s: an earlier replicated write failed; the topic is reloading", meta.ErrTopicFenced, t.name)
	}
	res, err := slot.a.Receive(b)
	slot.mu.Unlock()
	if err != nil {
		return err
	}
	r := rq.Push()
	var out []replicator.Ack
	if res.Reply != nil {
		out = append(out, *res.Reply)
	}
	if res.Duplicates > 0 {
		t.svc.metrics.Duplicates.Add(float64(res.Duplicates))
	}
	if res.Regressed {
		t.svc.log.Error("replication: this region lost entries it had acknowledged", "topic", t.name.String(), "origin", b.Origin)
	}
	w := res.Write
	if w == nil {
		r.Done(out, nil)
		return nil
	}
	// failed voids w (and, in the applier, every write after it).
	failed := func(err error) {
		slot.mu.Lock()
		slot.a.PersistFailed(w)
		slot.broken = true
		slot.mu.Unlock()
		r.Done(out, err)
	}
	if !w.Skipped.Empty() {
		t.svc.log.Error("replication: a new stream skipped entries (declared loss)", "topic", t.name.String(), "origin", w.Origin, "from", w.Skipped.From, "through", w.Skipped.Through)
	}
	// The async tail of a failover (orphans.go): listed, and by policy
	// kept aside instead of appended.
	rec, maybe := t.orphanRecord()
	var orphans []int
	if maybe {
		orphans = findOrphans(rec, w.Entries)
	}
	quarantine := ""
	var qpos []mledger.Position
	if len(orphans) > 0 && t.policies().Effective().Orphans == meta.OrphansQuarantine {
		ctx, cancel := context.WithTimeout(t.svc.ctx, 30*time.Second)
		quarantine, qpos, err = t.quarantine(ctx, w.Entries, orphans)
		cancel()
		if err != nil {
			failed(fmt.Errorf("quarantine the orphans of the failover: %w", err))
			return nil
		}
		for _, i := range orphans {
			w.Entries[i].Skip = true // kept aside: only the sequence advances here
		}
	}
	t.alterForTest(w.Entries)
	// The callback runs on the managed ledger's delivery goroutine once
	// every entry of w is persisted or failed (or at once when nothing is
	// to be written, or the topic is closed): it takes slot.mu, never
	// slot.order, which this goroutine holds.
	t.log.AppendReplicated(w.Entries, func(err error) {
		if err != nil {
			failed(err)
			return
		}
		slot.mu.Lock()
		if slot.broken {
			// An earlier write failed after this one was handed out:
			// this one is void; the topic reloads and rebuilds the
			// record from the log.
			slot.mu.Unlock()
			r.Done(out, fmt.Errorf("%w: %s: an earlier replicated write failed", meta.ErrTopicFenced, t.name))
			return
		}
		ack, err := slot.a.Persisted(w)
		slot.mu.Unlock()
		if err != nil {
			r.Done(out, err)
			return
		}
		t.svc.metrics.Applied.Add(float64(len(w.Entries)))
		n, size := replicatedSize(w.Entries)
		slot.in.Add(t.svc.clock.Now(), n, size)
		t.recordOrphans(rec, w.Entries, orphans, quarantine, qpos)
		r.Done(append(out, ack), nil)
	})
	return nil
}

// checkMessages checks each entry of b that carries a message as the
// broker checks a producer's SEND before storing it (codec.VerifyChecksum:
// the message part's header sizes and its CRC32C), so that another
// region's bytes reach this region's consumers only as a Pulsar message
// a producer could have sent. Placeholders (Skip) carry none.
func checkMessages(b replicator.Batch) error {
	for i := range b.Entries {
		e := &b.Entries[i]
		if e.Skip {
			continue
		}
		if err := codec.VerifyChecksum(e.Data); err != nil {
			return fmt.Errorf("replicated entry %d of batch %d from %s (origin seq %d): %w", i, b.ID, b.Origin, e.OriginSeq, err)
		}
	}
	return nil
}

// replicatedSize counts the entries of es that carry a message, and
// their bytes: what a sender's msgRateOut and an applier's msgRateIn
// count. A Skip entry (a replicate_to placeholder, or an orphan kept
// aside in quarantine) carries none: the sender sends only its sequence,
// the applier appends nothing.
func replicatedSize(es []replicator.Entry) (entries, bytes int64) {
	for i := range es {
		if !es[i].Skip {
			entries++
			bytes += int64(len(es[i].Data))
		}
	}
	return entries, bytes
}

// alterForTest applies the fault Faults.AlterTopic/AlterSeq to the
// entries about to be stored.
func (t *Topic) alterForTest(es []replicator.Entry) {
	f := t.svc.cfg.Faults
	if f.AlterSeq == 0 || f.AlterTopic != t.name.String() {
		return
	}
	for i := range es {
		if e := &es[i]; e.OriginSeq == f.AlterSeq && !e.Skip && len(e.Data) > 0 {
			e.Data = slices.Clone(e.Data)
			e.Data[len(e.Data)-1] ^= 0xff
			t.svc.log.Warn("fault injection: a replicated entry's payload altered before it is stored", "topic", t.name.String(), "origin", e.Origin, "seq", e.OriginSeq)
		}
	}
}
