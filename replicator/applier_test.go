package replicator

import (
	"errors"
	"reflect"
	"testing"
)

func batchOf(stream, base, acked uint64, seqs ...uint64) Batch {
	b := Batch{ID: 1, Origin: "a", Stream: stream, Base: base, Acked: acked}
	for _, s := range seqs {
		b.Entries = append(b.Entries, Entry{Origin: "a", OriginSeq: s, Data: []byte{byte(s)}})
	}
	return b
}

func span(from, through uint64) []uint64 {
	var out []uint64
	for s := from; s <= through; s++ {
		out = append(out, s)
	}
	return out
}

func writeSeqs(w *Write) []uint64 {
	if w == nil {
		return nil
	}
	var out []uint64
	for _, e := range w.Entries {
		out = append(out, e.OriginSeq)
	}
	return out
}

// "Applier: output which entries to persist (new, contiguous after the
// highest contiguous seq persisted), which are duplicates (ack
// immediately), and whether there is a GAP (must NOT be persisted ahead;
// reply with a 'resend from seq X' nack)".
func TestApplierReceive(t *testing.T) {
	for _, tc := range []struct {
		name      string
		state     State
		batch     Batch
		write     []uint64 // seqs to persist
		after     State    // the write's State
		skipped   SeqRange
		reply     *Ack // immediate reply
		dups      int
		regressed bool
	}{
		{name: "next entries", state: State{"a", 1, 5}, batch: batchOf(1, 0, 5, 6, 7, 8),
			write: span(6, 8), after: State{"a", 1, 8}},
		{name: "first entries of a new applier", state: State{Origin: "a"}, batch: batchOf(1, 0, 0, 1, 2),
			write: span(1, 2), after: State{"a", 1, 2}},
		{name: "all duplicates: ack at once", state: State{"a", 1, 5}, batch: batchOf(1, 0, 2, 3, 4, 5),
			reply: &Ack{Origin: "a", BatchID: 1, Stream: 1, Through: 5}, dups: 3},
		{name: "overlap: duplicates dropped, the rest persisted", state: State{"a", 1, 5}, batch: batchOf(1, 0, 3, 4, 5, 6, 7),
			write: span(6, 7), after: State{"a", 1, 7}, dups: 2},
		{name: "gap: nothing kept, resend from the hole", state: State{"a", 1, 5}, batch: batchOf(1, 0, 5, 8, 9),
			reply: &Ack{Origin: "a", BatchID: 1, Stream: 1, Through: 5, ResendFrom: 6}},
		{name: "new stream: adopt, skip to its base", state: State{"a", 1, 5}, batch: batchOf(2, 10, 10, 11, 12),
			write: span(11, 12), after: State{"a", 2, 12}, skipped: SeqRange{6, 10}},
		{name: "new stream below the record: nothing skipped", state: State{"a", 1, 5}, batch: batchOf(2, 3, 3, 4, 5, 6),
			write: span(6, 6), after: State{"a", 2, 6}, dups: 2},
		{name: "new stream, no entries: adopt alone", state: State{"a", 1, 5}, batch: batchOf(2, 9, 9),
			after: State{"a", 2, 9}, skipped: SeqRange{6, 9}},
		{name: "stale stream: entries still applied by seq", state: State{"a", 3, 5}, batch: batchOf(2, 0, 5, 6),
			write: span(6, 6), after: State{"a", 3, 6}},
		{name: "regressed: the sender saw acks above the record", state: State{"a", 1, 5}, batch: batchOf(1, 0, 9, 10, 11),
			reply: &Ack{Origin: "a", BatchID: 1, Stream: 1, Through: 5, ResendFrom: 6, Regressed: true}, regressed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewApplier("b", tc.state)
			if err != nil {
				t.Fatal(err)
			}
			res, err := a.Receive(tc.batch)
			if err != nil {
				t.Fatal(err)
			}
			if got := writeSeqs(res.Write); !reflect.DeepEqual(got, tc.write) {
				t.Fatalf("write %v, want %v", got, tc.write)
			}
			if res.Write != nil {
				if res.Write.State != tc.after || res.Write.Prev != tc.state || res.Write.Skipped != tc.skipped {
					t.Fatalf("write %v→%v skipped %v, want %v→%v skipped %v", res.Write.Prev, res.Write.State, res.Write.Skipped, tc.state, tc.after, tc.skipped)
				}
			} else if tc.after != (State{}) {
				t.Fatalf("no write, want one to %v", tc.after)
			}
			if !reflect.DeepEqual(res.Reply, tc.reply) {
				t.Fatalf("reply %v, want %v", res.Reply, tc.reply)
			}
			if res.Duplicates != tc.dups || res.Regressed != tc.regressed || res.Gap != (tc.reply != nil && tc.reply.ResendFrom != 0) {
				t.Fatalf("result %+v", res)
			}
			if a.State() != tc.state {
				t.Fatalf("record %v changed before Persisted", a.State())
			}
			if res.Write != nil {
				ack, err := a.Persisted(res.Write)
				if err != nil {
					t.Fatal(err)
				}
				if want := (Ack{Origin: "a", BatchID: 1, Stream: tc.after.Stream, Through: tc.after.Through}); ack != want {
					t.Fatalf("ack %v, want %v", ack, want)
				}
				if a.State() != tc.after {
					t.Fatalf("record %v, want %v", a.State(), tc.after)
				}
			}
		})
	}
}

