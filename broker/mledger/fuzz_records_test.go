package mledger

import (
	"testing"
	"time"
)

// FuzzDecodeRecords: the managed-ledger records read back from etcd (a
// ledger list and a cursor) never crash the decoder, and whatever decodes
// satisfies the invariants the cursor core relies on, so driving the core
// with it (advance, rewind, backlog, acks) never panics.
func FuzzDecodeRecords(f *testing.F) {
	info, err := encodeInfo(infoRecord{epoch: 3, ledgers: []LedgerInfo{{ID: 10, Entries: 3, Closed: true}, {ID: 11, Closed: true}, {ID: 12, Entries: 2}}})
	if err != nil {
		f.Fatal(err)
	}
	cur, err := encodeCursor(cursorRecord{markDelete: Position{10, 0}, acked: []Range{{Position{10, 2}, Position{12, 0}}}, props: map[string]int64{"seq": 7}}, time.Unix(1, 0))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(info, cur)
	f.Add([]byte{}, []byte{})
	f.Add(info[:len(info)/2], cur[:len(cur)/2])
	f.Fuzz(func(t *testing.T, ib, cb []byte) {
		ir, ierr := decodeInfo("info", ib)
		cr, cerr := decodeCursor("cursor", cb)
		if ierr != nil || cerr != nil {
			return
		}
		if err := validateCursor("cursor", cr); err != nil {
			t.Fatalf("decoded a cursor that breaks the invariants: %v", err)
		}
		if len(ir.ledgers) > 64 || len(cr.acked) > 64 {
			return // bound the work per input
		}
		v := &view{open: len(ir.ledgers) > 0 && !ir.ledgers[len(ir.ledgers)-1].Closed}
		lc := Position{-1, -1}
		for _, l := range ir.ledgers {
			v.spans = append(v.spans, span{l.ID, l.Entries})
			if l.Entries > 0 {
				lc = Position{l.ID, l.Entries - 1}
			}
		}
		c := &cursorCore{markDelete: cr.markDelete, acked: cr.acked}
		c.advance(v)
		c.rewind(v)
		if c.backlog(v, lc) < 0 {
			t.Fatalf("negative backlog for %+v over %+v", cr, ir.ledgers)
		}
		p := c.readPosition(v)
		for range 8 {
			c.ack(v, lc, p)
			p = v.next(p)
		}
		c.ackCumulative(v, lc, lc)
		_ = c.ackedRanges()
	})
}
