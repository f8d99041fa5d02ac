package dispatch

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// delayedSim plays the subscription shell around a Delayed index: a log of
// delayed entries read in order, a store of persisted snapshots (the
// buckets' and the list), a consumer that acknowledges what it is given,
// and time as an input (no clock: the core takes it).
type delayedSim struct {
	t     *testing.T
	cfg   DelayedConfig
	d     *Delayed
	now   int64
	log   []delayedItem // every entry of the log, by position
	read  int           // the cursor's read position in log
	store map[uint64][][]byte
	list  []byte
	// delivered: entry → times dispatched; acked: acknowledged on the
	// cursor (the sim acknowledges what it delivers unless told not to).
	delivered map[Position]int
	late      map[Position]int64 // how late its first dispatch was
	acked     map[Position]bool
	noAck     bool
	failSeals int // the next n seals fail
	loads     int
	merges    int // merges reported with Merged
	// opsLeft: the I/O operations (a seal, a list write, a delete, a
	// load, a merge) done before the process dies (halted); -1 no limit.
	opsLeft int
	halted  bool
	// holdMerge: a merge's reads are done at once but reported only by
	// finishMerge, so the index goes on meanwhile.
	holdMerge bool
	held      *heldMerge
}

type heldMerge struct {
	gen  uint64
	data [][]byte
}

// op reports whether the process is still alive to do one more operation.
func (s *delayedSim) op() bool {
	if s.opsLeft == 0 {
		s.halted = true
		return false
	}
	if s.opsLeft > 0 {
		s.opsLeft--
	}
	return true
}

func newDelayedSim(t *testing.T, cfg DelayedConfig) *delayedSim {
	return &delayedSim{t: t, cfg: cfg, d: NewDelayed(cfg), store: map[uint64][][]byte{},
		delivered: map[Position]int{}, late: map[Position]int64{}, acked: map[Position]bool{}, opsLeft: -1}
}

func (s *delayedSim) publish(n int, maxDelay int64, rng *rand.Rand) {
	for range n {
		pos := Position{Ledger: 7 + int64(len(s.log))/5000, Entry: int64(len(s.log)) % 5000}
		s.log = append(s.log, delayedItem{at: s.now + 1 + rng.Int64N(maxDelay), pos: pos})
	}
}

func (s *delayedSim) deliver(it delayedItem) {
	s.t.Helper()
	if it.at > s.now {
		s.t.Fatalf("%s dispatched at %d, before its time %d", it.pos, s.now, it.at)
	}
	if s.delivered[it.pos] == 0 {
		s.late[it.pos] = s.now - it.at
	}
	s.delivered[it.pos]++
	if !s.noAck {
		s.acked[it.pos] = true
	}
}

// readLog offers what the cursor has not read yet, as dispatch does.
func (s *delayedSim) readLog() {
	if !s.d.Ready() {
		return
	}
	for ; s.read < len(s.log); s.read++ {
		it := s.log[s.read]
		switch {
		case s.acked[it.pos]:
		case it.at <= s.now:
			s.deliver(it)
		case !s.d.Contains(it.pos):
			s.d.Add(it.pos, it.at)
		}
	}
}

func (s *delayedSim) at(p Position) delayedItem {
	for _, it := range s.log {
		if it.pos == p {
			return it
		}
	}
	s.t.Fatalf("%s is not in the log", p)
	return delayedItem{}
}

