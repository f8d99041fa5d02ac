package failoverctl

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/meridian-mq/meridian/broker/meta"
)

// The plan of a region-wide switchover: the namespaces active in the
// region, in name order whatever order they were read in; those whose
// regions do not include the target are skipped (they stay), and those
// active elsewhere are not part of it.
func TestRegionSwitchoverPlansTheRegionsNamespacesInNameOrder(t *testing.T) {
	two, three := []string{"east", "west"}, []string{"east", "west", "north"}
	cands := []regionCandidate{
		{Namespace: "t/c", Active: "east", Regions: two},
		{Namespace: "a/z", Active: "east", Regions: three},
		{Namespace: "t/west-one", Active: "west", Regions: two},
		{Namespace: "t/north-only", Active: "east", Regions: []string{"east", "north"}},
		{Namespace: "t/a", Active: "east", Regions: two},
	}
	move, skipped := planRegionSwitchover("east", "west", cands)
	if want := []string{"a/z", "t/a", "t/c"}; !reflect.DeepEqual(move, want) {
		t.Errorf("moves %v, want %v", move, want)
	}
	if len(skipped) != 1 || skipped[0].Namespace != "t/north-only" || skipped[0].State != RegionNSSkipped || skipped[0].Reason == "" {
		t.Errorf("skipped %+v, want t/north-only skipped with a reason", skipped)
	}
	if move, skipped := planRegionSwitchover("north", "west", cands); len(move) != 0 || len(skipped) != 0 {
		t.Errorf("a region with nothing active: moves %v, skips %v", move, skipped)
	}
}

// Every namespace moves, one at a time, in the plan's order; each
// reports its epoch and hold.
func TestRegionSwitchoverMovesEachInTurn(t *testing.T) {
	var calls []string
	out, all := runRegionSwitchover(context.Background(), []string{"t/a", "t/b", "t/c"}, func(ns string) (SwitchoverReport, error) {
		calls = append(calls, ns)
		return SwitchoverReport{Namespace: ns, HoldMs: 100, DrainMs: 60, Record: &meta.FailoverRecord{Epoch: uint64(len(calls))}}, nil
	})
	if !all {
		t.Fatal("not every namespace moved")
	}
	if want := []string{"t/a", "t/b", "t/c"}; !reflect.DeepEqual(calls, want) {
		t.Fatalf("moved %v, want %v in that order", calls, want)
	}
	for i, rn := range out {
		if rn.State != RegionNSCommitted || rn.Epoch != uint64(i+1) || rn.HoldMs != 100 || rn.DrainMs != 60 {
			t.Errorf("namespace %d: %+v", i, rn)
		}
	}
}

// The first abort ends the run: the namespaces moved before it stay
// moved, it is reported aborted with its reason, and no later one is
// started (move is never called for them).
func TestRegionSwitchoverFirstAbortEndsTheRun(t *testing.T) {
	var calls []string
	out, all := runRegionSwitchover(context.Background(), []string{"t/a", "t/b", "t/c", "t/d"}, func(ns string) (SwitchoverReport, error) {
		calls = append(calls, ns)
		if ns == "t/b" {
			return SwitchoverReport{Namespace: ns}, errors.New("switchover of t/b to west aborted after 3s: the drain did not finish")
		}
		return SwitchoverReport{Namespace: ns, Record: &meta.FailoverRecord{Epoch: 7}}, nil
	})
	if all {
		t.Fatal("reported every namespace moved after an abort")
	}
	if want := []string{"t/a", "t/b"}; !reflect.DeepEqual(calls, want) {
		t.Fatalf("started %v, want %v: nothing after the abort", calls, want)
	}
	want := []string{RegionNSCommitted, RegionNSAborted, RegionNSNotStarted, RegionNSNotStarted}
	for i, rn := range out {
		if rn.State != want[i] {
			t.Errorf("%s: %s, want %s", rn.Namespace, rn.State, want[i])
		}
	}
	if out[0].Epoch != 7 || out[1].Reason == "" || out[2].Reason == "" {
		t.Errorf("report %+v: want the moved one's epoch and reasons for the others", out)
	}
}

// A run whose request ended between two namespaces starts no more.
func TestRegionSwitchoverStopsWhenTheRequestEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out, all := runRegionSwitchover(ctx, []string{"t/a", "t/b"}, func(ns string) (SwitchoverReport, error) {
		cancel()
		return SwitchoverReport{Namespace: ns}, nil
	})
	if all || out[0].State != RegionNSCommitted || out[1].State != RegionNSNotStarted {
		t.Fatalf("all %v, report %+v: want t/a moved and t/b not started", all, out)
	}
}
