package mledger

import (
	"fmt"
	"math"
	"sort"
)

// Position of an entry in a managed ledger: the ledger id and the entry id
// inside it. Positions are ordered by (Ledger, Entry). {L, -1} means "before
// the first entry of ledger L".
type Position struct{ Ledger, Entry int64 }

var (
	// Earliest is before every entry.
	Earliest = Position{-1, -1}
	// Latest is after every entry.
	Latest = Position{math.MaxInt64, math.MaxInt64}
)

// Less reports whether p sorts before q.
func (p Position) Less(q Position) bool {
	if p.Ledger != q.Ledger {
		return p.Ledger < q.Ledger
	}
	return p.Entry < q.Entry
}

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p Position) Compare(q Position) int {
	switch {
	case p.Less(q):
		return -1
	case q.Less(p):
		return 1
	}
	return 0
}

// String prints "ledger:entry", as Pulsar prints message ids.
func (p Position) String() string {
	switch p {
	case Earliest:
		return "earliest"
	case Latest:
		return "latest"
	}
	return fmt.Sprintf("%d:%d", p.Ledger, p.Entry)
}

func maxPos(a, b Position) Position {
	if a.Less(b) {
		return b
	}
	return a
}

func minPos(a, b Position) Position {
	if b.Less(a) {
		return b
	}
	return a
}

// Range is a closed range [From, To] of positions: every stored entry p with
// From <= p <= To.
type Range struct{ From, To Position }

func (r Range) String() string { return "[" + r.From.String() + ", " + r.To.String() + "]" }

// span is one ledger of the log as the pure helpers see it.
type span struct {
	id int64
	// entries stored in the ledger; unused for the open ledger, whose end is
	// the last confirmed position.
	entries int64
}

// view is an immutable snapshot of the ledger list, ascending by id. When
// open is set the last span is the ledger being written: positions in it
// are unbounded above (the next append's position is {id, entries}).
// Deleted and never-written ledger ids are simply absent. Every function on
// it is pure.
type view struct {
	spans []span
	open  bool
}

// find returns the index of the span with id, or -1.
func (v *view) find(id int64) int {
	i := sort.Search(len(v.spans), func(i int) bool { return v.spans[i].id >= id })
	if i < len(v.spans) && v.spans[i].id == id {
		return i
	}
	return -1
}

func (v *view) isOpen(i int) bool { return v.open && i == len(v.spans)-1 }

// next returns the position after p: the next stored entry, crossing ledger
// boundaries and skipping empty and deleted ledgers, or the write position
// (the position the next append gets) when p is at or after the last
// stored entry. For p after the write position it returns p's arithmetic
// successor.
func (v *view) next(p Position) Position {
	// The first span with id >= p.Ledger.
	i := sort.Search(len(v.spans), func(i int) bool { return v.spans[i].id >= p.Ledger })
	for ; i < len(v.spans); i++ {
		s := v.spans[i]
		if s.id == p.Ledger {
			if p.Entry+1 < s.entries || v.isOpen(i) {
				return Position{s.id, max(p.Entry+1, 0)}
			}
			continue
		}
		if s.entries > 0 || v.isOpen(i) {
			return Position{s.id, 0}
		}
	}
	if p == Latest {
		return Latest
	}
	if len(v.spans) > 0 {
		last := v.spans[len(v.spans)-1]
		if p.Ledger < last.id || (p.Ledger == last.id && p.Entry < last.entries) {
			// Only reachable without an open ledger: p is at or after the
			// last stored entry.
			return Position{last.id, last.entries}
		}
	}
	if p.Entry == math.MaxInt64 {
		return p
	}
	return Position{p.Ledger, p.Entry + 1}
}

// normalize returns the first stored entry at or after p, or the write
// position if there is none (p itself if p is beyond the write position).
func (v *view) normalize(p Position) Position {
	if p.Entry < 0 {
		return v.next(Position{p.Ledger, -1})
	}
	return v.next(Position{p.Ledger, p.Entry - 1})
}

// prev returns the position just before p (for a mark-delete "before p").
func prev(p Position) Position { return Position{p.Ledger, p.Entry - 1} }

// stored reports whether p is an entry of the view, given the last
// confirmed position (which bounds the open ledger).
func (v *view) stored(p Position, lastConfirmed Position) bool {
	i := v.find(p.Ledger)
	if i < 0 || p.Entry < 0 {
		return false
	}
	if v.isOpen(i) {
		return !lastConfirmed.Less(p)
	}
	return p.Entry < v.spans[i].entries
}

// count returns the number of stored entries in [from, to]; to is bounded by
// lastConfirmed (the open ledger's end).
func (v *view) count(from, to, lastConfirmed Position) int64 {
	to = minPos(to, lastConfirmed)
	if to.Less(from) {
		return 0
	}
	var n int64
	for i, s := range v.spans {
		if s.id < from.Ledger || s.id > to.Ledger {
			continue
		}
		end := s.entries - 1 // last entry in the span
		if v.isOpen(i) {
			end = -1
			if s.id == lastConfirmed.Ledger {
				end = lastConfirmed.Entry
			}
		}
		lo, hi := int64(0), end
		if s.id == from.Ledger {
			lo = max(lo, from.Entry)
		}
		if s.id == to.Ledger {
			hi = min(hi, to.Entry)
		}
		if hi >= lo {
			n += hi - lo + 1
		}
	}
	return n
}