// work does the index's I/O until it has none.
func (s *delayedSim) work() {
	s.t.Helper()
	for range 1000 {
		if s.halted {
			return
		}
		w := s.d.Work(s.now)
		if w.Empty() {
			return
		}
		for _, sw := range w.Seal {
			if !s.op() {
				return
			}
			if s.failSeals > 0 {
				s.failSeals--
				s.d.Sealed(w.Gen, sw.Bucket, false)
				continue
			}
			s.store[sw.Bucket] = slices.Clone(sw.Segments)
			s.d.Sealed(w.Gen, sw.Bucket, true)
		}
		if w.List != nil {
			if !s.op() {
				return
			}
			s.list = slices.Clone(w.List)
			s.d.ListWritten(w.ListVersion)
		}
		for _, id := range w.Delete {
			if !s.op() {
				return
			}
			delete(s.store, id)
		}
		for _, ref := range w.Load {
			if !s.op() {
				return
			}
			s.loads++
			segs, ok := s.store[ref.Bucket]
			if !ok || ref.Entry >= int64(len(segs)) {
				if s.d.LoadFailed(w.Gen, ref, true) {
					s.read = 0 // rewind
				}
				continue
			}
			if s.d.Loaded(w.Gen, ref, segs[ref.Entry]) {
				s.read = 0
			}
		}
		if m := w.Merge; m != nil {
			if !s.op() {
				return
			}
			data := make([][]byte, len(m.Read))
			for i, ref := range m.Read {
				segs, ok := s.store[ref.Bucket]
				if !ok || ref.Entry >= int64(len(segs)) {
					if s.d.MergeFailed(w.Gen, ref, true) {
						s.read = 0
					}
					data = nil
					break
				}
				data[i] = segs[ref.Entry]
			}
			switch {
			case data == nil:
			case s.holdMerge:
				s.held = &heldMerge{gen: w.Gen, data: data}
			default:
				if s.d.Merged(w.Gen, data) {
					s.read = 0
				}
				s.merges++
			}
		}
	}
	s.t.Fatal("Work did not settle")
}

// finishMerge reports the merge held back by holdMerge.
func (s *delayedSim) finishMerge() {
	s.t.Helper()
	if s.held == nil {
		s.t.Fatal("no merge was held")
	}
	if s.d.Merged(s.held.gen, s.held.data) {
		s.read = 0
	}
	s.held = nil
	s.merges++
}

// step advances time to now, releases what is due, and does the I/O.
func (s *delayedSim) step(now int64) {
	s.t.Helper()
	s.now = now
	s.readLog()
	s.work()
	for !s.halted {
		due := s.d.Due(s.now, 1<<30)
		for _, p := range due {
			if !s.acked[p] {
				s.deliver(s.at(p))
			}
		}
		s.work() // loads the segments due next
		s.readLog()
		s.work()
		if len(due) == 0 {
			return
		}
	}
}

// crash loses the memory: a new index restored from the store, the
// garbage deleted, the cursor back at its first unacknowledged entry.
func (s *delayedSim) crash() {
	s.t.Helper()
	s.halted, s.opsLeft, s.held = false, -1, nil
	s.d = NewDelayed(s.cfg)
	if err := s.d.Restore(s.list); err != nil {
		s.t.Fatal(err)
	}
	for id := range s.store {
		if !s.d.Referenced(id) {
			delete(s.store, id)
		}
	}
	s.work()
	if !s.d.Ready() {
		s.t.Fatal("not ready after the restore's loads")
	}
	s.read = 0
}

// The requirement: every delayed entry is dispatched, none before its
// time, and once the open bucket is sealed only the segments due next are
// in memory.
func TestDelayedReleasesEveryEntryAtItsTimeFromBuckets(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	cfg := DelayedConfig{BucketMax: 200, SegmentMax: 20, LookaheadMs: 50}
	s := newDelayedSim(t, cfg)
	s.publish(2000, 10_000, rng)
	s.step(0)
	if got := s.d.Len(); got != 2000 {
		t.Fatalf("Len = %d, want 2000", got)
	}
	if s.d.Buckets() != 10 || len(s.store) != 10 {
		t.Fatalf("%d buckets, %d persisted, want 10", s.d.Buckets(), len(s.store))
	}
	if n := s.d.InMemory(); n > 10*cfg.SegmentMax {
		t.Fatalf("%d entries in memory after sealing, want at most one segment a bucket (%d)", n, 10*cfg.SegmentMax)
	}
	maxMem := 0
	for now := int64(0); now <= 10_100; now += 7 + rng.Int64N(40) {
		s.step(now)
		maxMem = max(maxMem, s.d.InMemory())
	}
	s.step(20_000)
	for _, it := range s.log {
		if s.delivered[it.pos] != 1 {
			t.Fatalf("%s dispatched %d times", it.pos, s.delivered[it.pos])
		}
	}
	if s.d.Len() != 0 || s.d.Buckets() != 0 || len(s.store) != 0 {
		t.Fatalf("after everything was due: Len %d, %d buckets, %d persisted", s.d.Len(), s.d.Buckets(), len(s.store))
	}
	if maxMem > 10*cfg.SegmentMax*2 {
		t.Fatalf("up to %d entries in memory, want about one segment a bucket", maxMem)
	}
	t.Logf("%d segment loads, at most %d of 2000 entries in memory", s.loads, maxMem)
}

