package dispatch

import (
	"errors"
	"fmt"
	"sort"
)

// Position of an entry in the topic's managed ledger: ledger id, entry id,
// ordered by (Ledger, Entry). Its fields are mledger.Position's, so the
// broker converts one into the other with a plain type conversion.
type Position struct{ Ledger, Entry int64 }

// Less reports whether p sorts before q.
func (p Position) Less(q Position) bool {
	if p.Ledger != q.Ledger {
		return p.Ledger < q.Ledger
	}
	return p.Entry < q.Entry
}

// String prints "ledger:entry".
func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Ledger, p.Entry) }

// SubType is a subscription's type, numbered as the Pulsar protocol's
// CommandSubscribe.SubType.
type SubType int32

const (
	Exclusive SubType = 0
	Shared    SubType = 1
	Failover  SubType = 2
	KeyShared SubType = 3
)

func (t SubType) String() string {
	switch t {
	case Exclusive:
		return "Exclusive"
	case Shared:
		return "Shared"
	case Failover:
		return "Failover"
	case KeyShared:
		return "Key_Shared"
	}
	return fmt.Sprintf("SubType(%d)", int32(t))
}

// ID names a consumer to the Core. The caller chooses it, unique among
// the Core's consumers for the Core's life (Pulsar's consumer ids are
// unique only per connection, so the broker numbers its own).
type ID uint64

// Admission errors (Admit). The broker answers both as ConsumerBusy.
var (
	ErrTypeMismatch  = errors.New("dispatch: the subscription has consumers of another type")
	ErrExclusiveBusy = errors.New("dispatch: the exclusive subscription already has a consumer")
)

// ConsumerInfo is what the Core knows of a consumer when it joins.
type ConsumerInfo struct {
	ID ID
	// ConsumerID is the Pulsar consumer id; with Name it places the
	// consumer on the Key_Shared hash ring.
	ConsumerID uint64
	Name       string
	// Priority is the Pulsar priority level: under Failover, lower comes
	// first.
	Priority int32
}

// ConsumerState is a consumer as the Core sees it (Consumers).
type ConsumerState struct {
	ConsumerInfo
	Ready   bool // the caller told the client it subscribed (Ready)
	Permits int  // messages it may still receive; may be below zero
}

// ActiveChange is an ACTIVE_CONSUMER_CHANGE to send (Failover).
type ActiveChange struct {
	Consumer ID
	Active   bool
}

// Ack is one individually acknowledged entry.
type Ack struct {
	Pos Position
	// AckSet, when not empty, acknowledges only some messages of a batch:
	// a bit SET for each batch index still unacknowledged (Java BitSet
	// long words, as the protocol's ack_set).
	AckSet []int64
}

type consumer struct {
	ConsumerInfo
	ready   bool
	permits int
	// notified, active: the last ACTIVE_CONSUMER_CHANGE sent (Failover).
	notified, active bool
	// ring: the consumer's points on the Key_Shared hash ring, computed
	// once from its name and consumer id.
	ring [ringPoints]uint32
}

type pendingEntry struct {
	c    *consumer
	size int    // messages in the entry
	hash uint32 // key hash (Key_Shared)
}

// drainRef (Key_Shared) records that a key hash has entries dispatched to
// c and not yet acknowledged: further entries of that hash go to c too (or
// wait) until they are all acknowledged, even if the hash now belongs to
// another consumer — so a key never has entries in two consumers' hands at
// once and its order holds when consumers join or leave (the "draining
// hashes" rule of Pulsar's PIP-379).
type drainRef struct {
	c *consumer
	n int
}

