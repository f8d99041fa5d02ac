package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/meridian-mq/meridian/bookie/digest"

	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
)

// Entry is one entry read back.
type Entry struct {
	LedgerID, EntryID int64
	Payload           []byte
	// Bookie is the replica that served the entry.
	Bookie string
	// Skipped lists the replicas tried before it and why they failed
	// (corrupt, unknown, unreachable): each is counted, none is fatal while
	// another replica has the entry.
	Skipped []ReplicaError
}

// ReplicaError says why one replica could not serve an entry.
type ReplicaError struct {
	Bookie string
	Status bookiepb.Status // OK when the failure was a transport error
	Err    error
}

func (e ReplicaError) Error() string { return fmt.Sprintf("%s: %v", e.Bookie, e.Err) }

// Reader reads a ledger. Safe for concurrent use.
type Reader struct {
	c    *Client
	meta Metadata
	// lastReadable bounds reads: the last entry of a closed ledger or the
	// LAC of an open one (moved by RefreshLAC).
	lastReadable atomic.Int64
}

// Open opens a ledger for reading without recovery. For an open ledger,
// reads are bounded by the LAC read from its bookies at open time (call
// RefreshLAC to move it).
func (c *Client) Open(ctx context.Context, id int64) (*Reader, error) {
	m, err := ReadMetadata(ctx, c.cfg.Store, id)
	if err != nil {
		return nil, err
	}
	r := &Reader{c: c, meta: m}
	if m.Meta.State == metapb.LedgerState_CLOSED {
		r.lastReadable.Store(m.Meta.LastEntryId)
		return r, nil
	}
	lac, err := r.readLAC(ctx)
	if err != nil {
		return nil, err
	}
	r.lastReadable.Store(lac)
	return r, nil
}

func newClosedReader(c *Client, m Metadata) *Reader {
	r := &Reader{c: c, meta: m}
	r.lastReadable.Store(m.Meta.LastEntryId)
	return r
}

// Metadata returns the metadata the reader was opened with.
func (r *Reader) Metadata() Metadata { return r.meta }

// LastEntry returns the last readable entry id (-1 when none).
func (r *Reader) LastEntry() int64 { return r.lastReadable.Load() }

// RefreshLAC re-reads the last-add-confirmed of an open ledger.
func (r *Reader) RefreshLAC(ctx context.Context) (int64, error) {
	if r.meta.Meta.State == metapb.LedgerState_CLOSED {
		return r.lastReadable.Load(), nil
	}
	lac, err := r.readLAC(ctx)
	if err != nil {
		return 0, err
	}
	for {
		cur := r.lastReadable.Load()
		if lac <= cur || r.lastReadable.CompareAndSwap(cur, lac) {
			return max(cur, lac), nil
		}
	}
}

