package ledger

import (
	"context"
	"fmt"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
)

// Helpers for re-replication (bookie/autorecovery): a copier reads an entry
// from one surviving replica and re-sends it, unchanged, to one replacement
// bookie, then swaps the replacement into the ledger's metadata.

// WriteSet returns the ensemble positions that store entry e: (e+w) mod E for
// w in [0, Qw), the same striping the writer uses.
func WriteSet(e int64, ensembleSize, qw int) []int { return writeSet(e, ensembleSize, qw) }

// PolicyOf returns the placement policy recorded in a ledger's metadata.
func PolicyOf(m *metapb.LedgerMetadata) rack.Policy { return policyFromProto(m.Placement) }

// RackBookie returns the placement labels of an ensemble member as recorded in
// the metadata (usable even after the bookie left the registry).
func RackBookie(b *metapb.BookieRef) rack.Bookie { return toRack(b) }

// FragmentLastEntry returns the last entry id of fragment i of a CLOSED
// ledger: the entry before the next fragment's first, or the ledger's last
// entry for the last fragment. It is below the fragment's first entry when
// the fragment holds no entry. For a ledger that is not CLOSED the last
// fragment's end is unknown and it returns -1 with ok=false.
func FragmentLastEntry(m *metapb.LedgerMetadata, i int) (last int64, ok bool) {
	f := m.Fragments
	if i+1 < len(f) {
		return f[i+1].FirstEntryId - 1, true
	}
	if m.State != metapb.LedgerState_CLOSED {
		return -1, false
	}
	return m.LastEntryId, true
}

// ReadEntryFrom reads one entry from one given bookie without fencing. A
// response with a bad digest comes back with Status CORRUPT. The error is a
// transport error; the bookie's answer is in the response's Status.
func (c *Client) ReadEntryFrom(ctx context.Context, b *metapb.BookieRef, ledgerID, entryID int64) (*bookiepb.ReadEntryResponse, error) {
	return c.readOne(ctx, b, ledgerID, entryID, false)
}

// RecoveryAddTo writes an entry, exactly as read from a replica (same LAC,
// payload and digest), to bookie b as a recovery add (accepted on fenced
// and limbo ledgers), and waits until b persisted it or failed. Writing the
// same entry twice is harmless.
func (c *Client) RecoveryAddTo(ctx context.Context, b *metapb.BookieRef, ledgerID, entryID int64, src *bookiepb.ReadEntryResponse) error {
	conn, err := c.conn(b)
	if err != nil {
		return err
	}
	req := &bookiepb.AddRequest{LedgerId: ledgerID, EntryId: entryID, Lac: src.Lac, Payload: src.Payload, Digest: src.Digest, Recovery: true}
	ch := make(chan error, 1)
	conn.add(req, func(resp *bookiepb.AddResponse, err error) {
		if err == nil && resp.Status != bookiepb.Status_OK {
			err = fmt.Errorf("bookie %s: %s: %s", b.Id, resp.Status, resp.Message)
		}
		ch <- err
	})
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AddTimeout)
	defer cancel()
	select {
	case err := <-ch:
		if err != nil {
			return fmt.Errorf("ledger %d entry %d to %s: %w", ledgerID, entryID, b.Id, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ledger %d entry %d to %s: %w", ledgerID, entryID, b.Id, ctx.Err())
	}
}

// UpdateMetadata is the metadata compare-and-swap loop: transform a copy of
// the current metadata and CAS it at cur.Rev; on a lost race re-read and
// call transform again. transform returns (nil, nil) when no write is needed,
// or an error to stop (returned as is).
func UpdateMetadata(ctx context.Context, s *cluster.Store, cur Metadata, transform func(*metapb.LedgerMetadata) (*metapb.LedgerMetadata, error)) (Metadata, error) {
	return updateMeta(ctx, s, cur, transform)
}
