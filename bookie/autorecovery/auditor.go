package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Auditor detects lost bookies and marks the ledgers that must be
// re-replicated. Many may run; one per region audits at a time (elected in
// etcd). Safe for concurrent use.
type Auditor struct {
	cfg Config
	id  string

	mu     sync.Mutex
	leader bool
	lost   []string
	stats  AuditStats
}

// AuditStats counts what the auditor did (for tests and metrics).
type AuditStats struct {
	Scans          int // full metadata scans
	MarkersWritten int // markers created or extended
	Misplaced      int // fragments breaking their placement rule at the last scan
}

// NewAuditor returns an auditor named id (for the election record).
func NewAuditor(cfg Config, id string) (*Auditor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Auditor{cfg: cfg.withDefaults(), id: id}, nil
}

// Leader reports whether this auditor is the elected one now.
func (a *Auditor) Leader() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.leader }

// Lost returns the bookies currently declared lost (as leader).
func (a *Auditor) Lost() []string { a.mu.Lock(); defer a.mu.Unlock(); return slices.Clone(a.lost) }

// Stats returns the counters.
func (a *Auditor) Stats() AuditStats { a.mu.Lock(); defer a.mu.Unlock(); return a.stats }

// Run campaigns for the auditor role and audits while elected, until ctx
// ends. It re-campaigns after losing its session.
func (a *Auditor) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := a.term(ctx)
		if ctx.Err() != nil {
			return nil
		}
		a.cfg.Logger.Warn("auditor term ended", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

// term campaigns once, then audits until the session is lost or ctx ends.
func (a *Auditor) term(ctx context.Context) error {
	sess, err := concurrency.NewSession(a.cfg.Store.Client(), concurrency.WithTTL(int((a.cfg.ElectionTTL+time.Second-1)/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("autorecovery: election session: %w", err)
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, a.cfg.Store.Prefix()+electionKey)
	if err := el.Campaign(ctx, a.id); err != nil {
		return fmt.Errorf("autorecovery: campaign: %w", err)
	}
	a.cfg.Logger.Info("auditor elected", "id", a.id)
	a.setLeader(true)
	defer a.setLeader(false)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-lctx.Done():
		}
	}()
	err = a.lead(lctx)
	if ctx.Err() == nil {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		el.Resign(rctx)
		rcancel()
	}
	return err
}

func (a *Auditor) setLeader(v bool) { a.mu.Lock(); a.leader = v; a.mu.Unlock() }

// lead is the elected auditor's loop: every CheckInterval feed the registry
// to the detector; scan when a bookie becomes lost or the scrub is due.
func (a *Auditor) lead(ctx context.Context) error {
	det := NewLossDetector(a.cfg.LostBookieDelay)
	known := map[string]bool{}
	// The first scan learns which bookies the ledgers use.
	if err := a.scan(ctx, nil, known); err != nil {
		return err
	}
	nextScrub := time.Now().Add(a.cfg.ScrubInterval)
	tick := time.NewTicker(a.cfg.CheckInterval)
	defer tick.Stop()
	for {
		for _, b := range a.cfg.Bookies.Bookies(false) {
			known[b.Reg.Id] = true
		}
		ids := make([]string, 0, len(known))
		for id := range known {
			ids = append(ids, id)
		}
		now := time.Now()
		lost, newly := det.Observe(now, ids, a.present)
		a.mu.Lock()
		a.lost = lost
		a.mu.Unlock()
		if len(newly) > 0 || !now.Before(nextScrub) {
			if len(newly) > 0 {
				a.cfg.Logger.Warn("bookies lost", "newly", newly, "lost", lost, "delay", a.cfg.LostBookieDelay)
			}
			lostSet := map[string]bool{}
			for _, id := range lost {
				lostSet[id] = true
			}
			if err := a.scan(ctx, lostSet, known); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				// Keep the lost bookies "newly" lost: retry at the next tick.
				a.cfg.Logger.Warn("audit scan failed; retrying", "err", err)
				det = retryDetector(det, newly)
			} else {
				nextScrub = now.Add(a.cfg.ScrubInterval)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// retryDetector forgets that ids were declared lost, so the next Observe
// reports them as newly lost again (and the scan is retried).
func retryDetector(d *LossDetector, ids []string) *LossDetector {
	for _, id := range ids {
		delete(d.lost, id)
	}
	return d
}

func (a *Auditor) present(id string) bool {
	if _, ok := a.cfg.Bookies.Lookup(id); ok {
		return true
	}
	return a.cfg.Alive != nil && a.cfg.Alive(id)
}

// scan reads every ledger's metadata, adds its bookies to known and writes
// a marker for each ledger with a fragment on a lost bookie.
func (a *Auditor) scan(ctx context.Context, lost map[string]bool, known map[string]bool) error {
	s := a.cfg.Store
	ids, err := ledger.ListLedgers(ctx, s)
	if err != nil {
		return err
	}
	written, misplaced := 0, 0
	clear(known) // bookies no ledger uses any more stop being of interest
	for _, id := range ids {
		m, err := ledger.ReadMetadata(ctx, s, id)
		if errors.Is(err, ledger.ErrNoSuchLedger) {
			continue
		}
		if err != nil {
			return err
		}
		for _, f := range m.Meta.Fragments {
			for _, b := range f.Ensemble {
				known[b.Id] = true
			}
		}
		misplaced += len(Misplaced(m.Meta))
		frags, found := Affected(m.Meta, lost)
		if len(frags) == 0 {
			continue
		}
		changed, err := a.mark(ctx, Marker{LedgerID: id, Lost: found, Fragments: frags, CtimeMs: time.Now().UnixMilli()})
		if err != nil {
			return err
		}
		if changed {
			written++
			a.cfg.Logger.Info("ledger under-replicated", "ledger", id, "lost", found, "fragments", frags, "state", m.Meta.State.String())
		}
	}
	a.mu.Lock()
	a.stats.Scans++
	a.stats.MarkersWritten += written
	a.stats.Misplaced = misplaced
	a.mu.Unlock()
	if misplaced > 0 {
		a.cfg.Logger.Warn("fragments break their placement rule (not repaired in this version)", "fragments", misplaced)
	}
	return nil
}

// mark creates the ledger's marker or merges mk into the existing one.
func (a *Auditor) mark(ctx context.Context, mk Marker) (bool, error) {
	s := a.cfg.Store
	key := markerKey(mk.LedgerID)
	for {
		kv, err := s.Get(ctx, key)
		if errors.Is(err, cluster.ErrNotFound) {
			_, err = s.Create(ctx, key, mk.encode())
			if errors.Is(err, cluster.ErrExists) {
				continue
			}
			return err == nil, err
		}
		if err != nil {
			return false, err
		}
		cur, err := decodeMarker(kv.Value)
		if err != nil {
			cur = Marker{LedgerID: mk.LedgerID, CtimeMs: mk.CtimeMs}
		}
		next, changed := cur.merge(mk)
		if !changed {
			return false, nil
		}
		_, err = s.CAS(ctx, key, next.encode(), kv.ModRevision)
		if errors.Is(err, cluster.ErrVersionMismatch) || errors.Is(err, cluster.ErrNotFound) {
			continue
		}
		return err == nil, err
	}
}
