package replicator

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// SyncPolicy is what sync replication does when a region of the sync set
// does not persist an entry within SyncConfig.Timeout.
type SyncPolicy int

const (
	// SyncStrict: a producer's receipt never goes out before every region
	// of the sync set persisted the entry (zero loss); past the timeout
	// the tracker reports the region as stalled and entries keep waiting
	// (the producer's own send timeout and the broker's pending limit
	// push back). Only the failover decision removes a dead region
	// (RemoveRegion).
	SyncStrict SyncPolicy = iota
	// SyncDegrade: past the timeout the lagging region is dropped from the
	// sync set until it catches up; receipts go out without it, and the
	// entries acknowledged meanwhile are exposed to loss (counted).
	SyncDegrade
)

func (p SyncPolicy) String() string {
	switch p {
	case SyncStrict:
		return "strict"
	case SyncDegrade:
		return "degrade"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// SyncConfig configures a SyncTracker.
type SyncConfig struct {
	Policy SyncPolicy
	// Timeout: how long the oldest waiting entry may wait for a region
	// before the policy acts. 0: never (strict, without stall reports).
	Timeout time.Duration
}

// SyncEventKind says what a SyncEvent reports.
type SyncEventKind int

const (
	// SyncStalled (strict): Region kept the oldest entry waiting past the
	// timeout. Reported once per stall; progress re-arms it.
	SyncStalled SyncEventKind = iota + 1
	// SyncDegraded (degrade): Region left the sync set after the timeout.
	SyncDegraded
	// SyncRestored (degrade): Region caught up and is in the sync set
	// again.
	SyncRestored
)

func (k SyncEventKind) String() string {
	switch k {
	case SyncStalled:
		return "stalled"
	case SyncDegraded:
		return "degraded"
	case SyncRestored:
		return "restored"
	}
	return fmt.Sprintf("SyncEventKind(%d)", int(k))
}

// SyncEvent is a change for the shell to log and count.
type SyncEvent struct {
	Kind   SyncEventKind
	Region string
	// Seq: the oldest waiting entry (stalled, degraded) or the region's
	// acknowledged sequence number (restored).
	Seq    uint64
	Waited time.Duration
}

// SyncReady is what a SyncTracker tells its shell.
type SyncReady struct {
	// ReceiptThrough: the producers of every local entry with sequence
	// number <= ReceiptThrough may now get their receipts. Never
	// decreases; 0 or unchanged means nothing new.
	ReceiptThrough uint64
	Events         []SyncEvent
	// WakeAt, if non-zero: when a Tick lets the policy act — the oldest
	// waiting entry's timeout, or the tracker's clock (tick at once) when
	// that timeout has passed and a region holding the entry back has not
	// been acted on yet (the entry became the oldest only after its
	// timeout). Zero: until the next input, no Tick does anything. The
	// shell sleeps until WakeAt or an input; it needs no periodic tick.
	WakeAt time.Time
}

type syncRegion struct {
	// from: entries with seq >= from wait for this region (it joined the
	// set when the entries before it were already tracked).
	from      uint64
	degraded  bool
	restoreAt uint64 // degraded: acked >= restoreAt restores the region
	stalled   bool
}

type waiting struct {
	seq uint64
	at  time.Time
}

// SyncTracker decides when a local entry of a topic in sync mode may be
// receipted to its producer: after it is persisted locally and in every
// region of the sync set. Pure and not safe for concurrent use; time and
// acks are inputs. One per topic (the local origin's sequence numbers).
type SyncTracker struct {
	cfg      SyncConfig
	epoch    uint64
	set      map[string]*syncRegion
	names    []string          // the keys of set, sorted
	acked    map[string]uint64 // per remote region, kept across set changes
	waiting  []waiting
	tracked  uint64
	released uint64
	now      time.Time
	rd       SyncReady
}

// NewSyncTracker returns a tracker whose sync set is regions (the remote
// regions a write must reach), as decided at failover epoch epoch.
func NewSyncTracker(cfg SyncConfig, regions []string, epoch uint64, now time.Time) *SyncTracker {
	t := &SyncTracker{cfg: cfg, epoch: epoch, set: map[string]*syncRegion{}, acked: map[string]uint64{}, now: now}
	for _, r := range regions {
		t.set[r] = &syncRegion{from: 1}
	}
	t.setChanged()
	return t
}

// Regions returns the sync set (degraded regions included), sorted.
func (t *SyncTracker) Regions() []string { return slices.Clone(t.names) }

func (t *SyncTracker) setChanged() { t.names = slices.Sorted(maps.Keys(t.set)) }

// Waiting is the number of entries waiting for a receipt.
func (t *SyncTracker) Waiting() int { return len(t.waiting) }

// Track registers a local entry, after it is persisted locally, at time
// now. Sequence numbers must ascend; an older one is ignored.
func (t *SyncTracker) Track(seq uint64, now time.Time) {
	t.advanceClock(now)
	if seq <= t.tracked {
		return
	}
	t.tracked = seq
	t.waiting = append(t.waiting, waiting{seq: seq, at: t.now})
	t.release()
}

// Acked records that region persisted every local entry through seq (the
// region's Sender's Ready.Acked).
func (t *SyncTracker) Acked(region string, seq uint64) {
	if seq <= t.acked[region] {
		return
	}
	t.acked[region] = seq
	if r := t.set[region]; r != nil {
		r.stalled = false
		if r.degraded && seq >= r.restoreAt {
			r.degraded = false
			t.rd.Events = append(t.rd.Events, SyncEvent{Kind: SyncRestored, Region: region, Seq: seq})
		}
	}
	t.release()
}

// RemoveRegion takes region out of the sync set as decided at failover
// epoch (the region was declared failed): entries waiting only for it
// complete. A change older than one already applied is refused with
// ErrStaleEpoch.
func (t *SyncTracker) RemoveRegion(region string, epoch uint64) error {
	if epoch < t.epoch {
		return fmt.Errorf("%w: remove %s at epoch %d < %d", ErrStaleEpoch, region, epoch, t.epoch)
	}
	t.epoch = epoch
	delete(t.set, region)
	t.setChanged()
	t.release()
	return nil
}

// AddRegion puts region into the sync set at failover epoch: entries
// tracked from now on wait for it; those already tracked do not.
func (t *SyncTracker) AddRegion(region string, epoch uint64) error {
	if epoch < t.epoch {
		return fmt.Errorf("%w: add %s at epoch %d < %d", ErrStaleEpoch, region, epoch, t.epoch)
	}
	t.epoch = epoch
	if t.set[region] == nil {
		t.set[region] = &syncRegion{from: t.tracked + 1}
		t.setChanged()
	}
	return nil
}

// Tick advances the clock and applies the policy to an entry waiting past
// the timeout.
func (t *SyncTracker) Tick(now time.Time) {
	t.advanceClock(now)
	if t.cfg.Timeout <= 0 || len(t.waiting) == 0 {
		return
	}
	w := t.waiting[0]
	waited := t.now.Sub(w.at)
	if waited < t.cfg.Timeout {
		return
	}
	for _, name := range t.names {
		r := t.set[name]
		if r.degraded || t.limit(name, r) >= w.seq {
			continue
		}
		switch t.cfg.Policy {
		case SyncStrict:
			if !r.stalled {
				r.stalled = true
				t.rd.Events = append(t.rd.Events, SyncEvent{Kind: SyncStalled, Region: name, Seq: w.seq, Waited: waited})
			}
		case SyncDegrade:
			r.degraded = true
			r.restoreAt = t.tracked
			t.rd.Events = append(t.rd.Events, SyncEvent{Kind: SyncDegraded, Region: name, Seq: w.seq, Waited: waited})
		}
	}
	t.release()
}

func (t *SyncTracker) advanceClock(now time.Time) {
	if now.After(t.now) {
		t.now = now
	}
}

// limit is the highest sequence number region r does not hold back.
func (t *SyncTracker) limit(name string, r *syncRegion) uint64 {
	return max(t.acked[name], r.from-1)
}

func (t *SyncTracker) release() {
	through := t.tracked
	for _, name := range t.names {
		if r := t.set[name]; !r.degraded {
			through = min(through, t.limit(name, r))
		}
	}
	if through <= t.released {
		return
	}
	t.released = through
	t.rd.ReceiptThrough = through
	i := 0
	for i < len(t.waiting) && t.waiting[i].seq <= through {
		i++
	}
	t.waiting = t.waiting[i:]
}

// Ready returns and forgets what the shell must do.
func (t *SyncTracker) Ready() SyncReady {
	rd := t.rd
	t.rd = SyncReady{}
	rd.WakeAt = t.wakeAt()
	return rd
}

// wakeAt is SyncReady.WakeAt: the first time at which Tick would act on
// the oldest waiting entry (Tick acts on no other).
func (t *SyncTracker) wakeAt() time.Time {
	if t.cfg.Timeout <= 0 || len(t.waiting) == 0 {
		return time.Time{}
	}
	w := t.waiting[0]
	if at := w.at.Add(t.cfg.Timeout); at.After(t.now) {
		return at
	}
	for _, name := range t.names {
		r := t.set[name]
		if r.degraded || t.limit(name, r) >= w.seq || (t.cfg.Policy == SyncStrict && r.stalled) {
			continue // holds nothing back, or already acted on
		}
		return t.now
	}
	return time.Time{}
}
