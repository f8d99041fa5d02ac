package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
)

// The deduplication snapshot: every producer name's last persisted
// sequence id as of a position of the log, so that a load replays only
// the entries after it (topic.go's load). It is the managed ledger's
// snapshot "dedup" (mledger.OpenSnapshot): written as the entries of a
// ledger of its own behind a small etcd record, so its size is not capped
// by etcd's request limit (1.5 MiB: 1,100 producers with 2 KB names made
// it larger, and every reload then replayed the log since the last
// snapshot that fit). Deleting the topic's managed ledger deletes the
// snapshot's ledgers with it.
//
// The state itself is bounded: producer names are at most
// meta.MaxProducerNameBytes, and a name with no producer connected for
// Config.DedupProducerInactivityTimeout loses its state (expireDedup).
//
// Earlier versions kept the snapshot as one etcd value at /dedup/<managed
// ledger> (legacyDedupSnapshot). A load that finds no ledger snapshot
// reads it once; the first ledger snapshot written deletes it.

const dedupSnapshotName = "dedup"

// dedupSnapshotFormat is the Format this code writes.
const dedupSnapshotFormat = 1

// dedupSnapshot is the persisted form (JSON).
type dedupSnapshot struct {
	Format    int                      `json:"format"`
	Position  mledger.Position         `json:"position"`
	Producers map[string]dedupProducer `json:"producers"`
	// LocalSeq and LocalBytes: the topic's local sequence number and
	// local bytes as of Position; Applied: each origin's highest sequence
	// number persisted here.
	LocalSeq   uint64            `json:"localSeq,omitempty"`
	LocalBytes int64             `json:"localBytes,omitempty"`
	Applied    map[string]uint64 `json:"applied,omitempty"`
}

// dedupProducer is one producer name's state in the snapshot: its last
// persisted sequence id and, when no producer of the name was connected,
// since when (Unix ms; 0: connected when the snapshot was taken).
type dedupProducer struct {
	Seq    int64 `json:"s"`
	IdleMs int64 `json:"i,omitempty"`
}

// legacyDedupSnapshot is the etcd form of earlier versions.
type legacyDedupSnapshot struct {
	Position   mledger.Position  `json:"position"`
	Producers  map[string]int64  `json:"producers"`
	LocalSeq   uint64            `json:"localSeq,omitempty"`
	LocalBytes int64             `json:"localBytes,omitempty"`
	Applied    map[string]uint64 `json:"applied,omitempty"`
}

// dedupKey is the etcd key of the legacy snapshot.
func (t *Topic) dedupKey() string { return "/dedup/" + t.name.ManagedLedgerName() }

// readSnapshot opens the topic's dedup snapshot and returns what it holds
// (nil: none, or unreadable: the load replays everything retained).
// Errors are worth retrying (etcd or bookies unreachable): the load fails.
func (t *Topic) readSnapshot(ctx context.Context) (*dedupSnapshot, error) {
	s, err := t.ml.OpenSnapshot(ctx, dedupSnapshotName, mledger.SnapshotOptions{})
	if err != nil {
		return nil, fmt.Errorf("dedup snapshot: %w", err)
	}
	t.dedupSnap = s
	data, info, err := s.Read(ctx)
	switch {
	case err == nil:
		var snap dedupSnapshot
		if err := json.Unmarshal(data, &snap); err != nil || snap.Format > dedupSnapshotFormat {
			t.b.log.Warn("dedup snapshot unreadable; replaying the whole log", "topic", t.name.String(), "format", snap.Format, "err", err)
			return nil, nil
		}
		t.snapBytes.Store(info.SizeBytes)
		return &snap, nil
	case errors.Is(err, mledger.ErrSnapshotCorrupt):
		t.b.log.Warn("dedup snapshot corrupt; replaying the whole log", "topic", t.name.String(), "err", err)
		return nil, nil
	case !errors.Is(err, mledger.ErrNoSnapshot):
		return nil, fmt.Errorf("dedup snapshot: %w", err)
	}
	kv, err := t.store.Get(ctx, t.dedupKey())
	if errors.Is(err, cluster.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dedup snapshot (etcd form): %w", err)
	}
	var old legacyDedupSnapshot
	if err := json.Unmarshal(kv.Value, &old); err != nil {
		t.b.log.Warn("dedup snapshot (etcd form) unreadable; replaying the whole log", "topic", t.name.String(), "err", err)
		t.legacySnap = true
		return nil, nil
	}
	t.legacySnap = true
	t.snapBytes.Store(int64(len(kv.Value)))
	snap := &dedupSnapshot{Format: dedupSnapshotFormat, Position: old.Position, Producers: make(map[string]dedupProducer, len(old.Producers)),
		LocalSeq: old.LocalSeq, LocalBytes: old.LocalBytes, Applied: old.Applied}
	for name, seq := range old.Producers {
		snap.Producers[name] = dedupProducer{Seq: seq}
	}
	return snap, nil
}