// Core is one subscription's dispatch state and the rules that move it.
// It does no I/O, reads no clock, starts no goroutine, takes no lock and
// does not log: the caller serializes every call (the broker holds the
// subscription's mutex around each) and does the reading and sending.
//
// Invariants:
//   - an entry is in pending (dispatched, not acknowledged) or in replay
//     (to send again before new entries), not both, except while a
//     replayed entry is being sent again;
//   - under Key_Shared, every pending entry of a key hash is held by the
//     consumer drain names for that hash.
type Core struct {
	typ       SubType
	partition int
	consumers []*consumer // in the order they joined
	byID      map[ID]*consumer
	rr        int // Shared: where the round robin looks first
	pending   map[Position]*pendingEntry
	// replay: positions to send (again) before new entries: redeliveries,
	// entries held back, entries of consumers that went away; → key hash
	// (Key_Shared), else 0.
	replay   map[Position]uint32
	redelivs map[Position]uint32 // times an entry was sent from replay
	// batchAcks: batch-index acknowledgements of partly acknowledged
	// entries (bit set = acknowledged); the caller persists them with the
	// cursor (BatchAckSet) and restores them (RestoreBatchAck).
	batchAcks map[Position][]uint64
	drain     map[uint32]*drainRef
}

// New returns the Core of a subscription of type typ on a topic that is
// partition number partition of a partitioned topic (-1 if it is not one).
func New(typ SubType, partition int) *Core {
	return &Core{
		typ: typ, partition: partition,
		byID:      map[ID]*consumer{},
		pending:   map[Position]*pendingEntry{},
		replay:    map[Position]uint32{},
		redelivs:  map[Position]uint32{},
		batchAcks: map[Position][]uint64{},
		drain:     map[uint32]*drainRef{},
	}
}

// Type returns the subscription's type.
func (c *Core) Type() SubType { return c.typ }

// Len returns the number of consumers.
func (c *Core) Len() int { return len(c.consumers) }

// Pending returns the number of entries dispatched and not acknowledged.
func (c *Core) Pending() int { return len(c.pending) }

// Consumers returns the consumers in the order they joined.
func (c *Core) Consumers() []ConsumerState {
	out := make([]ConsumerState, len(c.consumers))
	for i, cs := range c.consumers {
		out[i] = ConsumerState{ConsumerInfo: cs.ConsumerInfo, Ready: cs.ready, Permits: cs.permits}
	}
	return out
}

// Unacked returns, by consumer, the messages of the entries dispatched to
// it and not acknowledged (a consumer with none is absent).
func (c *Core) Unacked() map[ID]int {
	out := map[ID]int{}
	for _, pe := range c.pending {
		out[pe.c.ID] += pe.size
	}
	return out
}

// Admit checks that a consumer of type typ may join. A subscription
// without consumers takes the type of the next one that asks (even if the
// caller then refuses it for another reason); one with consumers refuses
// another type (ErrTypeMismatch); an Exclusive one refuses a second
// consumer (ErrExclusiveBusy).
func (c *Core) Admit(typ SubType) error {
	if typ != c.typ {
		if len(c.consumers) > 0 {
			return ErrTypeMismatch
		}
		c.typ = typ
	}
	if c.typ == Exclusive && len(c.consumers) > 0 {
		return ErrExclusiveBusy
	}
	return nil
}

// AddConsumer adds an admitted consumer, not ready and without permits.
// It panics if the ID is in use.
func (c *Core) AddConsumer(info ConsumerInfo) {
	if c.byID[info.ID] != nil {
		panic(fmt.Sprintf("dispatch: consumer %d added twice", info.ID))
	}
	cs := &consumer{ConsumerInfo: info}
	for i := range cs.ring {
		cs.ring[i] = hash32(fmt.Sprintf("%s#%d#%d", info.Name, info.ConsumerID, i))
	}
	c.consumers = append(c.consumers, cs)
	c.byID[info.ID] = cs
}

// Ready marks a consumer ready: its client was told it subscribed, so
// messages may follow once it has permits.
func (c *Core) Ready(id ID) {
	if cs := c.byID[id]; cs != nil {
		cs.ready = true
	}
}

// RemoveConsumer removes a consumer; what it had not acknowledged goes to
// replay, for the others. It reports whether the consumer was there.
func (c *Core) RemoveConsumer(id ID) bool {
	cs := c.byID[id]
	if cs == nil {
		return false
	}
	for i, x := range c.consumers {
		if x == cs {
			c.consumers = append(c.consumers[:i], c.consumers[i+1:]...)
			break
		}
	}
	delete(c.byID, id)
	for pos, pe := range c.pending {
		if pe.c == cs {
			c.dropPending(pos)
			c.replay[pos] = pe.hash
		}
	}
	for h, d := range c.drain {
		if d.c == cs {
			delete(c.drain, h)
		}
	}
	return true
}

