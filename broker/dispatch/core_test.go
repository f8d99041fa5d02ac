package dispatch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

func pos(e int64) Position { return Position{1, e} }

func newWith(typ SubType, consumers ...string) *Core {
	c := New(typ, -1)
	for i, name := range consumers {
		id := ID(i + 1)
		if err := c.Admit(typ); err != nil {
			panic(err)
		}
		c.AddConsumer(ConsumerInfo{ID: id, ConsumerID: uint64(id), Name: name})
		c.Ready(id)
	}
	return c
}

// The broker converts the protocol's sub type with a plain conversion.
func TestSubTypesAreTheProtocols(t *testing.T) {
	for _, c := range []struct {
		d SubType
		p pb.CommandSubscribe_SubType
	}{{Exclusive, pb.CommandSubscribe_Exclusive}, {Shared, pb.CommandSubscribe_Shared}, {Failover, pb.CommandSubscribe_Failover}, {KeyShared, pb.CommandSubscribe_Key_Shared}} {
		if int32(c.d) != int32(c.p) || c.d.String() != c.p.String() {
			t.Errorf("%v (%d) is not the protocol's %v (%d)", c.d, c.d, c.p, c.p)
		}
	}
}

// A replay that appears while a round runs (a consumer left after the
// round listed the replays) is not overtaken by a new entry: under
// Exclusive and Failover by none, under Key_Shared by none of its key.
func TestReplayAppearingMidRoundIsNotOvertaken(t *testing.T) {
	for _, typ := range []SubType{Failover, KeyShared} {
		t.Run(typ.String(), func(t *testing.T) {
			c := newWith(typ, "a", "b")
			c.Flow(1, 10)
			c.Flow(2, 10)
			r := c.StartRound()
			var key string // a key a owns
			for i := 0; ; i++ {
				key = fmt.Sprint("k", i)
				if id, _ := c.KeyOwner(key); typ != KeyShared || id == 1 {
					break
				}
			}
			if _, o := c.Read(r, Entry{Pos: pos(0), Key: key, NumMessages: 1}); o != Deliver {
				t.Fatalf("first entry: %v", o)
			}
			r2 := c.StartRound()
			c.RemoveConsumer(1) // 1:0 goes to replay, after r2 listed none
			if _, ok := r2.NextReplay(); ok {
				t.Fatal("r2 lists a replay that appeared after it started")
			}
			if _, o := c.Read(r2, Entry{Pos: pos(1), Key: key, NumMessages: 1}); o != Hold {
				t.Fatalf("a new entry of the key overtook its replay: %v", o)
			}
			if typ == KeyShared {
				other := ""
				for i := 0; other == ""; i++ {
					if k := fmt.Sprint("o", i); hash32(k) != hash32(key) {
						other = k
					}
				}
				if _, o := c.Read(r2, Entry{Pos: pos(2), Key: other, NumMessages: 1}); o != Deliver {
					t.Fatalf("another key waited behind the replay: %v", o)
				}
			}
			// The next round sends the replays in order.
			r3 := c.StartRound()
			var got []Position
			for p, ok := r3.NextReplay(); ok; p, ok = r3.NextReplay() {
				if _, o := c.Replayed(r3, Entry{Pos: p, Key: key, NumMessages: 1}); o == Deliver {
					got = append(got, p)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint([]Position{pos(0), pos(1)}) {
				t.Fatalf("replayed %v", got)
			}
		})
	}
}

// Key_Shared: once a replay of a key is held in a round, a later replay
// of that key in the same round is held too, even if what held the first
// (a draining consumer without permits) went away meanwhile.
func TestKeySharedHeldReplayBlocksItsKeyForTheRound(t *testing.T) {
	c := newWith(KeyShared, "a", "b")
	var key string
	for i := 0; ; i++ {
		if key = fmt.Sprint("k", i); func() bool { id, _ := c.KeyOwner(key); return id == 2 }() {
			break
		}
	}
	c.Flow(1, 1)
	c.Flow(2, 1)
	r := c.StartRound()
	for e := int64(0); e < 3; e++ {
		c.Read(r, Entry{Pos: pos(e), Key: key, NumMessages: 1}) // 1:0 to b, 1:1 and 1:2 held (b has no permits)
	}
	c.Flow(1, 5)
	r = c.StartRound()
	p, _ := r.NextReplay()
	if _, o := c.Replayed(r, Entry{Pos: p, Key: key, NumMessages: 1}); o != Hold || p != pos(1) {
		t.Fatalf("replay %v: %v, want held (drained by b, which has no permits)", p, o)
	}
	if full := c.Ack([]Ack{{Pos: pos(0)}}); len(full) != 1 { // the drain ends: the key is free
		t.Fatal("ack")
	}
	p, _ = r.NextReplay()
	if _, o := c.Replayed(r, Entry{Pos: p, Key: key, NumMessages: 1}); o != Hold || p != pos(2) {
		t.Fatalf("replay %v: %v, want held behind 1:1 in this round", p, o)
	}
}

// A round sends at most RoundMax entries; the rest wait for the next.
func TestRoundMax(t *testing.T) {
	c := newWith(Shared, "a")
	c.Flow(1, 1000)
	r := c.StartRound()
	for e := int64(0); e < 150; e++ {
		c.Read(r, Entry{Pos: pos(e), NumMessages: 1})
	}
	c.Redeliver(1, nil)
	r = c.StartRound()
	n := 0
	for p, ok := r.NextReplay(); ok; p, ok = r.NextReplay() {
		if _, o := c.Replayed(r, Entry{Pos: p, NumMessages: 1}); o == Deliver {
			n++
		}
	}
	if n != RoundMax || c.ToRead(r, 1) != 0 {
		t.Fatalf("sent %d replays, then would read %d new entries", n, c.ToRead(r, 1))
	}
	r = c.StartRound()
	n = 0
	for p, ok := r.NextReplay(); ok; p, ok = r.NextReplay() {
		c.Replayed(r, Entry{Pos: p, NumMessages: 1})
		n++
	}
	if n != 50 || c.ToRead(r, 1) != RoundMax-50 {
		t.Fatalf("second round: %d replays, then reads %d", n, c.ToRead(r, 1))
	}
}

func TestEntriesForAndAverage(t *testing.T) {
	for _, c := range []struct {
		permits int
		avg     float64
		want    int
	}{{200, 0, 1}, {200, 50, 4}, {201, 50, 5}, {1, 50, 1}, {0, 50, 1}, {3, 1, 3}} {
		if got := EntriesFor(c.permits, c.avg); got != c.want {
			t.Errorf("EntriesFor(%d, %v) = %d, want %d", c.permits, c.avg, got, c.want)
		}
	}
	if a := Average(0, 50); a != 50 {
		t.Errorf("first entry: %v", a)
	}
	if a := Average(50, 0); a != 50 {
		t.Errorf("n=0 changed it: %v", a)
	}
	if a := Average(50, 10); a != 45 {
		t.Errorf("Average(50, 10) = %v, want 45", a)
	}
	// ToRead sizes a round by the permits it started with.
	c := newWith(Exclusive, "a")
	c.Flow(1, 200)
	if n := c.ToRead(c.StartRound(), 50); n != 4 {
		t.Errorf("ToRead = %d, want 4", n)
	}
}

// The MESSAGE's ack_set: the complement of what was acknowledged, word by
// word (bits past the batch's end are set).
func TestRedeliveryAckSetWords(t *testing.T) {
	c := newWith(Shared, "a")
	c.Flow(1, 10)
	r := c.StartRound()
	c.Read(r, Entry{Pos: pos(0), NumMessages: 3})
	if full := c.Ack([]Ack{{Pos: pos(0), AckSet: []int64{0b110}}}); len(full) != 0 {
		t.Fatal("a partial batch ack acknowledged the entry")
	}
	c.Redeliver(1, []Position{pos(0)})
	r = c.StartRound()
	p, _ := r.NextReplay()
	d, o := c.Replayed(r, Entry{Pos: p, NumMessages: 3})
	if o != Deliver || len(d.AckSet) != 1 || d.AckSet[0] != ^int64(1) || d.RedeliveryCount != 1 {
		t.Fatalf("%v %+v", o, d)
	}
}

func TestForgetThroughAndReset(t *testing.T) {
	c := newWith(KeyShared, "a")
	c.Flow(1, 10)
	r := c.StartRound()
	for e := int64(0); e < 4; e++ {
		c.Read(r, Entry{Pos: pos(e), Key: "k", NumMessages: 1})
	}
	c.Redeliver(1, []Position{pos(3)})
	c.ForgetThrough(pos(2))
	if c.Pending() != 0 || len(c.replay) != 1 || len(c.drain) != 0 {
		t.Fatalf("pending %d, replay %v, drain %v", c.Pending(), c.replay, c.drain)
	}
	c.Reset()
	if c.Pending() != 0 || len(c.replay) != 0 || len(c.drain) != 0 || len(c.batchAcks) != 0 {
		t.Fatal("Reset left state")
	}
}

func TestAdmitAndAddConsumer(t *testing.T) {
	c := New(Exclusive, -1)
	if err := c.Admit(Shared); err != nil || c.Type() != Shared {
		t.Fatalf("an empty subscription takes the asked type: %v %v", err, c.Type())
	}
	c.AddConsumer(ConsumerInfo{ID: 1, Name: "a"})
	if err := c.Admit(Failover); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("another type: %v", err)
	}
	if err := c.Admit(Shared); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a reused ID did not panic")
		}
	}()
	c.AddConsumer(ConsumerInfo{ID: 1, Name: "b"})
}

