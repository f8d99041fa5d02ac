package drill

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/meridian-mq/meridian/tools/up"
)

// A drill's region-wide planned switchover (action switchover with
// region:, issue 33 item 1) asks what `meridian admin failover --region R
// --to T --planned --timeout D` asks: a POST of {region, to, planned,
// timeoutMs} to /admin/v2/meridian/failover on a broker of R, with
// "Prefer: respond-async", then GETs the operation's status URL until it
// ended. The brokers move every active-standby namespace active in R one
// at a time (broker/failoverctl/region.go); the drill records each
// namespace as a Switchover of its own (Region set: committed, aborted,
// not started or skipped, its epoch, hold, drain and call), its commit
// time read back from its failover record, and the run as a
// RegionSwitchover. Each namespace's pause is the longest stall of its
// own topics (judgeSwitchovers): the others keep serving meanwhile.

// RegionSwitchover is one region-wide switchover the drill asked for.
// Times are seconds since the workload started.
type RegionSwitchover struct {
	Region  string  `json:"region"`
	To      string  `json:"to"`
	AskedAt float64 `json:"asked_at"`
	EndedAt float64 `json:"ended_at"`
	// State: committed (every namespace that could move moved), aborted
	// (one's switchover aborted and ended the run) or failed (could not
	// be asked, or its operation ended otherwise).
	State string `json:"state"`
	// TookMs: the brokers' run, first hold to last release; Moved and
	// NotStarted: namespaces moved, and left in Region after an abort.
	TookMs     int64  `json:"took_ms"`
	Moved      int    `json:"moved"`
	NotStarted int    `json:"not_started"`
	Error      string `json:"error,omitempty"`
}

// regionSwitchoverOp is the admin API's long operation with a region-wide
// switchover's result (failoverctl.RegionSwitchoverReport).
type regionSwitchoverOp struct {
	State     string `json:"state"`
	StatusURL string `json:"statusUrl"`
	Error     string `json:"error"`
	Result    struct {
		State      string `json:"state"`
		TookMs     int64  `json:"tookMs"`
		Moved      int    `json:"moved"`
		NotStarted int    `json:"notStarted"`
		Namespaces []struct {
			Namespace string `json:"namespace"`
			State     string `json:"state"`
			Reason    string `json:"reason"`
			Epoch     uint64 `json:"epoch"`
			HoldMs    int64  `json:"holdMs"`
			DrainMs   int64  `json:"drainMs"`
			TookMs    int64  `json:"tookMs"`
		} `json:"namespaces"`
	} `json:"result"`
}

// regionSwitchover runs fault f (a switchover with region) and records
// it: the run, and each namespace's part.
func (r *runner) regionSwitchover(ctx context.Context, f FaultSpec, at time.Time) error {
	rs := RegionSwitchover{Region: f.Region, To: f.To, AskedAt: at.Sub(r.start).Seconds()}
	op, err := r.askRegionSwitchover(ctx, f)
	rs.EndedAt = time.Since(r.start).Seconds()
	res := op.Result
	rs.TookMs, rs.Moved, rs.NotStarted = res.TookMs, res.Moved, res.NotStarted
	switch {
	case err != nil:
		rs.State, rs.Error = "failed", err.Error()
	case op.State == "succeeded" && res.State == "committed":
		rs.State = "committed"
	case op.State == "failed" && res.State == "aborted":
		rs.State, rs.Error = "aborted", op.Error
		err = fmt.Errorf("%s", op.Error)
	default:
		rs.State, rs.Error = "failed", fmt.Sprintf("operation %s (%s): %s", op.State, res.State, op.Error)
		err = fmt.Errorf("region-wide switchover of %s to %s: %s", f.Region, f.To, rs.Error)
	}
	var sws []Switchover
	for _, n := range res.Namespaces {
		sw := Switchover{Namespace: n.Namespace, Region: f.Region, From: f.Region, To: f.To, AskedAt: rs.AskedAt, EndedAt: rs.EndedAt,
			State: n.State, Epoch: n.Epoch, HoldMs: n.HoldMs, DrainMs: n.DrainMs, TookMs: n.TookMs, at: at}
		if n.State != "committed" {
			sw.Error = n.Reason
			if n.State == "aborted" {
				sw.ActiveAfter = r.activeAfter(ctx, n.Namespace, f.Region)
			}
		} else {
			sw.CommittedAt = r.committedAt(ctx, n.Namespace, n.Epoch, f.To)
			if sw.CommittedAt == 0 {
				// Not read back: the end of the run bounds it.
				sw.CommittedAt = rs.EndedAt
				r.note("switchover region %s: the commit of %s epoch %d was not read back; its epoch counts from the run's end", f.Region, n.Namespace, n.Epoch)
			}
		}
		sws = append(sws, sw)
	}
	r.mu.Lock()
	r.regionSwitchovers = append(r.regionSwitchovers, rs)
	for _, sw := range sws {
		r.recordLocked(sw)
	}
	label := fmt.Sprintf("region %s → %s %s: %d moved, %d not started (%d ms)", rs.Region, rs.To, rs.State, rs.Moved, rs.NotStarted, rs.TookMs)
	r.markers = append(r.markers, Marker{T: rs.EndedAt, Label: label, Err: rs.Error})
	r.mu.Unlock()
	return err
}

