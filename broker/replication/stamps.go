package replication

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/replicator"
)

// Where the replication lag goes: each entry carries the times it passed
// the stages of its way (replicator.Stamps), from timestamps the brokers
// take anyway on the hot path — one clock read per entry per stage, one
// histogram observation — and the stages are observed where they end:
//
//	east_persist   origin: handed to its managed ledger → its bookies
//	               confirmed the add (before both lags: the same work as
//	               west_persist, for comparison)
//	east_read      origin: quorum-confirmed add → the sender read it
//	east_send      origin: read → its batch handed to the stream
//	wire           sent → the target's transport received the batch (two
//	               brokers' clocks)
//	west_apply     target: received → handed to its managed ledger (its
//	               stream's apply loop, the applier, the batch's earlier
//	               entries' hand-over)
//	west_persist   target: handed → its bookies confirmed the add
//	west_dispatch  target: confirmed → sent to a consumer (first dispatch)
//
// and beside them the store-to-store lag: the origin's quorum-confirmed
// add → the target's (two brokers' clocks: exact on one machine, off by
// their clocks' difference elsewhere). Entries read from the bookies
// rather than the tail (a backlog, a catch-up) have no origin persistence
// time here and count in neither.

// Stage names, the stage label of the stage histogram.
const (
	StageEastPersist  = "east_persist"
	StageEastRead     = "east_read"
	StageEastSend     = "east_send"
	StageWire         = "wire"
	StageWestApply    = "west_apply"
	StageWestPersist  = "west_persist"
	StageWestDispatch = "west_dispatch"
)

// Stages lists the stages in the order an entry passes them.
var Stages = []string{StageEastPersist, StageEastRead, StageEastSend, StageWire, StageWestApply, StageWestPersist, StageWestDispatch}

// LagBuckets are the buckets of the stage and store-to-store histograms:
// 20 µs to 20 s, each 1.26× the last, so a percentile read from them is
// within about 13 % (half that, interpolated) at any lag from loopback's
// to a WAN's.
var LagBuckets = prometheus.ExponentialBucketsRange(20e-6, 20, 60)

// stampRing is how many of a topic's last persisted entries keep their
// persistence time: at 1,000 entries a second, the last 4 s — more than a
// sender's window (900 entries) or a dispatch round behind the tail.
const stampRing = 4096

// persistTimes remembers when the topic's last stampRing entries were
// persisted here, by position. Safe for concurrent use.
type persistTimes struct {
	mu   sync.Mutex
	ring [stampRing]stamp
}

type stamp struct {
	pos                 mledger.Position
	appended, persisted int64 // Unix ns; appended 0 for a replicated entry
}

func (p *persistTimes) put(pos mledger.Position, appended, persisted int64) {
	i := uint64(pos.Entry) % stampRing
	p.mu.Lock()
	p.ring[i] = stamp{pos, appended, persisted}
	p.mu.Unlock()
}

// get returns when the entry at pos was handed to the managed ledger and
// persisted (0, 0: not remembered).
func (p *persistTimes) get(pos mledger.Position) (appended, persisted int64) {
	i := uint64(pos.Entry) % stampRing
	p.mu.Lock()
	s := p.ring[i]
	p.mu.Unlock()
	if s.pos != pos {
		return 0, 0
	}
	return s.appended, s.persisted
}

// observeSince observes now − since in seconds on o, when since is known
// (and not after now: two clocks may disagree).
func observeSince(o prometheus.Observer, since, now int64) {
	if since == 0 || o == nil {
		return
	}
	o.Observe(float64(max(0, now-since)) / 1e9)
}

// stageObservers resolves the stage histogram's children once (nil
// observers when the service has none).
func stageObservers(h *prometheus.HistogramVec) map[string]prometheus.Observer {
	out := make(map[string]prometheus.Observer, len(Stages))
	for _, st := range Stages {
		if h != nil {
			out[st] = h.WithLabelValues(st)
		}
	}
	return out
}

// Persisted is told, in the append callback of a local entry (one a
// producer published here), that the entry at pos, handed to the managed
// ledger at appended, was persisted at now.
func (t *Topic) Persisted(pos mledger.Position, appended, now time.Time) {
	t.stamps.put(pos, appended.UnixNano(), now.UnixNano())
}

// ReplicatedPersisted is told, in the append callback of the replicated
// entry e (from another region), that it was persisted at pos at now,
// having been handed to the managed ledger at handed: the target's
// stages and the store-to-store lag.
func (t *Topic) ReplicatedPersisted(e *replicator.Entry, pos mledger.Position, handed, now time.Time) {
	ns := now.UnixNano()
	t.stamps.put(pos, 0, ns)
	svc := t.svc
	observeSince(svc.stageObs[StageWire], e.Stamps.Sent, e.Stamps.Received)
	observeSince(svc.stageObs[StageWestApply], e.Stamps.Received, handed.UnixNano())
	observeSince(svc.stageObs[StageWestPersist], handed.UnixNano(), ns)
	if h := svc.metrics.StoreToStore; h != nil && e.Stamps.Persisted != 0 {
		observeSince(h.WithLabelValues(e.Origin), e.Stamps.Persisted, ns)
	}
}

// Dispatched is told that the replicated entry at pos was sent to a
// consumer for the first time, at now.
func (t *Topic) Dispatched(pos mledger.Position, now time.Time) {
	_, persisted := t.stamps.get(pos)
	observeSince(t.svc.stageObs[StageWestDispatch], persisted, now.UnixNano())
}

// observeSent observes the origin's stages of the entries of batch b,
// handed to the stream at now (a resend counts again: its read → send
// includes the wait for it).
func (svc *Service) observeSent(b replicator.Batch, now time.Time) {
	persist, read, send := svc.stageObs[StageEastPersist], svc.stageObs[StageEastRead], svc.stageObs[StageEastSend]
	if read == nil {
		return
	}
	ns := now.UnixNano()
	for i := range b.Entries {
		s := &b.Entries[i].Stamps
		if s.Persisted != 0 {
			observeSince(persist, s.Appended, s.Persisted)
		}
		observeSince(read, s.Persisted, s.Read)
		observeSince(send, s.Read, ns)
	}
}
