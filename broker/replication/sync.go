package replication

import (
	"slices"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/clock"
	"github.com/meridian-mq/meridian/replicator"
)

// Sync replication (namespace mode sync): a producer's receipt goes out
// only after the entry is persisted here and in every other region of the
// namespace (the sync set), as replicator.SyncTracker decides from the
// senders' acknowledgements. While a region does not acknowledge:
//
//   - strict (default): receipts wait. Past the namespace's sync timeout
//     an alert fires (meridian_broker_replication_alerts_total
//     {kind="sync-stalled"}); the producer's own send timeout then fails
//     its sends with a timeout error, which is retriable, and the
//     broker's pending-send limit pushes back.
//   - degrade: past the timeout the region leaves the sync set (alert
//     sync-degraded), receipts go out without it, and it rejoins once it
//     acknowledged everything tracked meanwhile (sync-restored).
//
// A topic that loads in sync mode tracks every local entry already in its
// log as not yet confirmed remotely (one waiting mark at its last local
// sequence number) until the senders report them acknowledged, so a
// producer resending to a new owner does not get an early receipt.
//
// Its goroutine (loop) obeys the tracker: it sleeps until the tracker's
// WakeAt — taken from every Ready, under mu — and ticks it then; a Ready
// with a new WakeAt kicks it to sleep again until that.
type syncState struct {
	mu      sync.Mutex
	tr      *replicator.SyncTracker
	regions []string
	held    []heldReceipt // ascending seq
	svc     *Service
	topic   string
	stop    chan struct{}
	clock   clock.Clock
	// wakeAt is the tracker's WakeAt as of its last Ready; kick tells the
	// loop it changed.
	wakeAt time.Time
	kick   chan struct{}
	// idle, a test hook, is called each time the loop goes to sleep, with
	// when it wakes next (zero: only a kick or stop wakes it).
	idle func(wake time.Time)
	// removed: regions the failover decision declared failed, out of the
	// sync set since that epoch, until they catch up (acked >= tracked).
	removed map[string]uint64
	tracked uint64
}

type heldReceipt struct {
	seq     uint64
	release func()
}

// refreshSync creates, keeps or drops the topic's sync state to match its
// policies. Dropping it (the namespace left sync mode) releases every
// held receipt.
func (t *Topic) refreshSync() {
	pol := t.policies()
	_, localSeq, _ := t.log.End()
	eff := pol.Effective()
	var remotes []string
	if eff.Mode == meta.ReplicationSync && slices.Contains(pol.ReplicationClusters, t.svc.cfg.Cluster) {
		for _, r := range pol.ReplicationClusters {
			if r != t.svc.cfg.Cluster {
				remotes = append(remotes, r)
			}
		}
	}
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	old := t.sync
	if old != nil && len(remotes) > 0 && slices.Equal(old.regions, remotes) {
		return
	}
	if len(remotes) > 0 {
		cfg := replicator.SyncConfig{Timeout: time.Duration(eff.SyncTimeoutMs) * time.Millisecond}
		if eff.SyncOnUnreachable == meta.SyncDegrade {
			cfg.Policy = replicator.SyncDegrade
		}
		now := t.svc.clock.Now()
		ss := &syncState{tr: replicator.NewSyncTracker(cfg, remotes, 0, now), regions: remotes, svc: t.svc, topic: t.name.String(),
			stop: make(chan struct{}), removed: map[string]uint64{}, clock: t.svc.clock, kick: make(chan struct{}, 1)}
		if h := t.svc.hooks.syncIdle; h != nil {
			ss.idle = func(wake time.Time) { h(ss, wake) }
		}
		if localSeq > 0 {
			ss.tr.Track(localSeq, now)
			ss.tracked = localSeq
			ss.wakeAt = ss.tr.Ready().WakeAt // the load-time mark's timeout
		}
		if rec := t.svc.active.FailedOver(t.name.NamespaceName(), pol); rec.Previous != "" {
			ss.mu.Lock()
			ss.removeLocked(rec.Previous, rec.Epoch)
			ss.mu.Unlock()
		}
		t.sync = ss
		go ss.loop()
	} else {
		t.sync = nil
	}
	if old != nil {
		close(old.stop)
		old.releaseAll()
	}
}

// stopSync stops the sync state's clock on unload. Held receipts are not
// released: their producers resend to the next owner.
func (t *Topic) stopSync() {
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	if t.sync != nil {
		close(t.sync.stop)
		t.sync = nil
	}
}