// askRegionSwitchover asks a broker of f.Region for the region-wide
// switchover and polls its operation until it ended.
func (r *runner) askRegionSwitchover(ctx context.Context, f FaultSpec) (regionSwitchoverOp, error) {
	timeout := f.Timeout
	if timeout == 0 {
		timeout = defaultSwitchoverTimeout
	}
	body := map[string]any{"region": f.Region, "to": f.To, "reason": "planned switchover of region " + f.Region + " (drill " + r.s.Name + ")",
		"planned": true, "dryRun": false, "timeoutMs": timeout.Milliseconds()}
	var op regionSwitchoverOp
	var broker up.ProcSpec
	var lastErr error
	for _, ps := range r.dep.Plan.Procs {
		if ps.Role != "broker" || ps.Region != f.Region {
			continue
		}
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.adm.callOneWith(c, ps, "POST", "/admin/v2/meridian/failover", map[string]string{"Prefer": "respond-async"}, body, &op)
		cancel()
		if err == nil {
			broker, lastErr = ps, nil
			break
		}
		lastErr = err
	}
	if lastErr != nil || broker.Name == "" {
		return op, fmt.Errorf("switchover region %s to %s: asking %s: %v", f.Region, f.To, f.Region, lastErr)
	}
	// One drain timeout per namespace that could move, and a margin.
	n := 0
	for _, ns := range r.s.activeStandby() {
		if slices.Contains(ns.Regions, f.Region) && slices.Contains(ns.Regions, f.To) {
			n++
		}
	}
	bound := time.Duration(n+1)*timeout + 30*time.Second
	deadline := time.Now().Add(bound)
	for op.State == "running" && op.StatusURL != "" {
		if time.Now().After(deadline) {
			return op, fmt.Errorf("switchover region %s to %s: still running %s after it was asked", f.Region, f.To, bound)
		}
		select {
		case <-ctx.Done():
			return op, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := r.adm.callOne(c, broker, "GET", op.StatusURL, nil, &op)
		cancel()
		if err != nil {
			return op, fmt.Errorf("switchover region %s to %s: its status: %w", f.Region, f.To, err)
		}
	}
	return op, nil
}

// committedAt reads namespace ns's failover record (from region first,
// then any) and returns, in seconds since the workload started, when
// epoch was committed; 0 if no region answers with that epoch.
func (r *runner) committedAt(ctx context.Context, ns string, epoch uint64, region string) float64 {
	for _, reg := range []string{region, ""} {
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		var recs []struct {
			Namespace string `json:"namespace"`
			Epoch     uint64 `json:"epoch"`
			SinceMs   int64  `json:"sinceMs"`
		}
		err := r.adm.call(c, reg, "GET", "/admin/v2/meridian/failover/"+ns, nil, &recs)
		cancel()
		if err != nil {
			continue
		}
		for _, rec := range recs {
			if rec.Namespace == ns && rec.Epoch == epoch && rec.SinceMs > 0 {
				return time.UnixMilli(rec.SinceMs).Sub(r.start).Seconds()
			}
		}
	}
	return 0
}