// "entries that did not originate locally are never replicated again":
// the applier refuses a batch that would loop back.
func TestApplierRefusesMalformedBatches(t *testing.T) {
	a, err := NewApplier("b", State{Origin: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		batch Batch
		want  error
	}{
		{"batch from the local region", Batch{Origin: "b", Stream: 1}, ErrLoop},
		{"entry of the local region", Batch{Origin: "a", Stream: 1, Entries: []Entry{{Origin: "b", OriginSeq: 1}}}, ErrLoop},
		{"batch of another origin", Batch{Origin: "c", Stream: 1}, ErrBadBatch},
		{"relayed entry of another origin", Batch{Origin: "a", Stream: 1, Entries: []Entry{{Origin: "c", OriginSeq: 1}}}, ErrBadBatch},
		{"holes inside the batch", batchOf(1, 0, 0, 1, 3), ErrBadBatch},
		{"seq 0", batchOf(1, 0, 0, 0), ErrBadBatch},
		{"no stream", batchOf(0, 0, 0, 1), ErrBadBatch},
	} {
		if _, err := a.Receive(tc.batch); !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
	if a.State() != (State{Origin: "a"}) {
		t.Fatalf("record changed: %v", a.State())
	}
	if _, err := NewApplier("a", State{Origin: "a"}); !errors.Is(err, ErrLoop) {
		t.Fatalf("applier of the local origin: %v", err)
	}
}

// Entries re-sent while an earlier write is still being persisted are
// neither written twice nor acknowledged early; writes chain.
func TestApplierPipelinedWrites(t *testing.T) {
	a, _ := NewApplier("b", State{Origin: "a", Stream: 1})
	r1, _ := a.Receive(batchOf(1, 0, 0, 1, 2, 3))
	r2, _ := a.Receive(batchOf(1, 0, 0, 1, 2, 3, 4))
	if got := writeSeqs(r2.Write); !reflect.DeepEqual(got, []uint64{4}) || r2.Duplicates != 3 {
		t.Fatalf("second write %v, dups %d", got, r2.Duplicates)
	}
	r3, _ := a.Receive(batchOf(1, 0, 0, 2, 3))
	if r3.Write != nil || r3.Reply == nil || r3.Reply.Through != 0 {
		t.Fatalf("in-progress duplicates: %+v (must not ack what is not durable)", r3)
	}
	if _, err := a.Persisted(r2.Write); !errors.Is(err, ErrPersistOrder) {
		t.Fatalf("second write persisted before the first: %v", err)
	}
	if ack, err := a.Persisted(r1.Write); err != nil || ack.Through != 3 {
		t.Fatalf("first: %v %v", ack, err)
	}
	if ack, err := a.Persisted(r2.Write); err != nil || ack.Through != 4 {
		t.Fatalf("second: %v %v", ack, err)
	}
}

// A failed write voids the writes after it, not those before; the entries
// are taken again when re-sent, never past the hole.
func TestApplierPersistFailed(t *testing.T) {
	a, _ := NewApplier("b", State{Origin: "a", Stream: 1})
	r1, _ := a.Receive(batchOf(1, 0, 0, 1, 2))
	r2, _ := a.Receive(batchOf(1, 0, 0, 3, 4))
	r3, _ := a.Receive(batchOf(1, 0, 0, 5, 6))
	a.PersistFailed(r2.Write)
	a.PersistFailed(r3.Write) // void already: no-op
	if _, err := a.Persisted(r3.Write); !errors.Is(err, ErrPersistOrder) {
		t.Fatalf("voided write persisted: %v", err)
	}
	if ack, err := a.Persisted(r1.Write); err != nil || ack.Through != 2 {
		t.Fatalf("write before the failure: %v %v", ack, err)
	}
	// A later batch arriving first is a gap, not a write.
	r, _ := a.Receive(batchOf(1, 0, 0, 5, 6))
	if r.Write != nil || r.Reply.ResendFrom != 3 {
		t.Fatalf("after failure: %+v", r)
	}
	r, _ = a.Receive(batchOf(1, 0, 0, 3, 4, 5, 6))
	if got := writeSeqs(r.Write); !reflect.DeepEqual(got, span(3, 6)) {
		t.Fatalf("resend: write %v", got)
	}
}

// "state is a small record the shell persists (highest contiguous seq per
// origin) and restores on load": a restarted applier acknowledges
// re-sent entries as duplicates (Pulsar #25861 lost its watermark on
// reload and duplicated them).
func TestApplierRestartFromRecord(t *testing.T) {
	a, _ := NewApplier("b", State{Origin: "a"})
	r, _ := a.Receive(batchOf(1, 0, 0, 1, 2, 3))
	if _, err := a.Persisted(r.Write); err != nil {
		t.Fatal(err)
	}
	rec := a.State()
	a, _ = NewApplier("b", rec)
	r, _ = a.Receive(batchOf(1, 0, 0, 1, 2, 3, 4))
	if got := writeSeqs(r.Write); !reflect.DeepEqual(got, []uint64{4}) || r.Duplicates != 3 {
		t.Fatalf("after restart: write %v dups %d", got, r.Duplicates)
	}
}
