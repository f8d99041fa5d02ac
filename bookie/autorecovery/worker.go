package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/ratelog"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
	clientv3 "go.etcd.io/etcd/client/v3"
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
	// rlog: the retry warnings, one a key per 10 s with the count held
	// back (a region's worth of ledgers failing every RetryBackoff would
	// flood the log and hide what explains it).
	rlog *ratelog.Logger

	mu       sync.Mutex
	stats    WorkerStats
	backoff  map[int64]time.Time
	current  int64
	hasLease bool
}

// WorkerStats counts what a worker did.
type WorkerStats struct {
	Ledgers          int   // markers completed (deleted)
	Fragments        int   // fragment positions swapped in metadata
	Entries          int64 // entry copies acknowledged by a replacement
	Bytes            int64 // payload bytes of those copies
	Recovered        int   // open ledgers whose writer was gone, recovered (fenced, closed)
	WaitingForWriter int   // passes that left a marker to a live writer's ledger
	Failures         int   // ledger attempts that failed (retried later)
	LastCopyError    string
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
	cfg = cfg.withDefaults()
	return &Worker{cfg: cfg, id: id, client: client,
		rng:     rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6175746f)),
		rlog:    ratelog.New(cfg.Logger, 0),
		backoff: map[int64]time.Time{}}, nil
}

// ID returns the worker's name.
func (w *Worker) ID() string { return w.id }

// Stats returns the counters.
func (w *Worker) Stats() WorkerStats { w.mu.Lock(); defer w.mu.Unlock(); return w.stats }

// HasLease reports whether the worker holds its etcd lease now (its
// claims live under it): false before its first session and between
// sessions (etcd unreachable).
func (w *Worker) HasLease() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.hasLease }

func (w *Worker) setLease(v bool) { w.mu.Lock(); w.hasLease = v; w.mu.Unlock() }

// Run claims and repairs marked ledgers until ctx ends. Its claims live as
// long as its lease: when the process dies they expire after LockTTL.
func (w *Worker) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		w.cfg.beat(w.id)
		err := w.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		w.rlog.Warn("worker session ended", "worker", w.id, "err", err)
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
	w.setLease(true)
	defer w.setLease(false)
	go func() {
		select {
		case <-lease.Lost():
			w.setLease(false)
			cancel()
		case <-sctx.Done():
		}
	}()
	go w.publishLoop(sctx, lease)
	for sctx.Err() == nil {
		w.cfg.beat(w.id)
		did, err := w.pass(sctx, lease)
		if err != nil && sctx.Err() == nil {
			w.rlog.Warn("worker pass failed", "worker", w.id, "err", err)
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

// publishLoop keeps the worker's progress record (bound to its lease)
// current every StatusInterval.
func (w *Worker) publishLoop(ctx context.Context, lease *cluster.Lease) {
	t := time.NewTicker(w.cfg.StatusInterval)
	defer t.Stop()
	var prevBytes int64
	prev := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w.mu.Lock()
			st := w.stats
			cur := w.current
			w.mu.Unlock()
			rec := WorkerStatus{ID: w.id, UpdatedMs: now.UnixMilli(), Entries: st.Entries, Bytes: st.Bytes, Fragments: st.Fragments,
				Ledgers: st.Ledgers, Recovered: st.Recovered, Failures: st.Failures, Current: cur, LastError: st.LastCopyError,
				CopyBytesPerSec: float64(st.Bytes-prevBytes) / now.Sub(prev).Seconds()}
			prevBytes, prev = st.Bytes, now
			b, _ := json.Marshal(rec)
			if _, err := w.cfg.Store.PutWithLease(ctx, workerPrefix+w.id, b, lease.ID); err != nil && ctx.Err() == nil {
				w.cfg.Logger.Debug("publish worker progress", "worker", w.id, "err", err)
			}
		}
	}
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
			w.rlog.Warn("re-replication failed; will retry", "worker", w.id, "ledger", mk.LedgerID, "err", err)
			w.mu.Lock()
			w.stats.Failures++
			w.stats.LastCopyError = err.Error()
			w.cfg.Metrics.failures.Inc()
			w.backoff[mk.LedgerID] = time.Now().Add(w.cfg.RetryBackoff)
			w.mu.Unlock()
		case done:
			did = true
		}
	}
	return did, nil
}

