package replicator

import (
	"fmt"
	"time"
)

// ReadRequest asks the shell to read the local log: the entries after
// After, ascending, at most MaxEntries of them and about MaxBytes (at
// least one entry if there is any, whatever its size). After is exclusive
// because positions are not dense: the next entry may be in a later
// ledger.
type ReadRequest struct {
	ID         uint64
	After      Position
	MaxEntries int
	MaxBytes   int
}

// Backlog is what a remote region still lacks of the local entries.
type Backlog struct {
	Entries int64
	Bytes   int64
	// Age of the oldest unacknowledged local entry that the sender has
	// read (0 when there is none, or none read yet).
	Age time.Duration
}

// AlertKind says what an Alert is about.
type AlertKind int

const (
	// AlertOverQuota: the backlog passed the quota; Alert.Policy says
	// what the shell does about it.
	AlertOverQuota AlertKind = iota + 1
	// AlertUnderQuota: the backlog is back under the quota.
	AlertUnderQuota
	// AlertNeedsResync: replication to the region stopped; Alert.Reason
	// says why. It resumes only from a new stream (Cursor.NextStream).
	AlertNeedsResync
)

func (k AlertKind) String() string {
	switch k {
	case AlertOverQuota:
		return "over-quota"
	case AlertUnderQuota:
		return "under-quota"
	case AlertNeedsResync:
		return "needs-resync"
	}
	return fmt.Sprintf("AlertKind(%d)", int(k))
}

// ResyncReason says why a region needs a resync. Each one is a situation
// where the stream cannot go on without skipping sequence numbers, which
// the replicator never does on its own.
type ResyncReason int

const (
	ResyncNone ResyncReason = iota
	// ResyncTrimmed: retention deleted local entries the region had not
	// received.
	ResyncTrimmed
	// ResyncTargetRegressed: the region lost entries it had acknowledged
	// (restored from an old backup, storage lost).
	ResyncTargetRegressed
	// ResyncStaleStream: the region follows a newer stream of this
	// topic: this sender runs from an outdated cursor.
	ResyncStaleStream
	// ResyncTargetAhead: the region acknowledged sequence numbers this
	// log never had (the topic was deleted and recreated here).
	ResyncTargetAhead
	// ResyncQuota: the backlog passed the quota under QuotaResyncNow.
	ResyncQuota
)

func (r ResyncReason) String() string {
	switch r {
	case ResyncNone:
		return "none"
	case ResyncTrimmed:
		return "trimmed"
	case ResyncTargetRegressed:
		return "target-regressed"
	case ResyncStaleStream:
		return "stale-stream"
	case ResyncTargetAhead:
		return "target-ahead"
	case ResyncQuota:
		return "quota"
	}
	return fmt.Sprintf("ResyncReason(%d)", int(r))
}

// Alert is a condition for the operator (and, for quota, the policy).
type Alert struct {
	Kind    AlertKind
	Remote  string
	Backlog Backlog
	// Policy (AlertOverQuota): what to do; see QuotaPolicy.
	Policy QuotaPolicy
	// Reason (AlertNeedsResync).
	Reason ResyncReason
}

func (a Alert) String() string {
	s := fmt.Sprintf("%v remote=%s backlog=%d entries/%d bytes/%v", a.Kind, a.Remote, a.Backlog.Entries, a.Backlog.Bytes, a.Backlog.Age)
	switch a.Kind {
	case AlertOverQuota:
		s += " policy=" + a.Policy.String()
	case AlertNeedsResync:
		s += " reason=" + a.Reason.String()
	}
	return s
}

