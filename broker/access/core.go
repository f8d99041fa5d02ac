// Package access is the pure core of a topic's producer access modes
// (Pulsar's PIP-68): which producer may publish on a topic, who waits for
// exclusive access, who is fenced out, and the topic epoch that keeps a
// fenced producer from coming back. The broker's topic is its shell
// (broker/produceraccess.go): it persists the epoch, answers PRODUCER
// requests and closes the producers the core fences.
//
// # Rules (as Pulsar's AbstractTopic)
//
//   - Shared joins unless the topic has an exclusive producer or one
//     waiting for exclusive access: then ErrBusy (ProducerBusy).
//   - Exclusive is granted only when the topic has no producer and none
//     waiting; otherwise ErrFenced (ProducerFenced).
//   - WaitForExclusive is granted like Exclusive, else it is queued (the
//     caller answers PRODUCER_SUCCESS with producer_ready=false) and granted
//     once the topic has no producer left, queued producers in arrival
//     order.
//   - ExclusiveWithFencing is granted at once: every producer of the topic
//     is fenced (closed; queued ones refused with ErrFenced).
//   - Epoch: every exclusive grant to a producer that never had one moves
//     the topic epoch up by one (the first is 0); a producer that
//     reconnects with the epoch it was granted keeps it (or sets it, when
//     the topic's is lower: it was granted elsewhere). A producer asking
//     for exclusive access with an epoch below the topic's is refused with
//     ErrFenced — another exclusive producer was granted since — before it
//     can fence or queue behind anyone (Pulsar checks it after fencing the
//     current producers, so a stale one reconnecting in ExclusiveWithFencing
//     mode bounced the rightful one once).
//
// # The caller's duties
//
//  1. Serialize every call (the topic holds its mutex around each).
//  2. Persist the epoch of a Grant with Persist set before answering its
//     producer, and Remove the producer if that fails.
//  3. Close the producers a Decision fences (CLOSE_PRODUCER for granted
//     ones, ProducerFenced for queued ones); they are already removed.
//  4. Remove every producer that leaves (closed, connection lost, the topic
//     unloads), granted or queued, and act on the Promotion it returns.
//
// No goroutines, clock, I/O, locks or logging; only the standard library.
package access

import (
	"errors"
	"fmt"
)

// Mode is a producer's access mode, numbered as the protocol's
// ProducerAccessMode.
type Mode int32

const (
	Shared               Mode = 0
	Exclusive            Mode = 1
	WaitForExclusive     Mode = 2
	ExclusiveWithFencing Mode = 3
)

func (m Mode) String() string {
	switch m {
	case Shared:
		return "Shared"
	case Exclusive:
		return "Exclusive"
	case WaitForExclusive:
		return "WaitForExclusive"
	case ExclusiveWithFencing:
		return "ExclusiveWithFencing"
	}
	return fmt.Sprintf("Mode(%d)", int32(m))
}

// Refusals. The broker answers ErrBusy as ProducerBusy (a Go producer
// being created fails, a reconnecting one retries) and ErrFenced as
// ProducerFenced (the Go producer closes for good).
var (
	ErrBusy   = errors.New("access: the topic has an exclusive producer")
	ErrFenced = errors.New("access: producer fenced")
	// ErrMode: a mode the protocol does not define.
	ErrMode = errors.New("access: unknown producer access mode")
)

// ID names a producer to the Core; the caller chooses it, unique among the
// Core's producers for the Core's life.
type ID uint64

// Request is a producer asking to join.
type Request struct {
	ID   ID
	Mode Mode
	// Epoch is the topic epoch the producer was granted before (it
	// reconnects; the protocol's topic_epoch), if HasEpoch.
	Epoch    uint64
	HasEpoch bool
}

// Verdict is what became of a Request.
type Verdict int

const (
	// Granted: the producer may publish (after the epoch is persisted,
	// when Persist is set).
	Granted Verdict = iota
	// Queued: WaitForExclusive behind other producers; a Promotion grants
	// it later.
	Queued
	// Refused: Err says why.
	Refused
)

func (v Verdict) String() string {
	switch v {
	case Granted:
		return "granted"
	case Queued:
		return "queued"
	case Refused:
		return "refused"
	}
	return "verdict?"
}

// Decision answers a Request.
type Decision struct {
	Verdict Verdict
	// Err (Refused) wraps ErrBusy, ErrFenced or ErrMode.
	Err error
	// Epoch, HasEpoch: the topic epoch to answer with (Granted). An
	// exclusive grant always has one.
	Epoch    uint64
	HasEpoch bool
	// Persist: the grant changed the topic epoch; persist it before
	// answering.
	Persist bool
	// Fenced: producers taken off the topic (ExclusiveWithFencing), to be
	// closed; Queued lists those of them that were waiting.
	Fenced []ID
	Queued []ID
}

// Promotion is a queued producer granted exclusive access after others
// left, or refused because the epoch moved past it while it waited.
type Promotion struct {
	ID      ID
	Granted bool
	Epoch   uint64
	Persist bool
}

// Core is one topic's producer access state.
//
// Invariants: at most one exclusive producer; an exclusive producer and
// shared producers never together; a queued producer exists only while a
// producer is granted (or its grant is being promoted).
type Core struct {
	epoch     uint64
	hasEpoch  bool
	shared    map[ID]bool
	exclusive ID
	hasExcl   bool
	waiting   []Request
}