// repairLedger re-replicates every affected fragment of a marked ledger
// and deletes its marker (at markerRev). done is false when the marker stays
// (an open ledger's last fragment is left to its live writer).
func (w *Worker) repairLedger(ctx context.Context, mk Marker, markerRev int64) (done bool, err error) {
	lost := map[string]bool{}
	for _, id := range mk.Lost {
		lost[id] = true
	}
	w.setCurrent(mk.LedgerID)
	defer w.setCurrent(0)
	recovered, checked := false, false
	for attempt := 0; ; attempt++ {
		m, err := ledger.ReadMetadata(ctx, w.cfg.Store, mk.LedgerID)
		if errors.Is(err, ledger.ErrNoSuchLedger) {
			return true, w.deleteMarker(ctx, mk, markerRev) // ledger deleted: nothing to keep
		}
		if err != nil {
			return false, err
		}
		ws := w.writerState(ctx, m.Meta)
		switch Decide(m.Meta.State, ws) {
		case ActRecover:
			if recovered {
				return false, fmt.Errorf("autorecovery: ledger %d still %s after recovery", mk.LedgerID, m.Meta.State)
			}
			// Its writer is gone (or a recovery died halfway): fence it and
			// close it at the last entry that may have been acknowledged, as a
			// new owner would; then its last fragment is complete and copied
			// like any other.
			w.cfg.Logger.Info("recovering a ledger whose writer is gone", "worker", w.id, "ledger", mk.LedgerID,
				"state", m.Meta.State.String(), "writer", m.Meta.Writer, "writer_lease", m.Meta.WriterLease)
			if _, err := w.client.Recover(ctx, mk.LedgerID); err != nil {
				return false, fmt.Errorf("autorecovery: recover ledger %d: %w", mk.LedgerID, err)
			}
			recovered = true
			w.mu.Lock()
			w.stats.Recovered++
			w.mu.Unlock()
			w.cfg.Metrics.ledgersRecoverd.Inc()
			continue
		}
		if !checked {
			// After any recovery: the last fragment is complete then,
			// and sampled too.
			w.dropReturned(ctx, m.Meta, lost)
			checked = true
		}
		repairs, waiting := PlanRepairs(m.Meta, lost)
		err = nil
		for _, r := range repairs {
			if m, err = w.repairFragment(ctx, m, r, lost); err != nil {
				break
			}
		}
		if err == nil {
			for _, rep := range mk.Missing {
				if err = w.refill(ctx, m, rep, lost); err != nil {
					break
				}
			}
		}
		if err == nil {
			for _, fi := range mk.Misplaced {
				if m, err = w.fixPlacement(ctx, m, fi); err != nil {
					break
				}
			}
		}
		if errors.Is(err, errReplan) && attempt < 3 {
			continue
		}
		if err != nil {
			return false, err
		}
		if waiting {
			// The last fragment of an open ledger still names a lost or
			// draining bookie: its live writer replaces it (at its next add,
			// or when idle by itself, see ledger.Config.IdleReplaceAfter);
			// then the completed fragment is copied at a later pass.
			w.mu.Lock()
			w.stats.WaitingForWriter++
			w.backoff[mk.LedgerID] = time.Now().Add(w.cfg.RetryBackoff)
			w.mu.Unlock()
			return false, nil
		}
		if err := w.deleteMarker(ctx, mk, markerRev); err != nil {
			return false, err
		}
		w.mu.Lock()
		w.stats.Ledgers++
		w.mu.Unlock()
		w.cfg.Metrics.ledgersDone.Inc()
		return true, nil
	}
}