// Ready is what a Sender asks of its shell; Sender.Ready hands it over
// once. The fields are independent: there is no ordering between sending
// and persisting the cursor, because the cursor only ever covers entries
// the target already persisted.
type Ready struct {
	// Read, if set: read the local log (ReadRequest) and answer with
	// Sender.Read(Read.ID, entries) or Sender.ReadFailed(Read.ID, err).
	// At most one read is outstanding.
	Read *ReadRequest
	// Send: batches to send to the remote region, in this order. Report
	// a transport failure with SendFailed(batch.ID, err). The shell must
	// not modify the entries (their Data is shared with the sender).
	Send []Batch
	// Cursor, if set: persist it. A later cursor replaces an earlier one,
	// so the shell may persist lazily or coalesce; a cursor not persisted
	// before a crash only means resending entries the target already has.
	Cursor *Cursor
	// Acked is the highest sequence number the target acknowledged (for
	// a SyncTracker); always set.
	Acked uint64
	// Backoff, if non-zero: a failure just paused sending until then.
	Backoff time.Time
	// Alerts to raise (log, metric, notify).
	Alerts []Alert
	// WakeAt, if non-zero: the earliest time at which a Tick lets the
	// sender make progress (end of a backoff, a rate-limit refill, an ack
	// timeout, the quota's age limit).
	WakeAt time.Time
}

// Status is a snapshot for metrics and admin.
type Status struct {
	Cursor          Cursor
	Acked           uint64
	Backlog         Backlog
	OverQuota       bool
	NeedsResync     ResyncReason
	InflightBatches int
	InflightBytes   int
	BackoffUntil    time.Time
	// HoldsRetention: whether the replicator cursor should hold back
	// trimming like a subscription; false once the backlog is over quota
	// under any policy but QuotaHold.
	HoldsRetention bool
}

// item is one entry read from the local log and not yet passed by the
// cursor.
type item struct {
	pos       Position
	seq       uint64
	publishMs int64
	local     bool
	dataLen   int       // len(Data) at the origin (cursor and backlog bytes)
	size      int       // bytes this item sends (0: placeholder or foreign)
	e         Entry     // what is sent; zero for foreign items
	sentAt    time.Time // zero: not sent since the last rewind
}

// flight is one sent, unacknowledged batch.
type flight struct {
	id          uint64
	first, last uint64
}

// Sender replicates one topic's local entries to one remote region: a
// pure state machine (see the package doc). Not safe for concurrent use.
type Sender struct {
	cfg SenderConfig
	now time.Time

	// cursor: every entry at or before cursor.Pos is done.
	cursor      Cursor
	cursorDirty bool
	// acked: the target persisted every local entry with seq <= acked;
	// reportedAcked: as last handed out in Ready.
	acked, reportedAcked uint64

	end      LogEnd
	endKnown bool

	// readPos, readSeq: the last entry read and the last local seq read.
	readPos     Position
	readSeq     uint64
	readID      uint64 // outstanding read, 0 if none
	nextReadID  uint64
	readFails   int
	readRetryAt time.Time

	// win holds the entries read and not yet passed by the cursor, in log
	// order; after every step its first item, if any, is a local entry
	// the target has not acknowledged. win[:sendIdx] were sent since the
	// last rewind.
	win      window
	sendIdx  int
	winBytes int // sum of size over win
	inflight []flight
	// inflightBytes: sum of size over win[:sendIdx].
	inflightBytes int
	nextBatchID   uint64
	// rewindFloor: the first batch id sent after the last rewind; a nack
	// or failure for an older batch is already dealt with.
	rewindFloor uint64
	// nackFrom: the hole the last nack named, until acknowledged.
	nackFrom     uint64
	failures     int
	backoffUntil time.Time
	limiterRetry time.Time

	overQuota bool
	resync    ResyncReason

	rd Ready
}

// NewSender returns a Sender resuming from cursor c (the last persisted
// one, or InitialCursor for a new replicator) at time now. The shell then
// calls Appended with the log's end before anything else.
func NewSender(cfg SenderConfig, c Cursor, now time.Time) (*Sender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if c.Stream == 0 {
		return nil, fmt.Errorf("%w: cursor %v has no stream (use InitialCursor)", ErrInvalidConfig, c)
	}
	if c.Seq < c.Base {
		return nil, fmt.Errorf("%w: cursor %v: seq below base", ErrInvalidConfig, c)
	}
	s := &Sender{
		cfg:           cfg,
		now:           now,
		cursor:        c,
		acked:         c.Seq,
		reportedAcked: c.Seq,
		end:           LogEnd{Pos: c.Pos, Seq: c.Seq, Bytes: c.Bytes},
		readPos:       c.Pos,
		readSeq:       c.Seq,
		nextReadID:    1,
		nextBatchID:   1,
		rewindFloor:   1,
	}
	return s, nil
}

