package dispatch

import (
	"math"
	"sort"
)

// RoundMax is the most entries a round dispatches: replays sent plus new
// entries read.
const RoundMax = 100

// Entry is an entry read from the log, as far as dispatch needs it.
type Entry struct {
	Pos Position
	// Key is the entry's key (the batch's first message's): Key_Shared
	// routes by it.
	Key string
	// NumMessages is the number of messages in the entry (1 unless it is a
	// batch): what a delivery costs in permits.
	NumMessages int
	// Undecodable: the caller could not parse the entry's metadata.
	Undecodable bool
}

// Delivery is an entry to send to a consumer.
type Delivery struct {
	Consumer    ID
	Pos         Position
	NumMessages int
	// RedeliveryCount is how many times the entry was sent from replay,
	// this time included: 0 for a first delivery.
	RedeliveryCount uint32
	// AckSet, for a batch some of whose messages were acknowledged: a bit
	// SET for each index still unacknowledged (the MESSAGE's ack_set).
	AckSet []int64
}

// Outcome is what became of an entry offered to a round.
type Outcome int

const (
	// Hold: not sent now; it waits in replay (no consumer can take it, or
	// it must not overtake an older entry), or it was already dispatched.
	Hold Outcome = iota
	// Deliver: send the Delivery; the entry is pending.
	Deliver
	// Discard: the entry is Undecodable; the caller logs it and
	// acknowledges it on the cursor. It leaves replay and holds nothing
	// back: what was read after it goes on.
	Discard
)

func (o Outcome) String() string {
	switch o {
	case Hold:
		return "hold"
	case Deliver:
		return "deliver"
	case Discard:
		return "discard"
	}
	return "outcome?"
}

// Round is one dispatch pass: replays first, in position order, then new
// entries from the cursor. It belongs to the one caller that runs it; its
// own methods touch only the round, the Core's methods that take it need
// the caller's serialization as any Core method.
type Round struct {
	replay  []Position
	next    int
	single  bool // Exclusive or Failover when the round started
	permits int
	// blocked (Key_Shared): key hashes with an entry held back in this
	// round: nothing newer of that key may pass it.
	blocked map[uint32]bool
	sent    int
	heldAll bool // a replay was held or could not be read
	stop    bool // single: a replay was held: no later one may pass it
	stalled bool // single: a new entry was held: the rest waits behind it
}

// StartRound begins a dispatch round, or returns nil when nobody can
// receive: under Exclusive and Failover the active consumer must be ready
// with permits, under Shared and Key_Shared some consumer must be.
func (c *Core) StartRound() *Round {
	single := c.typ == Exclusive || c.typ == Failover
	permits := 0
	if single {
		if a := c.active(); a != nil && a.ready && a.permits > 0 {
			permits = a.permits
		}
	} else {
		for _, cs := range c.consumers {
			if cs.ready && cs.permits > 0 {
				permits += cs.permits
			}
		}
	}
	if permits == 0 {
		return nil
	}
	replay := make([]Position, 0, len(c.replay))
	for p := range c.replay {
		replay = append(replay, p)
	}
	sort.Slice(replay, func(i, j int) bool { return replay[i].Less(replay[j]) })
	return &Round{replay: replay, single: single, permits: permits, blocked: map[uint32]bool{}}
}

// NextReplay returns the next position to read and offer with Replayed,
// in position order of the replays when the round started, or false when
// the round's replays are done: all offered, RoundMax sent, or (Exclusive
// and Failover) one was held or could not be read.
func (r *Round) NextReplay() (Position, bool) {
	if r.stop || r.sent >= RoundMax || r.next >= len(r.replay) {
		return Position{}, false
	}
	p := r.replay[r.next]
	r.next++
	return p, true
}

// ReplayFailed records that the replay NextReplay returned could not be
// read. It stays in replay; the caller retries the round later.
func (r *Round) ReplayFailed() {
	r.heldAll = true
	if r.single {
		r.stop = true
	}
}

// ReplayGone records that the replay at p is no longer stored (trimmed):
// there is nothing to deliver.
func (c *Core) ReplayGone(p Position) { delete(c.replay, p) }

// Replayed offers the entry read for the replay NextReplay returned.
func (c *Core) Replayed(r *Round, e Entry) (Delivery, Outcome) {
	d, o := c.assign(e, true, r.blocked)
	if o == Discard {
		return d, o // gone from replay: nothing waits behind it
	}
	if o != Deliver {
		r.heldAll = true
		if r.single {
			r.stop = true // one consumer: never pass a held entry
		}
		return d, o
	}
	r.sent++
	return d, o
}

// ToRead returns how many new entries to read from the cursor once the
// replays are done, 0 for none: none once RoundMax were sent, nor under
// Exclusive and Failover when a replay was held; otherwise as many as the
// round's permits cover (EntriesFor with avgPerEntry, the messages per
// entry seen so far), at most RoundMax less those sent.
func (c *Core) ToRead(r *Round, avgPerEntry float64) int {
	if r.sent >= RoundMax || (c.typ != Shared && c.typ != KeyShared && r.heldAll) {
		return 0
	}
	return min(RoundMax-r.sent, EntriesFor(r.permits, avgPerEntry))
}