// dropReturned removes from lost the bookies that are back with their
// data for ledger m: registered again, not being decommissioned, and
// answering every entry the scrub would sample from their replicas in m's
// completed fragments with the entry itself. Their replicas stay where they
// are. Without this a marker kept naming a bookie that came back, the
// worker kept it out of the candidates for its replacement, and in a region
// with no bookie to spare (all of a restarted region's bookies once looked
// lost at once, issue 32) it retried the ledger forever. A bookie that came
// back without its data (wiped: a new instance, entries missing) stays
// lost and is moved off as before; so does any bookie when the registry or
// the decommission records cannot be read.
func (w *Worker) dropReturned(ctx context.Context, m *metapb.LedgerMetadata, lost map[string]bool) {
	var back []string
	for id := range lost {
		if reg, ok := w.cfg.Bookies.Lookup(id); ok && reg.Reg != nil {
			back = append(back, id)
		}
	}
	if len(back) == 0 {
		return
	}
	ds, err := cluster.ListDecommissions(ctx, w.cfg.Store)
	if err != nil {
		return
	}
	for _, d := range ds {
		back = slices.DeleteFunc(back, func(id string) bool { return id == d.BookieID })
	}
	slices.Sort(back)
	for _, id := range back {
		if w.hasItsData(ctx, m, id) {
			delete(lost, id)
			w.cfg.Logger.Info("a bookie marked lost is back with its data; its replicas stay", "worker", w.id, "ledger", m.LedgerId, "bookie", id)
		}
	}
}

// hasItsData reads, from registered bookie id, the sample entries of each of
// its replicas in m's completed fragments, and reports whether it returned
// every one of them intact.
func (w *Worker) hasItsData(ctx context.Context, m *metapb.LedgerMetadata, id string) bool {
	reg, ok := w.cfg.Bookies.Lookup(id)
	if !ok {
		return false
	}
	ref := &metapb.BookieRef{Id: id, Addr: reg.Reg.Addr, Region: reg.Reg.Region, Rack: reg.Reg.Rack}
	for fi, f := range m.Fragments {
		for p, b := range f.Ensemble {
			if b.Id != id {
				continue
			}
			for _, e := range SampleEntries(m, fi, p) {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				resp, err := w.client.ReadEntryFrom(rctx, ref, m.LedgerId, e)
				cancel()
				if err != nil || resp.Status != bookiepb.Status_OK {
					return false
				}
			}
		}
	}
	return true
}

// writerState asks etcd whether the lease recorded as the ledger's writer's
// is alive. Anything but a definite "expired" is WriterUnknown or Alive:
// a ledger is fenced only when its writer is known to be gone.
func (w *Worker) writerState(ctx context.Context, m *metapb.LedgerMetadata) WriterState {
	if m.State != metapb.LedgerState_OPEN || m.WriterLease == 0 {
		return WriterUnknown
	}
	resp, err := w.cfg.Store.Client().TimeToLive(ctx, clientv3.LeaseID(m.WriterLease))
	switch {
	case err != nil:
		return WriterUnknown
	case resp.TTL < 0: // expired, or revoked by a writer that closed
		return WriterGone
	}
	return WriterAlive
}

func (w *Worker) setCurrent(id int64) { w.mu.Lock(); w.current = id; w.mu.Unlock() }

func (w *Worker) deleteMarker(ctx context.Context, mk Marker, rev int64) error {
	err := w.cfg.Store.DeleteCAS(ctx, markerKey(mk.LedgerID), rev)
	if errors.Is(err, cluster.ErrVersionMismatch) || errors.Is(err, cluster.ErrNotFound) {
		return nil // extended by the auditor meanwhile (re-planned next pass), or gone
	}
	return err
}

// candidates returns the writable bookies not in exclude, as placement
// candidates with their registrations.
func (w *Worker) candidates(exclude map[string]bool) ([]rack.Bookie, map[string]*metapb.BookieRegistration) {
	regs := w.cfg.Bookies.Bookies(true)
	cands := make([]rack.Bookie, 0, len(regs))
	byID := map[string]*metapb.BookieRegistration{}
	for _, b := range regs {
		if exclude[b.Reg.Id] {
			continue
		}
		cands = append(cands, rack.Bookie{ID: b.Reg.Id, Region: b.Reg.Region, Rack: b.Reg.Rack})
		byID[b.Reg.Id] = b.Reg
	}
	return cands, byID
}

// labels returns a registered bookie's current labels.
func (w *Worker) labels(id string) (rack.Bookie, bool) {
	b, ok := w.cfg.Bookies.Lookup(id)
	if !ok {
		return rack.Bookie{}, false
	}
	return rack.Bookie{ID: id, Region: b.Reg.Region, Rack: b.Reg.Rack}, true
}

