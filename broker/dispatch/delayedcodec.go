package dispatch

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
)

// The persisted forms of the delayed-delivery index (delayed.go). A
// bucket's snapshot: entry 0 its position set, entry k+1 its segment k;
// each ends with a CRC-32C (Castagnoli) of what precedes it, so a bad blob
// is told from a good one beyond the ledger's own digest. The list is JSON.

// errDelayedCorrupt: a persisted form does not decode.
var errDelayedCorrupt = errors.New("dispatch: delayed-delivery snapshot corrupt")

const delayedFormat = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func appendCRC(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// checkCRC returns b without its CRC, or an error if it does not match or
// b does not start with the format version.
func checkCRC(b []byte) ([]byte, error) {
	if len(b) < 5 {
		return nil, fmt.Errorf("%w: %d bytes", errDelayedCorrupt, len(b))
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: CRC mismatch", errDelayedCorrupt)
	}
	if body[0] != delayedFormat {
		return nil, fmt.Errorf("%w: format %d", errDelayedCorrupt, body[0])
	}
	return body[1:], nil
}

// reader decodes varints, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: truncated", errDelayedCorrupt)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: truncated", errDelayedCorrupt)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of items of at least min bytes each that must fit
// in what is left.
func (r *reader) count(minBytes int) int {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)/minBytes) {
		r.err = fmt.Errorf("%w: count %d", errDelayedCorrupt, n)
		return 0
	}
	return int(n)
}

// posSet is an immutable set of log positions: per ledger a bitmap over
// the span of its entries when that is the smaller (dense: 1 bit an
// entry), else their offsets from the first (4 bytes an entry), as
// roaring bitmaps choose containers.
type posSet struct{ ls []ledgerSet }

type ledgerSet struct {
	ledger, base int64
	bits         []uint64 // bit i: entry base+i
	offs         []uint32 // entries base+offs[i], ascending
	wide         []int64  // entries, ascending (a span beyond 2^32)
	n            int
	last         int64
}

// newPosSet builds a set from ledger → ascending entries.
func newPosSet(m map[int64][]int64) *posSet {
	s := &posSet{}
	for l, es := range m {
		if len(es) == 0 {
			continue
		}
		ls := ledgerSet{ledger: l, base: es[0], n: len(es), last: es[len(es)-1]}
		span := uint64(es[len(es)-1] - es[0] + 1)
		switch {
		case span/8 <= uint64(4*len(es)):
			ls.bits = make([]uint64, (span+63)/64)
			for _, e := range es {
				i := uint64(e - ls.base)
				ls.bits[i/64] |= 1 << (i % 64)
			}
		case span <= 1<<32:
			ls.offs = make([]uint32, len(es))
			for i, e := range es {
				ls.offs[i] = uint32(e - ls.base)
			}
		default:
			ls.wide = slices.Clone(es)
		}
		s.ls = append(s.ls, ls)
	}
	slices.SortFunc(s.ls, func(a, b ledgerSet) int {
		switch {
		case a.ledger < b.ledger:
			return -1
		case a.ledger > b.ledger:
			return 1
		}
		return 0
	})
	return s
}

func (s *posSet) has(p Position) bool {
	i, ok := slices.BinarySearchFunc(s.ls, p.Ledger, func(ls ledgerSet, l int64) int {
		switch {
		case ls.ledger < l:
			return -1
		case ls.ledger > l:
			return 1
		}
		return 0
	})
	if !ok {
		return false
	}
	ls := &s.ls[i]
	if p.Entry < ls.base || p.Entry > ls.last {
		return false
	}
	switch {
	case ls.bits != nil:
		o := uint64(p.Entry - ls.base)
		return ls.bits[o/64]&(1<<(o%64)) != 0
	case ls.offs != nil:
		_, ok := slices.BinarySearch(ls.offs, uint32(p.Entry-ls.base))
		return ok
	default:
		_, ok := slices.BinarySearch(ls.wide, p.Entry)
		return ok
	}
}

// bounds returns the first and last positions of a set that is not empty.
func (s *posSet) bounds() (first, last Position) {
	if len(s.ls) == 0 {
		return Position{}, Position{}
	}
	f, l := s.ls[0], s.ls[len(s.ls)-1]
	return Position{Ledger: f.ledger, Entry: f.base}, Position{Ledger: l.ledger, Entry: l.last}
}

// Bytes is the set's size in memory, about.
func (s *posSet) bytes() int {
	n := 0
	for _, ls := range s.ls {
		n += 64 + 8*len(ls.bits) + 4*len(ls.offs) + 8*len(ls.wide)
	}
	return n
}

const (
	setBits = 0
	setOffs = 1
	setWide = 2
)

func (s *posSet) encode() []byte {
	b := []byte{delayedFormat}
	b = binary.AppendUvarint(b, uint64(len(s.ls)))
	for _, ls := range s.ls {
		b = binary.AppendVarint(b, ls.ledger)
		b = binary.AppendVarint(b, ls.base)
		b = binary.AppendVarint(b, ls.last)
		b = binary.AppendUvarint(b, uint64(ls.n))
		switch {
		case ls.bits != nil:
			b = append(b, setBits)
			b = binary.AppendUvarint(b, uint64(len(ls.bits)))
			for _, w := range ls.bits {
				b = binary.LittleEndian.AppendUint64(b, w)
			}
		case ls.offs != nil:
			b = append(b, setOffs)
			b = binary.AppendUvarint(b, uint64(len(ls.offs)))
			prev := uint32(0)
			for _, o := range ls.offs {
				b = binary.AppendUvarint(b, uint64(o-prev))
				prev = o
			}
		default:
			b = append(b, setWide)
			b = binary.AppendUvarint(b, uint64(len(ls.wide)))
			prev := int64(0)
			for _, e := range ls.wide {
				b = binary.AppendVarint(b, e-prev)
				prev = e
			}
		}
	}
	return appendCRC(b)
}