// Appended tells the sender the local log's end (it grew, or at start).
func (s *Sender) Appended(end LogEnd) {
	if s.endKnown {
		if end.Pos.Less(s.end.Pos) {
			end.Pos = s.end.Pos
		}
		end.Seq = max(end.Seq, s.end.Seq)
		end.Bytes = max(end.Bytes, s.end.Bytes)
	}
	s.end, s.endKnown = end, true
	s.step()
}

// Read delivers the entries read for request id. A result for a request
// that is no longer outstanding is ignored. An empty result means nothing
// is readable yet (the sender asks again after BackoffInitial). A result
// that breaks the read contract is refused with an error wrapping
// ErrBadRead, and the read retried after a backoff.
func (s *Sender) Read(id uint64, entries []Entry) error {
	if id == 0 || id != s.readID {
		return nil
	}
	s.readID = 0
	if s.resync != ResyncNone {
		return nil
	}
	if len(entries) == 0 {
		s.readRetryAt = s.now.Add(s.cfg.BackoffInitial)
		s.step()
		return nil
	}
	prev, seq := s.readPos, s.readSeq
	for i := range entries {
		e := &entries[i]
		if !prev.Less(e.Pos) {
			s.readFailed()
			return fmt.Errorf("%w: entry at %v after %v", ErrBadRead, e.Pos, prev)
		}
		prev = e.Pos
		if e.Origin == s.cfg.Local {
			if e.OriginSeq != seq+1 {
				s.readFailed()
				return fmt.Errorf("%w: local entry at %v has seq %d, want %d", ErrBadRead, e.Pos, e.OriginSeq, seq+1)
			}
			seq++
		}
	}
	for i := range entries {
		e := &entries[i]
		it := item{pos: e.Pos, seq: e.OriginSeq, publishMs: e.PublishMs}
		if e.Origin == s.cfg.Local {
			it.local = true
			it.dataLen = len(e.Data)
			if e.replicatesTo(s.cfg.Remote) {
				it.e = *e
				it.e.Skip = false
				it.size = len(e.Data)
			} else {
				it.e = Entry{Pos: e.Pos, Origin: e.Origin, OriginID: e.OriginID, OriginSeq: e.OriginSeq, PublishMs: e.PublishMs, Skip: true}
			}
		}
		s.win.push(it)
		s.winBytes += it.size
	}
	s.readPos, s.readSeq = prev, seq
	if s.end.Pos.Less(prev) {
		s.end.Pos = prev
	}
	s.end.Seq = max(s.end.Seq, seq)
	s.readFails = 0
	s.step()
	return nil
}

// ReadFailed reports that request id failed. ErrTrimmed (wrapped) means
// the entries are gone: the region needs a resync. Anything else is
// retried after a backoff.
func (s *Sender) ReadFailed(id uint64, err error) {
	if id == 0 || id != s.readID {
		return
	}
	s.readID = 0
	if isTrimmed(err) {
		s.needResync(ResyncTrimmed)
	} else {
		s.readFailed()
	}
	s.step()
}

func (s *Sender) readFailed() {
	s.readFails++
	s.readRetryAt = s.now.Add(s.backoff(s.readFails))
}

// Acked delivers a reply from the target.
func (s *Sender) Acked(a Ack) {
	if a.Origin != s.cfg.Local {
		return
	}
	reason := ResyncNone
	switch {
	case a.Stream > s.cursor.Stream:
		reason = ResyncStaleStream
	case a.Regressed:
		reason = ResyncTargetRegressed
	case s.endKnown && a.Through > max(s.end.Seq, s.readSeq):
		reason = ResyncTargetAhead
	}
	if reason != ResyncNone {
		s.needResync(reason)
		s.step()
		return
	}
	// Below: a truthful ack of this stream. It moves the cursor even when
	// replication stopped (needs resync), so a resync starts from what the
	// target really has.
	if a.Through > s.acked {
		s.acked = a.Through
		s.failures = 0
		s.backoffUntil = time.Time{}
		if s.acked >= s.nackFrom {
			s.nackFrom = 0
		}
	}
	if s.resync == ResyncNone && a.ResendFrom > s.acked && a.Stream == s.cursor.Stream && a.BatchID >= s.rewindFloor {
		// A nack: resend from the hole at once. The same hole again means
		// the resend was lost too: from then on, back off as for a failure.
		if a.ResendFrom == s.nackFrom {
			s.backOff()
		}
		s.nackFrom = a.ResendFrom
		s.rewindTo(a.ResendFrom)
	}
	s.step()
}