// snapshotLocked takes the snapshot as of pos (the position of the last
// entry whose callback ran).
func (t *Topic) snapshotLocked(pos mledger.Position) *dedupSnapshot {
	s := &dedupSnapshot{Format: dedupSnapshotFormat, Position: pos, Producers: make(map[string]dedupProducer, len(t.dedup)),
		LocalSeq: t.localSeq, LocalBytes: t.localBytes, Applied: maps.Clone(t.applied)}
	for name, st := range t.dedup {
		if st.lastPersisted < 0 {
			continue
		}
		p := dedupProducer{Seq: st.lastPersisted}
		if st.connected == 0 {
			p.IdleMs = st.idleSince.UnixMilli()
		}
		s.Producers[name] = p
	}
	return s
}

// queueSnapshot has s written in the background: one goroutine writes the
// latest snapshot queued, in turn, so writes neither pile up nor land out
// of order.
func (t *Topic) queueSnapshot(s *dedupSnapshot) {
	t.snapQMu.Lock()
	t.snapNext = s
	if t.snapBusy {
		t.snapQMu.Unlock()
		return
	}
	t.snapBusy = true
	t.snapQMu.Unlock()
	go func() {
		for {
			t.snapQMu.Lock()
			s := t.snapNext
			t.snapNext = nil
			if s == nil {
				t.snapBusy = false
				t.snapQMu.Unlock()
				return
			}
			t.snapQMu.Unlock()
			t.writeSnapshot(context.Background(), s)
		}
	}()
}

// writeSnapshot persists s, unless a snapshot of a later position was
// written already, giving up after 30 s or when ctx ends (the next load
// then starts from the previous snapshot and replays the entries after
// it, as after a crash).
func (t *Topic) writeSnapshot(ctx context.Context, s *dedupSnapshot) {
	t.snapMu.Lock()
	defer t.snapMu.Unlock()
	if t.dedupSnap == nil || s.Position.Less(t.snapWritten) {
		return
	}
	b, err := json.Marshal(s)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := t.dedupSnap.Write(ctx, b)
	if err != nil {
		t.b.log.Warn("dedup snapshot not written", "topic", t.name.String(), "bytes", len(b), "err", err)
		return
	}
	t.snapWritten = s.Position
	t.snapBytes.Store(info.SizeBytes)
	t.b.metrics.dedupSnapshots.Inc()
	if t.legacySnap {
		if err := t.store.Delete(ctx, t.dedupKey()); err == nil || errors.Is(err, cluster.ErrNotFound) {
			t.legacySnap = false
		}
	}
}

// expireDedup drops the state of producer names with no producer
// connected (and no send in flight) for DedupProducerInactivityTimeout,
// at most every tenth of the timeout, and then queues a snapshot without
// them. Run by the policy loop.
func (t *Topic) expireDedup(now time.Time) {
	timeout := t.b.cfg.DedupProducerInactivityTimeout
	if timeout < 0 {
		return
	}
	t.mu.Lock()
	if t.closed || now.Before(t.nextDedupSweep) {
		t.mu.Unlock()
		return
	}
	t.nextDedupSweep = now.Add(timeout / 10)
	n := 0
	for name, st := range t.dedup {
		if st.connected == 0 && len(st.inflight) == 0 && now.Sub(st.idleSince) >= timeout {
			delete(t.dedup, name)
			n++
		}
	}
	var snap *dedupSnapshot
	if n > 0 {
		snap = t.snapshotLocked(t.lastPos)
	}
	left := len(t.dedup)
	t.mu.Unlock()
	if n == 0 {
		return
	}
	t.b.metrics.dedupExpired.Add(float64(n))
	t.b.log.Info("dedup state of inactive producers expired", "topic", t.name.String(), "expired", n, "left", left, "inactive_for", timeout)
	t.queueSnapshot(snap)
}

// keepsDedup reports whether entries of a producer name get dedup state
// (loaded, replayed or replicated): not a name no producer can connect
// with (meta.ValidProducerName; from before the limit, or from another
// region's older broker).
func keepsDedup(name string) bool { return meta.ValidProducerName(name) == nil }

// dedupProducers is the number of producer names with dedup state.
func (t *Topic) dedupProducers() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dedup)
}
