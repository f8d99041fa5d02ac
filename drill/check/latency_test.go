package check

import (
	"testing"
	"time"
)

// Publish latency before the first fault and while it lasts, per
// producer, and expectations on it and on a measured figure.
func TestPublishLatencyFigures(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := History{Start: t0, End: t0.Add(40 * time.Second), Faults: []Fault{{Name: "wan", At: t0.Add(10 * time.Second)}}}
	add := func(prod string, sent time.Duration, lat time.Duration) {
		h.Attempts = append(h.Attempts, Attempt{Producer: prod, Topic: "t", Seq: int64(len(h.Attempts)),
			SentAt: t0.Add(sent), AckedAt: t0.Add(sent + lat)})
	}
	for i := range 100 {
		at := time.Duration(i) * 100 * time.Millisecond // 0..9.9 s: before
		add("sync", at, 5*time.Millisecond)
		add("async", at, 4*time.Millisecond)
		add("sync", 10*time.Second+at, 210*time.Millisecond) // during
		add("async", 10*time.Second+at, 6*time.Millisecond)
	}
	r := Check(h)
	if len(r.Publish) != 2 || r.Publish[1].Producer != "sync" || r.Publish[1].Before != 100 || r.Publish[1].During != 100 {
		t.Fatalf("publish latency: %+v", r.Publish)
	}
	if p := r.Publish[1]; p.P50Before != 0.005 || p.P50During < 0.2099 || p.P50During > 0.2101 {
		t.Fatalf("sync latency before %v during %v", p.P50Before, p.P50During)
	}
	r.Measured = map[string]float64{"replication_backlog_max_during_fault": 40}
	vs := Evaluate([]Expectation{
		{"publish_p50_increase[sync]", ">= 150ms"},
		{"publish_p50_increase[async]", "<= 50ms"},
		{"publish_p50_increase[sync]", "<= 50ms"},
		{"publish_p50_increase[nobody]", "<= 50ms"},
		{"replication_backlog_max_during_fault", "<= 500"},
		{"replication_backlog_max_during_fault", "< 10"},
	}, r, nil)
	want := []bool{true, true, false, false, true, false}
	for i, v := range vs {
		if v.Pass != want[i] {
			t.Errorf("%s %s: pass=%t (actual %s, err %q), want %t", v.Name, v.Expr, v.Pass, v.Actual, v.Err, want[i])
		}
	}
	if vs[3].Err == "" {
		t.Error("an expectation on an unknown producer's latency failed without saying why")
	}
}