// Consistent hashing: a consumer that joins takes keys only for itself;
// no key moves between the consumers already there.
func TestKeySharedJoinMovesKeysOnlyToTheNewConsumer(t *testing.T) {
	c := newWith(KeyShared, "a", "b", "c")
	before := map[string]ID{}
	for i := range 2000 {
		k := fmt.Sprint("key-", i)
		before[k], _ = c.KeyOwner(k)
	}
	c.AddConsumer(ConsumerInfo{ID: 4, ConsumerID: 4, Name: "d"})
	moved := 0
	for k, was := range before {
		now, _ := c.KeyOwner(k)
		if now != was {
			if now != 4 {
				t.Fatalf("key %s moved from c%d to c%d", k, was, now)
			}
			moved++
		}
	}
	if moved < 200 || moved > 900 {
		t.Fatalf("the fourth consumer took %d of 2000 keys", moved)
	}
}

// A seeded simulation: consumers join, leave, flow, ack and nack at
// random. Whatever happens, a Key_Shared key never has pending entries at
// two consumers, nothing is both pending and waiting in replay, and once
// consumers take and acknowledge everything, every entry was acknowledged
// (nothing lost).
func TestSimulationLosesNothing(t *testing.T) {
	for _, typ := range []SubType{Exclusive, Shared, Failover, KeyShared} {
		for seed := uint64(1); seed <= 20; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", typ, seed), func(t *testing.T) {
				simulate(t, typ, seed)
			})
		}
	}
}