// New returns the Core of a topic whose persisted epoch is epoch (if
// hasEpoch; a topic that never had an exclusive producer has none).
func New(epoch uint64, hasEpoch bool) *Core {
	return &Core{epoch: epoch, hasEpoch: hasEpoch, shared: map[ID]bool{}}
}

// Epoch returns the topic epoch, if it has one.
func (c *Core) Epoch() (uint64, bool) { return c.epoch, c.hasEpoch }

// Exclusive returns the exclusive producer, if any.
func (c *Core) Exclusive() (ID, bool) { return c.exclusive, c.hasExcl }

// Waiting returns the number of queued producers.
func (c *Core) Waiting() int { return len(c.waiting) }

// stale reports whether r carries an epoch the topic has moved past.
func (c *Core) stale(r Request) bool {
	return r.HasEpoch && c.hasEpoch && r.Epoch < c.epoch
}

func (c *Core) staleErr(r Request) error {
	return fmt.Errorf("%w: the topic epoch moved to %d past the producer's %d (another exclusive producer was granted since)", ErrFenced, c.epoch, r.Epoch)
}

// grant makes r the exclusive producer and moves the epoch.
func (c *Core) grant(r Request) (epoch uint64, persist bool) {
	next := uint64(0)
	if c.hasEpoch {
		next = c.epoch + 1
	}
	if r.HasEpoch && (!c.hasEpoch || r.Epoch >= c.epoch) {
		next = r.Epoch // it reconnects with its own (or a newer) epoch
	}
	persist = !c.hasEpoch || next != c.epoch
	c.epoch, c.hasEpoch = next, true
	c.exclusive, c.hasExcl = r.ID, true
	return next, persist
}

func (c *Core) granted(r Request) Decision {
	e, persist := c.grant(r)
	return Decision{Verdict: Granted, Epoch: e, HasEpoch: true, Persist: persist}
}

// Add decides on a producer asking to join. The ID must not be one of the
// Core's producers.
func (c *Core) Add(r Request) Decision {
	if c.shared[r.ID] || (c.hasExcl && c.exclusive == r.ID) {
		panic(fmt.Sprintf("access: producer %d added twice", r.ID))
	}
	busy := c.hasExcl || len(c.shared) > 0
	switch r.Mode {
	case Shared:
		if c.hasExcl || len(c.waiting) > 0 {
			return Decision{Verdict: Refused, Err: fmt.Errorf("%w (or one waiting for exclusive access)", ErrBusy)}
		}
		c.shared[r.ID] = true
		return Decision{Verdict: Granted, Epoch: c.epoch, HasEpoch: c.hasEpoch}
	case Exclusive:
		switch {
		case c.hasExcl || len(c.waiting) > 0:
			return Decision{Verdict: Refused, Err: fmt.Errorf("%w: the topic has an exclusive producer (or one waiting for exclusive access)", ErrFenced)}
		case len(c.shared) > 0:
			return Decision{Verdict: Refused, Err: fmt.Errorf("%w: the topic has %d shared producers", ErrFenced, len(c.shared))}
		case c.stale(r):
			return Decision{Verdict: Refused, Err: c.staleErr(r)}
		}
		return c.granted(r)
	case WaitForExclusive:
		if c.stale(r) {
			return Decision{Verdict: Refused, Err: c.staleErr(r)}
		}
		if busy || len(c.waiting) > 0 {
			c.waiting = append(c.waiting, r)
			return Decision{Verdict: Queued}
		}
		return c.granted(r)
	case ExclusiveWithFencing:
		if c.stale(r) {
			return Decision{Verdict: Refused, Err: c.staleErr(r)}
		}
		var fenced, queued []ID
		if c.hasExcl {
			fenced = append(fenced, c.exclusive)
			c.hasExcl = false
		}
		for id := range c.shared {
			fenced = append(fenced, id)
		}
		clear(c.shared)
		for _, w := range c.waiting {
			fenced = append(fenced, w.ID)
			queued = append(queued, w.ID)
		}
		c.waiting = nil
		d := c.granted(r)
		d.Fenced, d.Queued = fenced, queued
		return d
	}
	return Decision{Verdict: Refused, Err: fmt.Errorf("%w: %d", ErrMode, int32(r.Mode))}
}

// Remove takes a producer off the topic (granted or queued; unknown IDs
// are ignored). When the topic is left without a granted producer, the
// queued producers are promoted in order: the first whose epoch has not
// been passed is granted; those before it whose epoch was passed are
// refused (Granted false).
func (c *Core) Remove(id ID) []Promotion {
	switch {
	case c.hasExcl && c.exclusive == id:
		c.hasExcl = false
	case c.shared[id]:
		delete(c.shared, id)
	default:
		for i, w := range c.waiting {
			if w.ID == id {
				c.waiting = append(c.waiting[:i], c.waiting[i+1:]...)
				break
			}
		}
		return nil
	}
	if c.hasExcl || len(c.shared) > 0 {
		return nil
	}
	var out []Promotion
	for len(c.waiting) > 0 {
		w := c.waiting[0]
		c.waiting = c.waiting[1:]
		if c.stale(w) {
			out = append(out, Promotion{ID: w.ID})
			continue
		}
		e, persist := c.grant(w)
		out = append(out, Promotion{ID: w.ID, Granted: true, Epoch: e, Persist: persist})
		break
	}
	return out
}