// SendFailed reports that the transport failed to send batch id (it may
// or may not have arrived). The sender rewinds to the first unacknowledged
// entry and resends after a backoff. A failure of a batch that is already
// acknowledged or was sent before the last rewind is ignored.
func (s *Sender) SendFailed(id uint64, err error) {
	_ = err // the shell logs it; every transport error is retried the same way
	if id < s.rewindFloor || s.resync != ResyncNone {
		return
	}
	for _, f := range s.inflight {
		if f.id == id {
			s.fail()
			break
		}
	}
	s.step()
}

// Tick advances the sender's clock: ack timeouts, backoff, rate limit and
// backlog age are measured against it.
func (s *Sender) Tick(now time.Time) {
	if now.After(s.now) {
		s.now = now
	}
	if s.resync == ResyncNone && s.win.len() > 0 {
		if f := s.win.at(0); !f.sentAt.IsZero() && !s.now.Before(f.sentAt.Add(s.cfg.AckTimeout)) {
			s.fail()
		}
	}
	s.step()
}

// fail handles a lost batch or ack: rewind to the first unacknowledged
// entry, and back off.
func (s *Sender) fail() {
	if s.win.len() > 0 {
		s.rewindTo(s.win.at(0).seq)
	}
	s.backOff()
}

// backOff pauses sending after a failure, exponentially.
func (s *Sender) backOff() {
	s.failures++
	s.backoffUntil = s.now.Add(s.backoff(s.failures))
	s.rd.Backoff = s.backoffUntil
}

func (s *Sender) backoff(n int) time.Duration {
	d := s.cfg.BackoffInitial
	for i := 1; i < n && d < s.cfg.BackoffMax; i++ {
		d *= 2
	}
	return min(d, s.cfg.BackoffMax)
}

// rewindTo makes the entry with sequence number seq, and everything after
// it, unsent. Entries before it stay sent (their ack timeout still runs).
func (s *Sender) rewindTo(seq uint64) {
	i := 0
	for ; i < s.sendIdx; i++ {
		if it := s.win.at(i); it.local && it.seq >= seq {
			break
		}
	}
	if i >= s.sendIdx {
		return // not sent yet: nothing to rewind
	}
	for j := i; j < s.sendIdx; j++ {
		it := s.win.at(j)
		s.inflightBytes -= it.size
		it.sentAt = time.Time{}
	}
	s.sendIdx = i
	// Forget the batches that held a rewound entry: it goes again in a new
	// one.
	kept := s.inflight[:0]
	for _, f := range s.inflight {
		if f.last < seq {
			kept = append(kept, f)
		}
	}
	s.inflight = kept
	s.rewindFloor = s.nextBatchID
}

func (s *Sender) needResync(r ResyncReason) {
	if s.resync != ResyncNone {
		return
	}
	s.resync = r
	s.readID = 0
	s.rewindTo(0)
	s.inflight = nil
	s.rd.Alerts = append(s.rd.Alerts, Alert{Kind: AlertNeedsResync, Remote: s.cfg.Remote, Backlog: s.backlog(), Reason: r})
}

// step runs after every input: advance the cursor over what is done,
// check the quota, send what may be sent, ask for the next read.
func (s *Sender) step() {
	s.advance()
	s.checkQuota()
	if s.resync != ResyncNone {
		return
	}
	s.requestRead()
	s.send()
	s.requestRead()
}

// advance pops acknowledged local entries and foreign entries off the
// front of the window, moving the cursor over them: the cursor passes an
// entry only when it and everything before it are done.
func (s *Sender) advance() {
	for s.win.len() > 0 {
		it := s.win.at(0)
		if it.local && it.seq > s.acked {
			break
		}
		if s.sendIdx > 0 {
			s.sendIdx--
			s.inflightBytes -= it.size
		}
		s.winBytes -= it.size
		s.cursor.Pos = it.pos
		if it.local {
			s.cursor.Seq = it.seq
			s.cursor.Bytes += int64(it.dataLen)
		}
		s.cursorDirty = true
		s.win.pop()
	}
	kept := s.inflight[:0]
	for _, f := range s.inflight {
		if f.last > s.acked {
			kept = append(kept, f)
		}
	}
	s.inflight = kept
}

