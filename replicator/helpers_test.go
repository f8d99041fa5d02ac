package replicator

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

// testLog is a region's local log for unit tests.
type testLog struct {
	region  string
	entries []Entry
	seq     uint64
	bytes   int64
	ledger  int64
	next    int64
	// trimmed: retention deleted every entry at or before it.
	trimmed Position
}

func newTestLog(region string) *testLog {
	return &testLog{region: region, ledger: 10, trimmed: Earliest}
}

// local appends n local entries.
func (l *testLog) local(n int) {
	for range n {
		l.seq++
		data := []byte(fmt.Sprintf("%s-%d", l.region, l.seq))
		l.bytes += int64(len(data))
		l.append(Entry{Origin: l.region, OriginSeq: l.seq, Data: data, PublishMs: t0.UnixMilli()})
	}
}

// foreign appends an entry replicated from origin.
func (l *testLog) foreign(origin string, seq uint64) {
	l.append(Entry{Origin: origin, OriginSeq: seq, Data: []byte(fmt.Sprintf("%s-%d", origin, seq)), PublishMs: t0.UnixMilli()})
}

func (l *testLog) append(e Entry) {
	e.Pos = Position{l.ledger, l.next}
	if e.Origin == l.region {
		e.OriginID = MessageID{Ledger: e.Pos.Ledger, Entry: e.Pos.Entry}
	}
	l.next++
	l.entries = append(l.entries, e)
}

// rollover starts a new ledger, with an id jump.
func (l *testLog) rollover() { l.ledger += 7; l.next = 0 }

func (l *testLog) end() LogEnd {
	return LogEnd{Pos: l.entries[len(l.entries)-1].Pos, Seq: l.seq, Bytes: l.bytes}
}

func (l *testLog) read(rq ReadRequest) []Entry {
	i := sort.Search(len(l.entries), func(i int) bool { return rq.After.Less(l.entries[i].Pos) })
	var out []Entry
	bytes := 0
	for ; i < len(l.entries) && len(out) < rq.MaxEntries; i++ {
		if len(out) > 0 && bytes+len(l.entries[i].Data) > rq.MaxBytes {
			break
		}
		out = append(out, l.entries[i])
		bytes += len(l.entries[i].Data)
	}
	return out
}

// posOf returns the position of the local entry with seq.
func (l *testLog) posOf(seq uint64) Position {
	for _, e := range l.entries {
		if e.Origin == l.region && e.OriginSeq == seq {
			return e.Pos
		}
	}
	panic(fmt.Sprintf("no local seq %d", seq))
}

func testSenderConfig() SenderConfig {
	cfg := DefaultSenderConfig("a", "b")
	cfg.BatchMaxEntries = 2
	cfg.MaxInflightBatches = 3
	cfg.AckTimeout = time.Second
	cfg.BackoffInitial = 100 * time.Millisecond
	cfg.BackoffMax = 400 * time.Millisecond
	return cfg
}

func mustSender(t *testing.T, cfg SenderConfig, c Cursor, l *testLog) *Sender {
	t.Helper()
	s, err := NewSender(cfg, c, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.entries) > 0 {
		s.Appended(l.end())
	}
	return s
}

// serveReads answers read requests from l until the sender asks for none,
// and returns everything else the sender asked for along the way.
func serveReads(t *testing.T, s *Sender, l *testLog) Ready {
	t.Helper()
	var all Ready
	for {
		rd := s.Ready()
		all.Send = append(all.Send, rd.Send...)
		all.Alerts = append(all.Alerts, rd.Alerts...)
		if rd.Cursor != nil {
			all.Cursor = rd.Cursor
		}
		if !rd.Backoff.IsZero() {
			all.Backoff = rd.Backoff
		}
		all.Acked, all.WakeAt = rd.Acked, rd.WakeAt
		if rd.Read == nil {
			return all
		}
		if err := s.Read(rd.Read.ID, l.read(*rd.Read)); err != nil {
			t.Fatal(err)
		}
	}
}

