package broker

import (
	"testing"

	"github.com/meridian-mq/meridian/broker/mledger"
)

func TestOriginIndexRuns(t *testing.T) {
	var x originIndex
	pos := func(l, e int64) mledger.Position { return mledger.Position{Ledger: l, Entry: e} }
	// Origin ledger 100 entries 0..9 land at local 7:0..7:9, interleaved
	// after entry 4 with another origin's entries (local 7:5, 7:6), then a
	// local rollover.
	for e := int64(0); e < 5; e++ {
		x.add(pos(100, e), pos(7, e))
	}
	x.add(pos(200, 0), pos(7, 5))
	x.add(pos(200, 1), pos(7, 6))
	for e := int64(5); e < 8; e++ {
		x.add(pos(100, e), pos(7, e+2))
	}
	x.add(pos(100, 8), pos(9, 0))
	x.add(pos(100, 9), pos(9, 1))
	x.add(pos(100, 3), pos(7, 3)) // a replay of an indexed id changes nothing
	want := map[mledger.Position]mledger.Position{
		pos(100, 0): pos(7, 0), pos(100, 4): pos(7, 4), pos(100, 5): pos(7, 7),
		pos(100, 7): pos(7, 9), pos(100, 8): pos(9, 0), pos(100, 9): pos(9, 1),
		pos(200, 0): pos(7, 5), pos(200, 1): pos(7, 6),
	}
	for id, p := range want {
		if got, ok := x.lookup(id); !ok || got != p {
			t.Errorf("lookup(%v) = %v, %v; want %v", id, got, ok, p)
		}
	}
	for id, p := range want {
		if got, ok := x.origin(p); !ok || got != id {
			t.Errorf("origin(%v) = %v, %v; want %v", p, got, ok, id)
		}
	}
	for _, p := range []mledger.Position{pos(7, 10), pos(9, 2), pos(8, 0)} {
		if got, ok := x.origin(p); ok {
			t.Errorf("origin(%v) = %v; want not found (not a replicated entry)", p, got)
		}
	}
	for _, id := range []mledger.Position{pos(100, 10), pos(100, -1), pos(300, 0), pos(200, 2)} {
		if got, ok := x.lookup(id); ok {
			t.Errorf("lookup(%v) = %v; want not found", id, got)
		}
	}
	if got := x.size(); got != 4 {
		t.Errorf("runs = %d, want 4 (100:0-4, 100:5-7, 100:8-9, 200:0-1)", got)
	}
}
