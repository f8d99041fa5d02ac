package replicator

import (
	"slices"
	"testing"
	"time"
)

// "A region that is gone for long must not take the survivor down: the
// replicator cursor's backlog counts against a per-region replication
// backlog quota; past it an alert fires and the policy decides (default:
// keep data up to retention and mark the region as needing a resync)."
//
// Region b goes away; the backlog passes the quota; under the default
// policy the cursor stops holding retention, retention trims entries b
// never got, the sender finds them gone and stops (needs resync) instead
// of skipping them. The resync — a new stream from the first retained
// entry — makes b skip exactly the trimmed entries it lacked, declared in
// Write.Skipped, and everything after arrives once, in order.
func TestRegionGoneLongNeedsResync(t *testing.T) {
	l := newTestLog("a")
	l.local(10)
	cfg := testSenderConfig()
	cfg.Quota = BacklogQuota{MaxEntries: 20}
	p := newPair(t, cfg, l)
	p.pump()
	for range 5 {
		p.step(10 * time.Millisecond)
	}
	if len(p.stored) != 10 {
		t.Fatalf("stored %v", p.stored)
	}
	// b goes away.
	p.drop = func(*Batch) bool { return true }
	for range 30 {
		l.local(1)
		p.s.Appended(l.end())
		p.step(100 * time.Millisecond)
	}
	if len(p.alerts) != 1 || p.alerts[0].Kind != AlertOverQuota || p.alerts[0].Policy != QuotaKeepUpToRetention {
		t.Fatalf("alerts %v, want one over-quota", p.alerts)
	}
	if st := p.s.Status(); st.HoldsRetention || st.NeedsResync != ResyncNone {
		t.Fatalf("status %+v: the cursor must stop holding retention, replication goes on", st)
	}
	// Retention deletes up to seq 25 (b has 10). The sender still holds
	// what it read ahead (11..18) and delivers it when b is back; its next
	// read, of entries b lacks, fails.
	l.trimmed = l.posOf(25)
	p.drop = nil
	for range 20 {
		p.step(500 * time.Millisecond)
	}
	if len(p.alerts) != 2 || p.alerts[1].Kind != AlertNeedsResync || p.alerts[1].Reason != ResyncTrimmed {
		t.Fatalf("alerts %v, want needs-resync (trimmed)", p.alerts)
	}
	if !slices.Equal(p.stored, span(1, 18)) || p.a.State().Through != 18 || p.cursor.Seq != 18 {
		t.Fatalf("stored %v, record %v, cursor %v", p.stored, p.a.State(), p.cursor)
	}
	for range 20 {
		p.step(time.Second)
	}
	if len(p.stored) != 18 || len(p.alerts) != 2 {
		t.Fatalf("went on after needs-resync: stored %v, alerts %v", p.stored, p.alerts)
	}
	// The operator resyncs from the first retained entry.
	p.s = mustSender(t, cfg, p.cursor.NextStream(l.trimmed, 25, 0), l)
	p.pump()
	for _, b := range p.inFly {
		if b.Stream != 2 || b.Base != 25 {
			t.Fatalf("batch of stream %d base %d", b.Stream, b.Base)
		}
	}
	for range 50 {
		p.step(10 * time.Millisecond)
	}
	if !slices.Equal(p.skipped, []SeqRange{{19, 25}}) {
		t.Fatalf("skipped %v, want exactly the trimmed entries b lacked, 19..25", p.skipped)
	}
	if want := append(span(1, 18), span(26, 40)...); !slices.Equal(p.stored, want) {
		t.Fatalf("stored %v, want %v", p.stored, want)
	}
	if p.cursor.Seq != 40 || p.cursor.Stream != 2 {
		t.Fatalf("cursor %v", p.cursor)
	}
}
