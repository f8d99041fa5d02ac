package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Auditor detects lost bookies and marks the ledgers that must be
// re-replicated. Many may run; one per region audits at a time (elected in
// etcd). Safe for concurrent use.
type Auditor struct {
	cfg Config
	id  string

	mu        sync.Mutex
	leader    bool
	lost      []string
	draining_ []string
	stats     AuditStats
	lastScan  time.Time
	status    AuditorStatus
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

// Draining returns the bookies being decommissioned (as leader).
func (a *Auditor) Draining() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.draining_)
}

// Stats returns the counters.
func (a *Auditor) Stats() AuditStats { a.mu.Lock(); defer a.mu.Unlock(); return a.stats }

// Status returns the last status the auditor published (as leader).
func (a *Auditor) Status() AuditorStatus { a.mu.Lock(); defer a.mu.Unlock(); return a.status }

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
// (and gossip) to the detector and read the decommissions; scan when a
// bookie becomes lost or draining, or the scrub is due; publish the status.
func (a *Auditor) lead(ctx context.Context) error {
	det := NewLossDetector(a.cfg.LostBookieDelay)
	known := map[string]bool{}
	m := a.cfg.Metrics
	m.leader.Set(1)
	defer m.leader.Set(0)
	ep := &episode{}
	// The first scan learns which bookies the ledgers use; it also queues
	// what a previous auditor left (fragments on draining bookies, misplaced
	// ones).
	draining, err := a.draining(ctx)
	if err != nil {
		return err
	}
	if err := a.scan(ctx, toSet(nil, draining), known, ep, false); err != nil {
		return err
	}
	nextScrub := time.Now().Add(a.cfg.ScrubInterval)
	var nextStatus time.Time
	prevDraining := draining
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
		draining, err := a.draining(ctx)
		if err != nil {
			draining = prevDraining // etcd hiccup: keep the last view
		}
		newDrain := false
		for _, id := range draining {
			if !slices.Contains(prevDraining, id) {
				newDrain = true
			}
		}
		prevDraining = draining
		a.mu.Lock()
		a.lost = lost
		a.draining_ = draining
		a.mu.Unlock()
		changed := len(newly) > 0 || newDrain
		if changed {
			if len(newly) > 0 {
				a.cfg.Logger.Warn("bookies lost", "newly", newly, "lost", lost, "delay", a.cfg.LostBookieDelay)
			}
			// Say who is lost before the scan, which reads every ledger's
			// metadata and can take long on a loaded etcd.
			if err := a.publish(ctx, now, det, lost, draining, ep); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Warn("publish recovery status", "err", err)
			}
		}
		if changed || !now.Before(nextScrub) {
			if changed {
				ep.begin(now)
			}
			scrub := !now.Before(nextScrub)
			if err := a.scan(ctx, toSet(lost, draining), known, ep, scrub); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				// Keep the lost bookies "newly" lost: retry at the next tick.
				a.cfg.Logger.Warn("audit scan failed; retrying", "err", err)
				det = retryDetector(det, newly)
				prevDraining = nil
			} else {
				nextScrub = now.Add(a.cfg.ScrubInterval)
			}
		}
		if changed || !now.Before(nextStatus) {
			if err := a.publish(ctx, now, det, lost, draining, ep); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Warn("publish recovery status", "err", err)
			}
			nextStatus = now.Add(a.cfg.StatusInterval)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// episode tracks one stretch of under-replication, for "time to full
// replication": from the first bookie declared lost or draining (or the
// first marker found) until no marker is left.
type episode struct {
	start                time.Time
	lastDuration         time.Duration
	lastEnd              time.Time
	markersSeenSinceOpen bool
}

func (e *episode) begin(now time.Time) {
	if e.start.IsZero() {
		e.start = now
		e.markersSeenSinceOpen = false
	}
}