// repairFragment chooses replacements for r's positions, copies the
// entries they must hold from survivors, then swaps them into the metadata.
func (w *Worker) repairFragment(ctx context.Context, m ledger.Metadata, r FragmentRepair, lost map[string]bool) (ledger.Metadata, error) {
	meta := m.Meta
	frag := meta.Fragments[r.Index]
	qw, qa := int(meta.WriteQuorum), int(meta.AckQuorum)
	cands, byID := w.candidates(lost)
	newEns, err := ChooseReplacements(cands, ledger.PolicyOf(meta), qw, qa, EnsembleLabels(frag, w.labels), r.Positions, lost, w.rng)
	if err != nil {
		return m, err
	}
	return w.move(ctx, m, r, newEns, byID, "lost or draining")
}

// fixPlacement re-places fragment fi of m if it (still) breaks its rule
// under the current labels and is complete. A fragment no choice can fix
// with the bookies there are now is left (logged); the next scrub finds it
// again.
func (w *Worker) fixPlacement(ctx context.Context, m ledger.Metadata, fi int) (ledger.Metadata, error) {
	meta := m.Meta
	if fi >= len(meta.Fragments) || !slices.Contains(Misplaced(meta, w.labels), fi) {
		return m, nil // fixed meanwhile, or relabelled back
	}
	last, ok := ledger.FragmentLastEntry(meta, fi)
	if !ok || meta.State != metapb.LedgerState_CLOSED && fi == len(meta.Fragments)-1 {
		return m, nil // the writer's fragment; re-checked once the ledger is closed
	}
	frag := meta.Fragments[fi]
	cands, byID := w.candidates(nil)
	newEns, positions, err := FixPlacement(cands, ledger.PolicyOf(meta), int(meta.WriteQuorum), int(meta.AckQuorum), EnsembleLabels(frag, w.labels), nil, w.rng)
	if err != nil {
		w.rlog.Warn("fragment breaks its placement rule and no replacement fixes it now", "ledger", meta.LedgerId, "fragment", fi, "err", err)
		return m, nil
	}
	return w.move(ctx, m, FragmentRepair{Index: fi, Positions: positions, First: frag.FirstEntryId, Last: last}, newEns, byID, "misplaced")
}

// refill copies back onto a member the entries its position of a
// completed fragment stores, from the other members (the scrub found it
// without them). Entries it still has are answered OK as idempotent
// retries; missing or corrupt ones are written (recovery adds are accepted
// on limbo and fenced ledgers). The metadata does not change.
func (w *Worker) refill(ctx context.Context, m ledger.Metadata, rep Replica, lost map[string]bool) error {
	meta := m.Meta
	if rep.Fragment >= len(meta.Fragments) || lost[rep.Bookie] {
		return nil // gone, or moving off anyway
	}
	last, ok := ledger.FragmentLastEntry(meta, rep.Fragment)
	if !ok || meta.State != metapb.LedgerState_CLOSED && rep.Fragment == len(meta.Fragments)-1 {
		return nil
	}
	frag := meta.Fragments[rep.Fragment]
	reg, registered := w.cfg.Bookies.Lookup(rep.Bookie)
	for p, b := range frag.Ensemble {
		if b.Id != rep.Bookie {
			continue
		}
		if !registered {
			return nil // the detector decides about it
		}
		ref := &metapb.BookieRef{Id: b.Id, Addr: reg.Reg.Addr, Region: reg.Reg.Region, Rack: reg.Reg.Rack}
		start := time.Now()
		n, bytes, err := w.copyEntries(ctx, meta.LedgerId, frag, FragmentRepair{Index: rep.Fragment, Positions: []int{p}, First: frag.FirstEntryId, Last: last},
			int(meta.EnsembleSize), int(meta.WriteQuorum), map[int]*metapb.BookieRef{p: ref})
		if err != nil {
			return err
		}
		w.cfg.Logger.Info("replica refilled", "worker", w.id, "ledger", meta.LedgerId, "fragment", rep.Fragment, "bookie", rep.Bookie,
			"entries", n, "bytes", bytes, "took", time.Since(start))
	}
	return nil
}