// Durability: a crash at any time (the memory lost, the open bucket with
// it) delivers every entry not acknowledged, none before its time: the
// persisted buckets hold theirs, the log is read again for the rest.
func TestDelayedCrashLosesNothingAndReleasesNothingEarly(t *testing.T) {
	for round := range 20 {
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		cfg := DelayedConfig{BucketMax: 50, SegmentMax: 7, LookaheadMs: 30}
		if round%4 >= 2 {
			cfg.MaxBuckets = 2 // merging while crashing
		}
		s := newDelayedSim(t, cfg)
		s.noAck = round%2 == 0 // unacknowledged deliveries come again
		s.publish(300, 2_000, rng)
		s.step(0)
		for now := int64(0); now <= 3_400; now += 1 + rng.Int64N(60) {
			if rng.IntN(8) == 0 {
				s.crash()
			}
			if now < 2_200 && rng.IntN(10) == 0 {
				s.publish(1+rng.IntN(60), 1_000, rng)
			}
			s.step(now)
		}
		s.step(3_401)
		s.crash()
		s.step(5_000)
		for _, it := range s.log {
			if s.delivered[it.pos] == 0 {
				t.Fatalf("seed %d: %s (due %d) never dispatched", seed, it.pos, it.at)
			}
			// Time advances by at most 60 ms a step: an entry held
			// through the crashes is dispatched by then, not at a later
			// restart's read of the log.
			if s.late[it.pos] > 60 {
				t.Fatalf("seed %d: %s (due %d) dispatched %d ms late", seed, it.pos, it.at, s.late[it.pos])
			}
			if !s.noAck && s.delivered[it.pos] != 1 {
				t.Fatalf("seed %d: %s acknowledged yet dispatched %d times", seed, it.pos, s.delivered[it.pos])
			}
		}
		if len(s.store) != 0 {
			t.Fatalf("seed %d: %d bucket snapshots left once everything was released", seed, len(s.store))
		}
	}
}

// A failed seal keeps the bucket in memory and is retried; the list never
// names a bucket that is not persisted.
func TestDelayedFailedSealIsRetriedAndNotListed(t *testing.T) {
	s := newDelayedSim(t, DelayedConfig{BucketMax: 10, SegmentMax: 4, LookaheadMs: 1})
	s.publish(10, 1000, rand.New(rand.NewPCG(1, 2)))
	s.readLog()
	w := s.d.Work(0)
	if len(w.Seal) != 1 || w.List != nil {
		t.Fatalf("Work after the bucket filled: %d seals, list %q; want the seal alone", len(w.Seal), w.List)
	}
	s.d.Sealed(w.Gen, w.Seal[0].Bucket, false)
	if s.d.InMemory() != 10 || s.d.Len() != 10 {
		t.Fatalf("after a failed seal: %d in memory, Len %d; want 10", s.d.InMemory(), s.d.Len())
	}
	l, err := decodeList(s.d.encodeList())
	if err != nil || len(l.Buckets) != 0 {
		t.Fatalf("list names %v (err %v), want no bucket", l.Buckets, err)
	}
	s.step(0)
	if len(s.store) != 1 || s.d.InMemory() > 4 {
		t.Fatalf("after the retry: %d persisted, %d in memory; want 1 and at most a segment", len(s.store), s.d.InMemory())
	}
}

// A bucket whose segment cannot be read is dropped and the cursor rewound:
// its entries are read from the log again, and held again.
func TestDelayedCorruptSegmentRewindsTheCursor(t *testing.T) {
	s := newDelayedSim(t, DelayedConfig{BucketMax: 10, SegmentMax: 5, LookaheadMs: 1})
	rng := rand.New(rand.NewPCG(3, 4))
	s.publish(10, 1000, rng)
	s.step(0)
	segs := s.store[1]
	segs[2] = append(bytes.Clone(segs[2][:len(segs[2])-1]), segs[2][len(segs[2])-1]^1)
	s.step(1100)
	for _, it := range s.log {
		if s.delivered[it.pos] != 1 {
			t.Fatalf("%s dispatched %d times after a corrupt segment", it.pos, s.delivered[it.pos])
		}
	}
}

