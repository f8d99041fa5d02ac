package replicator

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// "A gap is never skipped: drop one batch forever while later ones
// arrive: the applier persists nothing past the gap, and the sender
// eventually resends it."
func TestGapIsNeverSkipped(t *testing.T) {
	l := newTestLog("a")
	l.local(4)
	l.rollover() // the hole straddles a ledger rollover (Pulsar #26113)
	l.local(16)
	cfg := testSenderConfig()
	cfg.MaxInflightBatches = 4
	p := newPair(t, cfg, l)
	var lost uint64 // the id of the batch dropped, forever
	p.drop = func(b *Batch) bool {
		if lost == 0 && b.FirstSeq() == 5 {
			lost = b.ID
		}
		return b.ID == lost
	}
	p.pump()
	if lost == 0 {
		t.Fatal("the batch holding seq 5 was not sent")
	}
	// Deliver the batches after it without a tick: the target sees later
	// entries first.
	batches := p.inFly
	p.inFly = nil
	for _, b := range batches {
		res := p.receive(b)
		if b.FirstSeq() > 5 && (res.Write != nil || !res.Gap || res.Reply.ResendFrom != 5) {
			t.Fatalf("batch %d..%d past the hole: %+v", b.FirstSeq(), b.LastSeq(), res)
		}
	}
	if got := p.a.State().Through; got != 4 {
		t.Fatalf("record %d, want 4: persisted past the hole", got)
	}
	for _, a := range p.acks {
		p.s.Acked(a)
	}
	p.acks = nil
	p.pump()
	// The nack made the sender resend from the hole, in a new batch.
	if !slices.ContainsFunc(p.inFly, func(b Batch) bool { return b.FirstSeq() == 5 && b.ID != lost }) {
		t.Fatalf("after the nack: in flight %v", seqs(p.inFly))
	}
	for range 10 {
		p.step(10 * time.Millisecond)
	}
	if !slices.Equal(p.stored, span(1, 20)) || p.cursor.Seq != 20 {
		t.Fatalf("stored %v, cursor %v", p.stored, p.cursor)
	}
}

// The same hole, but every copy of seq 5 is lost for a long time (a link
// that drops that batch each time): the target stays at 4, the sender's
// cursor never passes 4, the sender keeps retrying with backoff and
// without flooding, and all arrives once the link heals.
func TestGapHeldUntilFilled(t *testing.T) {
	l := newTestLog("a")
	l.local(20)
	cfg := testSenderConfig()
	p := newPair(t, cfg, l)
	p.drop = func(b *Batch) bool { return b.FirstSeq() <= 5 && b.LastSeq() >= 5 }
	p.pump()
	for range 3000 { // 30 s
		p.step(10 * time.Millisecond)
		if p.a.State().Through > 4 || p.cursor.Seq > 4 {
			t.Fatalf("record %v, cursor %v: past the hole", p.a.State(), p.cursor)
		}
	}
	if p.sends[5] < 10 {
		t.Fatalf("seq 5 sent %d times in 30 s: the sender gave up", p.sends[5])
	}
	if p.sends[5] > 200 {
		t.Fatalf("seq 5 sent %d times in 30 s: no backoff", p.sends[5])
	}
	p.drop = nil
	for range 200 {
		p.step(10 * time.Millisecond)
	}
	if !slices.Equal(p.stored, span(1, 20)) || p.cursor.Seq != 20 {
		t.Fatalf("stored %v, cursor %v", p.stored, p.cursor)
	}
}

// Pulsar #26113: E3's send fails at the head of the queue while E4 and E5,
// pipelined behind it, persist on the target; after the rewind E3 was
// judged a duplicate against the position watermark and acknowledged:
// silent loss. Here E4 and E5 cannot persist ahead of E3, and the cursor
// does not pass E2 until E3 is acknowledged.
func TestHeadOfQueueFailureDoesNotLose(t *testing.T) {
	l := newTestLog("a")
	l.local(2)
	l.rollover()
	l.local(3)
	cfg := testSenderConfig()
	cfg.BatchMaxEntries = 1
	cfg.MaxInflightBatches = 5
	p := newPair(t, cfg, l)
	var failed uint64
	p.drop = func(b *Batch) bool {
		if b.FirstSeq() == 3 && failed == 0 {
			failed = b.ID
			return true
		}
		return false
	}
	p.pump()
	p.deliver() // E1, E2 persist; E4, E5 are a gap
	p.s.SendFailed(failed, errors.New("remote rejected"))
	p.pump()
	if p.cursor.Seq != 2 || p.a.State().Through != 2 {
		t.Fatalf("cursor %v, record %v", p.cursor, p.a.State())
	}
	for range 50 {
		p.step(10 * time.Millisecond)
	}
	if !slices.Equal(p.stored, span(1, 5)) || p.cursor.Seq != 5 {
		t.Fatalf("stored %v, cursor %v", p.stored, p.cursor)
	}
}

// A rewind never moves the read position, so a read in flight during a
// rewind cannot leave entries unread (Pulsar PR #26106: the replication
// stalled with a pending read that skipped past unacked entries).
func TestRewindDuringReadDoesNotStall(t *testing.T) {
	l := newTestLog("a")
	l.local(8)
	cfg := testSenderConfig()
	s := mustSender(t, cfg, InitialCursor(Earliest, 0, 0), l)
	rd := s.Ready()
	if err := s.Read(rd.Read.ID, l.read(*rd.Read)); err != nil {
		t.Fatal(err)
	}
	rd = s.Ready() // batch [1 2] sent, next read outstanding
	if rd.Read == nil || len(rd.Send) != 1 {
		t.Fatalf("ready %+v", rd)
	}
	s.SendFailed(rd.Send[0].ID, errors.New("reset")) // rewind while the read is out
	if err := s.Read(rd.Read.ID, l.read(*rd.Read)); err != nil {
		t.Fatal(err)
	}
	sent := map[uint64]bool{}
	acked := uint64(0)
	now := t0
	for range 100 {
		now = now.Add(50 * time.Millisecond)
		s.Tick(now)
		rd := serveReads(t, s, l)
		for _, b := range rd.Send {
			for _, e := range b.Entries {
				sent[e.OriginSeq] = true
				if e.OriginSeq == acked+1 {
					acked++
				}
			}
		}
		s.Acked(ack(acked))
	}
	if acked != 8 || s.Status().Cursor.Seq != 8 {
		t.Fatalf("acked %d, cursor %v: stalled", acked, s.Status().Cursor)
	}
}