// Flow gives a consumer permits more messages.
func (c *Core) Flow(id ID, permits int) {
	if cs := c.byID[id]; cs != nil {
		cs.permits += permits
	}
}

// Active returns the consumer that receives everything under Exclusive
// and Failover, if any.
func (c *Core) Active() (ID, bool) {
	if a := c.active(); a != nil {
		return a.ID, true
	}
	return 0, false
}

// active: under Exclusive the first consumer; otherwise consumers sorted
// by priority level, then name (stable: equal ones in joining order); for
// partition i the (i mod n)-th, else the first.
func (c *Core) active() *consumer {
	if len(c.consumers) == 0 {
		return nil
	}
	if c.typ == Exclusive {
		return c.consumers[0]
	}
	sorted := append([]*consumer(nil), c.consumers...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Priority != sorted[j].Priority {
			return sorted[i].Priority < sorted[j].Priority
		}
		return sorted[i].Name < sorted[j].Name
	})
	i := 0
	if p := c.partition; p > 0 {
		i = p % len(sorted)
	}
	return sorted[i]
}

// ActiveChanges returns, under Failover, the ACTIVE_CONSUMER_CHANGE
// notes to send: to each ready consumer whose state differs from the last
// note it was sent (or that was never sent one), in joining order. It
// records them as sent. Nil for other types.
func (c *Core) ActiveChanges() []ActiveChange {
	if c.typ != Failover {
		return nil
	}
	act := c.active()
	var out []ActiveChange
	for _, cs := range c.consumers {
		if !cs.ready {
			continue
		}
		a := cs == act
		if !cs.notified || cs.active != a {
			cs.notified, cs.active = true, a
			out = append(out, ActiveChange{Consumer: cs.ID, Active: a})
		}
	}
	return out
}

// dropPending forgets a dispatched entry (acknowledged, or going back to
// replay) and its hold on its key hash.
func (c *Core) dropPending(pos Position) {
	pe := c.pending[pos]
	if pe == nil {
		return
	}
	delete(c.pending, pos)
	if d := c.drain[pe.hash]; d != nil && d.c == pe.c {
		if d.n--; d.n <= 0 {
			delete(c.drain, pe.hash)
		}
	}
}

// AckCumulative handles a cumulative ack of the message in entry p.
// ackSet, when not empty, says the ack named a message inside a batch
// (the protocol's ack_set: a bit SET for each index still
// unacknowledged): the entries before p are acknowledged, and p's batch
// only up to that message (recorded as a batch-index ack of a pending p,
// as Ack does; BatchAckSet then has what the caller persists) unless that
// completes it. Everything acknowledged leaves pending and replay. It
// returns the position through which the caller acknowledges the cursor,
// or false when that is before the first entry of p's ledger.
func (c *Core) AckCumulative(p Position, ackSet []int64) (Position, bool) {
	if len(ackSet) > 0 {
		pe := c.pending[p]
		if pe == nil || !c.batchAck(p, ackSet, pe.size) {
			p = Position{Ledger: p.Ledger, Entry: p.Entry - 1}
		}
	}
	for pos := range c.pending {
		if !p.Less(pos) {
			c.dropPending(pos)
			delete(c.redelivs, pos)
			delete(c.batchAcks, pos)
		}
	}
	for pos := range c.replay {
		if !p.Less(pos) {
			delete(c.replay, pos)
		}
	}
	for pos := range c.batchAcks {
		if !p.Less(pos) {
			delete(c.batchAcks, pos) // restored (RestoreBatchAck), not pending
		}
	}
	return p, p.Entry >= 0
}

