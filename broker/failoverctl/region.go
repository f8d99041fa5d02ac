package failoverctl

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
)

// Region-wide planned switchover (issue 33, item 1): `meridian admin
// failover --region R --to T --planned` empties region R for maintenance.
// Run by a broker of R, it moves every active-standby namespace active in
// R to T by the planned path (Switchover), one at a time, in namespace
// name order. The first namespace whose switchover fails (its drain did
// not finish, its commit failed, or the request ended) ends the run: the
// namespaces moved before it stay moved (each is a committed epoch of its
// own, as good as a switchover asked alone), it stays active in R (its
// switchover aborted as a single one does: never a half move), and the
// rest are reported "not started", still active in R. A namespace whose
// regions do not include T is reported "skipped" and stays in R. With
// DryRun nothing moves: the namespaces that would move, each with its
// pre-flight.

// The states of a namespace in a region-wide switchover.
const (
	RegionNSCommitted  = "committed"
	RegionNSAborted    = "aborted"
	RegionNSNotStarted = "not started"
	RegionNSSkipped    = "skipped"
	RegionNSWouldMove  = "would move"
)

// RegionNamespace is one namespace's part in a region-wide switchover.
type RegionNamespace struct {
	Namespace string `json:"namespace"`
	// State: committed, aborted, not started, skipped or (dry run) would
	// move.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Epoch is the committed epoch; HoldMs and DrainMs its switchover's
	// (SwitchoverReport); TookMs the whole call's.
	Epoch   uint64 `json:"epoch,omitempty"`
	HoldMs  int64  `json:"holdMs,omitempty"`
	DrainMs int64  `json:"drainMs,omitempty"`
	TookMs  int64  `json:"tookMs,omitempty"`
	// PreFlight is the dry run's report of the namespace.
	PreFlight *SwitchoverReport `json:"preFlight,omitempty"`
}

// RegionSwitchoverReport is what a region-wide switchover did.
type RegionSwitchoverReport struct {
	Region string `json:"region"`
	To     string `json:"to"`
	// State: "committed" (every namespace that could move moved),
	// "aborted" (a namespace's switchover failed: see Namespaces) or
	// "dry-run".
	State string `json:"state"`
	// TookMs: the whole run, first hold to last release.
	TookMs     int64             `json:"tookMs"`
	Moved      int               `json:"moved"`
	NotStarted int               `json:"notStarted"`
	Namespaces []RegionNamespace `json:"namespaces"`
}

// regionCandidate is an active-standby namespace as read for a
// region-wide switchover: its active region and its regions.
type regionCandidate struct {
	Namespace string
	Active    string
	Regions   []string
}

// planRegionSwitchover returns the namespaces active in region to move to
// to, in name order, and those active there that cannot move (to is not
// one of their regions), reported skipped. Namespaces active elsewhere
// are not part of it.
func planRegionSwitchover(region, to string, cands []regionCandidate) (move []string, skipped []RegionNamespace) {
	for _, c := range cands {
		if c.Active != region {
			continue
		}
		if !slices.Contains(c.Regions, to) {
			skipped = append(skipped, RegionNamespace{Namespace: c.Namespace, State: RegionNSSkipped,
				Reason: fmt.Sprintf("region %s is not one of its regions %v: it stays active in %s", to, c.Regions, region)})
			continue
		}
		move = append(move, c.Namespace)
	}
	slices.Sort(move)
	slices.SortFunc(skipped, func(a, b RegionNamespace) int { return strings.Compare(a.Namespace, b.Namespace) })
	return move, skipped
}

// runRegionSwitchover moves the namespaces of plan one at a time with
// move, in order, until one fails: that one is aborted, every later one
// not started; with ctx ended between two, the rest are not started
// either. It reports whether every namespace moved.
func runRegionSwitchover(ctx context.Context, plan []string, move func(ns string) (SwitchoverReport, error)) ([]RegionNamespace, bool) {
	out := make([]RegionNamespace, 0, len(plan))
	stopped := ""
	for _, ns := range plan {
		if stopped == "" && ctx.Err() != nil {
			stopped = fmt.Sprintf("the region-wide switchover ended before it: %v", ctx.Err())
		}
		if stopped != "" {
			out = append(out, RegionNamespace{Namespace: ns, State: RegionNSNotStarted, Reason: stopped})
			continue
		}
		start := time.Now()
		rep, err := move(ns)
		rn := RegionNamespace{Namespace: ns, TookMs: time.Since(start).Milliseconds(), HoldMs: rep.HoldMs, DrainMs: rep.DrainMs}
		if err != nil {
			rn.State, rn.Reason = RegionNSAborted, err.Error()
			stopped = fmt.Sprintf("the switchover of %s aborted: the region-wide switchover stopped there", ns)
		} else {
			rn.State = RegionNSCommitted
			if rep.Record != nil {
				rn.Epoch = rep.Record.Epoch
			}
		}
		out = append(out, rn)
	}
	return out, stopped == ""
}