func (s *Sender) send() {
	for len(s.inflight) < s.cfg.MaxInflightBatches && s.inflightBytes < s.cfg.MaxInflightBytes &&
		!s.now.Before(s.backoffUntil) && !s.now.Before(s.limiterRetry) {
		// Pass over foreign entries; gather local ones.
		i := s.sendIdx
		for i < s.win.len() && !s.win.at(i).local {
			i++
		}
		s.sendIdx = i
		n, bytes := 0, 0
		for j := i; j < s.win.len() && n < s.cfg.BatchMaxEntries; j++ {
			it := s.win.at(j)
			if !it.local {
				continue
			}
			if n > 0 && bytes+it.size > s.cfg.BatchMaxBytes {
				break
			}
			n++
			bytes += it.size
		}
		if n == 0 {
			return
		}
		if s.readID != 0 && n < s.cfg.BatchMaxEntries && bytes < s.cfg.BatchMaxBytes {
			return // a read is coming back: fill the batch first
		}
		if s.cfg.Limiter != nil {
			if ok, retry := s.cfg.Limiter.Take(s.now, n, bytes); !ok {
				s.limiterRetry = retry
				return
			}
		}
		b := Batch{ID: s.nextBatchID, Origin: s.cfg.Local, Stream: s.cursor.Stream, Base: s.cursor.Base, Acked: s.acked,
			Entries: make([]Entry, 0, n)}
		s.nextBatchID++
		j := i
		for len(b.Entries) < n {
			it := s.win.at(j)
			j++
			if !it.local {
				continue
			}
			b.Entries = append(b.Entries, it.e)
			it.sentAt = s.now
		}
		for k := i; k < j; k++ {
			s.inflightBytes += s.win.at(k).size
		}
		s.sendIdx = j
		s.inflight = append(s.inflight, flight{id: b.ID, first: b.FirstSeq(), last: b.LastSeq()})
		s.rd.Send = append(s.rd.Send, b)
	}
}

// unsentLocal counts the local entries read and not sent (since the last
// rewind), up to a batch's worth.
func (s *Sender) unsentLocal() int {
	n := 0
	for i := s.sendIdx; i < s.win.len() && n < s.cfg.BatchMaxEntries; i++ {
		if s.win.at(i).local {
			n++
		}
	}
	return n
}

// windowLimit bounds the entries held in memory (local and foreign).
func (s *Sender) windowLimit() int { return (s.cfg.MaxInflightBatches + 1) * s.cfg.BatchMaxEntries }

func (s *Sender) requestRead() {
	if s.readID != 0 || !s.endKnown || !s.readPos.Less(s.end.Pos) || s.now.Before(s.readRetryAt) {
		return
	}
	room := s.windowLimit() - s.win.len()
	if room <= 0 || s.unsentLocal() >= s.cfg.BatchMaxEntries ||
		s.winBytes-s.inflightBytes >= s.cfg.BatchMaxBytes || s.winBytes >= s.cfg.MaxInflightBytes+s.cfg.BatchMaxBytes {
		return
	}
	s.readID = s.nextReadID
	s.nextReadID++
	s.rd.Read = &ReadRequest{ID: s.readID, After: s.readPos, MaxEntries: min(room, s.cfg.BatchMaxEntries), MaxBytes: s.cfg.BatchMaxBytes}
}

func (s *Sender) backlog() Backlog {
	var b Backlog
	if s.end.Seq > s.acked {
		b.Entries = int64(s.end.Seq - s.acked)
	}
	b.Bytes = satSub(s.end.Bytes, s.cursor.Bytes)
	if s.win.len() > 0 {
		if f := s.win.at(0); f.local {
			b.Age = max(0, s.now.Sub(time.UnixMilli(f.publishMs)))
		}
	}
	return b
}