// BatchAckSet returns what is recorded of entry p's batch: a bit SET for
// each index still unacknowledged (the protocol's ack_set, the form the
// cursor persists), or nil when no index of p is acknowledged (or all
// are: then p itself is).
func (c *Core) BatchAckSet(p Position) []int64 {
	acked := c.batchAcks[p]
	if acked == nil {
		return nil
	}
	set := make([]int64, len(acked))
	for i := range acked {
		set[i] = int64(^acked[i])
	}
	if pe := c.pending[p]; pe != nil && pe.size%64 != 0 && len(set) > 0 {
		set[len(set)-1] &= int64(uint64(1)<<uint(pe.size%64) - 1) // bits past the batch's end
	}
	return set
}

// RestoreBatchAck seeds the batch-index acks of entry p from its persisted
// form (unacked: a bit SET for each index still unacknowledged, as
// BatchAckSet returns), after a restart or reload: when p is dispatched
// again its Delivery carries them, and further batch-index acks add to
// them.
func (c *Core) RestoreBatchAck(p Position, unacked []int64) {
	if len(unacked) == 0 {
		return
	}
	acked := make([]uint64, len(unacked))
	for i, w := range unacked {
		acked[i] = ^uint64(w)
	}
	c.batchAcks[p] = acked
}

// Ack handles individual acks, in order. An entry is acknowledged when
// its ack has no ack set, or when its ack set completes the batch of a
// pending entry (an ack set for an entry not pending is ignored). It
// returns the acknowledged entries, for the caller to acknowledge on the
// cursor.
func (c *Core) Ack(acks []Ack) []Position {
	var full []Position
	for _, a := range acks {
		p := a.Pos
		if len(a.AckSet) > 0 {
			pe := c.pending[p]
			if pe == nil || !c.batchAck(p, a.AckSet, pe.size) {
				continue
			}
		}
		c.dropPending(p)
		delete(c.replay, p)
		delete(c.redelivs, p)
		delete(c.batchAcks, p)
		full = append(full, p)
	}
	return full
}

// batchAck records a batch-index ack (ackSet: a bit SET for each index
// still unacknowledged); it reports whether every index of the entry is
// now acknowledged.
func (c *Core) batchAck(p Position, ackSet []int64, size int) bool {
	acked := c.batchAcks[p]
	if words := (size + 63) / 64; len(acked) < words {
		// New, or restored from a shorter form: the indexes it did not
		// cover are unacknowledged.
		acked = append(acked, make([]uint64, words-len(acked))...)
		c.batchAcks[p] = acked
	}
	all := true
	for i := 0; i < size; i++ {
		w, bit := i/64, uint(i%64)
		stillUnacked := w < len(ackSet) && uint64(ackSet[w])&(1<<bit) != 0
		if !stillUnacked {
			acked[w] |= 1 << bit
		}
		if acked[w]&(1<<bit) == 0 {
			all = false
		}
	}
	return all
}

// Redeliver handles a consumer's request to have entries sent again
// (negative acks): those of ps it holds, or all it holds if ps is empty,
// go to replay. Entries it does not hold are ignored.
func (c *Core) Redeliver(id ID, ps []Position) {
	cs := c.byID[id]
	if cs == nil {
		return
	}
	if len(ps) == 0 {
		for pos, pe := range c.pending {
			if pe.c == cs {
				c.dropPending(pos)
				c.replay[pos] = pe.hash
			}
		}
	}
	for _, p := range ps {
		if pe := c.pending[p]; pe != nil && pe.c == cs {
			c.dropPending(p)
			c.replay[p] = pe.hash
		}
	}
}

// Reset forgets what was dispatched, waits for replay and partial batch
// acks (a seek: the caller resets the cursor and closes the consumers).
// Redelivery counts are kept.
func (c *Core) Reset() {
	c.pending = map[Position]*pendingEntry{}
	c.replay = map[Position]uint32{}
	c.batchAcks = map[Position][]uint64{}
	c.drain = map[uint32]*drainRef{}
}

// ForgetThrough drops the pending and replay entries at or before p (the
// cursor acknowledged them: message TTL, backlog eviction).
func (c *Core) ForgetThrough(p Position) {
	for pos := range c.pending {
		if !p.Less(pos) {
			c.dropPending(pos)
		}
	}
	for pos := range c.replay {
		if !p.Less(pos) {
			delete(c.replay, pos)
		}
	}
}
