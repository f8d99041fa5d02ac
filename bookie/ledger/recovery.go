package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
)

// Recover opens a ledger for recovery and closes it at the last entry that
// may have been acknowledged to its writer, then returns a reader of the
// closed ledger. It is BookKeeper's recover-and-close:
//
//  1. CAS the metadata OPEN → IN_RECOVERY (a closed ledger needs nothing).
//  2. Fence the last fragment's bookies with a fencing read of their LAC,
//     until every write set has at least Qw-Qa+1 answers: the old writer can
//     then never gather Qa acknowledgements again. The fence is persisted on
//     each bookie before it answers.
//  3. Read forward from max(LAC, first entry of the last fragment - 1) + 1.
//     Recovery reads fence too (BookKeeper #2614). An entry is present if
//     any replica returns it intact; absent only when Qw-Qa+1 replicas say
//     authoritatively that they do not have it (a wiped bookie answers
//     UNKNOWN, which counts for nothing: BookKeeper #2612). Each entry found
//     is re-written to its whole write set as a recovery add.
//  4. CAS IN_RECOVERY → CLOSED at the last entry found. Concurrent
//     recoveries, and a recovery that crashed halfway, converge: the CAS
//     lets one result stand and every later recovery reads it.
func (c *Client) Recover(ctx context.Context, id int64) (*Reader, error) {
	m, err := ReadMetadata(ctx, c.cfg.Store, id)
	if err != nil {
		return nil, err
	}
	m, err = updateMeta(ctx, c.cfg.Store, m, func(x *metapb.LedgerMetadata) (*metapb.LedgerMetadata, error) {
		if x.State != metapb.LedgerState_OPEN {
			return nil, nil
		}
		x.State = metapb.LedgerState_IN_RECOVERY
		return x, nil
	})
	if err != nil {
		return nil, err
	}
	if m.Meta.State == metapb.LedgerState_CLOSED {
		return newClosedReader(c, m), nil
	}

	frag := m.LastFragment()
	lac, err := c.fenceAndReadLAC(ctx, m)
	if err != nil {
		return nil, err
	}
	last := max(lac, frag.FirstEntryId-1)
	for e := last + 1; ; e++ {
		found, resp, err := c.recoveryRead(ctx, m, e)
		if err != nil {
			return nil, err
		}
		if !found {
			break
		}
		if err := c.recoveryAdd(ctx, m, e, resp); err != nil {
			return nil, err
		}
		last = e
	}

	m, err = updateMeta(ctx, c.cfg.Store, m, func(x *metapb.LedgerMetadata) (*metapb.LedgerMetadata, error) {
		if x.State == metapb.LedgerState_CLOSED {
			return nil, nil // another recovery finished first; its result stands
		}
		x.State = metapb.LedgerState_CLOSED
		x.LastEntryId = last
		return x, nil
	})
	if err != nil {
		return nil, err
	}
	c.cfg.Logger.Info("ledger recovered", "ledger", id, "last_entry", m.Meta.LastEntryId)
	return newClosedReader(c, m), nil
}

// fenceAndReadLAC fences every bookie of the last fragment and returns the
// highest LAC they report, once the answers cover every write set.
func (c *Client) fenceAndReadLAC(ctx context.Context, m Metadata) (int64, error) {
	frag := m.LastFragment()
	e, qw, qa := int(m.Meta.EnsembleSize), int(m.Meta.WriteQuorum), int(m.Meta.AckQuorum)
	type res struct {
		pos  int
		resp *bookiepb.ReadLacResponse
		err  error
	}
	ch := make(chan res, e)
	for p, b := range frag.Ensemble {
		go func() {
			resp, err := c.readLac(ctx, b, m.Meta.LedgerId, true)
			ch <- res{p, resp, err}
		}()
	}
	valid := make([]bool, e)
	lac := int64(-1)
	var errs []error
	for range e {
		r := <-ch
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.resp.Status == bookiepb.Status_OK:
			valid[r.pos] = true
			lac = max(lac, r.resp.Lac)
		case r.resp.Status == bookiepb.Status_NO_SUCH_LEDGER:
			valid[r.pos] = true
		default:
			errs = append(errs, fmt.Errorf("bookie %s: %s: %s", frag.Ensemble[r.pos].Id, r.resp.Status, r.resp.Message))
		}
		if covered(valid, e, qw, qw-qa+1) {
			return lac, nil
		}
	}
	return 0, fmt.Errorf("%w: ledger %d: fencing did not reach %d bookies of every write set: %w", ErrRecovery, m.Meta.LedgerId, qw-qa+1, errors.Join(errs...))
}