func simulate(t *testing.T, typ SubType, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	c := New(typ, -1)
	const entries = 300
	keyOf := func(e int64) string { return fmt.Sprint("k", e%7) }
	var next int64 // cursor read position (entry id)
	acked := map[Position]bool{}
	held := map[ID][]Position{}
	nextID := ID(1)
	round := func() {
		for range 50 {
			r := c.StartRound()
			if r == nil {
				return
			}
			offer := func(e Entry, replay bool) {
				var d Delivery
				var o Outcome
				if replay {
					d, o = c.Replayed(r, e)
				} else {
					d, o = c.Read(r, e)
				}
				if o == Deliver {
					held[d.Consumer] = append(held[d.Consumer], d.Pos)
				}
			}
			for p, ok := r.NextReplay(); ok; p, ok = r.NextReplay() {
				offer(Entry{Pos: p, Key: keyOf(p.Entry), NumMessages: 1}, true)
			}
			n := c.ToRead(r, 1)
			read := 0
			for ; read < n && next < entries; next++ {
				if !acked[pos(next)] {
					offer(Entry{Pos: pos(next), Key: keyOf(next), NumMessages: 1}, false)
					read++
				}
			}
			if read == 0 {
				return
			}
		}
	}
	check := func() {
		owner := map[uint32]*consumer{}
		for p, pe := range c.pending {
			if _, ok := c.replay[p]; ok {
				t.Fatalf("%s pending and in replay", p)
			}
			if typ == KeyShared {
				if o := owner[pe.hash]; o != nil && o != pe.c {
					t.Fatalf("a key pending at c%d and c%d", o.ID, pe.c.ID)
				}
				owner[pe.hash] = pe.c
			}
		}
	}
	for step := 0; step < 400; step++ {
		cs := c.Consumers()
		switch x := rng.IntN(10); {
		case x == 0 && len(cs) < 4:
			if c.Admit(typ) == nil {
				c.AddConsumer(ConsumerInfo{ID: nextID, ConsumerID: uint64(nextID), Name: fmt.Sprint("c", rng.IntN(5)), Priority: int32(rng.IntN(2))})
				c.Ready(nextID)
				nextID++
			}
		case x == 1 && len(cs) > 0:
			id := cs[rng.IntN(len(cs))].ID
			c.RemoveConsumer(id)
			delete(held, id)
		case x <= 4 && len(cs) > 0:
			c.Flow(cs[rng.IntN(len(cs))].ID, 1+rng.IntN(5))
		case x <= 7 && len(cs) > 0:
			id := cs[rng.IntN(len(cs))].ID
			if h := held[id]; len(h) > 0 {
				i := rng.IntN(len(h))
				for _, p := range c.Ack([]Ack{{Pos: h[i]}}) {
					acked[p] = true
				}
				held[id] = append(h[:i], h[i+1:]...)
			}
		case x == 8 && len(cs) > 0:
			id := cs[rng.IntN(len(cs))].ID
			c.Redeliver(id, nil)
			held[id] = nil
		}
		c.ActiveChanges()
		round()
		check()
	}
	// Drain: one consumer with plenty of permits acknowledges everything.
	for _, cs := range c.Consumers() {
		c.RemoveConsumer(cs.ID)
	}
	held = map[ID][]Position{}
	c.Admit(typ)
	c.AddConsumer(ConsumerInfo{ID: nextID, ConsumerID: uint64(nextID), Name: "last"})
	c.Ready(nextID)
	for range 100 {
		c.Flow(nextID, 1000)
		round()
		check()
		for _, p := range c.Ack(positions(held[nextID])) {
			acked[p] = true
		}
		held[nextID] = nil
	}
	for e := int64(0); e < entries; e++ {
		if !acked[pos(e)] {
			t.Fatalf("%s never acknowledged (pending %d, replay %d)", pos(e), c.Pending(), len(c.replay))
		}
	}
}

func positions(ps []Position) []Ack {
	out := make([]Ack, len(ps))
	for i, p := range ps {
		out[i] = Ack{Pos: p}
	}
	return out
}
