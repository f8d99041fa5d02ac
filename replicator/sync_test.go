package replicator

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// "Sync mode: the producer's receipt only after the remote region(s)
// persisted the entry."
func TestSyncReceiptAfterEveryRegion(t *testing.T) {
	tr := NewSyncTracker(SyncConfig{Policy: SyncStrict, Timeout: time.Second}, []string{"b", "c"}, 1, t0)
	for seq := uint64(1); seq <= 3; seq++ {
		tr.Track(seq, t0)
	}
	steps := []struct {
		region string
		seq    uint64
		want   uint64 // ReceiptThrough, 0 = nothing new
	}{
		{"b", 2, 0},
		{"c", 3, 2},
		{"b", 1, 0}, // late, older ack
		{"d", 3, 0}, // not in the sync set
		{"b", 3, 3},
	}
	for _, s := range steps {
		tr.Acked(s.region, s.seq)
		if got := tr.Ready().ReceiptThrough; got != s.want {
			t.Fatalf("after %s acked %d: receipts through %d, want %d", s.region, s.seq, got, s.want)
		}
	}
	if tr.Waiting() != 0 {
		t.Fatalf("%d still waiting", tr.Waiting())
	}
	// Acks ahead of the local log wait for the entries to be tracked.
	tr.Acked("b", 5)
	tr.Acked("c", 5)
	tr.Track(4, t0)
	if got := tr.Ready().ReceiptThrough; got != 4 {
		t.Fatalf("receipts through %d, want 4", got)
	}
}

// "supports removing a region from the sync set at an epoch (when failover
// declares it failed) so waiting entries complete".
func TestSyncRemoveRegionAtEpoch(t *testing.T) {
	tr := NewSyncTracker(SyncConfig{Policy: SyncStrict}, []string{"b", "c"}, 4, t0)
	tr.Track(1, t0)
	tr.Track(2, t0)
	tr.Acked("b", 2)
	if got := tr.Ready().ReceiptThrough; got != 0 {
		t.Fatalf("receipts through %d with c silent", got)
	}
	if err := tr.RemoveRegion("c", 3); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("stale removal: %v", err)
	}
	if err := tr.RemoveRegion("c", 5); err != nil {
		t.Fatal(err)
	}
	if got := tr.Ready().ReceiptThrough; got != 2 {
		t.Fatalf("after removing c: receipts through %d, want 2", got)
	}
	// c comes back at epoch 6: it holds back only entries tracked after.
	tr.Track(3, t0)
	if got := tr.Ready().ReceiptThrough; got != 0 {
		t.Fatalf("b has not acked 3, yet receipts through %d", got)
	}
	if err := tr.AddRegion("c", 6); err != nil {
		t.Fatal(err)
	}
	tr.Track(4, t0)
	tr.Acked("b", 4)
	if got := tr.Ready().ReceiptThrough; got != 3 {
		t.Fatalf("receipts through %d, want 3 (4 waits for c)", got)
	}
	tr.Acked("c", 4)
	if got := tr.Ready().ReceiptThrough; got != 4 {
		t.Fatalf("receipts through %d, want 4", got)
	}
	if err := tr.AddRegion("d", 5); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("stale add: %v", err)
	}
	if got := tr.Regions(); !reflect.DeepEqual(got, []string{"b", "c"}) {
		t.Fatalf("regions %v", got)
	}
}

// "a strict/degrade policy with timeouts as input time".
func TestSyncTimeoutPolicies(t *testing.T) {
	t.Run("strict", func(t *testing.T) {
		tr := NewSyncTracker(SyncConfig{Policy: SyncStrict, Timeout: time.Second}, []string{"b", "c"}, 1, t0)
		tr.Track(1, t0)
		tr.Acked("b", 1)
		if rd := tr.Ready(); !rd.WakeAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("wake at %v", rd.WakeAt)
		}
		tr.Tick(t0.Add(time.Second))
		rd := tr.Ready()
		want := []SyncEvent{{Kind: SyncStalled, Region: "c", Seq: 1, Waited: time.Second}}
		if !reflect.DeepEqual(rd.Events, want) || rd.ReceiptThrough != 0 {
			t.Fatalf("ready %+v, want stalled c and no receipt", rd)
		}
		tr.Tick(t0.Add(time.Minute))
		if rd := tr.Ready(); len(rd.Events) != 0 || rd.ReceiptThrough != 0 {
			t.Fatalf("strict released or re-reported: %+v", rd)
		}
		tr.Acked("c", 1)
		if rd := tr.Ready(); rd.ReceiptThrough != 1 {
			t.Fatalf("after c acked: %+v", rd)
		}
	})
	t.Run("degrade", func(t *testing.T) {
		tr := NewSyncTracker(SyncConfig{Policy: SyncDegrade, Timeout: time.Second}, []string{"b", "c"}, 1, t0)
		tr.Track(1, t0)
		tr.Track(2, t0.Add(500*time.Millisecond))
		tr.Acked("b", 2)
		tr.Tick(t0.Add(999 * time.Millisecond))
		if rd := tr.Ready(); rd.ReceiptThrough != 0 {
			t.Fatalf("released before the timeout: %+v", rd)
		}
		tr.Tick(t0.Add(time.Second))
		rd := tr.Ready()
		if rd.ReceiptThrough != 2 || len(rd.Events) != 1 || rd.Events[0].Kind != SyncDegraded || rd.Events[0].Region != "c" {
			t.Fatalf("ready %+v, want c degraded and receipts through 2", rd)
		}
		// While degraded, c holds nothing back.
		tr.Track(3, t0.Add(time.Second))
		tr.Acked("b", 3)
		if rd := tr.Ready(); rd.ReceiptThrough != 3 {
			t.Fatalf("ready %+v", rd)
		}
		// c catches up with what was tracked when it left: back in the set.
		tr.Acked("c", 2)
		rd = tr.Ready()
		if len(rd.Events) != 1 || rd.Events[0].Kind != SyncRestored {
			t.Fatalf("events %v, want restored", rd.Events)
		}
		tr.Track(4, t0.Add(2*time.Second))
		tr.Acked("b", 4)
		if rd := tr.Ready(); rd.ReceiptThrough != 0 {
			t.Fatalf("restored c did not hold entry 4: %+v", rd)
		}
		tr.Acked("c", 4)
		if rd := tr.Ready(); rd.ReceiptThrough != 4 {
			t.Fatalf("ready %+v", rd)
		}
	})
}

func TestSyncEmptySetIsAsync(t *testing.T) {
	tr := NewSyncTracker(SyncConfig{}, nil, 1, t0)
	tr.Track(1, t0)
	if got := tr.Ready().ReceiptThrough; got != 1 {
		t.Fatalf("receipts through %d", got)
	}
}
