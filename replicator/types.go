package replicator

import (
	"errors"
	"fmt"
	"slices"
)

// Position is an entry's place in a topic's local log: the ledger id and
// the entry id inside it, ordered by (Ledger, Entry). It mirrors the
// managed ledger's position without importing broker. Positions are not
// dense: a rollover jumps to a new ledger id, so "the next position" is
// known only to the log. The replicator therefore never derives one
// position from another; it only compares them.
type Position struct{ Ledger, Entry int64 }

// Earliest sorts before every entry ("nothing done yet").
var Earliest = Position{-1, -1}

// Less reports whether p sorts before q.
func (p Position) Less(q Position) bool {
	if p.Ledger != q.Ledger {
		return p.Ledger < q.Ledger
	}
	return p.Entry < q.Entry
}

func (p Position) String() string {
	if p == Earliest {
		return "earliest"
	}
	return fmt.Sprintf("%d:%d", p.Ledger, p.Entry)
}

// MessageID is a Pulsar message id as the origin region issued it. A
// replicated entry keeps it in every region, so an id taken in one region
// names the same message everywhere (DESIGN.md, "Message ids mean the same
// thing everywhere").
type MessageID struct {
	Ledger, Entry int64
	Batch         int32
}

func (m MessageID) String() string { return fmt.Sprintf("%d:%d:%d", m.Ledger, m.Entry, m.Batch) }

// Entry is one log entry as the replicator sees it.
//
// In the log it is read from (the sender's side), Pos is its local
// position. Origin is the region where a producer published it; OriginID
// the message id that region issued; OriginSeq its place in the origin's
// dense sequence for this topic (1, 2, 3, ... with no holes: the origin's
// broker assigns it at append, and every entry of that origin, replicated
// or not, takes one). The target stores Origin, OriginID and OriginSeq
// with the entry.
type Entry struct {
	Pos       Position
	Origin    string
	OriginID  MessageID
	OriginSeq uint64
	Data      []byte
	// PublishMs is the origin broker's publish time (Unix ms); backlog
	// age is measured from it.
	PublishMs int64
	// ReplicateTo limits the regions the entry goes to (Pulsar's
	// replicate_to); nil means every region of the topic.
	ReplicateTo []string
	// Skip marks a placeholder: the entry exists at the origin but is not
	// replicated to this target (ReplicateTo excludes it). It carries its
	// OriginSeq, and no Data, so the target's sequence stays dense; the
	// target stores no message for it, only advances its record.
	Skip bool
	// Stamps are the entry's times on its way between the regions, for
	// the replication latency metrics only: the replicator neither reads
	// nor sets them, and a resend carries them as they were.
	Stamps Stamps
}

// Stamps are the times an entry passed the stages of its replication
// (Unix ns; 0 unknown). Persisted and Sent are the origin broker's clock
// and travel on the wire; Appended and Read stay at the origin; Received
// is the target's. A target compares the origin's with its own clock only
// as an estimate (exact on one machine).
type Stamps struct {
	// Appended: the origin broker handed the entry to its managed ledger
	// (stays at the origin).
	Appended int64
	// Persisted: the origin's bookies confirmed the entry's add (its
	// quorum persisted it).
	Persisted int64
	// Read: the origin's sender read it from the log.
	Read int64
	// Sent: the origin's sender handed its batch to the stream.
	Sent int64
	// Received: the target's transport received the batch (the target's
	// clock).
	Received int64
}

// replicatesTo reports whether e goes to region r.
func (e *Entry) replicatesTo(r string) bool {
	return e.ReplicateTo == nil || slices.Contains(e.ReplicateTo, r)
}

// Cursor is a sender's durable state, persisted by the shell (with the
// managed-ledger cursor: Pos as its mark-delete position, the rest as
// cursor properties). Every entry at or before Pos has been either
// acknowledged by the target or passed over as not local.
type Cursor struct {
	Pos Position
	// Seq is the OriginSeq of the last local entry at or before Pos (0 if
	// none); the next local entry has Seq+1.
	Seq uint64
	// Bytes is the total len(Data) of the local entries at or before Pos,
	// counted the same way as LogEnd.Bytes; backlog bytes are their
	// difference.
	Bytes int64
	// Stream is the replication stream's generation. It is 1 for a new
	// replicator and grows only by an explicit restart (InitialCursor,
	// NextStream): the only way a target ever accepts to jump over
	// sequence numbers.
	Stream uint64
	// Base is the sequence number the stream started after: entries with
	// OriginSeq <= Base are not carried by this stream.
	Base uint64
}

func (c Cursor) String() string {
	return fmt.Sprintf("pos=%v seq=%d bytes=%d stream=%d base=%d", c.Pos, c.Seq, c.Bytes, c.Stream, c.Base)
}

// InitialCursor is the cursor of a new replicator that starts after
// position start, where the local log's last local entry at or before
// start has sequence number seq and the local entries up to it hold bytes
// bytes. To replicate the whole topic: InitialCursor(Earliest, 0, 0); to
// replicate only new messages (Pulsar's replicationStartAt=latest): the
// log's end. If retention already trimmed the beginning of the log, start
// just before the first retained entry ({its ledger, -1}) with seq its
// OriginSeq-1: the sender checks that local sequence numbers follow on
// from seq and refuses a read that does not (ErrBadRead). Persist it
// before the first send.
func InitialCursor(start Position, seq uint64, bytes int64) Cursor {
	return Cursor{Pos: start, Seq: seq, Bytes: bytes, Stream: 1, Base: seq}
}