// move copies the entries r's positions store to the members newEns puts
// there, then swaps them into the metadata (and refreshes the other
// members' recorded labels) by CAS — only where the metadata still names
// the bookie copied for, and, for a ledger that is not closed, only a
// completed fragment.
func (w *Worker) move(ctx context.Context, m ledger.Metadata, r FragmentRepair, newEns []rack.Bookie, byID map[string]*metapb.BookieRegistration, why string) (ledger.Metadata, error) {
	meta := m.Meta
	frag := meta.Fragments[r.Index]
	e, qw := int(meta.EnsembleSize), int(meta.WriteQuorum)
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
	next, err := ledger.UpdateMetadata(ctx, w.cfg.Store, m, func(x *metapb.LedgerMetadata) (*metapb.LedgerMetadata, error) {
		if r.Index >= len(x.Fragments) || x.Fragments[r.Index].FirstEntryId != frag.FirstEntryId {
			return nil, errReplan
		}
		if x.State != metapb.LedgerState_CLOSED && r.Index == len(x.Fragments)-1 {
			return nil, errReplan // never the fragment a writer may be writing
		}
		f := x.Fragments[r.Index]
		for _, p := range r.Positions {
			if f.Ensemble[p].Id != frag.Ensemble[p].Id {
				return nil, errReplan
			}
			f.Ensemble[p] = repl[p]
		}
		for i, b := range f.Ensemble {
			if reg, ok := w.cfg.Bookies.Lookup(b.Id); ok && repl[i] == nil {
				f.Ensemble[i] = &metapb.BookieRef{Id: b.Id, Addr: reg.Reg.Addr, Region: reg.Reg.Region, Rack: reg.Reg.Rack}
			}
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
	w.cfg.Logger.Info("fragment re-replicated", "worker", w.id, "ledger", meta.LedgerId, "fragment", r.Index, "why", why,
		"state", meta.State.String(), "swaps", swaps, "entries", n, "bytes", bytes, "took", time.Since(start))
	w.mu.Lock()
	w.stats.Fragments += len(r.Positions)
	w.mu.Unlock()
	w.cfg.Metrics.fragmentsFixed.Add(float64(len(r.Positions)))
	return next, nil
}

// copyEntries copies every entry of the fragment that a replaced position
// stores, from a surviving replica to the replacement, as recovery adds
// (same LAC, payload and digest), throttled. Up to CopyWindow entries are
// in flight at once (each: a read from a survivor, then the adds). It
// returns once every copy was acknowledged, or at the first error.
func (w *Worker) copyEntries(ctx context.Context, ledgerID int64, frag *metapb.Fragment, r FragmentRepair, e, qw int, repl map[int]*metapb.BookieRef) (int64, int64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, max(w.cfg.CopyWindow, 1))
	var wg sync.WaitGroup
	var n, bytes atomic.Int64
	for id := r.First; id <= r.Last; id++ {
		c, ok := CopiesOf(id, e, qw, r.Positions)
		if !ok {
			continue
		}
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
			src, err := w.readSurvivor(ctx, ledgerID, id, frag, c.Sources)
			if err != nil {
				cancel(err)
				return
			}
			if err := w.cfg.Throttle.Wait(ctx, len(src.Payload)*len(c.Targets)); err != nil {
				return
			}
			for _, p := range c.Targets {
				if err := w.client.RecoveryAddTo(ctx, repl[p], ledgerID, id, src); err != nil {
					cancel(err)
					return
				}
				n.Add(1)
				bytes.Add(int64(len(src.Payload)))
				w.mu.Lock()
				w.stats.Entries++
				w.stats.Bytes += int64(len(src.Payload))
				w.mu.Unlock()
				w.cfg.Metrics.copiedEntries.Inc()
				w.cfg.Metrics.copiedBytes.Add(float64(len(src.Payload)))
				w.cfg.beat(w.id)
				if h := w.cfg.testHookCopied; h != nil {
					h(w, ledgerID, id)
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return n.Load(), bytes.Load(), err
	}
	return n.Load(), bytes.Load(), nil
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