// covered reports whether every one of the E write sets has at least need
// positions marked.
func covered(marked []bool, e, qw, need int) bool {
	for start := range e {
		n := 0
		for w := range qw {
			if marked[(start+w)%e] {
				n++
			}
		}
		if n < need {
			return false
		}
	}
	return true
}

// recoveryRead reads entry id with fencing from its write set. It returns
// found=true with a replica's intact copy, found=false when Qw-Qa+1 replicas
// say authoritatively they do not have it, and an error when it cannot tell.
func (c *Client) recoveryRead(ctx context.Context, m Metadata, id int64) (bool, *bookiepb.ReadEntryResponse, error) {
	frag := m.FragmentFor(id)
	qw, qa := int(m.Meta.WriteQuorum), int(m.Meta.AckQuorum)
	ws := writeSet(id, int(m.Meta.EnsembleSize), qw)
	type res struct {
		b    *metapb.BookieRef
		resp *bookiepb.ReadEntryResponse
		err  error
	}
	ch := make(chan res, len(ws))
	for _, p := range ws {
		b := frag.Ensemble[p]
		go func() {
			resp, err := c.readOne(ctx, b, m.Meta.LedgerId, id, true)
			ch <- res{b, resp, err}
		}()
	}
	absent := 0
	var errs []error
	for range ws {
		r := <-ch
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.resp.Status == bookiepb.Status_OK:
			return true, r.resp, nil
		case r.resp.Status == bookiepb.Status_NO_SUCH_ENTRY || r.resp.Status == bookiepb.Status_NO_SUCH_LEDGER:
			absent++
			if absent >= qw-qa+1 {
				return false, nil, nil
			}
		default:
			errs = append(errs, fmt.Errorf("bookie %s: %s: %s", r.b.Id, r.resp.Status, r.resp.Message))
		}
	}
	return false, nil, fmt.Errorf("%w: ledger %d entry %d: neither found nor absent on %d replicas: %w", ErrRecovery, m.Meta.LedgerId, id, qw-qa+1, errors.Join(errs...))
}

// recoveryAdd re-writes a recovered entry, as it was (same LAC and digest),
// to its whole write set, and waits for the ack quorum.
func (c *Client) recoveryAdd(ctx context.Context, m Metadata, id int64, src *bookiepb.ReadEntryResponse) error {
	frag := m.FragmentFor(id)
	qw, qa := int(m.Meta.WriteQuorum), int(m.Meta.AckQuorum)
	ws := writeSet(id, int(m.Meta.EnsembleSize), qw)
	ch := make(chan error, len(ws))
	for _, p := range ws {
		b := frag.Ensemble[p]
		req := &bookiepb.AddRequest{LedgerId: m.Meta.LedgerId, EntryId: id, Lac: src.Lac, Payload: src.Payload, Digest: src.Digest, Recovery: true}
		conn, err := c.conn(b)
		if err != nil {
			ch <- err
			continue
		}
		conn.add(req, func(resp *bookiepb.AddResponse, err error) {
			if err == nil && resp.Status != bookiepb.Status_OK {
				err = fmt.Errorf("bookie %s: %s: %s", b.Id, resp.Status, resp.Message)
			}
			ch <- err
		})
	}
	ok := 0
	var errs []error
	timeout := time.After(c.cfg.AddTimeout)
	for range ws {
		select {
		case err := <-ch:
			if err != nil {
				errs = append(errs, err)
				continue
			}
			ok++
			if ok >= qa {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			errs = append(errs, fmt.Errorf("no answer within %s", c.cfg.AddTimeout))
			if c.cfg.DegradedRecovery && ok >= qw-qa+1 {
				c.cfg.Logger.Warn("ledger recovery: entry re-written to fewer bookies than the ack quorum (degraded recovery; auto-recovery restores it)",
					"ledger", m.Meta.LedgerId, "entry", id, "bookies", ok, "ack_quorum", qa, "errors", errors.Join(errs...))
				return nil
			}
			return fmt.Errorf("%w: ledger %d entry %d: re-replicated to %d bookies, need %d: %w", ErrRecovery, m.Meta.LedgerId, id, ok, qa, errors.Join(errs...))
		}
	}
	if c.cfg.DegradedRecovery && ok >= qw-qa+1 {
		c.cfg.Logger.Warn("ledger recovery: entry re-written to fewer bookies than the ack quorum (degraded recovery; auto-recovery restores it)",
			"ledger", m.Meta.LedgerId, "entry", id, "bookies", ok, "ack_quorum", qa, "errors", errors.Join(errs...))
		return nil
	}
	return fmt.Errorf("%w: ledger %d entry %d: re-replicated to %d bookies, need %d: %w", ErrRecovery, m.Meta.LedgerId, id, ok, qa, errors.Join(errs...))
}
