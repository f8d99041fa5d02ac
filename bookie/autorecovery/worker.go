package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
)

// errReplan: the metadata changed under a copy (another worker swapped the
// position first, or the ledger changed); the ledger is planned again.
var errReplan = errors.New("autorecovery: metadata changed during the copy; re-plan")

// Worker re-replicates the ledgers marked under-replicated. Run several
// (in one process or many): a lock key bound to each worker's lease makes
// sure two never copy the same ledger at once.
type Worker struct {
	cfg    Config
	id     string
	client *ledger.Client
	rng    *rand.Rand

	mu      sync.Mutex
	stats   WorkerStats
	backoff map[int64]time.Time
}

// WorkerStats counts what a worker did.
type WorkerStats struct {
	Ledgers       int   // markers completed (deleted)
	Fragments     int   // fragment positions swapped in metadata
	Entries       int64 // entry copies acknowledged by a replacement
	Bytes         int64 // payload bytes of those copies
	SkippedOpen   int   // markers left because the ledger is not closed
	Failures      int   // ledger attempts that failed (retried later)
	LastCopyError string
}

// NewWorker returns a worker named id, reading and writing bookies through
// client (whose BookieSource should be the same registry view).
func NewWorker(cfg Config, id string, client *ledger.Client) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, errors.New("autorecovery: NewWorker needs a ledger client")
	}
	return &Worker{cfg: cfg.withDefaults(), id: id, client: client,
		rng:     rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6175746f)),
		backoff: map[int64]time.Time{}}, nil
}

// ID returns the worker's name.
func (w *Worker) ID() string { return w.id }

// Stats returns the counters.
func (w *Worker) Stats() WorkerStats { w.mu.Lock(); defer w.mu.Unlock(); return w.stats }

// Run claims and repairs marked ledgers until ctx ends. Its claims live as
// long as its lease: when the process dies they expire after LockTTL.
func (w *Worker) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := w.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		w.cfg.Logger.Warn("worker session ended", "worker", w.id, "err", err)
		sleep(ctx, time.Second)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// session holds one lease and works under it until the lease is lost.
func (w *Worker) session(ctx context.Context) error {
	lease, err := w.cfg.Store.GrantLease(ctx, w.cfg.LockTTL)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-lease.Lost():
			cancel()
		case <-sctx.Done():
		}
	}()
	for sctx.Err() == nil {
		did, err := w.pass(sctx, lease)
		if err != nil && sctx.Err() == nil {
			w.cfg.Logger.Warn("worker pass failed", "worker", w.id, "err", err)
		}
		if !did {
			sleep(sctx, w.cfg.PollInterval)
		}
	}
	if ctx.Err() != nil {
		// Shutting down cleanly: give our claims back at once. (A killed
		// process cannot; its claims expire with the lease.)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		lease.Revoke(rctx)
		rcancel()
	}
	return errors.New("lease lost")
}

// pass tries every marker once; did reports whether it completed one.
func (w *Worker) pass(ctx context.Context, lease *cluster.Lease) (did bool, err error) {
	kvs, _, err := w.cfg.Store.List(ctx, markerPrefix)
	if err != nil {
		return false, err
	}
	for _, kv := range kvs {
		if ctx.Err() != nil {
			return did, nil
		}
		mk, err := decodeMarker(kv.Value)
		if err != nil {
			w.cfg.Logger.Error("bad marker; deleting", "key", kv.Key, "err", err)
			w.cfg.Store.DeleteCAS(ctx, kv.Key, kv.ModRevision)
			continue
		}
		w.mu.Lock()
		until := w.backoff[mk.LedgerID]
		w.mu.Unlock()
		if time.Now().Before(until) {
			continue
		}
		if _, err := w.cfg.Store.CreateWithLease(ctx, lockKey(mk.LedgerID), []byte(w.id), lease.ID); err != nil {
			if errors.Is(err, cluster.ErrExists) {
				continue // another worker has it
			}
			return did, err
		}
		done, err := w.repairLedger(ctx, mk, kv.ModRevision)
		if ctx.Err() == nil {
			w.cfg.Store.Delete(context.WithoutCancel(ctx), lockKey(mk.LedgerID))
		}
		switch {
		case err != nil:
			w.cfg.Logger.Warn("re-replication failed; will retry", "worker", w.id, "ledger", mk.LedgerID, "err", err)
			w.mu.Lock()
			w.stats.Failures++
			w.stats.LastCopyError = err.Error()
			w.backoff[mk.LedgerID] = time.Now().Add(w.cfg.RetryBackoff)
			w.mu.Unlock()
		case done:
			did = true
		}
	}
	return did, nil
}

