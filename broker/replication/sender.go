package replication

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/clock"
	"github.com/meridian-mq/meridian/internal/ratemeter"
	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
)

// The sender shell: one goroutine per (topic, remote region) drives a
// replicator.Sender — reads the log, sends batches on the stream to the
// remote region, delivers its acks, persists the cursor. It obeys its
// core: it sleeps until the core's WakeAt, its own next deadline (below)
// or an input — the log grew (Wake), a reply or a stream error, stop —
// on an injected clock, and each wake-up is one step (step), a method of
// the time it is given.
//
// Its own deadlines, besides the core's:
//   - the status, published at most every statusEvery, so a step that did
//     not publish it brings the next one at the latest statusEvery after
//     the last;
//   - the backlog marker: cleared markerIdle after the region caught up; a
//     failed write of it retried statusEvery later;
//   - the replicated subscriptions' positions, every subSyncEvery while a
//     stream is open in an active-standby namespace: a consumer's ack
//     moves them without any input reaching the sender, so they are
//     polled — the one periodic wake-up, and only where positions travel.

// statusEvery bounds how often a sender publishes its status.
const statusEvery = 200 * time.Millisecond

// stream is an open replication stream to the remote region
// (*transport.Stream): SendBatch and SendSubscription from the sender's
// goroutine, Recv from the stream's receiving one.
type stream interface {
	SendBatch(replicator.Batch) error
	SendSubscription(*replpb.SubscriptionUpdate) error
	Recv() (replicator.Ack, error)
	Addr() string
	Close()
}

// replSender drives one replicator.Sender: a goroutine owns it (run).
type replSender struct {
	t      *Topic
	remote string
	tlog   senderLog                                 // the topic's log and cursor
	dial   func(ctx context.Context) (stream, error) // a stream to remote's owner of the topic
	clock  clock.Clock
	s      *replicator.Sender
	log    *slog.Logger

	wake   chan struct{}
	events chan senderEvent
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	st          *outStream
	gen         int
	dropped     int       // batches dropped by fault injection
	marked      bool      // the backlog marker is set
	markerRetry time.Time // a write of the marker failed: try again then
	caughtUp    time.Time // since when the remote region has acked everything

	lastStatus    time.Time // when the status was last published
	forceStatus   bool      // replies arrived: publish at the next step
	statusPending bool      // a step did not publish: publish by lastStatus+statusEvery

	lastSubSync time.Time          // when subscription positions were last sent
	sentSubs    map[string]subSent // what was sent of them on stream subGen
	subGen      int

	status  atomic.Pointer[Status]
	lastErr atomic.Pointer[string]
	// out meters the entries sent to the remote region (admin stats).
	out ratemeter.Meter

	// idle, a test hook, is called each time run goes to sleep, with when
	// it wakes next (zero: only an input wakes it).
	idle func(wake time.Time)
}

type outStream struct {
	gen  int
	cs   stream
	sent []uint64
	addr string
}

type senderEvent struct {
	gen int
	ack *replicator.Ack
	err error
}

// newSender returns the shell of a sender towards remote resuming from
// cursor c, over tl and dial; run starts it.
func (t *Topic) newSender(remote string, cfg replicator.SenderConfig, c replicator.Cursor, tl senderLog, dial func(context.Context) (stream, error)) (*replSender, error) {
	s, err := replicator.NewSender(cfg, c, t.svc.clock.Now())
	if err != nil {
		return nil, err
	}
	rs := &replSender{t: t, remote: remote, tlog: tl, dial: dial, clock: t.svc.clock, s: s, log: t.svc.log,
		wake: make(chan struct{}, 1), events: make(chan senderEvent, 256), done: make(chan struct{}),
		sentSubs: map[string]subSent{}}
	if h := t.svc.hooks.senderIdle; h != nil {
		rs.idle = func(wake time.Time) { h(rs, wake) }
	}
	rs.ctx, rs.cancel = context.WithCancel(t.svc.ctx)
	return rs, nil
}

func (rs *replSender) stop() {
	rs.cancel()
	<-rs.done
}