// Read offers a new entry read from the cursor, in log order. The caller
// skips entries the cursor has acknowledged.
func (c *Core) Read(r *Round, e Entry) (Delivery, Outcome) {
	if r.stalled {
		c.replay[e.Pos] = 0
		return Delivery{}, Hold
	}
	d, o := c.assign(e, false, r.blocked)
	if o == Hold && r.single {
		r.stalled = true // keep order: the rest waits behind it
	}
	return d, o
}

// assign picks a consumer for an entry and records it as pending, or
// queues it for replay.
func (c *Core) assign(e Entry, fromReplay bool, blocked map[uint32]bool) (Delivery, Outcome) {
	if e.Undecodable {
		// The caller acknowledges it on the cursor: it leaves replay
		// too, or every later round would offer it again and (Exclusive,
		// Failover) stop there, never passing it.
		delete(c.replay, e.Pos)
		return Delivery{}, Discard
	}
	if _, gone := c.pending[e.Pos]; gone && !fromReplay {
		return Delivery{}, Hold
	}
	h := uint32(0)
	if c.typ == KeyShared {
		h = hash32(e.Key)
	}
	cs := c.choose(e.Key)
	if cs == nil || (c.typ == KeyShared && blocked[h]) || (!fromReplay && c.olderReplay(e.Pos, h)) {
		c.replay[e.Pos] = h
		if c.typ == KeyShared {
			blocked[h] = true
		}
		return Delivery{}, Hold
	}
	delete(c.replay, e.Pos)
	cs.permits -= e.NumMessages
	c.pending[e.Pos] = &pendingEntry{c: cs, size: e.NumMessages, hash: h}
	if c.typ == KeyShared {
		d := c.drain[h]
		if d == nil {
			d = &drainRef{c: cs}
			c.drain[h] = d
		}
		d.n++
	}
	d := Delivery{Consumer: cs.ID, Pos: e.Pos, NumMessages: e.NumMessages}
	if fromReplay {
		c.redelivs[e.Pos]++
		d.RedeliveryCount = c.redelivs[e.Pos]
	}
	if acked := c.batchAcks[e.Pos]; acked != nil {
		// Tell the client which indexes are still unacknowledged.
		set := make([]int64, len(acked))
		for i := range acked {
			set[i] = int64(^acked[i])
		}
		d.AckSet = set
	}
	return d, Deliver
}

// choose picks the consumer for an entry with key, or nil if it must wait
// (no permits, or not ready): under Exclusive and Failover the active
// consumer; under Shared the next ready one with permits in joining order,
// round robin; under Key_Shared the consumer draining the key's hash, else
// the hash's owner on the ring.
func (c *Core) choose(key string) *consumer {
	switch c.typ {
	case Exclusive, Failover:
		cs := c.active()
		if cs == nil || !cs.ready || cs.permits <= 0 {
			return nil
		}
		return cs
	case Shared:
		n := len(c.consumers)
		for i := 0; i < n; i++ {
			cs := c.consumers[(c.rr+i)%n]
			if cs.ready && cs.permits > 0 {
				c.rr = (c.rr + i + 1) % n
				return cs
			}
		}
		return nil
	default: // Key_Shared
		cs := c.keyOwner(key)
		if d := c.drain[hash32(key)]; d != nil {
			cs = d.c
		}
		if cs == nil || !cs.ready || cs.permits <= 0 {
			return nil
		}
		return cs
	}
}

// olderReplay reports whether an entry older than pos waits in replay
// that pos must not overtake: any, for Exclusive and Failover; one of the
// same key hash, for Key_Shared. (Replays can appear while a round runs —
// a consumer leaves — after the round took its list of them.)
func (c *Core) olderReplay(pos Position, h uint32) bool {
	switch c.typ {
	case Shared:
		return false
	case KeyShared:
		for p, ph := range c.replay {
			if ph == h && p.Less(pos) {
				return true
			}
		}
		return false
	default:
		for p := range c.replay {
			if p.Less(pos) {
				return true
			}
		}
		return false
	}
}

// EntriesFor is how many entries to read for permits messages: permits ÷
// the messages per entry seen so far (avgPerEntry), rounded up (the last
// entry may take the permits below zero, as Pulsar's dispatcher allows),
// and one entry while none was seen (avgPerEntry <= 0). Reading more than
// the permits cover would stall the rest of the read behind the first
// entry the consumer has no room for, and each stalled entry is read
// again, alone, when permits come (replay). Pulsar sizes its reads the
// same way (the consumer's avgMessagesPerEntry in its dispatchers).
func EntriesFor(permits int, avgPerEntry float64) int {
	if avgPerEntry <= 0 {
		return 1
	}
	return max(1, int(math.Ceil(float64(permits)/avgPerEntry)))
}

// Average folds an entry of n messages into avg, the moving average of
// messages per entry that EntriesFor takes (weight 1/8; the first entry
// sets it; n <= 0 leaves it).
func Average(avg float64, n int) float64 {
	if n <= 0 {
		return avg
	}
	if avg <= 0 {
		return float64(n)
	}
	return avg + (float64(n)-avg)/8
}
