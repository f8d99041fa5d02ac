package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/replicator"
	"github.com/meridian-mq/meridian/replicator/transport"
)

// The sender shell: one goroutine per (topic, remote region) drives a
// replicator.Sender — reads the log, sends batches on the stream to the
// remote region, delivers its acks, persists the cursor.

// replSender drives one replicator.Sender: a goroutine owns it.
type replSender struct {
	t      *Topic
	remote string
	cur    *mledger.Cursor
	s      *replicator.Sender
	log    *slog.Logger

	wake   chan struct{}
	events chan senderEvent
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	st       *outStream
	gen      int
	dropped  int       // batches dropped by fault injection
	marked   bool      // the backlog marker is set
	caughtUp time.Time // since when the remote region has acked everything
	status   atomic.Pointer[Status]
	lastErr  atomic.Pointer[string]
}

type outStream struct {
	gen  int
	cs   *transport.Stream
	sent []uint64
	addr string
}

type senderEvent struct {
	gen int
	ack *replicator.Ack
	err error
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

func (rs *replSender) run() {
	defer close(rs.done)
	defer rs.closeStream()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastStatus, lastSubSync := time.Time{}, time.Time{}
	sentSubs, subGen := map[string]subSent{}, 0
	for {
		rs.s.Appended(rs.t.logEnd())
		now := time.Now()
		rs.s.Tick(now)
		rs.drive()

		if time.Since(lastStatus) > 200*time.Millisecond {
			rs.publishStatus()
			lastStatus = time.Now()
		}
		if rs.st != nil && rs.st.gen != subGen {
			subGen, sentSubs = rs.st.gen, map[string]subSent{} // a new stream: send every position again
		}
		if rs.st != nil && time.Since(lastSubSync) >= subSyncEvery {
			lastSubSync = time.Now()
			for _, u := range rs.t.subscriptionUpdates(sentSubs) {
				if err := rs.st.cs.SendSubscription(u); err != nil {
					delete(sentSubs, u.Name)
					break
				}
			}
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
			rs.publishStatus()
		case <-tick.C:
		}
	}
}

func (rs *replSender) flushCursor() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = rs.cur.Flush(ctx)
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

// drive acts on everything the sender asks for.
func (rs *replSender) drive() {
	for i := 0; rs.s.HasReady() && i < 64; i++ {
		r := rs.s.Ready()
		if r.Cursor != nil {
			rs.cur.AckCumulativeWith(toMLPos(r.Cursor.Pos), cursorProps(*r.Cursor))
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
			entries, err := rs.read(*r.Read)
			if len(entries) == 0 && err != nil {
				rs.s.ReadFailed(r.Read.ID, err)
			} else if err := rs.s.Read(r.Read.ID, entries); err != nil {
				rs.log.Warn("replication read refused", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
			}
		}
	}
}

func (rs *replSender) read(req replicator.ReadRequest) ([]replicator.Entry, error) {
	ml := rs.t.ml
	ctx, cancel := context.WithTimeout(rs.ctx, 30*time.Second)
	defer cancel()
	after := toMLPos(req.After)
	if after != mledger.Earliest && !slices.ContainsFunc(ml.Ledgers(), func(l mledger.LedgerInfo) bool { return l.ID == after.Ledger }) {
		// The ledger the cursor is in was deleted: retention trimmed
		// entries the region had not received (the cursor had stopped
		// holding them, over its backlog quota).
		return nil, fmt.Errorf("%w: ledger %d of %s", replicator.ErrTrimmed, after.Ledger, rs.t.name)
	}
	es, err := ml.ReadEntries(ctx, ml.Next(after), req.MaxEntries, req.MaxBytes)
	out := make([]replicator.Entry, 0, len(es))
	local := rs.t.svc.cfg.Cluster
	for i, e := range es {
		d, derr := entry.Decode(e.Data)
		if i == 0 && after == mledger.Earliest && derr == nil && d.Origin.Region == "" && d.Origin.Seq > rs.s.Status().Cursor.Seq+1 {
			// From the start of the log, and its first local entries are
			// gone: trimmed before the region received them.
			return nil, fmt.Errorf("%w: %s starts at local sequence number %d", replicator.ErrTrimmed, rs.t.name, d.Origin.Seq)
		}
		re := replicator.Entry{Pos: toReplPos(e.Pos)}
		switch {
		case derr != nil:
			re.Origin = "?" // unreadable: passed over, never sent
		case d.Origin.Region == "":
			re.Origin, re.OriginSeq, re.PublishMs, re.Data = local, d.Origin.Seq, d.PublishMs, d.Msg
			re.OriginID = replicator.MessageID{Ledger: e.Pos.Ledger, Entry: e.Pos.Entry, Batch: -1}
		default:
			re.Origin, re.OriginSeq, re.PublishMs = d.Origin.Region, d.Origin.Seq, d.PublishMs
			re.OriginID = replicator.MessageID{Ledger: d.Origin.ID.Ledger, Entry: d.Origin.ID.Entry, Batch: -1}
		}
		out = append(out, re)
	}
	return out, err
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
		rs.t.svc.metrics.Sent.Add(float64(len(b.Entries)))
	}
}

// connect opens a stream to the topic's owner in the remote region: any
// registered broker of that region, following at most a few redirects.
func (rs *replSender) connect() error {
	ctx, cancel := context.WithTimeout(rs.ctx, 10*time.Second)
	addrs, err := rs.t.svc.endpoints(ctx, rs.remote)
	cancel()
	if err != nil {
		return fmt.Errorf("list the endpoints of region %s: %w", rs.remote, err)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("region %s has no registered broker", rs.remote)
	}
	cs, err := rs.t.svc.dialer.Open(rs.ctx, addrs[rand.IntN(len(addrs))],
		transport.Hello{Source: rs.t.svc.cfg.Cluster, Target: rs.remote, Topic: rs.t.name.String()})
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