// stopWithin is stop waiting no longer than ctx (an unload's): the sender's
// goroutine leaves once its context is cancelled, whatever it was waiting
// for; its cursor's progress not yet flushed is sent again, never lost.
func (rs *replSender) stopWithin(ctx context.Context) {
	rs.cancel()
	select {
	case <-rs.done:
	case <-ctx.Done():
		rs.log.Warn("replication sender still stopping", "err", ctx.Err())
	}
}

// run is the sender's goroutine: step, then sleep until the wake-up time
// step returned or an input, and again.
func (rs *replSender) run() {
	defer close(rs.done)
	defer rs.closeStream()
	alarm := clock.NewAlarm(rs.clock)
	defer alarm.Stop()
	for {
		wake := rs.step(rs.clock.Now())
		ring := alarm.Set(wake)
		if rs.idle != nil {
			rs.idle(wake)
		}
		select {
		case <-rs.ctx.Done():
			rs.flushCursor()
			return
		case <-rs.wake:
		case ev := <-rs.events:
			rs.handle(ev)
			for more := true; more; {
				select {
				case ev := <-rs.events:
					rs.handle(ev)
				default:
					more = false
				}
			}
			rs.forceStatus = true
		case <-ring:
		}
	}
}

// step is one wake-up at time now: it tells the core the log's end and
// the time, acts on everything the core asks for, publishes the status
// and sends the subscriptions' positions when due, and returns when to
// step again without an input: the earliest of the core's WakeAt and the
// shell's own deadlines (zero: only an input).
func (rs *replSender) step(now time.Time) time.Time {
	rs.s.Appended(rs.tlog.End())
	rs.s.Tick(now)
	rs.drive()
	if rs.forceStatus || !now.Before(rs.lastStatus.Add(statusEvery)) || rs.markerDue(now) {
		rs.publishStatus(now)
		rs.lastStatus, rs.forceStatus, rs.statusPending = now, false, false
	} else {
		rs.statusPending = true
	}
	rs.syncSubscriptions(now)
	if rs.s.HasReady() {
		return now // drive stopped at its bound
	}
	at := rs.s.WakeAt()
	if rs.statusPending {
		at = earliest(at, rs.lastStatus.Add(statusEvery))
	}
	at = earliest(at, rs.markerAt())
	if rs.st != nil && meta.ActiveStandby(rs.t.policies()) {
		at = earliest(at, rs.lastSubSync.Add(subSyncEvery))
	}
	return at
}

// earliest is the earlier of two wake-up times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// syncSubscriptions sends the subscriptions' positions that changed, at
// most every subSyncEvery, on the open stream (a new stream gets every
// position again).
func (rs *replSender) syncSubscriptions(now time.Time) {
	if rs.st == nil {
		return
	}
	if rs.st.gen != rs.subGen {
		rs.subGen, rs.sentSubs = rs.st.gen, map[string]subSent{}
	}
	if now.Before(rs.lastSubSync.Add(subSyncEvery)) {
		return
	}
	rs.lastSubSync = now
	for _, u := range rs.tlog.Subscriptions(rs.sentSubs, now) {
		if err := rs.st.cs.SendSubscription(u); err != nil {
			delete(rs.sentSubs, u.Name)
			break
		}
	}
}

func (rs *replSender) flushCursor() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = rs.tlog.FlushCursor(ctx)
}

func (rs *replSender) handle(ev senderEvent) {
	if ev.ack != nil {
		rs.s.Acked(*ev.ack)
		if rs.st != nil && ev.gen == rs.st.gen {
			// Batches up to the acked one are settled.
			i := 0
			for i < len(rs.st.sent) && rs.st.sent[i] <= ev.ack.BatchID {
				i++
			}
			rs.st.sent = rs.st.sent[i:]
		}
		return
	}
	if rs.st != nil && ev.gen == rs.st.gen {
		rs.failStream(ev.err)
	}
}