func (q BacklogQuota) exceeded(b Backlog, frac float64) bool {
	over := func(v, limit int64) bool { return limit > 0 && float64(v) > frac*float64(limit) }
	return over(b.Entries, q.MaxEntries) || over(b.Bytes, q.MaxBytes) || over(int64(b.Age), int64(q.MaxAge))
}

func (s *Sender) checkQuota() {
	b := s.backlog()
	switch {
	case !s.overQuota && s.cfg.Quota.exceeded(b, 1):
		s.overQuota = true
		s.rd.Alerts = append(s.rd.Alerts, Alert{Kind: AlertOverQuota, Remote: s.cfg.Remote, Backlog: b, Policy: s.cfg.QuotaPolicy})
		if s.cfg.QuotaPolicy == QuotaResyncNow {
			s.needResync(ResyncQuota)
		}
	case s.overQuota && !s.cfg.Quota.exceeded(b, 0.9):
		s.overQuota = false
		s.rd.Alerts = append(s.rd.Alerts, Alert{Kind: AlertUnderQuota, Remote: s.cfg.Remote, Backlog: b})
	}
}

// HasReady reports whether Ready has anything for the shell to do.
func (s *Sender) HasReady() bool {
	return s.rd.Read != nil || len(s.rd.Send) > 0 || s.cursorDirty || !s.rd.Backoff.IsZero() || len(s.rd.Alerts) > 0 ||
		s.acked != s.reportedAcked
}

// Ready returns what the shell must do now and forgets it: the shell
// must do it (or, for Cursor, may coalesce it with a later one).
func (s *Sender) Ready() Ready {
	rd := s.rd
	s.rd = Ready{}
	if s.cursorDirty {
		c := s.cursor
		rd.Cursor = &c
		s.cursorDirty = false
	}
	rd.Acked = s.acked
	s.reportedAcked = s.acked
	rd.WakeAt = s.wakeAt()
	return rd
}

// WakeAt is the earliest time at which a Tick lets the sender make
// progress (Ready.WakeAt, as of the last input): the end of a backoff, a
// rate-limit refill, a read retry, an ack timeout, the quota's age limit.
// Zero: until the next input, no Tick does anything. Time moves the
// sender only through Tick, and a Tick acts on everything due by then, so
// a shell that sleeps until WakeAt or the next input needs no periodic
// tick.
func (s *Sender) WakeAt() time.Time { return s.wakeAt() }

func (s *Sender) wakeAt() time.Time {
	var at time.Time
	consider := func(t time.Time) {
		if t.After(s.now) && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if s.resync != ResyncNone {
		return at
	}
	consider(s.backoffUntil)
	consider(s.limiterRetry)
	if s.readID == 0 {
		consider(s.readRetryAt)
	}
	if s.win.len() > 0 {
		f := s.win.at(0)
		if !f.sentAt.IsZero() {
			consider(f.sentAt.Add(s.cfg.AckTimeout))
		}
		if s.cfg.Quota.MaxAge > 0 && !s.overQuota && f.local {
			consider(time.UnixMilli(f.publishMs).Add(s.cfg.Quota.MaxAge + time.Millisecond))
		}
	}
	return at
}

// Status returns a snapshot of the sender's state.
func (s *Sender) Status() Status {
	return Status{
		Cursor:          s.cursor,
		Acked:           s.acked,
		Backlog:         s.backlog(),
		OverQuota:       s.overQuota,
		NeedsResync:     s.resync,
		InflightBatches: len(s.inflight),
		InflightBytes:   s.inflightBytes,
		BackoffUntil:    s.backoffUntil,
		HoldsRetention:  !s.overQuota || s.cfg.QuotaPolicy == QuotaHold,
	}
}

// window is a FIFO of items.
type window struct {
	items []item
	head  int
}

func (w *window) len() int       { return len(w.items) - w.head }
func (w *window) at(i int) *item { return &w.items[w.head+i] }
func (w *window) push(it item)   { w.items = append(w.items, it) }
func (w *window) pop() {
	w.items[w.head] = item{} // drop the data reference
	w.head++
	if w.head == len(w.items) {
		w.items, w.head = w.items[:0], 0
	} else if w.head >= 64 && w.head*2 >= len(w.items) {
		n := copy(w.items, w.items[w.head:])
		clear(w.items[n:])
		w.items, w.head = w.items[:n], 0
	}
}