// readLAC asks the last fragment's bookies (no fencing) and takes the
// maximum. Entries up to it are on at least Qa bookies.
func (r *Reader) readLAC(ctx context.Context) (int64, error) {
	frag := r.meta.LastFragment()
	lac := frag.FirstEntryId - 1
	var errs []error
	answered := 0
	for _, b := range frag.Ensemble {
		resp, err := r.c.readLac(ctx, b, r.meta.Meta.LedgerId, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if resp.Status == bookiepb.Status_OK || resp.Status == bookiepb.Status_NO_SUCH_LEDGER {
			answered++
			if resp.Status == bookiepb.Status_OK && resp.Lac > lac {
				lac = resp.Lac
			}
		}
	}
	if answered == 0 && len(errs) > 0 {
		return 0, fmt.Errorf("ledger %d: read LAC: %w", r.meta.Meta.LedgerId, errors.Join(errs...))
	}
	return lac, nil
}

// Read reads entry id, trying the replicas of its write set in locality
// order (same rack, same region, others) and moving on from a replica that
// is corrupt, unknown, missing it or unreachable.
func (r *Reader) Read(ctx context.Context, id int64) (Entry, error) {
	if last := r.lastReadable.Load(); id < 0 || id > last {
		return Entry{}, fmt.Errorf("%w: ledger %d entry %d (last readable %d)", ErrNoSuchEntry, r.meta.Meta.LedgerId, id, last)
	}
	return r.c.readEntry(ctx, r.meta, id, false)
}

// CanReadRange reports whether ReadRange reads a run of entries with one
// request: every bookie of a fragment holds all of its entries (ensemble
// size = write quorum, no striping).
func (r *Reader) CanReadRange() bool {
	return r.meta.Meta.EnsembleSize == r.meta.Meta.WriteQuorum
}

// ReadRange reads consecutive entries from first on, up to last, and
// returns at least one of them (the first) unless it fails. With
// CanReadRange it asks one replica (the nearest in read order) for the
// run with one ReadEntries request (BookKeeper's batch read) and returns
// the prefix it answered intact, stopping at a fragment's end and at about
// maxBytes of payload (<= 0: the bookie's own bound). Where that replica
// fails, or the ledger is striped, it reads first alone, as Read does,
// from any replica that has it. Callers loop from the entry after the last
// one returned.
func (r *Reader) ReadRange(ctx context.Context, first, last int64, maxBytes int) ([]Entry, error) {
	if lr := r.lastReadable.Load(); first < 0 || first > last || last > lr {
		return nil, fmt.Errorf("%w: ledger %d entries %d..%d (last readable %d)", ErrNoSuchEntry, r.meta.Meta.LedgerId, first, last, lr)
	}
	if r.CanReadRange() && last > first {
		m := r.meta
		last = min(last, m.FragmentEnd(first))
		frag := m.FragmentFor(first)
		set := make([]rack.Bookie, len(frag.Ensemble))
		for i, b := range frag.Ensemble {
			set[i] = toRack(b)
		}
		order := rack.ReadOrder(set, r.c.cfg.Region, r.c.cfg.Rack, nil)
		b := frag.Ensemble[order[0]]
		if got, err := r.c.readRange(ctx, b, m.Meta.LedgerId, first, last, maxBytes); err == nil && len(got) > 0 {
			return got, nil
		}
	}
	e, err := r.Read(ctx, first)
	if err != nil {
		return nil, err
	}
	return []Entry{e}, nil
}

// readRange asks bookie b for entries first..last and returns the intact
// consecutive prefix of its answer.
func (c *Client) readRange(ctx context.Context, b *metapb.BookieRef, ledgerID, first, last int64, maxBytes int) ([]Entry, error) {
	conn, err := c.conn(b)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
	defer cancel()
	resp, err := conn.client.ReadEntries(ctx, &bookiepb.ReadEntriesRequest{
		LedgerId: ledgerID, FirstEntryId: first, MaxEntries: int32(min(last-first+1, 1<<20)), MaxBytes: int64(maxBytes),
	})
	if err != nil {
		return nil, fmt.Errorf("bookie %s: %w", b.Id, err)
	}
	if resp.Status != bookiepb.Status_OK {
		return nil, fmt.Errorf("bookie %s: %s: %s", b.Id, resp.Status, resp.Message)
	}
	out := make([]Entry, 0, len(resp.Entries))
	for i, e := range resp.Entries {
		id := first + int64(i)
		if e.EntryId != id || e.LedgerId != ledgerID || id > last || digest.Entry(ledgerID, id, e.Lac, e.Payload) != e.Digest {
			break // damaged or unexpected from here on: the caller reads it singly
		}
		out = append(out, Entry{LedgerID: ledgerID, EntryID: id, Payload: e.Payload, Bookie: b.Id})
	}
	return out, nil
}

func (c *Client) readLac(ctx context.Context, b *metapb.BookieRef, ledgerID int64, fence bool) (*bookiepb.ReadLacResponse, error) {
	conn, err := c.conn(b)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
	defer cancel()
	resp, err := conn.client.ReadLac(ctx, &bookiepb.ReadLacRequest{LedgerId: ledgerID, Fence: fence})
	if err != nil {
		return nil, fmt.Errorf("bookie %s: %w", b.Id, err)
	}
	return resp, nil
}

func (c *Client) readOne(ctx context.Context, b *metapb.BookieRef, ledgerID, entryID int64, fence bool) (*bookiepb.ReadEntryResponse, error) {
	conn, err := c.conn(b)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
	defer cancel()
	resp, err := conn.client.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: ledgerID, EntryId: entryID, Fence: fence})
	if err != nil {
		return nil, fmt.Errorf("bookie %s: %w", b.Id, err)
	}
	if resp.Status == bookiepb.Status_OK && digest.Entry(ledgerID, entryID, resp.Lac, resp.Payload) != resp.Digest {
		// The bookie checks on read too; this catches damage in between.
		resp.Status = bookiepb.Status_CORRUPT
		resp.Message = "digest mismatch at the client"
	}
	return resp, nil
}

// readEntry reads one entry from the first replica that has it intact.
func (c *Client) readEntry(ctx context.Context, m Metadata, id int64, fence bool) (Entry, error) {
	frag := m.FragmentFor(id)
	ws := writeSet(id, int(m.Meta.EnsembleSize), int(m.Meta.WriteQuorum))
	set := make([]rack.Bookie, len(ws))
	for i, p := range ws {
		set[i] = toRack(frag.Ensemble[p])
	}
	order := rack.ReadOrder(set, c.cfg.Region, c.cfg.Rack, nil)
	var skipped []ReplicaError
	corrupt := 0
	for _, i := range order {
		b := frag.Ensemble[ws[i]]
		resp, err := c.readOne(ctx, b, m.Meta.LedgerId, id, fence)
		if err != nil {
			skipped = append(skipped, ReplicaError{Bookie: b.Id, Err: err})
			continue
		}
		if resp.Status != bookiepb.Status_OK {
			if resp.Status == bookiepb.Status_CORRUPT {
				corrupt++
			}
			skipped = append(skipped, ReplicaError{Bookie: b.Id, Status: resp.Status, Err: fmt.Errorf("%s: %s", resp.Status, resp.Message)})
			continue
		}
		return Entry{LedgerID: m.Meta.LedgerId, EntryID: id, Payload: resp.Payload, Bookie: b.Id, Skipped: skipped}, nil
	}
	errs := make([]error, len(skipped))
	for i, s := range skipped {
		errs[i] = s
	}
	if corrupt == len(skipped) && corrupt > 0 {
		return Entry{}, fmt.Errorf("%w: ledger %d entry %d: %w", ErrCorrupt, m.Meta.LedgerId, id, errors.Join(errs...))
	}
	return Entry{}, fmt.Errorf("ledger %d entry %d: no replica could serve it: %w", m.Meta.LedgerId, id, errors.Join(errs...))
}