// observe takes the marker count at now; it ends the episode when markers
// were seen and none is left (or none ever came: nothing was affected).
func (e *episode) observe(now time.Time, markers int) {
	if markers > 0 {
		e.begin(now)
		e.markersSeenSinceOpen = true
		return
	}
	if !e.start.IsZero() {
		if e.markersSeenSinceOpen {
			e.lastDuration, e.lastEnd = now.Sub(e.start), now
		}
		e.start = time.Time{}
	}
}

func toSet(a, b []string) map[string]bool {
	out := map[string]bool{}
	for _, id := range a {
		out[id] = true
	}
	for _, id := range b {
		out[id] = true
	}
	return out
}

// draining returns the bookies being decommissioned, sorted.
func (a *Auditor) draining(ctx context.Context) ([]string, error) {
	ds, err := cluster.ListDecommissions(ctx, a.cfg.Store)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range ds {
		if d.State == cluster.DecommissionDraining {
			out = append(out, d.BookieID)
		}
	}
	slices.Sort(out)
	return out, nil
}

// publish writes the status record and sets the gauges from the markers.
func (a *Auditor) publish(ctx context.Context, now time.Time, det *LossDetector, lost, draining []string, ep *episode) error {
	ms, err := ListMarkers(ctx, a.cfg.Store)
	if err != nil {
		return err
	}
	ep.observe(now, len(ms))
	st := AuditorStatus{Auditor: a.id, UpdatedMs: now.UnixMilli(), Lost: lost, Draining: draining,
		LostBookieDelayMs: a.cfg.LostBookieDelay.Milliseconds(), UnderReplicatedLedgers: len(ms)}
	for id, since := range det.goneSince {
		if !det.lost[id] {
			if st.Absent == nil {
				st.Absent = map[string]int64{}
			}
			st.Absent[id] = since.UnixMilli()
		}
	}
	for _, mk := range ms {
		st.UnderReplicatedFragments += len(mk.Fragments) + len(mk.Misplaced)
		st.UnderReplicatedEntries += mk.Entries
	}
	a.mu.Lock()
	st.Misplaced = a.stats.Misplaced
	st.Scans = a.stats.Scans
	st.LastScanMs = a.lastScan.UnixMilli()
	a.mu.Unlock()
	if !ep.start.IsZero() {
		st.EpisodeStartMs = ep.start.UnixMilli()
	}
	if !ep.lastEnd.IsZero() {
		st.LastFullReplicationSeconds = ep.lastDuration.Seconds()
		st.LastFullReplicationAtMs = ep.lastEnd.UnixMilli()
	}
	m := a.cfg.Metrics
	m.lost.Set(float64(len(lost)))
	m.draining.Set(float64(len(draining)))
	m.urLedgers.Set(float64(st.UnderReplicatedLedgers))
	m.urFragments.Set(float64(st.UnderReplicatedFragments))
	m.urEntries.Set(float64(st.UnderReplicatedEntries))
	m.misplaced.Set(float64(st.Misplaced))
	m.timeToFull.Set(ep.lastDuration.Seconds())
	if ep.start.IsZero() {
		m.episodeSeconds.Set(0)
	} else {
		m.episodeSeconds.Set(now.Sub(ep.start).Seconds())
	}
	a.mu.Lock()
	a.status = st
	a.mu.Unlock()
	b, _ := json.Marshal(st)
	_, err = a.cfg.Store.Put(ctx, statusKey, b)
	return err
}

// retryDetector forgets that ids were declared lost, so the next Observe
// reports them as newly lost again (and the scan is retried).
func retryDetector(d *LossDetector, ids []string) *LossDetector {
	for _, id := range ids {
		delete(d.lost, id)
	}
	return d
}

// present: registered, or alive in gossip. A bookie is absent only when
// its registration lease expired AND gossip does not have it alive.
func (a *Auditor) present(id string) bool {
	if _, ok := a.cfg.Bookies.Lookup(id); ok {
		return true
	}
	return a.cfg.Alive != nil && a.cfg.Alive(id)
}

