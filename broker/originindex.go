package broker

import (
	"sort"
	"sync"

	"github.com/meridian-mq/meridian/broker/mledger"
)

// originIndex maps the origin message id of every entry replicated into
// this topic to its local position, so a client's ack, seek or reader
// start taken in another region names the same message here. Entries of
// one origin ledger arrive in order and mostly land consecutively, so the
// index keeps runs (origin entries e..e+n-1 of ledger L are local entries
// p..p+n-1 of one local ledger), not one record per entry. Safe for
// concurrent use.
type originIndex struct {
	mu       sync.RWMutex
	byLedger map[int64][]*indexRun // by origin ledger, runs ascending
	byLocal  map[int64][]*indexRun // the same runs by local ledger, ascending
	runs     int
}

type indexRun struct {
	originLedger int64
	originEntry  int64
	local        mledger.Position
	n            int64
}

// add records that origin id lives at local position p. Ids of one origin
// ledger are added in ascending entry order.
func (x *originIndex) add(id, p mledger.Position) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byLedger == nil {
		x.byLedger, x.byLocal = map[int64][]*indexRun{}, map[int64][]*indexRun{}
	}
	rs := x.byLedger[id.Ledger]
	if k := len(rs) - 1; k >= 0 {
		r := rs[k]
		if r.originEntry+r.n == id.Entry && r.local.Ledger == p.Ledger && r.local.Entry+r.n == p.Entry {
			r.n++
			return
		}
		if id.Entry < r.originEntry+r.n {
			return // already indexed (a replay)
		}
	}
	r := &indexRun{originLedger: id.Ledger, originEntry: id.Entry, local: p, n: 1}
	x.byLedger[id.Ledger] = append(rs, r)
	x.byLocal[p.Ledger] = append(x.byLocal[p.Ledger], r)
	x.runs++
}

// origin returns the origin id of the replicated entry at local position
// p, if p holds one.
func (x *originIndex) origin(p mledger.Position) (mledger.Position, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	rs := x.byLocal[p.Ledger]
	i := sort.Search(len(rs), func(i int) bool { return rs[i].local.Entry+rs[i].n > p.Entry })
	if i == len(rs) || p.Entry < rs[i].local.Entry {
		return mledger.Position{}, false
	}
	r := rs[i]
	return mledger.Position{Ledger: r.originLedger, Entry: r.originEntry + p.Entry - r.local.Entry}, true
}

// lookup returns the local position of origin id, if indexed.
func (x *originIndex) lookup(id mledger.Position) (mledger.Position, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	rs := x.byLedger[id.Ledger]
	i := sort.Search(len(rs), func(i int) bool { return rs[i].originEntry+rs[i].n > id.Entry })
	if i == len(rs) || id.Entry < rs[i].originEntry {
		return mledger.Position{}, false
	}
	r := rs[i]
	return mledger.Position{Ledger: r.local.Ledger, Entry: r.local.Entry + id.Entry - r.originEntry}, true
}

// size returns the number of runs held.
func (x *originIndex) size() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.runs
}