// loop ticks the tracker at its WakeAt (timeouts act even while a sender
// is stuck dialling an unreachable region), and sleeps otherwise.
func (ss *syncState) loop() {
	alarm := clock.NewAlarm(ss.clock)
	defer alarm.Stop()
	for {
		// A kick pending is older than the wakeAt read below.
		select {
		case <-ss.kick:
		default:
		}
		ss.mu.Lock()
		wake := ss.wakeAt
		ss.mu.Unlock()
		ring := alarm.Set(wake)
		if ss.idle != nil {
			ss.idle(wake)
		}
		select {
		case <-ss.stop:
			return
		case <-ss.kick:
		case <-ring:
			ss.tick(ss.clock.Now())
		}
	}
}

func (t *Topic) syncState() *syncState {
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	return t.sync
}

// hold keeps release until the entry with local sequence number seq is
// persisted in the sync set (seq 0: behind every entry tracked so far).
func (ss *syncState) hold(seq uint64, release func()) {
	ss.mu.Lock()
	now := ss.clock.Now()
	if seq == 0 {
		if ss.tr.Waiting() == 0 {
			ss.mu.Unlock()
			release()
			return
		}
		seq = ss.lastTracked()
	} else {
		ss.tr.Track(seq, now)
		ss.tracked = max(ss.tracked, seq)
	}
	ss.held = append(ss.held, heldReceipt{seq: seq, release: release})
	out := ss.stepLocked()
	ss.mu.Unlock()
	run(out)
}

func (ss *syncState) lastTracked() uint64 {
	if n := len(ss.held); n > 0 {
		return ss.held[n-1].seq
	}
	// Only the load-time mark is waiting: it is the highest tracked.
	return ^uint64(0) >> 1
}

func (ss *syncState) acked(region string, seq uint64) {
	ss.mu.Lock()
	ss.tr.Acked(region, seq)
	if ep, ok := ss.removed[region]; ok && seq >= ss.tracked {
		// Caught up: back in the sync set for what comes next.
		if ss.tr.AddRegion(region, ep) == nil {
			delete(ss.removed, region)
			ss.svc.metrics.Alerts.WithLabelValues("sync-region-rejoined").Inc()
			ss.svc.log.Warn("sync replication: region caught up and rejoined the sync set", "topic", ss.topic, "region", region, "seq", seq)
		}
	}
	out := ss.stepLocked()
	ss.mu.Unlock()
	run(out)
}

func (ss *syncState) tick(now time.Time) {
	ss.mu.Lock()
	ss.tr.Tick(now)
	out := ss.stepLocked()
	ss.mu.Unlock()
	run(out)
}

// stepLocked applies the tracker's decisions: the receipts to release
// (returned, to run without the lock), its events, and when to tick it
// next (wakeAt).
func (ss *syncState) stepLocked() []func() {
	rd := ss.tr.Ready()
	if !rd.WakeAt.Equal(ss.wakeAt) {
		ss.wakeAt = rd.WakeAt
		select {
		case ss.kick <- struct{}{}:
		default:
		}
	}
	for _, ev := range rd.Events {
		ss.svc.metrics.Alerts.WithLabelValues("sync-" + ev.Kind.String()).Inc()
		ss.svc.log.Warn("sync replication: "+ev.Kind.String(), "topic", ss.topic, "region", ev.Region, "seq", ev.Seq, "waited", ev.Waited)
	}
	if rd.ReceiptThrough == 0 {
		return nil
	}
	if ss.tr.Waiting() == 0 {
		// Everything tracked is confirmed: receipts held behind the
		// load-time mark go too.
		rd.ReceiptThrough = ^uint64(0)
	}
	i := 0
	for i < len(ss.held) && ss.held[i].seq <= rd.ReceiptThrough {
		i++
	}
	out := make([]func(), i)
	for j := range i {
		out[j] = ss.held[j].release
	}
	ss.held = ss.held[i:]
	return out
}

func (ss *syncState) releaseAll() {
	ss.mu.Lock()
	held := ss.held
	ss.held = nil
	ss.mu.Unlock()
	for _, h := range held {
		h.release()
	}
}

func run(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// regionFailed takes a region the failover decision declared failed (an
// unplanned move away from it at epoch) out of the sync set, so this
// region — now active — receipts again; the region rejoins once it has
// caught up.
func (ss *syncState) regionFailed(region string, epoch uint64) {
	ss.mu.Lock()
	ss.removeLocked(region, epoch)
	out := ss.stepLocked()
	ss.mu.Unlock()
	run(out)
}

func (ss *syncState) removeLocked(region string, epoch uint64) {
	if !slices.Contains(ss.regions, region) {
		return
	}
	if _, done := ss.removed[region]; done {
		return
	}
	if err := ss.tr.RemoveRegion(region, epoch); err != nil {
		return
	}
	ss.removed[region] = epoch
	ss.svc.metrics.Alerts.WithLabelValues("sync-region-removed").Inc()
	ss.svc.log.Warn("sync replication: region declared failed leaves the sync set", "topic", ss.topic, "region", region, "epoch", epoch)
}