// repairLedger re-replicates every affected fragment of a closed ledger and
// deletes its marker (at markerRev). done is false when the ledger was
// left as is (open).
func (w *Worker) repairLedger(ctx context.Context, mk Marker, markerRev int64) (done bool, err error) {
	lost := map[string]bool{}
	for _, id := range mk.Lost {
		lost[id] = true
	}
	for attempt := 0; ; attempt++ {
		m, err := ledger.ReadMetadata(ctx, w.cfg.Store, mk.LedgerID)
		if errors.Is(err, ledger.ErrNoSuchLedger) {
			return true, w.deleteMarker(ctx, mk, markerRev) // ledger deleted: nothing to keep
		}
		if err != nil {
			return false, err
		}
		if m.Meta.State != metapb.LedgerState_CLOSED {
			// Left to its writer (or to recovery); never fenced here.
			w.mu.Lock()
			w.stats.SkippedOpen++
			w.backoff[mk.LedgerID] = time.Now().Add(w.cfg.RetryBackoff)
			w.mu.Unlock()
			return false, nil
		}
		repairs := PlanRepairs(m.Meta, lost)
		err = nil
		for _, r := range repairs {
			if m, err = w.repairFragment(ctx, m, r, lost); err != nil {
				break
			}
		}
		if errors.Is(err, errReplan) && attempt < 3 {
			continue
		}
		if err != nil {
			return false, err
		}
		if err := w.deleteMarker(ctx, mk, markerRev); err != nil {
			return false, err
		}
		w.mu.Lock()
		w.stats.Ledgers++
		w.mu.Unlock()
		return true, nil
	}
}

func (w *Worker) deleteMarker(ctx context.Context, mk Marker, rev int64) error {
	err := w.cfg.Store.DeleteCAS(ctx, markerKey(mk.LedgerID), rev)
	if errors.Is(err, cluster.ErrVersionMismatch) || errors.Is(err, cluster.ErrNotFound) {
		return nil // extended by the auditor meanwhile (re-planned next pass), or gone
	}
	return err
}