// regionCandidates reads the active-standby namespaces of this broker's
// region (activeStandbyNamespaces) with their active region from the
// global store.
func (sh *Shell) regionCandidates(ctx context.Context) ([]regionCandidate, error) {
	nss, err := sh.activeStandbyNamespaces()
	if err != nil {
		return nil, err
	}
	var out []regionCandidate
	for _, ns := range nss {
		pol, err := sh.meta.GetPolicies(ctx, ns)
		if err != nil {
			return nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
		rec, _, err := sh.readRecord(ctx, ns, pol)
		if err != nil {
			return nil, err
		}
		out = append(out, regionCandidate{Namespace: ns, Active: rec.Active, Regions: pol.ReplicationClusters})
	}
	return out, nil
}

// RegionSwitchover moves every active-standby namespace active in region
// to region to by the planned path, one at a time (see above), or with
// o.DryRun reports what would move. An abort is an error (409) naming
// what moved and what did not, returned with the report.
func (sh *Shell) RegionSwitchover(ctx context.Context, region, to string, o SwitchoverOptions) (RegionSwitchoverReport, error) {
	rep := RegionSwitchoverReport{Region: region, To: to, Namespaces: []RegionNamespace{}}
	switch {
	case region == "":
		return rep, meta.BadRequest(fmt.Errorf("region: the region to empty is required"))
	case to == "":
		return rep, meta.BadRequest(fmt.Errorf("to: the region to move the namespaces to is required"))
	case region == to:
		return rep, meta.BadRequest(fmt.Errorf("to %s is the region to empty itself: give another region", to))
	}
	regions, err := sh.meta.ListRegions(ctx)
	if err != nil {
		return rep, err
	}
	for _, r := range []string{region, to} {
		if !slices.Contains(regions, r) {
			return rep, meta.BadRequest(fmt.Errorf("region %s is not registered (regions: %s)", r, strings.Join(regions, ", ")))
		}
	}
	if region != sh.cfg.Cluster {
		return rep, meta.StatusError{Status: http.StatusConflict, Err: fmt.Errorf("a region-wide switchover of %s runs there (this broker is in %s): ask a broker of %s", region, sh.cfg.Cluster, region)}
	}
	cands, err := sh.regionCandidates(ctx)
	if err != nil {
		return rep, err
	}
	plan, skipped := planRegionSwitchover(region, to, cands)
	start := time.Now()
	if o.DryRun {
		rep.State = "dry-run"
		for _, ns := range plan {
			rn := RegionNamespace{Namespace: ns, State: RegionNSWouldMove}
			if pre, err := sh.Switchover(ctx, ns, to, o); err != nil {
				rn.Reason = "pre-flight: " + err.Error()
			} else {
				rn.PreFlight = &pre
			}
			rep.Namespaces = append(rep.Namespaces, rn)
		}
		rep.Namespaces = append(rep.Namespaces, skipped...)
		rep.TookMs = time.Since(start).Milliseconds()
		return rep, nil
	}
	if o.Reason == "" {
		o.Reason = "planned switchover of region " + region
	}
	sh.log.Warn("switchover: region-wide", "region", region, "to", to, "namespaces", len(plan), "skipped", len(skipped))
	done, all := runRegionSwitchover(ctx, plan, func(ns string) (SwitchoverReport, error) {
		return sh.Switchover(ctx, ns, to, o)
	})
	rep.TookMs = time.Since(start).Milliseconds()
	rep.Namespaces = append(done, skipped...)
	var moved, aborted, notStarted []string
	for _, rn := range done {
		switch rn.State {
		case RegionNSCommitted:
			moved = append(moved, rn.Namespace)
		case RegionNSAborted:
			aborted = append(aborted, rn.Namespace+" ("+rn.Reason+")")
		default:
			notStarted = append(notStarted, rn.Namespace)
		}
	}
	rep.Moved, rep.NotStarted = len(moved), len(notStarted)
	sh.log.Warn("switchover: region-wide ended", "region", region, "to", to, "moved", len(moved), "aborted", len(aborted), "not_started", len(notStarted), "took_ms", rep.TookMs)
	if all {
		rep.State = "committed"
		return rep, nil
	}
	rep.State = "aborted"
	list := func(v []string) string {
		if len(v) == 0 {
			return "none"
		}
		return strings.Join(v, ", ")
	}
	return rep, meta.StatusError{Status: http.StatusConflict, Err: fmt.Errorf("region-wide switchover of %s to %s aborted: moved to %s: %s; aborted, active in %s: %s; not started, active in %s: %s",
		region, to, to, list(moved), region, list(aborted), region, list(notStarted))}
}
