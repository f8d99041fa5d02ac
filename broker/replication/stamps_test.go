package replication

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/replicator"
)

// stampEnv is a service whose stage and store-to-store histograms the test
// reads.
func stampEnv(t *testing.T) (*Topic, *prometheus.HistogramVec, *prometheus.HistogramVec) {
	t.Helper()
	stages := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "stage", Buckets: LagBuckets}, []string{"stage"})
	s2s := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "s2s", Buckets: LagBuckets}, []string{"origin"})
	svc := NewService(Config{Cluster: "west", BrokerID: "b1", Logger: slog.New(slog.DiscardHandler),
		Metrics: Metrics{Stages: stages, StoreToStore: s2s}}, nil, noActive{})
	t.Cleanup(svc.Close)
	tn, err := meta.ParseTopic("persistent://t/ns/x")
	if err != nil {
		t.Fatal(err)
	}
	return svc.NewTopic(tn, nil, &testLog{pol: activeActive}), stages, s2s
}

// observed returns the count and sum (seconds) of one child histogram.
func observed(t *testing.T, h *prometheus.HistogramVec, label string) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(label).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func wantObserved(t *testing.T, h *prometheus.HistogramVec, label string, n uint64, sum time.Duration) {
	t.Helper()
	gotN, gotSum := observed(t, h, label)
	if gotN != n || time.Duration(gotSum*1e9+0.5) != sum {
		t.Fatalf("%s: %d observations summing %v, want %d summing %v", label, gotN, time.Duration(gotSum*1e9), n, sum)
	}
}

// Issue 34: each stage of an entry's replication is observed once, from
// the times the entry carries (the origin's persistence, read and send)
// and the target's own (handed to its log, persisted, dispatched), and the
// store-to-store lag runs from the origin's persistence to the target's.
func TestStagesAndStoreToStoreFromTheEntrysStamps(t *testing.T) {
	top, stages, s2s := stampEnv(t)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	// The origin's side: handed to its log 2 ms before its persistence
	// at 0, read at 1 ms, sent at 3 ms.
	e := replicator.Entry{Origin: "east", OriginSeq: 1, Stamps: replicator.Stamps{Appended: at(-2).UnixNano(), Persisted: at(0).UnixNano(), Read: at(1).UnixNano()}}
	top.svc.observeSent(replicator.Batch{Entries: []replicator.Entry{e}}, at(3))
	wantObserved(t, stages, StageEastPersist, 1, 2*time.Millisecond)
	wantObserved(t, stages, StageEastRead, 1, time.Millisecond)
	wantObserved(t, stages, StageEastSend, 1, 2*time.Millisecond)

	// The target's: the batch sent at 3 ms, received at 3.5 ms, handed to
	// the log at 4 ms, persisted at 9 ms, dispatched at 10 ms.
	e.Stamps.Appended, e.Stamps.Read = 0, 0 // they stay at the origin
	e.Stamps.Sent, e.Stamps.Received = at(3).UnixNano(), at(3).Add(500*time.Microsecond).UnixNano()
	pos := mledger.Position{Ledger: 7, Entry: 42}
	top.ReplicatedPersisted(&e, pos, at(4), at(9))
	top.Dispatched(pos, at(10))
	wantObserved(t, stages, StageWire, 1, 500*time.Microsecond)
	wantObserved(t, stages, StageWestApply, 1, 500*time.Microsecond)
	wantObserved(t, stages, StageWestPersist, 1, 5*time.Millisecond)
	wantObserved(t, stages, StageWestDispatch, 1, time.Millisecond)
	wantObserved(t, s2s, "east", 1, 9*time.Millisecond)

	// An entry whose persistence here the ring no longer holds (overwritten
	// by the one stampRing later) is not observed at dispatch; nor is an
	// entry read from the bookies (no origin persistence time) in the
	// store-to-store lag.
	later := mledger.Position{Ledger: 7, Entry: 42 + stampRing}
	old := replicator.Entry{Origin: "east", OriginSeq: 2, Stamps: replicator.Stamps{Sent: at(20).UnixNano()}}
	top.ReplicatedPersisted(&old, later, at(21), at(25))
	top.Dispatched(pos, at(30))
	wantObserved(t, stages, StageWestDispatch, 1, time.Millisecond)
	wantObserved(t, s2s, "east", 1, 9*time.Millisecond)
	top.Dispatched(later, at(26))
	wantObserved(t, stages, StageWestDispatch, 2, 2*time.Millisecond)

	// A local entry's persistence is remembered for its sender's read.
	local := mledger.Position{Ledger: 8, Entry: 1}
	top.Persisted(local, at(38), at(40))
	if a, p := top.stamps.get(local); a != at(38).UnixNano() || p != at(40).UnixNano() {
		t.Fatalf("local entry handed at %v and persisted at %v, want 38ms and 40ms", time.Unix(0, a).Sub(t0), time.Unix(0, p).Sub(t0))
	}
}
