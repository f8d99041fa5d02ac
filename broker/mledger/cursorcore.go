package mledger

import (
	"slices"
	"sort"
)

// BatchAck is a partly acknowledged batch: its entry and a bit SET for
// each batch index still unacknowledged (the protocol's ack_set words).
type BatchAck struct {
	Pos     Position
	Unacked []int64
}

// cursorCore is a cursor's state and the pure rules that move it. It does
// no I/O and takes no locks: the Cursor shell holds its mutex around every
// call and passes a snapshot of the ledger list (v) and the last confirmed
// position (lc).
//
// Invariants:
//   - every range in acked is after markDelete, ranges are sorted and
//     disjoint, and the first range does not start at next(markDelete)
//     (advance folds it into markDelete);
//   - an entry is acknowledged iff it is at or before markDelete or inside
//     a range of acked;
//   - every entry in batch (a batch only some of whose messages are
//     acknowledged) is after markDelete and not acknowledged.
type cursorCore struct {
	markDelete Position
	readPos    Position
	acked      []Range
	// batch: partly acknowledged batches → a bit SET for each batch index
	// still unacknowledged (the protocol's ack_set), as the subscription
	// last reported it (setBatch).
	batch map[Position][]int64
}

// setBatch records the batch indexes of the stored entry p still
// unacknowledged (unacked, the protocol's ack_set; empty: forget them).
// It reports whether anything changed; an entry acknowledged, or not
// stored, is ignored.
func (c *cursorCore) setBatch(v *view, lc, p Position, unacked []int64) bool {
	if len(unacked) == 0 {
		if _, ok := c.batch[p]; !ok {
			return false
		}
		delete(c.batch, p)
		return true
	}
	if c.isAcked(p) || !v.stored(p, lc) {
		return false
	}
	if old, ok := c.batch[p]; ok && slices.Equal(old, unacked) {
		return false
	}
	if c.batch == nil {
		c.batch = map[Position][]int64{}
	}
	c.batch[p] = slices.Clone(unacked)
	return true
}

// dropBatchAcked forgets the batch state of acknowledged entries.
func (c *cursorCore) dropBatchAcked() {
	for p := range c.batch {
		if c.isAcked(p) {
			delete(c.batch, p)
		}
	}
}

// batches returns the partly acknowledged batches in position order, at
// most limit.
func (c *cursorCore) batches(limit int) []BatchAck {
	out := make([]BatchAck, 0, len(c.batch))
	for p, u := range c.batch {
		out = append(out, BatchAck{Pos: p, Unacked: slices.Clone(u)})
	}
	slices.SortFunc(out, func(a, b BatchAck) int {
		switch {
		case a.Pos.Less(b.Pos):
			return -1
		case b.Pos.Less(a.Pos):
			return 1
		}
		return 0
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// isAcked reports whether p is acknowledged.
func (c *cursorCore) isAcked(p Position) bool {
	if !c.markDelete.Less(p) {
		return true
	}
	i := c.rangeAtOrAfter(p)
	return i < len(c.acked) && !p.Less(c.acked[i].From)
}

// rangeAtOrAfter returns the index of the first range whose To is >= p.
func (c *cursorCore) rangeAtOrAfter(p Position) int {
	return sort.Search(len(c.acked), func(i int) bool { return !c.acked[i].To.Less(p) })
}

// ack acknowledges the stored entry p; it reports whether anything changed.
// Entries not stored (beyond lc, in a deleted ledger, past a closed ledger's
// end) are ignored.
func (c *cursorCore) ack(v *view, lc, p Position) bool {
	if !c.markDelete.Less(p) || !v.stored(p, lc) {
		return false
	}
	i := c.rangeAtOrAfter(p)
	if i < len(c.acked) && !p.Less(c.acked[i].From) {
		return false // already inside a range
	}
	// No stored entry lies strictly between the left range and p, or
	// between p and the right range.
	left := i > 0 && !v.next(c.acked[i-1].To).Less(p)
	right := i < len(c.acked) && !v.next(p).Less(c.acked[i].From)
	switch {
	case left && right:
		c.acked[i-1].To = c.acked[i].To
		c.acked = append(c.acked[:i], c.acked[i+1:]...)
	case left:
		c.acked[i-1].To = p
	case right:
		c.acked[i].From = p
	default:
		c.acked = append(c.acked, Range{})
		copy(c.acked[i+1:], c.acked[i:])
		c.acked[i] = Range{p, p}
	}
	delete(c.batch, p)
	c.advance(v)
	return true
}

// ackCumulative acknowledges every entry at or before p (bounded by lc).
func (c *cursorCore) ackCumulative(v *view, lc, p Position) bool {
	p = minPos(p, lc)
	if !c.markDelete.Less(p) {
		return false
	}
	c.markDelete = p
	n := 0
	for n < len(c.acked) && !p.Less(c.acked[n].To) {
		n++ // entirely at or before p
	}
	c.acked = append(c.acked[:0], c.acked[n:]...)
	if len(c.acked) > 0 && !p.Less(c.acked[0].From) {
		c.acked[0].From = v.next(p) // straddles p
	}
	c.advance(v)
	c.dropBatchAcked()
	return true
}

// advance moves markDelete over the ranges that continue it.
func (c *cursorCore) advance(v *view) {
	n := 0
	for n < len(c.acked) && !v.next(c.markDelete).Less(c.acked[n].From) {
		c.markDelete = maxPos(c.markDelete, c.acked[n].To)
		n++
	}
	if n > 0 {
		c.acked = append(c.acked[:0], c.acked[n:]...)
	}
}

// backlog counts the stored entries after markDelete, up to lc, that are
// not individually acknowledged.
func (c *cursorCore) backlog(v *view, lc Position) int64 {
	n := v.count(v.next(c.markDelete), lc, lc)
	for _, r := range c.acked {
		n -= v.count(r.From, r.To, lc)
	}
	return max(n, 0)
}

// skipAcked returns the first position at or after p (and after
// markDelete) that is not acknowledged.
func (c *cursorCore) skipAcked(v *view, p Position) Position {
	p = maxPos(v.normalize(p), v.next(c.markDelete))
	for i := c.rangeAtOrAfter(p); i < len(c.acked) && !p.Less(c.acked[i].From); i++ {
		p = v.next(c.acked[i].To)
	}
	return p
}

// nextAckedFrom returns the start of the first acked range after p, the
// bound of a contiguous run of unacknowledged entries starting at p.
func (c *cursorCore) nextAckedFrom(p Position) (Position, bool) {
	i := c.rangeAtOrAfter(p)
	if i < len(c.acked) {
		return c.acked[i].From, true
	}
	return Position{}, false
}

// readPosition returns the effective read position.
func (c *cursorCore) readPosition(v *view) Position {
	return c.skipAcked(v, c.readPos)
}

// rewind moves the read position back to the first unacknowledged entry.
func (c *cursorCore) rewind(v *view) {
	c.readPos = c.skipAcked(v, v.next(c.markDelete))
}

// resetTo moves markDelete to just before p and the read position to p,
// forgetting individual acks. Earliest means the first stored entry, Latest
// the position after lc.
func (c *cursorCore) resetTo(v *view, lc, p Position) {
	switch p {
	case Earliest:
		p = v.normalize(Earliest)
	case Latest:
		p = v.next(lc)
	default:
		p = v.normalize(p)
	}
	c.markDelete = prev(p)
	c.readPos = p
	c.acked = nil
	c.batch = nil
}

// ackedRanges returns a copy of the individually acknowledged ranges.
func (c *cursorCore) ackedRanges() []Range {
	return append([]Range(nil), c.acked...)
}