// repairFragment chooses replacements for r's positions, copies the
// entries they must hold from survivors, then swaps them into the metadata.
func (w *Worker) repairFragment(ctx context.Context, m ledger.Metadata, r FragmentRepair, lost map[string]bool) (ledger.Metadata, error) {
	meta := m.Meta
	frag := meta.Fragments[r.Index]
	e, qw, qa := int(meta.EnsembleSize), int(meta.WriteQuorum), int(meta.AckQuorum)
	ens := make([]rack.Bookie, len(frag.Ensemble))
	for i, b := range frag.Ensemble {
		ens[i] = ledger.RackBookie(b)
	}
	regs := w.cfg.Bookies.Bookies(true)
	cands := make([]rack.Bookie, 0, len(regs))
	byID := map[string]*metapb.BookieRegistration{}
	for _, b := range regs {
		if lost[b.Reg.Id] {
			continue
		}
		cands = append(cands, rack.Bookie{ID: b.Reg.Id, Region: b.Reg.Region, Rack: b.Reg.Rack})
		byID[b.Reg.Id] = b.Reg
	}
	newEns, err := ChooseReplacements(cands, ledger.PolicyOf(meta), qw, qa, ens, r.Positions, lost, w.rng)
	if err != nil {
		return m, err
	}
	repl := map[int]*metapb.BookieRef{}
	for _, p := range r.Positions {
		reg := byID[newEns[p].ID]
		repl[p] = &metapb.BookieRef{Id: reg.Id, Addr: reg.Addr, Region: reg.Region, Rack: reg.Rack}
	}
	start := time.Now()
	n, bytes, err := w.copyEntries(ctx, meta.LedgerId, frag, r, e, qw, repl)
	if err != nil {
		return m, err
	}
	// Swap, only where the metadata still names the bookie we copied for.
	next, err := ledger.UpdateMetadata(ctx, w.cfg.Store, m, func(x *metapb.LedgerMetadata) (*metapb.LedgerMetadata, error) {
		if x.State != metapb.LedgerState_CLOSED || r.Index >= len(x.Fragments) || x.Fragments[r.Index].FirstEntryId != frag.FirstEntryId {
			return nil, errReplan
		}
		f := x.Fragments[r.Index]
		for _, p := range r.Positions {
			if f.Ensemble[p].Id != frag.Ensemble[p].Id {
				return nil, errReplan
			}
			f.Ensemble[p] = repl[p]
		}
		return x, nil
	})
	if err != nil {
		return m, err
	}
	var swaps []string
	for _, p := range r.Positions {
		swaps = append(swaps, fmt.Sprintf("%d:%s->%s", p, frag.Ensemble[p].Id, repl[p].Id))
	}
	w.cfg.Logger.Info("fragment re-replicated", "worker", w.id, "ledger", meta.LedgerId, "fragment", r.Index,
		"swaps", swaps, "entries", n, "bytes", bytes, "took", time.Since(start))
	w.mu.Lock()
	w.stats.Fragments += len(r.Positions)
	w.mu.Unlock()
	return next, nil
}

// copyEntries copies every entry of the fragment that a replaced position
// stores, from a surviving replica to the replacement, as recovery adds
// (same LAC, payload and digest), throttled, with CopyWindow adds in
// flight. It returns once every copy was acknowledged, or the first error.
func (w *Worker) copyEntries(ctx context.Context, ledgerID int64, frag *metapb.Fragment, r FragmentRepair, e, qw int, repl map[int]*metapb.BookieRef) (int64, int64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, w.cfg.CopyWindow)
	var wg sync.WaitGroup
	var n, bytes int64
	var cmu sync.Mutex
	for id := r.First; id <= r.Last; id++ {
		c, ok := CopiesOf(id, e, qw, r.Positions)
		if !ok {
			continue
		}
		src, err := w.readSurvivor(ctx, ledgerID, id, frag, c.Sources)
		if err != nil {
			cancel(err)
			break
		}
		if err := w.cfg.Throttle.Wait(ctx, len(src.Payload)*len(c.Targets)); err != nil {
			break
		}
		for _, p := range c.Targets {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := w.client.RecoveryAddTo(ctx, repl[p], ledgerID, id, src); err != nil {
					cancel(err)
					return
				}
				cmu.Lock()
				n++
				bytes += int64(len(src.Payload))
				cmu.Unlock()
				w.mu.Lock()
				w.stats.Entries++
				w.stats.Bytes += int64(len(src.Payload))
				w.mu.Unlock()
				if h := w.cfg.testHookCopied; h != nil {
					h(w, ledgerID, id)
				}
			}()
		}
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return n, bytes, err
	}
	return n, bytes, nil
}

// readSurvivor reads entry id from the first surviving position that
// returns it intact.
func (w *Worker) readSurvivor(ctx context.Context, ledgerID, id int64, frag *metapb.Fragment, sources []int) (*bookiepb.ReadEntryResponse, error) {
	var errs []error
	for _, p := range sources {
		b := frag.Ensemble[p]
		resp, err := w.client.ReadEntryFrom(ctx, b, ledgerID, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if resp.Status != bookiepb.Status_OK {
			errs = append(errs, fmt.Errorf("bookie %s: %s: %s", b.Id, resp.Status, resp.Message))
			continue
		}
		return resp, nil
	}
	return nil, fmt.Errorf("autorecovery: ledger %d entry %d: no surviving replica served it (sources %v): %w",
		ledgerID, id, slices.Clone(sources), errors.Join(errs...))
}
