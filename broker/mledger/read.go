package mledger

import (
	"context"
	"fmt"
	"sync"

	"github.com/meridian-mq/meridian/bookie/ledger"
)

// readWindow is how many entries of one ledger are read from bookies
// concurrently, one request each, where a ledger is striped (ensemble size
// > write quorum). readRun is the longest run of cache misses read in one
// go; where every bookie holds every entry, a run is read with range
// requests (ledger.Reader.ReadRange), one or a few per run.
const (
	readWindow       = 16
	readRun          = 256
	readRangeParts   = 4
	readRangeMinPart = 8
)

// ReadEntries reads up to maxEntries entries starting at from (inclusive;
// a position that is not a stored entry means the first stored entry after
// it), crossing ledger boundaries, and stops once about maxBytes of
// payload were read (at least one entry; maxBytes <= 0: no limit). It
// returns fewer entries, possibly none, when it reaches LastConfirmed.
// Entries still in the tail cache come from it (Stats.CacheHits); older
// ones from bookies (Stats.CacheMisses). On an error, the entries read
// before it are returned with it.
func (ml *ManagedLedger) ReadEntries(ctx context.Context, from Position, maxEntries int, maxBytes int) ([]Entry, error) {
	return ml.read(ctx, from, Latest, maxEntries, maxBytes)
}

// read is ReadEntries stopping before until.
func (ml *ManagedLedger) read(ctx context.Context, from, until Position, maxEntries, maxBytes int) ([]Entry, error) {
	if maxEntries <= 0 {
		return nil, nil
	}
	ml.mu.Lock()
	v, lc := ml.v, ml.lastConfirmed
	avg := int64(0)
	if ml.entries > 0 {
		avg = max(ml.sizeBytes/ml.entries, 1)
	}
	ml.mu.Unlock()

	var out []Entry
	bytes := 0
	full := func() bool { return len(out) >= maxEntries || (maxBytes > 0 && bytes >= maxBytes) }
	p := v.normalize(from)
	for !full() && !lc.Less(p) && p.Less(until) {
		ml.mu.Lock()
		data, ok := ml.cache.get(p)
		if ok {
			ml.stats.CacheHits++
			ml.mu.Unlock()
			out = append(out, Entry{p, data})
			bytes += len(data)
			p = v.next(p)
			continue
		}
		// A run of consecutive misses in p's ledger, sized to the budget.
		n := min(readRun, maxEntries-len(out))
		if maxBytes > 0 && avg > 0 {
			n = min(n, int((int64(maxBytes-bytes)+avg-1)/avg))
		}
		run := []Position{p}
		for q := v.next(p); len(run) < max(n, 1) && q.Ledger == p.Ledger && !lc.Less(q) && q.Less(until); q = v.next(q) {
			if _, hit := ml.cache.get(q); hit {
				break
			}
			run = append(run, q)
		}
		ml.mu.Unlock()
		got, err := ml.readFromBookies(ctx, p.Ledger, run)
		ml.mu.Lock()
		ml.stats.CacheMisses += int64(len(got))
		ml.mu.Unlock()
		for i, d := range got {
			out = append(out, Entry{run[i], d})
			bytes += len(d)
		}
		if err != nil {
			return out, err
		}
		p = v.next(run[len(run)-1])
	}
	return out, nil
}

// readFromBookies reads the entries at ps (consecutive, one ledger): with
// range requests where the ledger allows them, else readWindow at a time
// concurrently. It returns the payloads of the prefix of ps read before
// the first error.
func (ml *ManagedLedger) readFromBookies(ctx context.Context, ledgerID int64, ps []Position) ([][]byte, error) {
	r, err := ml.reader(ctx, ledgerID, ps[len(ps)-1].Entry)
	if err != nil {
		return nil, err
	}
	if r.CanReadRange() {
		// Up to readRangeParts range reads in flight, each over its part of
		// the run: one request at a time would serialise large entries that
		// single reads fetched readWindow at a time.
		parts := min(readRangeParts, (len(ps)+readRangeMinPart-1)/readRangeMinPart)
		size := (len(ps) + parts - 1) / parts
		got := make([][][]byte, parts)
		errs := make([]error, parts)
		var wg sync.WaitGroup
		for i := range parts {
			lo, hi := i*size, min((i+1)*size, len(ps))
			if lo >= hi {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next := ps[lo].Entry; next <= ps[hi-1].Entry; {
					es, err := r.ReadRange(ctx, next, ps[hi-1].Entry, 0)
					if err != nil {
						errs[i] = fmt.Errorf("mledger: %s: read %d:%d: %w", ml.name, ledgerID, next, err)
						return
					}
					for _, e := range es {
						got[i] = append(got[i], e.Payload)
					}
					next += int64(len(es))
				}
			}()
		}
		wg.Wait()
		var out [][]byte
		for i := range parts {
			out = append(out, got[i]...)
			if errs[i] != nil {
				return out, errs[i]
			}
		}
		return out, nil
	}
	out := make([][]byte, len(ps))
	errs := make([]error, len(ps))
	sem := make(chan struct{}, readWindow)
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			e, err := r.Read(ctx, p.Entry)
			out[i], errs[i] = e.Payload, err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return out[:i], fmt.Errorf("mledger: %s: read %s: %w", ml.name, ps[i], err)
		}
	}
	return out, nil
}

// reader returns a reader of ledger id that can read up to entry need. It
// caches readers; a cached one that ends before need (opened while the
// ledger was being written) is replaced by a fresh one rather than
// refreshed in place, because Reader.RefreshLAC is not safe concurrently
// with Read.
func (ml *ManagedLedger) reader(ctx context.Context, id, need int64) (*ledger.Reader, error) {
	ml.mu.Lock()
	r := ml.readers[id]
	ml.mu.Unlock()
	if r != nil && r.LastEntry() >= need {
		return r, nil
	}
	r, err := ml.lc.Open(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("mledger: %s: open ledger %d: %w", ml.name, id, err)
	}
	if r.LastEntry() < need {
		return nil, fmt.Errorf("mledger: %s: ledger %d: entry %d not readable from bookies yet (their LAC is %d)", ml.name, id, need, r.LastEntry())
	}
	ml.mu.Lock()
	if ml.v.find(id) >= 0 {
		ml.readers[id] = r
	}
	ml.mu.Unlock()
	return r, nil
}
