package replicator

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// "entries whose Origin != local region are skipped (never forwarded) —
// but the cursor still advances over them".
func TestSenderNeverForwardsForeignEntries(t *testing.T) {
	l := newTestLog("a")
	l.local(1)
	l.foreign("b", 1)
	l.foreign("c", 1)
	l.local(1)
	l.foreign("c", 2)
	s := mustSender(t, testSenderConfig(), InitialCursor(Earliest, 0, 0), l)
	rd := serveReads(t, s, l)
	if got, want := seqs(rd.Send), [][]uint64{{1, 2}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	for _, e := range rd.Send[0].Entries {
		if e.Origin != "a" {
			t.Fatalf("forwarded an entry of origin %s", e.Origin)
		}
	}
	if rd.Cursor != nil {
		t.Fatalf("cursor %v before any ack", rd.Cursor)
	}
	s.Acked(ack(2))
	rd = s.Ready()
	// The cursor passes the trailing foreign entry too.
	if rd.Cursor == nil || rd.Cursor.Pos != l.entries[4].Pos || rd.Cursor.Seq != 2 {
		t.Fatalf("cursor %v, want at %v seq 2", rd.Cursor, l.entries[4].Pos)
	}
}

func TestSenderCursorAdvancesOverForeignOnlyLog(t *testing.T) {
	l := newTestLog("a")
	l.foreign("b", 1)
	l.rollover()
	l.foreign("c", 1)
	s := mustSender(t, testSenderConfig(), InitialCursor(Earliest, 0, 0), l)
	rd := serveReads(t, s, l)
	if len(rd.Send) != 0 {
		t.Fatalf("sent %v", seqs(rd.Send))
	}
	if rd.Cursor == nil || rd.Cursor.Pos != l.end().Pos || rd.Cursor.Seq != 0 {
		t.Fatalf("cursor %v, want at %v", rd.Cursor, l.end().Pos)
	}
}

// "a cursor position is persisted only after the target acked every
// entry up to it" — and positions jump ledgers at rollovers.
func TestSenderCursorOnlyOverAckedEntries(t *testing.T) {
	l := newTestLog("a")
	l.local(2)
	l.rollover()
	l.local(1)
	l.foreign("b", 1)
	l.rollover()
	l.local(2)
	s := mustSender(t, testSenderConfig(), InitialCursor(Earliest, 0, 0), l)
	rd := serveReads(t, s, l)
	if got, want := seqs(rd.Send), [][]uint64{{1, 2}, {3, 4}, {5}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	for _, tc := range []struct {
		through uint64
		pos     Position
	}{
		{1, l.posOf(1)},
		{3, l.entries[3].Pos}, // seq 3 and the foreign entry after it
		{2, l.entries[3].Pos}, // a late, older ack changes nothing
		{5, l.posOf(5)},
	} {
		s.Acked(ack(tc.through))
		rd := s.Ready()
		got := s.Status().Cursor
		if got.Pos != tc.pos {
			t.Fatalf("after ack through %d: cursor %v, want at %v", tc.through, got, tc.pos)
		}
		if rd.Cursor != nil && rd.Cursor.Pos != tc.pos {
			t.Fatalf("after ack through %d: persist %v", tc.through, rd.Cursor)
		}
	}
	if st := s.Status(); st.Cursor.Bytes != l.bytes || st.Backlog.Entries != 0 || st.Backlog.Bytes != 0 {
		t.Fatalf("status %+v, want all bytes %d done", st, l.bytes)
	}
}

// "on SendFailed ... rewind to the first un-acked entry and resend (never
// skip)", with a backoff.
func TestSenderRewindsOnSendFailed(t *testing.T) {
	l := newTestLog("a")
	l.local(6)
	s := mustSender(t, testSenderConfig(), InitialCursor(Earliest, 0, 0), l)
	rd := serveReads(t, s, l)
	if got := seqs(rd.Send); len(got) != 3 {
		t.Fatalf("sent %v", got)
	}
	s.Acked(ack(2))
	s.SendFailed(rd.Send[2].ID, errors.New("reset"))
	rd = s.Ready()
	if len(rd.Send) != 0 || !rd.Backoff.Equal(t0.Add(100*time.Millisecond)) {
		t.Fatalf("during backoff: sent %v, backoff %v", seqs(rd.Send), rd.Backoff)
	}
	s.Tick(t0.Add(100 * time.Millisecond))
	rd = s.Ready()
	if got, want := seqs(rd.Send), [][]uint64{{3, 4}, {5, 6}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("resent %v, want %v (from the first unacknowledged)", got, want)
	}
	// A failure of a batch sent before the rewind is already dealt with.
	s.SendFailed(2, errors.New("reset"))
	if rd := s.Ready(); !rd.Backoff.IsZero() || len(rd.Send) != 0 {
		t.Fatalf("stale failure acted on: %+v", rd)
	}
}

// "on ... timeout: rewind ... and resend"; "exponential backoff with cap";
// progress resets it.
func TestSenderAckTimeoutBacksOffExponentially(t *testing.T) {
	l := newTestLog("a")
	l.local(1)
	s := mustSender(t, testSenderConfig(), InitialCursor(Earliest, 0, 0), l)
	serveReads(t, s, l)
	now := t0
	var backoffs []time.Duration
	for range 5 {
		now = now.Add(time.Second) // the ack timeout
		s.Tick(now)
		rd := s.Ready()
		if rd.Backoff.IsZero() {
			t.Fatalf("no backoff after ack timeout at %v", now)
		}
		backoffs = append(backoffs, rd.Backoff.Sub(now))
		if !rd.WakeAt.Equal(rd.Backoff) {
			t.Fatalf("wake at %v, backoff until %v", rd.WakeAt, rd.Backoff)
		}
		now = rd.Backoff
		s.Tick(now)
		if rd := s.Ready(); !reflect.DeepEqual(seqs(rd.Send), [][]uint64{{1}}) {
			t.Fatalf("after backoff: sent %v, want [[1]] again", seqs(rd.Send))
		}
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond}
	if !reflect.DeepEqual(backoffs, want) {
		t.Fatalf("backoffs %v, want %v", backoffs, want)
	}
	s.Acked(ack(1))
	l.local(1)
	s.Appended(l.end())
	serveReads(t, s, l)
	now = now.Add(time.Second)
	s.Tick(now)
	if rd := s.Ready(); rd.Backoff.Sub(now) != 100*time.Millisecond {
		t.Fatalf("backoff after progress: %v, want reset to 100ms", rd.Backoff.Sub(now))
	}
}

// "bounded in-flight (max batches/bytes: back-pressure)": a target that
// does not ack stops the sends, then the reads; memory stays bounded.
func TestSenderBackPressure(t *testing.T) {
	l := newTestLog("a")
	l.local(1000)
	cfg := testSenderConfig()
	s := mustSender(t, cfg, InitialCursor(Earliest, 0, 0), l)
	rd := serveReads(t, s, l)
	if len(rd.Send) != cfg.MaxInflightBatches {
		t.Fatalf("sent %d batches, want %d", len(rd.Send), cfg.MaxInflightBatches)
	}
	for i := range 10 {
		s.Tick(t0.Add(time.Duration(i) * 10 * time.Millisecond))
		if rd := s.Ready(); rd.Read != nil || len(rd.Send) > 0 {
			t.Fatalf("read or sent while the target is behind: %+v", rd)
		}
	}
	if n := s.win.len(); n > cfg.MaxInflightBatches*cfg.BatchMaxEntries+cfg.BatchMaxEntries {
		t.Fatalf("holds %d entries in memory", n)
	}
	st := s.Status()
	if st.InflightBatches != cfg.MaxInflightBatches || st.Backlog.Entries != 1000 {
		t.Fatalf("status %+v", st)
	}
	// An ack frees room: one more batch goes out and reading resumes.
	s.Acked(ack(2))
	rd = serveReads(t, s, l)
	if got := seqs(rd.Send); !reflect.DeepEqual(got, [][]uint64{{7, 8}}) {
		t.Fatalf("after ack: sent %v", got)
	}

	// The byte bound does the same for large entries.
	cfg = testSenderConfig()
	cfg.MaxInflightBatches = 100
	cfg.MaxInflightBytes = 20
	l = newTestLog("a")
	l.local(100) // entries of 3-5 bytes
	s = mustSender(t, cfg, InitialCursor(Earliest, 0, 0), l)
	rd = serveReads(t, s, l)
	n := 0
	for _, b := range rd.Send {
		n += b.Bytes()
	}
	if n < cfg.MaxInflightBytes || n > cfg.MaxInflightBytes+cfg.BatchMaxBytes {
		t.Fatalf("%d bytes in flight, bound %d", n, cfg.MaxInflightBytes)
	}
}

// "rate limit (token bucket fed by Tick's time)".
func TestSenderRateLimit(t *testing.T) {
	l := newTestLog("a")
	l.local(10)
	cfg := testSenderConfig()
	cfg.BatchMaxEntries = 1
	cfg.MaxInflightBatches = 100
	cfg.Limiter = NewTokenBucket(RateLimit{EntriesPerSecond: 2}, t0)
	s := mustSender(t, cfg, InitialCursor(Earliest, 0, 0), l)
	rd := serveReads(t, s, l)
	if len(rd.Send) != 2 {
		t.Fatalf("sent %d batches at once, want the burst of 2", len(rd.Send))
	}
	if want := t0.Add(500 * time.Millisecond); !rd.WakeAt.Equal(want) {
		t.Fatalf("wake at %v, want %v", rd.WakeAt.Sub(t0), want.Sub(t0))
	}
	sent := 2
	for now := t0; now.Before(t0.Add(2 * time.Second)); now = now.Add(50 * time.Millisecond) {
		s.Tick(now)
		sent += len(serveReads(t, s, l).Send)
	}
	if sent != 5 {
		t.Fatalf("sent %d entries in [0, 2 s) at 2/s with a burst of 2, want 5", sent)
	}
}

// "backlog accounting (entries/bytes behind, age of the oldest unreplicated
// entry from PublishMs) against a quota → alert + 'needs resync' decision
// per a policy enum".
func TestSenderBacklogQuota(t *testing.T) {
	for _, tc := range []struct {
		policy     QuotaPolicy
		holds      bool
		needResync bool
	}{
		{QuotaKeepUpToRetention, false, false},
		{QuotaHold, true, false},
		{QuotaResyncNow, false, true},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			l := newTestLog("a")
			l.local(10)
			cfg := testSenderConfig()
			cfg.Quota = BacklogQuota{MaxEntries: 10}
			cfg.QuotaPolicy = tc.policy
			s := mustSender(t, cfg, InitialCursor(Earliest, 0, 0), l)
			if rd := serveReads(t, s, l); len(rd.Alerts) != 0 {
				t.Fatalf("alerts at the quota: %v", rd.Alerts)
			}
			l.local(1)
			s.Appended(l.end())
			rd := serveReads(t, s, l)
			if len(rd.Alerts) == 0 || rd.Alerts[0].Kind != AlertOverQuota || rd.Alerts[0].Policy != tc.policy || rd.Alerts[0].Backlog.Entries != 11 {
				t.Fatalf("alerts %v, want over quota", rd.Alerts)
			}
			st := s.Status()
			if st.HoldsRetention != tc.holds || !st.OverQuota {
				t.Fatalf("status %+v", st)
			}
			if tc.needResync {
				if len(rd.Alerts) != 2 || rd.Alerts[1].Kind != AlertNeedsResync || rd.Alerts[1].Reason != ResyncQuota {
					t.Fatalf("alerts %v, want needs-resync", rd.Alerts)
				}
				l.local(5)
				s.Appended(l.end())
				s.Acked(ack(3))
				s.Tick(t0.Add(time.Hour))
				if rd := s.Ready(); len(rd.Send) != 0 || rd.Read != nil {
					t.Fatalf("replicates after giving up: %+v", rd)
				}
				return
			}
			// Under the quota but above 90% of it: still over.
			s.Acked(ack(1))
			if rd := serveReads(t, s, l); len(rd.Alerts) != 0 {
				t.Fatalf("alerts at 10/10: %v", rd.Alerts)
			}
			s.Acked(ack(2))
			if rd := serveReads(t, s, l); len(rd.Alerts) != 1 || rd.Alerts[0].Kind != AlertUnderQuota {
				t.Fatalf("alerts at 9/10: %v, want under quota", rd.Alerts)
			}
			if st := s.Status(); !st.HoldsRetention || st.OverQuota {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

func TestSenderBacklogAgeQuota(t *testing.T) {
	l := newTestLog("a")
	l.local(3)
	cfg := testSenderConfig()
	cfg.AckTimeout = time.Hour
	cfg.Quota = BacklogQuota{MaxAge: time.Minute}
	s := mustSender(t, cfg, InitialCursor(Earliest, 0, 0), l)
	rd := serveReads(t, s, l)
	if want := t0.Add(time.Minute + time.Millisecond); !rd.WakeAt.Equal(want) {
		t.Fatalf("wake at %v, want %v", rd.WakeAt, want)
	}
	s.Tick(t0.Add(time.Minute))
	if rd := s.Ready(); len(rd.Alerts) != 0 {
		t.Fatalf("alerts at the limit: %v", rd.Alerts)
	}
	s.Tick(t0.Add(time.Minute + time.Millisecond))
	if rd := s.Ready(); len(rd.Alerts) != 1 || rd.Alerts[0].Kind != AlertOverQuota || rd.Alerts[0].Backlog.Age != time.Minute+time.Millisecond {
		t.Fatalf("alerts %v", rd.Alerts)
	}
	s.Acked(ack(3))
	if rd := s.Ready(); len(rd.Alerts) != 1 || rd.Alerts[0].Kind != AlertUnderQuota {
		t.Fatalf("alerts after catching up: %v", rd.Alerts)
	}
}

// A region that was gone so long that retention trimmed what it lacks
// needs a resync; other read errors are retried.
func TestSenderReadFailures(t *testing.T) {
	l := newTestLog("a")
	l.local(3)
	s := mustSender(t, testSenderConfig(), InitialCursor(Earliest, 0, 0), l)
	rd := s.Ready()
	s.ReadFailed(rd.Read.ID, errors.New("bookie down"))
	rd = s.Ready()
	if rd.Read != nil || !rd.WakeAt.Equal(t0.Add(100*time.Millisecond)) {
		t.Fatalf("after a read error: %+v", rd)
	}
	s.Tick(t0.Add(100 * time.Millisecond))
	rd = s.Ready()
	if rd.Read == nil {
		t.Fatal("read not retried after the backoff")
	}
	// A stale result is ignored.
	if err := s.Read(rd.Read.ID+7, l.entries); err != nil || s.win.len() != 0 {
		t.Fatalf("stale read taken: %v", err)
	}
	s.ReadFailed(rd.Read.ID, fmt.Errorf("mledger: %w", ErrTrimmed))
	rd = s.Ready()
	if len(rd.Alerts) != 1 || rd.Alerts[0].Kind != AlertNeedsResync || rd.Alerts[0].Reason != ResyncTrimmed {
		t.Fatalf("alerts %v, want needs-resync (trimmed)", rd.Alerts)
	}
	s.Tick(t0.Add(time.Hour))
	if rd := s.Ready(); rd.Read != nil || len(rd.Send) != 0 {
		t.Fatalf("replicating after needs-resync: %+v", rd)
	}
	if s.Status().NeedsResync != ResyncTrimmed {
		t.Fatal("status does not say needs-resync")
	}
}

func TestSenderRefusesBadReads(t *testing.T) {
	for name, mangle := range map[string]func([]Entry) []Entry{
		"seq hole":       func(es []Entry) []Entry { return append(es[:1:1], es[2:]...) },
		"seq repeated":   func(es []Entry) []Entry { return append(es[:2:2], es[1:]...) },
		"not ascending":  func(es []Entry) []Entry { es[1].Pos, es[2].Pos = es[2].Pos, es[1].Pos; return es },
		"before request": func(es []Entry) []Entry { es[0].Pos = Earliest; return es },
	} {
		t.Run(name, func(t *testing.T) {
			l := newTestLog("a")
			l.local(4)
			cfg := testSenderConfig()
			cfg.BatchMaxEntries = 4
			s := mustSender(t, cfg, InitialCursor(Earliest, 0, 0), l)
			rd := s.Ready()
			es := mangle(l.read(*rd.Read))
			if err := s.Read(rd.Read.ID, es); !errors.Is(err, ErrBadRead) {
				t.Fatalf("err %v, want ErrBadRead", err)
			}
			if rd := s.Ready(); len(rd.Send) != 0 || rd.WakeAt.IsZero() {
				t.Fatalf("after a bad read: %+v", rd)
			}
		})
	}
}

// The target ahead of a restarted sender (its cursor was persisted
// lazily): re-sent entries are duplicates and the sender skips sending
// what the target already acknowledged. Pulsar #25861 lost the target's
// watermark on reload and produced duplicates; here the target's record
// is durable and the sender's lag costs only resends.
func TestSenderRestartBehindTarget(t *testing.T) {
	l := newTestLog("a")
	l.local(10)
	cfg := testSenderConfig()
	p := newPair(t, cfg, l)
	p.pump()
	for range 10 {
		p.step(10 * time.Millisecond)
	}
	if len(p.stored) != 10 {
		t.Fatalf("stored %v", p.stored)
	}
	// Restart from an old cursor: seq 2.
	old := Cursor{Pos: l.posOf(2), Seq: 2, Bytes: int64(len("a-1") + len("a-2")), Stream: 1}
	p.s = mustSender(t, cfg, old, l)
	p.sends = map[uint64]int{}
	p.pump()
	for range 10 {
		p.step(10 * time.Millisecond)
	}
	if len(p.stored) != 10 {
		t.Fatalf("stored %v after restart: duplicates", p.stored)
	}
	if p.cursor.Seq != 10 || p.cursor.Bytes != l.bytes {
		t.Fatalf("cursor %v, want seq 10, bytes %d", p.cursor, l.bytes)
	}
	// Only the batches sent before the first (duplicate) ack came back
	// went again: the ack told the sender where the target is, and it
	// dropped the rest without sending.
	if p.sends[3] != 1 || p.sends[9] != 0 || p.sends[10] != 0 {
		t.Fatalf("re-sent %v", p.sends)
	}
}

// The situations where the stream cannot continue without skipping: the
// sender stops and says why, rather than nack-looping or skipping.
func TestSenderNeedsResync(t *testing.T) {
	for _, tc := range []struct {
		name string
		ack  Ack
		want ResyncReason
	}{
		{"target follows a newer stream", Ack{Origin: "a", Stream: 2, Through: 1}, ResyncStaleStream},
		{"target lost acknowledged entries", Ack{Origin: "a", Stream: 1, Through: 1, ResendFrom: 2, Regressed: true}, ResyncTargetRegressed},
		{"target holds entries this log never had", Ack{Origin: "a", Stream: 1, Through: 9}, ResyncTargetAhead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLog("a")
			l.local(3)
			s := mustSender(t, testSenderConfig(), InitialCursor(Earliest, 0, 0), l)
			serveReads(t, s, l)
			s.Acked(tc.ack)
			rd := s.Ready()
			if len(rd.Alerts) != 1 || rd.Alerts[0].Kind != AlertNeedsResync || rd.Alerts[0].Reason != tc.want {
				t.Fatalf("alerts %v, want needs-resync %v", rd.Alerts, tc.want)
			}
			if rd.Cursor != nil || s.Status().Acked != 0 {
				t.Fatalf("cursor moved: %v", rd.Cursor)
			}
			s.Tick(t0.Add(time.Hour))
			if rd := s.Ready(); len(rd.Send) != 0 || rd.Read != nil {
				t.Fatalf("still replicating: %+v", rd)
			}
		})
	}
	// An ack of another origin is not for this sender.
	l := newTestLog("a")
	l.local(1)
	s := mustSender(t, testSenderConfig(), InitialCursor(Earliest, 0, 0), l)
	s.Acked(Ack{Origin: "c", Stream: 5, Through: 100})
	if st := s.Status(); st.NeedsResync != ResyncNone || st.Acked != 0 {
		t.Fatalf("status %+v", st)
	}
}

// A resync: a new stream from the first retained entry. The target adopts
// it, reports what it skipped, and replication resumes.
func TestResyncWithNewStream(t *testing.T) {
	l := newTestLog("a")
	l.local(10)
	cfg := testSenderConfig()
	p := newPair(t, cfg, l)
	p.drop = func(b *Batch) bool { return b.LastSeq() > 4 } // the region goes away
	p.pump()
	for range 5 {
		p.step(10 * time.Millisecond)
	}
	if len(p.stored) != 4 {
		t.Fatalf("stored %v", p.stored)
	}
	// Retention trimmed seq 1..6 meanwhile; the operator resyncs from 7.
	c := p.cursor.NextStream(l.posOf(6), 6, 0)
	p.s = mustSender(t, cfg, c, l)
	p.drop = nil
	var skipped SeqRange
	p.pump()
	for _, b := range p.inFly {
		if b.Stream != 2 || b.Base != 6 {
			t.Fatalf("batch stream %d base %d", b.Stream, b.Base)
		}
	}
	res, err := p.a.Receive(p.inFly[0])
	if err != nil || res.Write == nil {
		t.Fatalf("receive: %+v %v", res, err)
	}
	skipped = res.Write.Skipped
	if skipped != (SeqRange{From: 5, Through: 6}) {
		t.Fatalf("skipped %v, want 5..6", skipped)
	}
	if _, err := p.a.Persisted(res.Write); err != nil {
		t.Fatal(err)
	}
}

// "entries whose ReplicateTo excludes the target travel as placeholders so
// the target's sequence stays dense".
func TestSenderPlaceholderForExcludedEntry(t *testing.T) {
	l := newTestLog("a")
	l.local(1)
	l.seq++
	l.append(Entry{Origin: "a", OriginSeq: l.seq, Data: []byte("only-for-c"), ReplicateTo: []string{"a", "c"}})
	l.bytes += int64(len("only-for-c"))
	l.local(1)
	p := newPair(t, testSenderConfig(), l)
	p.pump()
	var sent []Entry
	for _, b := range p.inFly {
		sent = append(sent, b.Entries...)
	}
	if len(sent) != 3 || !sent[1].Skip || sent[1].Data != nil || sent[0].Skip || sent[2].Skip {
		t.Fatalf("sent %+v", sent)
	}
	p.step(10 * time.Millisecond)
	if !reflect.DeepEqual(p.stored, []uint64{1, 2, 3}) || p.a.State().Through != 3 || p.cursor.Seq != 3 || p.cursor.Bytes != l.bytes {
		t.Fatalf("stored %v, state %v, cursor %v", p.stored, p.a.State(), p.cursor)
	}
}

func TestNewSenderValidates(t *testing.T) {
	cfg := testSenderConfig()
	if _, err := NewSender(cfg, Cursor{}, t0); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("cursor without stream: %v", err)
	}
	cfg.Remote = "a"
	if _, err := NewSender(cfg, InitialCursor(Earliest, 0, 0), t0); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("remote = local: %v", err)
	}
}
