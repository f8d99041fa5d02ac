package replicator

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// The shell's duty "Tick at WakeAt" is enough (doc.go, the caller's
// duties): a Sender ticked only at its WakeAt sends the same batches at
// the same times as one ticked every millisecond, through a rate limit, a
// lost batch (nack) and a lost last batch (ack timeout, backoff, resend).
func TestSenderWakeAtNeedsNoPeriodicTick(t *testing.T) {
	run := func(poll bool) []string {
		l := newTestLog("a")
		l.local(6)
		cfg := testSenderConfig()
		cfg.BatchMaxEntries = 1
		cfg.Limiter = NewTokenBucket(RateLimit{EntriesPerSecond: 2}, t0)
		p := newPair(t, cfg, l)
		var trace []string
		lost := map[uint64]bool{}
		p.drop = func(b *Batch) bool {
			trace = append(trace, fmt.Sprintf("%v:%v", p.now.Sub(t0), seqs([]Batch{*b})))
			first := b.FirstSeq()
			if (first == 3 || first == 6) && !lost[first] {
				lost[first] = true
				return true
			}
			return false
		}
		p.pump()
		p.deliver()
		end := t0.Add(20 * time.Second)
		for p.now.Before(end) {
			next := p.now.Add(time.Millisecond)
			if !poll {
				if next = p.s.WakeAt(); next.IsZero() {
					break
				}
			}
			p.now = next
			p.s.Tick(p.now)
			p.pump()
			p.deliver()
		}
		if !reflect.DeepEqual(p.stored, []uint64{1, 2, 3, 4, 5, 6}) {
			t.Fatalf("poll=%v: target stored %v", poll, p.stored)
		}
		return trace
	}
	polled, woken := run(true), run(false)
	if !reflect.DeepEqual(polled, woken) {
		t.Fatalf("ticked every ms:\n%v\nticked at WakeAt:\n%v", polled, woken)
	}
	if len(polled) != 9 { // 6 entries; 3 and 4 again after the nack (4 was sent behind the hole), 6 after its ack timeout
		t.Fatalf("sends %v", polled)
	}
}

// The same for a SyncTracker: ticked only at SyncReady.WakeAt it reports
// the same stalls, degrades and receipts at the same times as ticked
// every millisecond — including an entry that becomes the oldest only
// after its own timeout passed (the region stalled on the entry before
// it, then acknowledged that one only: the stall re-arms at once).
func TestSyncWakeAtNeedsNoPeriodicTick(t *testing.T) {
	type input struct {
		ms     int
		track  uint64
		region string
		acked  uint64
	}
	script := []input{
		{ms: 0, track: 1},
		{ms: 100, region: "b", acked: 1},
		{ms: 500, track: 2},
		{ms: 600, region: "b", acked: 2},
		// 1000: c stalls (strict) or leaves the sync set (degrade) on 1.
		{ms: 3000, track: 3}, // moves the tracker's clock past 2's timeout
		{ms: 3100, region: "b", acked: 3},
		{ms: 3200, region: "c", acked: 1}, // progress: 2 is the oldest, past its timeout
		{ms: 4500, track: 4},
		{ms: 4600, region: "b", acked: 4},
		{ms: 6000, region: "c", acked: 4},
	}
	for _, policy := range []SyncPolicy{SyncStrict, SyncDegrade} {
		t.Run(policy.String(), func(t *testing.T) {
			run := func(poll bool) []string {
				tr := NewSyncTracker(SyncConfig{Policy: policy, Timeout: time.Second}, []string{"b", "c"}, 1, t0)
				var trace []string
				var wake time.Time
				take := func(ms int) {
					rd := tr.Ready()
					for _, ev := range rd.Events {
						trace = append(trace, fmt.Sprintf("%d:%v %s %d", ms, ev.Kind, ev.Region, ev.Seq))
					}
					if rd.ReceiptThrough > 0 {
						trace = append(trace, fmt.Sprintf("%d:receipts through %d", ms, rd.ReceiptThrough))
					}
					wake = rd.WakeAt
				}
				next := 0
				for ms := 0; ms <= 7000; ms++ {
					now := t0.Add(time.Duration(ms) * time.Millisecond)
					for ; next < len(script) && script[next].ms == ms; next++ {
						if in := script[next]; in.track > 0 {
							tr.Track(in.track, now)
						} else {
							tr.Acked(in.region, in.acked)
						}
					}
					take(ms)
					if poll || (!wake.IsZero() && !wake.After(now)) {
						tr.Tick(now)
						take(ms)
					}
				}
				return trace
			}
			polled, woken := run(true), run(false)
			if !reflect.DeepEqual(polled, woken) {
				t.Fatalf("ticked every ms:\n%q\nticked at WakeAt:\n%q", polled, woken)
			}
			t.Logf("%q", polled)
		})
	}
}