// failStream reports every batch sent on the current stream as failed
// and drops the stream.
func (rs *replSender) failStream(err error) {
	msg := err.Error()
	rs.lastErr.Store(&msg)
	if st := rs.st; st != nil {
		for _, id := range st.sent {
			rs.s.SendFailed(id, err)
		}
	}
	rs.closeStream()
	rs.log.Warn("replication stream failed", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
}

func (rs *replSender) closeStream() {
	if rs.st != nil {
		rs.st.cs.Close()
		rs.st = nil
	}
}

// drive acts on everything the sender asks for, at most 64 Readys (step
// wakes again at once when more is ready).
func (rs *replSender) drive() {
	for i := 0; rs.s.HasReady() && i < 64; i++ {
		r := rs.s.Ready()
		if r.Cursor != nil {
			rs.tlog.SaveCursor(*r.Cursor)
		}
		if r.Acked > 0 {
			if ss := rs.t.syncState(); ss != nil {
				ss.acked(rs.remote, r.Acked)
			}
		}
		resync := false
		for _, a := range r.Alerts {
			rs.t.svc.metrics.Alerts.WithLabelValues(a.Kind.String()).Inc()
			rs.log.Warn("replication alert", "topic", rs.t.name.String(), "remote", rs.remote, "alert", a.String())
			if a.Kind == replicator.AlertNeedsResync && a.Reason == replicator.ResyncTrimmed {
				resync = true
			}
		}
		if resync {
			rs.resync()
			continue
		}
		if len(r.Send) > 0 {
			rs.send(r.Send)
		}
		if r.Read != nil {
			ctx, cancel := context.WithTimeout(rs.ctx, 30*time.Second)
			entries, err := rs.tlog.Read(ctx, *r.Read, rs.s.Status().Cursor.Seq)
			cancel()
			if len(entries) == 0 && err != nil {
				rs.s.ReadFailed(r.Read.ID, err)
			} else if err := rs.s.Read(r.Read.ID, entries); err != nil {
				rs.log.Warn("replication read refused", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
			}
		}
	}
}

func (rs *replSender) send(batches []replicator.Batch) {
	if rs.st == nil {
		if err := rs.connect(); err != nil {
			msg := err.Error()
			rs.lastErr.Store(&msg)
			rs.log.Warn("replication: cannot reach the remote region", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
			for _, b := range batches {
				rs.s.SendFailed(b.ID, err)
			}
			return
		}
	}
	faults := rs.t.svc.cfg.Faults
	if faults.Delay > 0 {
		time.Sleep(faults.Delay)
	}
	for i, b := range batches {
		if rs.dropped < faults.DropBatches {
			// Fault injection: the batch is lost on the way; later ones
			// go through, so the target sees a gap.
			rs.dropped++
			rs.st.sent = append(rs.st.sent, b.ID)
			rs.log.Warn("fault injection: replication batch dropped", "topic", rs.t.name.String(), "remote", rs.remote, "batch", b.ID, "seq", b.FirstSeq())
			continue
		}
		if err := rs.st.cs.SendBatch(b); err != nil {
			rs.st.sent = append(rs.st.sent, b.ID)
			rs.failStream(err)
			for _, rest := range batches[i+1:] {
				rs.s.SendFailed(rest.ID, err)
			}
			return
		}
		rs.st.sent = append(rs.st.sent, b.ID)
		now := rs.clock.Now()
		rs.t.svc.metrics.Sent.Add(float64(len(b.Entries)))
		rs.t.svc.observeSent(b, now)
		n, size := replicatedSize(b.Entries)
		rs.out.Add(now, n, size)
	}
}

// connect opens a stream to the topic's owner in the remote region.
func (rs *replSender) connect() error {
	cs, err := rs.dial(rs.ctx)
	if err != nil {
		return err
	}
	rs.gen++
	rs.st = &outStream{gen: rs.gen, cs: cs, addr: cs.Addr()}
	rs.lastErr.Store(nil)
	go rs.recvLoop(rs.st)
	return nil
}

func (rs *replSender) recvLoop(st *outStream) {
	for {
		ack, err := st.cs.Recv()
		if err != nil {
			if err == io.EOF {
				err = errors.New("stream closed by the target")
			}
			select {
			case rs.events <- senderEvent{gen: st.gen, err: err}:
			case <-rs.ctx.Done():
			}
			return
		}
		select {
		case rs.events <- senderEvent{gen: st.gen, ack: &ack}:
		case <-rs.ctx.Done():
			return
		}
	}
}
