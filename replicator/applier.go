package replicator

import "fmt"

// State is an Applier's durable record, for one topic and one origin
// region on the target: the origin's stream the target follows and the
// highest contiguous sequence number it persisted. Not a (ledger, entry)
// high-water mark: positions jump at ledger rollovers, so a mark on them
// cannot see a hole (Pulsar #26113); a dense sequence can.
type State struct {
	Origin  string
	Stream  uint64
	Through uint64
}

func (s State) String() string {
	return fmt.Sprintf("%s stream=%d through=%d", s.Origin, s.Stream, s.Through)
}

// Write is what the Applier asks the shell to persist, as one atomic
// step: append Entries to the topic's log in order (each with its Origin,
// OriginID and OriginSeq; a Skip entry appends nothing) and save State as
// the record; then call Persisted(w), or PersistFailed(w).
type Write struct {
	Origin  string
	BatchID uint64
	// Prev is the record this write extends (the previous write's State).
	Prev    State
	Entries []Entry
	State   State
	// Skipped: sequence numbers this write jumps over because a new
	// stream started above the record (Cursor.NextStream after a resync):
	// lost to this region, by an explicit decision. Log and count them.
	Skipped SeqRange
	n       uint64 // handout number
}

// Result is the Applier's answer to one batch.
type Result struct {
	// Write, if set: persist it (see Write).
	Write *Write
	// Reply, if set: send it to the sender now. When nil, the reply is the
	// Ack that Persisted returns.
	Reply *Ack
	// Duplicates: entries of the batch already persisted or being
	// persisted, not written again.
	Duplicates int
	// Gap: the batch skipped ahead of the next expected sequence number;
	// Reply is a nack asking to resend from there.
	Gap bool
	// Regressed: the sender knows this target acknowledged more than its
	// record holds; the record lost data (alert).
	Regressed bool
}

// Applier applies one origin region's replicated entries to one topic on
// the target: each entry once, in the origin's order, never past a gap.
// A pure state machine (see the package doc); not safe for concurrent use.
type Applier struct {
	local   string
	durable State // what the record holds
	pending State // durable plus the writes handed out and not yet persisted
	// outstanding: handout numbers of the writes handed out and not yet
	// persisted or failed, in order.
	outstanding []uint64
	handed      uint64
}

// NewApplier returns the applier for entries from origin st.Origin into a
// topic of region local, resuming from the persisted record st (State{Origin:
// o} for a new one).
func NewApplier(local string, st State) (*Applier, error) {
	switch {
	case local == "" || st.Origin == "":
		return nil, fmt.Errorf("%w: empty region name", ErrInvalidConfig)
	case st.Origin == local:
		return nil, fmt.Errorf("%w: origin %q is the local region", ErrLoop, local)
	}
	return &Applier{local: local, durable: st, pending: st}, nil
}

// State returns the durable record (as of the last Persisted).
func (a *Applier) State() State { return a.durable }

// Receive takes a batch from the origin's sender. An error means the
// batch is malformed (or loops back): nothing of it is applied and no
// reply is due.
func (a *Applier) Receive(b Batch) (Result, error) {
	if err := a.check(&b); err != nil {
		return Result{}, err
	}
	next := a.pending
	var skipped SeqRange
	if b.Stream > next.Stream {
		// A new stream: the sender restarted the origin's stream after
		// Base (explicitly). Adopt it; anything between the record and
		// Base is skipped, by that decision.
		next.Stream = b.Stream
		if b.Base > next.Through {
			skipped = SeqRange{From: next.Through + 1, Through: b.Base}
			next.Through = b.Base
		}
	}
	var r Result
	if b.Stream == next.Stream && b.Acked > next.Through {
		r.Regressed = true
	}
	var write []Entry
	resendFrom := uint64(0)
	for i := range b.Entries {
		e := &b.Entries[i]
		switch {
		case e.OriginSeq <= next.Through:
			r.Duplicates++
		case e.OriginSeq == next.Through+1:
			write = append(write, *e)
			next.Through++
		default:
			resendFrom = next.Through + 1
		}
		if resendFrom != 0 {
			break
		}
	}
	if next != a.pending {
		a.handed++
		r.Write = &Write{Origin: next.Origin, BatchID: b.ID, Prev: a.pending, Entries: write, State: next, Skipped: skipped, n: a.handed}
		a.pending = next
		a.outstanding = append(a.outstanding, a.handed)
	}
	if resendFrom != 0 || r.Regressed || r.Write == nil {
		r.Gap = resendFrom != 0
		r.Reply = &Ack{Origin: next.Origin, BatchID: b.ID, Stream: a.pending.Stream, Through: a.durable.Through,
			ResendFrom: resendFrom, Regressed: r.Regressed}
	}
	return r, nil
}

func (a *Applier) check(b *Batch) error {
	o := a.durable.Origin
	switch {
	case b.Origin == a.local:
		return fmt.Errorf("%w: batch %d from %q", ErrLoop, b.ID, b.Origin)
	case b.Origin != o:
		return fmt.Errorf("%w: batch %d from %q to the applier of %q", ErrBadBatch, b.ID, b.Origin, o)
	case b.Stream == 0:
		return fmt.Errorf("%w: batch %d has no stream", ErrBadBatch, b.ID)
	}
	for i := range b.Entries {
		e := &b.Entries[i]
		switch {
		case e.Origin == a.local:
			return fmt.Errorf("%w: batch %d entry seq %d", ErrLoop, b.ID, e.OriginSeq)
		case e.Origin != o:
			return fmt.Errorf("%w: batch %d from %q holds an entry from %q", ErrBadBatch, b.ID, o, e.Origin)
		case e.OriginSeq == 0:
			return fmt.Errorf("%w: batch %d holds seq 0", ErrBadBatch, b.ID)
		case i > 0 && e.OriginSeq != b.Entries[i-1].OriginSeq+1:
			return fmt.Errorf("%w: batch %d seq %d after %d", ErrBadBatch, b.ID, e.OriginSeq, b.Entries[i-1].OriginSeq)
		}
	}
	return nil
}

// Persisted reports that w is durable (its entries appended and its State
// saved). Writes complete in the order they were handed out. It returns
// the Ack to send: every entry through w.State.Through is now durable. An
// error wrapping ErrPersistOrder means the shell broke the order or
// persisted a write voided by PersistFailed: the log may now hold entries
// out of order, which is a bug to stop on.
func (a *Applier) Persisted(w *Write) (Ack, error) {
	if len(a.outstanding) == 0 || a.outstanding[0] != w.n || w.Prev != a.durable {
		return Ack{}, fmt.Errorf("%w: write %v→%v, record %v", ErrPersistOrder, w.Prev, w.State, a.durable)
	}
	a.outstanding = a.outstanding[1:]
	a.durable = w.State
	return Ack{Origin: a.durable.Origin, BatchID: w.BatchID, Stream: a.durable.Stream, Through: a.durable.Through}, nil
}

// PersistFailed reports that w was not persisted. Every write handed out
// after it is void too: the shell must not persist them (it fails them;
// PersistFailed on a void write is a no-op). Writes handed out before w
// are unaffected. The entries are accepted again when the sender resends
// them.
func (a *Applier) PersistFailed(w *Write) {
	for i, n := range a.outstanding {
		if n == w.n {
			a.outstanding = a.outstanding[:i]
			a.pending = w.Prev
			return
		}
	}
}