// Clear (a seek) forgets everything; the persisted buckets are deleted
// once an empty list is written.
func TestDelayedClearDeletesAfterTheList(t *testing.T) {
	s := newDelayedSim(t, DelayedConfig{BucketMax: 10, SegmentMax: 5})
	s.publish(25, 1000, rand.New(rand.NewPCG(5, 6)))
	s.step(0)
	if len(s.store) != 2 || s.d.Len() != 25 {
		t.Fatalf("%d persisted, Len %d", len(s.store), s.d.Len())
	}
	s.d.Clear()
	w := s.d.Work(0)
	if len(w.Delete) != 0 || w.List == nil {
		t.Fatalf("first Work after Clear: %d deletes, list %q; want the list first", len(w.Delete), w.List)
	}
	s.d.ListWritten(w.ListVersion)
	if w = s.d.Work(0); len(w.Delete) != 2 {
		t.Fatalf("after the list: deletes %v, want both buckets", w.Delete)
	}
	if s.d.Len() != 0 || s.d.Contains(s.log[0].pos) {
		t.Fatal("Clear kept entries")
	}
}

func TestDelayedWakeAtIsTheNextTimeOrLoad(t *testing.T) {
	d := NewDelayed(DelayedConfig{BucketMax: -1})
	if _, ok := d.WakeAt(); ok {
		t.Fatal("an empty index wants a wake-up")
	}
	d.Add(Position{1, 2}, 500)
	d.Add(Position{1, 1}, 300)
	if !d.Add(Position{1, 3}, 900) || d.Add(Position{1, 3}, 900) {
		t.Fatal("Add of a held position must report false")
	}
	if at, _ := d.WakeAt(); at != 300 {
		t.Fatalf("WakeAt = %d, want 300", at)
	}
	if ps := d.Due(299, 10); len(ps) != 0 {
		t.Fatalf("Due(299) = %v, want none", ps)
	}
	if ps := d.Due(500, 10); !slices.Equal(ps, []Position{{1, 1}, {1, 2}}) {
		t.Fatalf("Due(500) = %v", ps)
	}
	if at, _ := d.WakeAt(); at != 900 || d.Len() != 1 || d.Buckets() != 0 {
		t.Fatalf("WakeAt %d, Len %d, %d buckets", at, d.Len(), d.Buckets())
	}
}

func TestDelayedCodecsRoundTripAndRefuseDamage(t *testing.T) {
	m := map[int64][]int64{
		3: {0, 1, 2, 5, 64, 65, 200},        // dense: bitmap
		4: {10, 1_000_000, 9_000_000},       // sparse: offsets
		5: {1, 1 << 40, 1<<40 + 1, 1 << 41}, // a span beyond 2^32
	}
	s := newPosSet(m)
	if s.ls[0].bits == nil || s.ls[1].offs == nil || s.ls[2].wide == nil {
		t.Fatalf("containers: %+v", s.ls)
	}
	got, err := decodePosSet(s.encode())
	if err != nil {
		t.Fatal(err)
	}
	for l, es := range m {
		for _, e := range es {
			if !got.has(Position{l, e}) {
				t.Fatalf("decoded set lacks %d:%d", l, e)
			}
			if got.has(Position{l, e + 3}) != slices.Contains(es, e+3) {
				t.Fatalf("decoded set wrong about %d:%d", l, e+3)
			}
		}
	}
	if f, l := got.bounds(); f != (Position{3, 0}) || l != (Position{5, 1 << 41}) {
		t.Fatalf("bounds %s %s", f, l)
	}
	items := []delayedItem{{at: 5, pos: Position{9, 3}}, {at: 5, pos: Position{8, 1}}, {at: 1 << 50, pos: Position{9, 0}}}
	back, err := decodeSegment(encodeSegment(items))
	if err != nil || !slices.Equal(back, items) {
		t.Fatalf("segment round trip: %v, %v", back, err)
	}
	for _, b := range [][]byte{s.encode(), encodeSegment(items)} {
		for i := range b {
			bad := bytes.Clone(b)
			bad[i] ^= 0x40
			_, e1 := decodePosSet(bad)
			_, e2 := decodeSegment(bad)
			if !errors.Is(e1, errDelayedCorrupt) || !errors.Is(e2, errDelayedCorrupt) {
				t.Fatalf("byte %d damaged: decoded without error (%v, %v)", i, e1, e2)
			}
		}
	}
	if _, err := decodeList([]byte(`{"format":1,"buckets":[{"id":1,"segFirst":[1],"segLen":[1],"done":2}]}`)); !errors.Is(err, errDelayedCorrupt) {
		t.Fatalf("a list with done past its segments: err = %v", err)
	}
}
