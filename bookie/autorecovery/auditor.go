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
	"github.com/meridian-mq/meridian/internal/ratelog"
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

	rlog *ratelog.Logger // retry warnings, one a key per 10 s

	mu        sync.Mutex
	leader    bool
	standby   bool // in the election with a live session, not elected
	lost      []string
	draining_ []string
	absent    map[string]int64 // unregistered, not yet lost: since (Unix ms)
	scanning  time.Time        // when the running scan started; zero: none
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
	cfg = cfg.withDefaults()
	return &Auditor{cfg: cfg, id: id, rlog: ratelog.New(cfg.Logger, 0)}, nil
}

// Leader reports whether this auditor is the elected one now.
func (a *Auditor) Leader() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.leader }

// InElection reports whether this auditor takes part in the election
// now: elected, or standing by with a live session (false between terms:
// no session, e.g. etcd unreachable).
func (a *Auditor) InElection() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.leader || a.standby
}

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
		a.cfg.beat("auditor")
		err := a.term(ctx)
		if ctx.Err() != nil {
			return nil
		}
		a.rlog.Warn("auditor term ended", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

// beatWhile calls the heartbeat every CheckInterval until stop is closed:
// a campaign waits, it does not turn.
func (a *Auditor) beatWhile(stop <-chan struct{}) {
	t := time.NewTicker(a.cfg.CheckInterval)
	defer t.Stop()
	for {
		a.cfg.beat("auditor")
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// term campaigns once, then audits until the session is lost or ctx ends.
func (a *Auditor) term(ctx context.Context) error {
	// Getting a session and campaigning wait (on etcd, on the leader):
	// beat meanwhile; lead beats on each of its own turns.
	stopBeat := make(chan struct{})
	go a.beatWhile(stopBeat)
	var once sync.Once
	endWait := func() { once.Do(func() { close(stopBeat) }) }
	defer endWait()
	sess, err := concurrency.NewSession(a.cfg.Store.Client(), concurrency.WithTTL(int((a.cfg.ElectionTTL+time.Second-1)/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("autorecovery: election session: %w", err)
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, a.cfg.Store.Prefix()+electionKey)
	a.mu.Lock()
	a.standby = true
	a.mu.Unlock()
	go func() {
		select {
		case <-sess.Done():
			a.mu.Lock()
			a.standby = false
			a.mu.Unlock()
		case <-stopBeat:
		}
	}()
	err = el.Campaign(ctx, a.id)
	endWait()
	a.mu.Lock()
	a.standby = false
	a.mu.Unlock()
	if err != nil {
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

// lead is the elected auditor's work, in three parts that never wait for
// one another, so a loss is detected and published within CheckInterval
// even while a scan runs:
//
//   - detection (this goroutine): every CheckInterval it feeds the
//     registry (and gossip) to the detector and reads the decommissions;
//     it asks for a scan when a bookie becomes lost or draining, after a
//     scan failed, and when the scrub is due;
//   - the scanner: one scan at a time, in a goroutine of its own. A scan
//     reads every ledger's metadata (minutes on a large region or a
//     loaded etcd), and a scrub reads data from bookies too (a bookie that
//     does not answer costs a read timeout). A loss pre-empts a running
//     scrub: its markers are written by a metadata-only scan first, and
//     the scrub runs again after it;
//   - the publisher (publishLoop): the status every StatusInterval, and at
//     once when detection saw a change or a scan ended.
func (a *Auditor) lead(ctx context.Context) error {
	m := a.cfg.Metrics
	m.leader.Set(1)
	defer m.leader.Set(0)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	a.mu.Lock()
	a.lost, a.draining_, a.absent, a.scanning = nil, nil, nil, time.Time{}
	a.mu.Unlock()
	ep := &episode{}
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	wg.Go(func() { a.publishLoop(ctx, ep, kick) })

	det := NewLossDetector(a.cfg.LostBookieDelay)
	// known: the bookies the detector watches (see keep). used: the ones
	// the last successful scan found in some ledger's ensemble.
	known, used := map[string]bool{}, map[string]bool{}
	var lost, draining, prevDraining, removed []string
	results := make(chan scanResult, 1)
	running, runningScrub := false, false
	cancelScan := context.CancelFunc(func() {})
	defer func() { cancelScan() }()
	// The first scan learns which bookies the ledgers use; it also queues
	// what a previous auditor left (fragments on draining bookies,
	// misplaced ones).
	pending := true
	nextScrub := time.Now().Add(a.cfg.ScrubInterval)
	startScan := func(now time.Time) {
		scrubDue := !now.Before(nextScrub)
		if running || !pending && !scrubDue {
			return
		}
		// A scan asked for by a loss goes first, metadata only; the scrub
		// (data reads) after it.
		scrub := scrubDue && !pending
		pending = false
		running, runningScrub = true, scrub
		sctx, scancel := context.WithCancel(ctx)
		cancelScan = scancel
		moveOut, k := toSet(lost, draining), maps.Clone(known)
		a.mu.Lock()
		a.scanning = now
		a.mu.Unlock()
		wg.Go(func() {
			defer scancel()
			err := a.scan(sctx, moveOut, k, ep, scrub)
			results <- scanResult{err: err, known: k, scrub: scrub, start: now, preempted: err != nil && sctx.Err() != nil && ctx.Err() == nil}
		})
	}
	tick := time.NewTicker(a.cfg.CheckInterval)
	defer tick.Stop()
	for first := true; ; first = false {
		a.cfg.beat("auditor")
		d, rm, err := a.decommissions(ctx)
		switch {
		case err == nil:
			draining, removed = d, rm
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			draining = prevDraining // etcd hiccup: keep the last view
		}
		for _, b := range a.cfg.Bookies.Bookies(false) {
			known[b.Reg.Id] = true
		}
		for _, id := range removed {
			if !used[id] {
				delete(known, id) // decommissioned and gone on purpose: never lost
			}
		}
		ids := make([]string, 0, len(known))
		for id := range known {
			ids = append(ids, id)
		}
		now := time.Now()
		var newly []string
		lost, newly = det.Observe(now, ids, a.present)
		newDrain := false
		for _, id := range draining {
			if !first && !slices.Contains(prevDraining, id) {
				newDrain = true
			}
		}
		prevDraining = draining
		absent := map[string]int64{}
		for id, since := range det.goneSince {
			if !det.lost[id] {
				absent[id] = since.UnixMilli()
			}
		}
		a.mu.Lock()
		a.lost, a.draining_, a.absent = lost, draining, absent
		a.mu.Unlock()
		if len(newly) > 0 || newDrain {
			if len(newly) > 0 {
				a.cfg.Logger.Warn("bookies lost", "newly", newly, "lost", lost, "delay", a.cfg.LostBookieDelay)
			}
			ep.begin(now)
			pending = true
			if running && runningScrub {
				cancelScan() // the loss's markers do not wait for the scrub's data reads
			}
		}
		if first || len(newly) > 0 || newDrain {
			poke()
		}
		startScan(now)
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
				waiting = false
			case r := <-results:
				running = false
				a.mu.Lock()
				a.scanning = time.Time{}
				a.mu.Unlock()
				switch {
				case r.err == nil:
					used = r.known
					known = a.keep(known, used, det, time.Now())
					if r.scrub {
						nextScrub = r.start.Add(a.cfg.ScrubInterval)
					}
				case r.preempted:
					// A loss cancelled the scrub; it runs again once the
					// loss's scan is done (nextScrub has not moved).
				default:
					pending = true // retried at the next tick, not at once
					a.rlog.Warn("audit scan failed; retrying", "err", r.err)
				}
				poke()
				if r.err == nil || r.preempted {
					startScan(time.Now()) // what a loss asked for meanwhile
				}
			}
		}
	}
}

// scanResult is what the scanner goroutine hands back to detection.
type scanResult struct {
	err error
	// known: the bookies the ledgers use (valid when err is nil).
	known     map[string]bool
	scrub     bool
	start     time.Time
	preempted bool // cancelled by a loss, not failed
}

// publishLoop publishes the status at the first kick (detection's first
// look), then every StatusInterval and at every kick, until ctx ends. It
// reads only etcd and what detection and the scanner left under a.mu, so
// neither a long scan nor a slow detection step holds it back.
func (a *Auditor) publishLoop(ctx context.Context, ep *episode, kick <-chan struct{}) {
	select {
	case <-ctx.Done():
		return
	case <-kick:
	}
	t := time.NewTicker(a.cfg.StatusInterval)
	defer t.Stop()
	for {
		if err := a.publish(ctx, time.Now(), ep); err != nil && ctx.Err() == nil {
			a.rlog.Warn("publish recovery status", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
	}
}

// episode tracks one stretch of under-replication, for "time to full
// replication": from the first bookie declared lost or draining (or the
// first marker found) until no marker is left.
// Safe for concurrent use (detection, the scanner and the publisher share
// one).
type episode struct {
	mu                   sync.Mutex
	start                time.Time
	lastDuration         time.Duration
	lastEnd              time.Time
	markersSeenSinceOpen bool
}

func (e *episode) begin(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.beginLocked(now)
}

func (e *episode) beginLocked(now time.Time) {
	if e.start.IsZero() {
		e.start = now
		e.markersSeenSinceOpen = false
	}
}

// observe takes the marker count at now; it ends the episode when markers
// were seen and none is left (or none ever came: nothing was affected). It
// returns the episode's start (zero: none now) and the last completed
// one's duration and end.
func (e *episode) observe(now time.Time, markers int) (start time.Time, lastDuration time.Duration, lastEnd time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case markers > 0:
		e.beginLocked(now)
		e.markersSeenSinceOpen = true
	case !e.start.IsZero():
		if e.markersSeenSinceOpen {
			e.lastDuration, e.lastEnd = now.Sub(e.start), now
		}
		e.start = time.Time{}
	}
	return e.start, e.lastDuration, e.lastEnd
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

// decommissions returns the bookies being decommissioned (draining) and
// the ones whose decommission is done (removed), each sorted.
func (a *Auditor) decommissions(ctx context.Context) (draining, removed []string, err error) {
	ds, err := cluster.ListDecommissions(ctx, a.cfg.Store)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range ds {
		switch d.State {
		case cluster.DecommissionDraining:
			draining = append(draining, d.BookieID)
		case cluster.DecommissionRemoved:
			removed = append(removed, d.BookieID)
		}
	}
	slices.Sort(draining)
	slices.Sort(removed)
	return draining, removed, nil
}

// keep returns the bookies the detector watches after a scan found used
// in some ledger's ensemble: those, and every bookie it watched that is not
// gone for ScrubInterval already (present ones, and absent ones, used or
// not). So a lost bookie that holds no fragment — a rack's second bookie
// that no ledger happened to choose — stays lost, and in the status beside
// its rack mate, instead of being forgotten by the very scan its loss
// started; and a bookie gone for long whose fragments all moved stops
// being reported.
func (a *Auditor) keep(known, used map[string]bool, det *LossDetector, now time.Time) map[string]bool {
	out := maps.Clone(used)
	for id := range known {
		if since, gone := det.goneSince[id]; !gone || now.Sub(since) < a.cfg.ScrubInterval {
			out[id] = true
		}
	}
	return out
}

// publish writes the status record and sets the gauges: the markers from
// etcd, the rest from what detection and the scanner left under a.mu.
func (a *Auditor) publish(ctx context.Context, now time.Time, ep *episode) error {
	ms, err := ListMarkers(ctx, a.cfg.Store)
	if err != nil {
		return err
	}
	start, lastDuration, lastEnd := ep.observe(now, len(ms))
	a.mu.Lock()
	st := AuditorStatus{Auditor: a.id, UpdatedMs: now.UnixMilli(), Lost: slices.Clone(a.lost), Draining: slices.Clone(a.draining_),
		LostBookieDelayMs: a.cfg.LostBookieDelay.Milliseconds(), UnderReplicatedLedgers: len(ms),
		Misplaced: a.stats.Misplaced, Scans: a.stats.Scans, LastScanMs: a.lastScan.UnixMilli()}
	if len(a.absent) > 0 {
		st.Absent = maps.Clone(a.absent)
	}
	if !a.scanning.IsZero() {
		st.ScanStartedMs = a.scanning.UnixMilli()
	}
	a.mu.Unlock()
	for _, mk := range ms {
		st.UnderReplicatedFragments += len(mk.Fragments) + len(mk.Misplaced)
		st.UnderReplicatedEntries += mk.Entries
	}
	if !start.IsZero() {
		st.EpisodeStartMs = start.UnixMilli()
	}
	if !lastEnd.IsZero() {
		st.LastFullReplicationSeconds = lastDuration.Seconds()
		st.LastFullReplicationAtMs = lastEnd.UnixMilli()
	}
	m := a.cfg.Metrics
	m.lost.Set(float64(len(st.Lost)))
	m.draining.Set(float64(len(st.Draining)))
	m.urLedgers.Set(float64(st.UnderReplicatedLedgers))
	m.urFragments.Set(float64(st.UnderReplicatedFragments))
	m.urEntries.Set(float64(st.UnderReplicatedEntries))
	m.misplaced.Set(float64(st.Misplaced))
	m.timeToFull.Set(lastDuration.Seconds())
	if start.IsZero() {
		m.episodeSeconds.Set(0)
	} else {
		m.episodeSeconds.Set(now.Sub(start).Seconds())
	}
	a.mu.Lock()
	a.status = st
	a.mu.Unlock()
	b, _ := json.Marshal(st)
	_, err = a.cfg.Store.Put(ctx, statusKey, b)
	return err
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
	// A bookie that does not answer the scrub is not asked again in this
	// scan: one read timeout per bookie, not one per fragment it holds.
	unreachable := map[string]bool{}
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
		if scrub && (a.cfg.ScrubReader != nil || a.cfg.testHookScrubRead != nil) {
			missing = a.verify(ctx, m.Meta, moveOut, unreachable)
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
// not have them. A member that cannot be reached is skipped, and added to
// unreachable, which the caller keeps for the whole scan: whether it is
// gone is the detector's call, and asking it again for each fragment would
// cost a read timeout each.
func (a *Auditor) verify(ctx context.Context, m *metapb.LedgerMetadata, moveOut, unreachable map[string]bool) []Replica {
	var out []Replica
	for fi, f := range m.Fragments {
		for p, b := range f.Ensemble {
			if moveOut[b.Id] || unreachable[b.Id] {
				continue
			}
			if _, ok := a.cfg.Bookies.Lookup(b.Id); !ok {
				continue
			}
			for _, e := range SampleEntries(m, fi, p) {
				resp, err := a.scrubRead(ctx, b, m.LedgerId, e)
				if ctx.Err() != nil {
					return out // the scan ends (cancelled: a loss pre-empts a scrub)
				}
				if err != nil {
					unreachable[b.Id] = true
					a.cfg.Logger.Warn("scrub: a bookie does not answer; not asked again in this scan", "bookie", b.Id, "ledger", m.LedgerId, "err", err)
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

// scrubRead reads one entry from b for the scrub, within
// scrubReadTimeout whatever the reader's own timeout.
func (a *Auditor) scrubRead(ctx context.Context, b *metapb.BookieRef, ledgerID, entryID int64) (*bookiepb.ReadEntryResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.scrubReadTimeout)
	defer cancel()
	if h := a.cfg.testHookScrubRead; h != nil {
		return h(ctx, b, ledgerID, entryID)
	}
	return a.cfg.ScrubReader.ReadEntryFrom(ctx, b, ledgerID, entryID)
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