func seqs(bs []Batch) [][]uint64 {
	var out [][]uint64
	for _, b := range bs {
		var s []uint64
		for _, e := range b.Entries {
			s = append(s, e.OriginSeq)
		}
		out = append(out, s)
	}
	return out
}

func ack(through uint64) Ack { return Ack{Origin: "a", Stream: 1, Through: through} }

// pair is a source log, a Sender and the target's Applier joined by a
// hand-driven link, for scripted scenarios.
type pair struct {
	t       *testing.T
	now     time.Time
	log     *testLog
	s       *Sender
	a       *Applier
	stored  []uint64 // seqs persisted on the target, in order
	cursor  Cursor   // last cursor the sender asked to persist
	inFly   []Batch  // sent, not delivered
	acks    []Ack    // replies, not delivered
	drop    func(b *Batch) bool
	dropped int
	sends   map[uint64]int // times each seq was sent
	alerts  []Alert
	skipped []SeqRange // declared skips the target reported
}

func newPair(t *testing.T, cfg SenderConfig, l *testLog) *pair {
	a, err := NewApplier("b", State{Origin: "a"})
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{t: t, now: t0, log: l, a: a, sends: map[uint64]int{}}
	p.s = mustSender(t, cfg, InitialCursor(Earliest, 0, 0), l)
	p.cursor = InitialCursor(Earliest, 0, 0)
	return p
}

// pump acts on the sender's Ready: reads at once, sends onto the link,
// checks every cursor against what the target persisted.
func (p *pair) pump() {
	p.t.Helper()
	for {
		rd := p.s.Ready()
		for _, b := range rd.Send {
			for _, e := range b.Entries {
				p.sends[e.OriginSeq]++
			}
			if p.drop != nil && p.drop(&b) {
				p.dropped++
				continue
			}
			p.inFly = append(p.inFly, b)
		}
		if c := rd.Cursor; c != nil {
			if through := p.a.State().Through; c.Seq > through {
				p.t.Fatalf("cursor %v persisted past the target's record %d", c, through)
			}
			p.cursor = *c
		}
		if rq := rd.Read; rq != nil {
			if rq.After.Less(p.log.trimmed) {
				p.s.ReadFailed(rq.ID, fmt.Errorf("test: %w", ErrTrimmed))
			} else if err := p.s.Read(rq.ID, p.log.read(*rq)); err != nil {
				p.t.Fatal(err)
			}
			continue
		}
		p.alerts = append(p.alerts, rd.Alerts...)
		if !p.s.HasReady() {
			return
		}
	}
}

// deliver hands every batch in flight to the applier (persisting its
// writes at once) and every reply back to the sender.
func (p *pair) deliver() {
	p.t.Helper()
	batches := p.inFly
	p.inFly = nil
	for _, b := range batches {
		p.receive(b)
	}
	acks := p.acks
	p.acks = nil
	for _, a := range acks {
		p.s.Acked(a)
	}
	p.pump()
}

// receive hands b to the applier, persists its write at once, and queues
// the replies.
func (p *pair) receive(b Batch) Result {
	p.t.Helper()
	res, err := p.a.Receive(b)
	if err != nil {
		p.t.Fatal(err)
	}
	if res.Reply != nil {
		p.acks = append(p.acks, *res.Reply)
	}
	if w := res.Write; w != nil {
		next := w.Prev.Through + 1
		if !w.Skipped.Empty() {
			p.skipped = append(p.skipped, w.Skipped)
			next = w.Skipped.Through + 1
		}
		for _, e := range w.Entries {
			if e.OriginSeq != next {
				p.t.Fatalf("target persisted seq %d, want %d", e.OriginSeq, next)
			}
			next++
			p.stored = append(p.stored, e.OriginSeq)
		}
		a, err := p.a.Persisted(w)
		if err != nil {
			p.t.Fatal(err)
		}
		p.acks = append(p.acks, a)
	}
	return res
}

// step advances time by d, ticks, and delivers.
func (p *pair) step(d time.Duration) {
	p.now = p.now.Add(d)
	p.s.Tick(p.now)
	p.pump()
	p.deliver()
}