// NextStream is the cursor that restarts replication after position start
// (with seq and bytes as in InitialCursor) as a new stream. It is the
// resync step after the sender reported NeedsResync: the target accepts
// the jump from its record to seq, and reports the sequence numbers it
// skipped, which are then lost to that region. Starting at or before the
// target's record skips nothing. Persist it, then create a new Sender from
// it.
func (c Cursor) NextStream(start Position, seq uint64, bytes int64) Cursor {
	return Cursor{Pos: start, Seq: seq, Bytes: bytes, Stream: c.Stream + 1, Base: seq}
}

// LogEnd describes the end of the local log, for the sender's reads and
// backlog: Pos is the last entry's position, Seq the OriginSeq of the last
// local entry, Bytes the total len(Data) of all local entries ever
// appended to the topic (a counter the topic keeps beside Seq).
type LogEnd struct {
	Pos   Position
	Seq   uint64
	Bytes int64
}

// Batch is what a Sender sends to the target region: consecutive local
// entries (OriginSeq ascending without holes; foreign entries never
// appear).
type Batch struct {
	// ID identifies the batch within one Sender's life, increasing; the
	// shell reports failures with it and the target echoes it in replies.
	ID     uint64
	Origin string
	// Stream and Base are the sender's Cursor.Stream and Cursor.Base.
	Stream, Base uint64
	// Acked is the highest sequence number the sender knows the target
	// persisted. A target whose record is below it has lost data it had
	// acknowledged, and says so.
	Acked   uint64
	Entries []Entry
}

// Bytes is the payload size of the batch.
func (b *Batch) Bytes() int {
	n := 0
	for i := range b.Entries {
		n += len(b.Entries[i].Data)
	}
	return n
}

// FirstSeq and LastSeq are the batch's sequence range (0 when empty).
func (b *Batch) FirstSeq() uint64 {
	if len(b.Entries) == 0 {
		return 0
	}
	return b.Entries[0].OriginSeq
}

func (b *Batch) LastSeq() uint64 {
	if len(b.Entries) == 0 {
		return 0
	}
	return b.Entries[len(b.Entries)-1].OriginSeq
}

// Ack is the target's reply. It is cumulative and always true when it is
// sent: every entry of Origin with OriginSeq <= Through is durable on the
// target, so a delayed, duplicated or reordered Ack is harmless.
type Ack struct {
	Origin string
	// BatchID is the batch this replies to (for a persistence ack, the
	// batch whose entries were persisted).
	BatchID uint64
	// Stream is the target's stream for Origin after this batch.
	Stream  uint64
	Through uint64
	// ResendFrom, when non-zero, is a nack: the batch skipped ahead of the
	// target's next expected sequence number, nothing at or past
	// ResendFrom was kept, and the sender should resend from there.
	ResendFrom uint64
	// Regressed: the target's record is below what the sender knows it
	// acknowledged (Batch.Acked): the target lost persisted entries.
	Regressed bool
}

func (a Ack) String() string {
	s := fmt.Sprintf("ack{%s batch=%d stream=%d through=%d", a.Origin, a.BatchID, a.Stream, a.Through)
	if a.ResendFrom != 0 {
		s += fmt.Sprintf(" resend-from=%d", a.ResendFrom)
	}
	if a.Regressed {
		s += " regressed"
	}
	return s + "}"
}

// SeqRange is a closed range of sequence numbers; the zero value is empty.
type SeqRange struct{ From, Through uint64 }

// Empty reports whether r holds no sequence number.
func (r SeqRange) Empty() bool { return r.From == 0 || r.Through < r.From }

// Len is the number of sequence numbers in r.
func (r SeqRange) Len() uint64 {
	if r.Empty() {
		return 0
	}
	return r.Through - r.From + 1
}

// Sentinel errors.
var (
	// ErrTrimmed: the log no longer holds the entries asked for (retention
	// deleted them). The shell passes it (wrapped) to Sender.ReadFailed;
	// the target then needs a resync.
	ErrTrimmed = errors.New("replicator: entries trimmed from the log")
	// ErrBadRead: a read result breaks the read contract (positions not
	// ascending after the request, or local sequence numbers not dense).
	ErrBadRead = errors.New("replicator: bad read result")
	// ErrLoop: a batch of entries that originated in the receiving region.
	ErrLoop = errors.New("replicator: entry originated in the receiving region")
	// ErrBadBatch: a batch that is not one origin's consecutive entries.
	ErrBadBatch = errors.New("replicator: malformed batch")
	// ErrPersistOrder: Persisted called out of the order of the writes, or
	// for a write voided by PersistFailed.
	ErrPersistOrder = errors.New("replicator: write persisted out of order")
	// ErrStaleEpoch: a sync-set change older than one already applied.
	ErrStaleEpoch = errors.New("replicator: stale epoch")
	// ErrInvalidConfig wraps every configuration error.
	ErrInvalidConfig = errors.New("replicator: invalid config")
)

func satSub(a, b int64) int64 {
	if a <= b {
		return 0
	}
	return a - b
}

func isTrimmed(err error) bool { return errors.Is(err, ErrTrimmed) }