func decodePosSet(data []byte) (*posSet, error) {
	body, err := checkCRC(data)
	if err != nil {
		return nil, err
	}
	r := &reader{b: body}
	s := &posSet{}
	nl := r.count(5)
	for range nl {
		ls := ledgerSet{ledger: r.varint(), base: r.varint(), last: r.varint(), n: int(r.uvarint())}
		if r.err != nil || len(r.b) == 0 {
			return nil, fmt.Errorf("%w: truncated set", errDelayedCorrupt)
		}
		kind := r.b[0]
		r.b = r.b[1:]
		switch kind {
		case setBits:
			n := r.count(8)
			if r.err != nil {
				return nil, r.err
			}
			ls.bits = make([]uint64, n)
			for i := range ls.bits {
				ls.bits[i] = binary.LittleEndian.Uint64(r.b)
				r.b = r.b[8:]
			}
		case setOffs:
			n := r.count(1)
			ls.offs = make([]uint32, n)
			prev := uint32(0)
			for i := range ls.offs {
				prev += uint32(r.uvarint())
				ls.offs[i] = prev
			}
		case setWide:
			n := r.count(1)
			ls.wide = make([]int64, n)
			prev := int64(0)
			for i := range ls.wide {
				prev += r.varint()
				ls.wide[i] = prev
			}
		default:
			return nil, fmt.Errorf("%w: set kind %d", errDelayedCorrupt, kind)
		}
		if r.err != nil {
			return nil, r.err
		}
		s.ls = append(s.ls, ls)
	}
	if r.err != nil || len(r.b) != 0 {
		return nil, fmt.Errorf("%w: set: %v, %d bytes left", errDelayedCorrupt, r.err, len(r.b))
	}
	return s, nil
}

// encodeSegment: the entries, by time: the first time, then deltas; each
// position as deltas from the one before.
func encodeSegment(items []delayedItem) []byte {
	b := []byte{delayedFormat}
	b = binary.AppendUvarint(b, uint64(len(items)))
	var at, l, e int64
	for _, it := range items {
		b = binary.AppendVarint(b, it.at-at)
		b = binary.AppendVarint(b, it.pos.Ledger-l)
		b = binary.AppendVarint(b, it.pos.Entry-e)
		at, l, e = it.at, it.pos.Ledger, it.pos.Entry
	}
	return appendCRC(b)
}

func decodeSegment(data []byte) ([]delayedItem, error) {
	body, err := checkCRC(data)
	if err != nil {
		return nil, err
	}
	r := &reader{b: body}
	n := r.count(3)
	items := make([]delayedItem, 0, n)
	var at, l, e int64
	for range n {
		at += r.varint()
		l += r.varint()
		e += r.varint()
		items = append(items, delayedItem{at: at, pos: Position{Ledger: l, Entry: e}})
	}
	if r.err != nil || len(r.b) != 0 {
		return nil, fmt.Errorf("%w: segment: %v, %d bytes left", errDelayedCorrupt, r.err, len(r.b))
	}
	return items, nil
}

// encode returns the bucket's snapshot entries: its set, then its
// segments.
func (b *bucket) encode() [][]byte {
	out := [][]byte{b.set.encode()}
	for _, seg := range b.all {
		out = append(out, encodeSegment(seg))
	}
	return out
}

// delayedList is the persisted list of buckets.
type delayedList struct {
	Format  int            `json:"format"`
	NextID  uint64         `json:"nextId"`
	Buckets []delayedEntry `json:"buckets"`
}

type delayedEntry struct {
	ID       uint64   `json:"id"`
	First    Position `json:"first"`
	Last     Position `json:"last"`
	SegFirst []int64  `json:"segFirst"`
	SegLen   []int    `json:"segLen"`
	// Done: segments wholly released (a restore loads from the next).
	Done int `json:"done"`
}

// encodeList returns the list of the persisted buckets.
func (d *Delayed) encodeList() []byte {
	l := delayedList{Format: delayedFormat, NextID: d.nextID, Buckets: []delayedEntry{}}
	for _, b := range d.buckets {
		if !b.persisted {
			// A merged bucket not yet persisted: the buckets it replaces
			// hold its entries until it is.
			l.Buckets = append(l.Buckets, b.replaces...)
			continue
		}
		l.Buckets = append(l.Buckets, b.listEntry())
	}
	out, _ := json.Marshal(l)
	return out
}

func decodeList(data []byte) (delayedList, error) {
	var l delayedList
	if err := json.Unmarshal(data, &l); err != nil {
		return delayedList{}, fmt.Errorf("%w: list: %v", errDelayedCorrupt, err)
	}
	if l.Format != delayedFormat {
		return delayedList{}, fmt.Errorf("%w: list format %d", errDelayedCorrupt, l.Format)
	}
	for _, b := range l.Buckets {
		if len(b.SegFirst) != len(b.SegLen) || b.Done < 0 || b.Done > len(b.SegLen) || b.ID == 0 {
			return delayedList{}, fmt.Errorf("%w: list: bucket %d", errDelayedCorrupt, b.ID)
		}
	}
	return l, nil
}