// labels returns a registered bookie's current placement labels.
func (a *Auditor) labels(id string) (rack.Bookie, bool) {
	b, ok := a.cfg.Bookies.Lookup(id)
	if !ok {
		return rack.Bookie{}, false
	}
	return rack.Bookie{ID: id, Region: b.Reg.Region, Rack: b.Reg.Rack}, true
}

// scan reads every ledger's metadata, adds its bookies to known and writes
// a marker for each ledger with a fragment on a bookie in moveOut (lost or
// draining) or breaking its placement rule under the current labels.
func (a *Auditor) scan(ctx context.Context, moveOut map[string]bool, known map[string]bool, ep *episode, scrub bool) error {
	s := a.cfg.Store
	ids, err := ledger.ListLedgers(ctx, s)
	if err != nil {
		return err
	}
	written, misplaced := 0, 0
	// Bookies no ledger uses any more stop being of interest, but only once
	// the scan has read every ledger: a scan that fails half-way must not
	// make the detector forget the lost bookies it is retrying for.
	uses := map[string]bool{}
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
				uses[b.Id] = true
			}
		}
		mis := Misplaced(m.Meta, a.labels)
		misplaced += len(mis)
		frags, found := Affected(m.Meta, moveOut)
		var missing []Replica
		if scrub && a.cfg.ScrubReader != nil {
			missing = a.verify(ctx, m.Meta, moveOut)
		}
		if len(frags) == 0 && len(mis) == 0 && len(missing) == 0 {
			continue
		}
		mk := Marker{LedgerID: id, Lost: found, Fragments: frags, Misplaced: mis, Missing: missing, CtimeMs: time.Now().UnixMilli(),
			Entries: UnderReplicatedEntries(m.Meta, moveOut)}
		changed, err := a.mark(ctx, mk)
		if err != nil {
			return err
		}
		if changed {
			written++
			ep.begin(time.Now())
			a.cfg.Logger.Info("ledger under-replicated", "ledger", id, "lost", found, "fragments", frags, "misplaced", mis, "state", m.Meta.State.String())
		}
	}
	clear(known)
	maps.Copy(known, uses)
	a.mu.Lock()
	a.stats.Scans++
	a.stats.MarkersWritten += written
	a.stats.Misplaced = misplaced
	a.lastScan = time.Now()
	a.mu.Unlock()
	a.cfg.Metrics.scans.Inc()
	if misplaced > 0 {
		a.cfg.Logger.Warn("fragments break their placement rule; queued for re-placement", "fragments", misplaced)
	}
	return nil
}

// verify reads SampleEntries from every registered member (not lost or
// draining) of every completed fragment and returns the members that do
// not have them. A member that cannot be reached is skipped: whether it is
// gone is the detector's call.
func (a *Auditor) verify(ctx context.Context, m *metapb.LedgerMetadata, moveOut map[string]bool) []Replica {
	var out []Replica
	for fi, f := range m.Fragments {
		for p, b := range f.Ensemble {
			if moveOut[b.Id] {
				continue
			}
			if _, ok := a.cfg.Bookies.Lookup(b.Id); !ok {
				continue
			}
			for _, e := range SampleEntries(m, fi, p) {
				resp, err := a.cfg.ScrubReader.ReadEntryFrom(ctx, b, m.LedgerId, e)
				if err != nil {
					break
				}
				switch resp.Status {
				case bookiepb.Status_OK:
					continue
				case bookiepb.Status_NO_SUCH_ENTRY, bookiepb.Status_NO_SUCH_LEDGER, bookiepb.Status_UNKNOWN, bookiepb.Status_CORRUPT:
					a.cfg.Logger.Warn("scrub: a replica lacks its data", "ledger", m.LedgerId, "fragment", fi, "bookie", b.Id, "entry", e, "status", resp.Status.String())
					out = append(out, Replica{Fragment: fi, Bookie: b.Id})
				}
				break
			}
		}
	}
	return out
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
