package drill

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/drill/check"
	"github.com/meridian-mq/meridian/tools/up"
)

// A drill's planned switchover (action switchover, issue 33 item 1) asks
// what `meridian admin failover NS --to R --planned --timeout T` asks: a
// POST of {to, planned, timeoutMs} to /admin/v2/meridian/failover/NS on a
// broker of the namespace's active region, with "Prefer: respond-async",
// then GETs the operation's status URL until it ended. The report keeps
// when it was asked, when the new epoch was committed (the record's
// sinceMs) or when it aborted, the brokers' hold and drain, and — as the
// fault's RTO — the produce and consume pause the clients saw.

// defaultSwitchoverTimeout is the admin command's --timeout default.
const defaultSwitchoverTimeout = 30 * time.Second

// Switchover is one planned switchover the drill asked for. Times are
// seconds since the workload started.
type Switchover struct {
	Namespace string `json:"namespace"`
	// Region: set when the switchover was one namespace's part in a
	// region-wide switchover of that region (RegionSwitchover).
	Region  string  `json:"region,omitempty"`
	From    string  `json:"from"`
	To      string  `json:"to"`
	AskedAt float64 `json:"asked_at"`
	// EndedAt: when the drill saw the operation end (committed, aborted
	// or failed).
	EndedAt float64 `json:"ended_at"`
	// State: committed, aborted (the drain did not finish in time: the
	// old region stays active), or failed (could not be asked); in a
	// region-wide switchover also "not started" (after the first abort)
	// and "skipped" (the target is not one of its regions).
	State string `json:"state"`
	// CommittedAt and Epoch: the new record's since and epoch.
	CommittedAt float64 `json:"committed_at,omitempty"`
	Epoch       uint64  `json:"epoch,omitempty"`
	// HoldMs and DrainMs: the coordinating broker's report (the hold from
	// in place to the commit, and its wait for every topic to be ready).
	HoldMs  int64 `json:"hold_ms,omitempty"`
	DrainMs int64 `json:"drain_ms,omitempty"`
	Topics  int   `json:"topics,omitempty"` // topics the drain waited for
	// TookMs: a region-wide switchover's call for this namespace, hold
	// to release (the broker's).
	TookMs int64  `json:"took_ms,omitempty"`
	Error  string `json:"error,omitempty"`
	// ActiveAfter: for an aborted one, the namespace's active region as
	// the old region's brokers answered right after (From, if the abort
	// left it in place).
	ActiveAfter string `json:"active_after,omitempty"`
	// ProducePause and ConsumePause: the clients' longest stall of
	// receipts and of first deliveries from the request to the next
	// fault (the fault's RTO), seconds.
	ProducePause float64 `json:"produce_pause"`
	ConsumePause float64 `json:"consume_pause"`

	at time.Time // the fault's At, to find its RTO
}

// switchoverOp is the admin API's long operation (broker/admin
// operations.go) with a switchover's result.
type switchoverOp struct {
	State     string `json:"state"`
	StatusURL string `json:"statusUrl"`
	Error     string `json:"error"`
	Result    struct {
		State  string `json:"state"`
		From   string `json:"from"`
		Record *struct {
			Epoch   uint64 `json:"epoch"`
			Active  string `json:"active"`
			SinceMs int64  `json:"sinceMs"`
		} `json:"record"`
		HoldMs  int64 `json:"holdMs"`
		DrainMs int64 `json:"drainMs"`
		Topics  []struct {
			Topic string `json:"topic"`
		} `json:"topics"`
	} `json:"result"`
}

// switchover runs fault f (action switchover) and records it.
func (r *runner) switchover(ctx context.Context, f FaultSpec, at time.Time) error {
	if f.Region != "" {
		return r.regionSwitchover(ctx, f, at)
	}
	sw := Switchover{Namespace: f.Namespace, To: f.To, AskedAt: at.Sub(r.start).Seconds(), at: at}
	err := r.askSwitchover(ctx, f, &sw)
	sw.EndedAt = time.Since(r.start).Seconds()
	if err != nil && sw.State == "" {
		sw.State, sw.Error = "failed", err.Error()
	}
	if sw.State == "aborted" {
		sw.ActiveAfter = r.activeAfter(ctx, sw.Namespace, sw.From)
	}
	r.mu.Lock()
	r.recordLocked(sw)
	r.mu.Unlock()
	return err
}

// record adds a switchover's outcome to the report: its markers and, once
// committed, its epoch. Called with r.mu held.
func (r *runner) recordLocked(sw Switchover) {
	r.switchovers = append(r.switchovers, sw)
	switch sw.State {
	case "committed":
		r.markers = append(r.markers, Marker{T: sw.CommittedAt, Label: fmt.Sprintf("committed: %s active in %s, epoch %d (hold %d ms, drain %d ms)", sw.Namespace, sw.To, sw.Epoch, sw.HoldMs, sw.DrainMs)})
		r.epochs = addEpoch(r.epochs, check.Epoch{Namespace: sw.Namespace, Epoch: sw.Epoch, Active: sw.To, Since: r.start.Add(time.Duration(sw.CommittedAt * float64(time.Second)))})
	case "aborted":
		r.markers = append(r.markers, Marker{T: sw.EndedAt, Label: fmt.Sprintf("aborted: %s stays active in %s", sw.Namespace, sw.From), Err: sw.Error})
	}
}

func (r *runner) askSwitchover(ctx context.Context, f FaultSpec, sw *Switchover) error {
	timeout := f.Timeout
	if timeout == 0 {
		timeout = defaultSwitchoverTimeout
	}
	var ns Namespace
	for _, n := range r.s.Namespaces {
		if n.Name == f.Namespace {
			ns = n
		}
	}
	// The active region, as any of the namespace's regions sees it.
	var lastErr error
	for _, reg := range ns.Regions {
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		a, err := r.adm.activeRegion(c, reg, ns.Name)
		cancel()
		if err == nil && a != "" {
			sw.From = a
			break
		}
		lastErr = err
	}
	if sw.From == "" {
		return fmt.Errorf("switchover %s: no active region known: %v", ns.Name, lastErr)
	}
	body := map[string]any{"to": f.To, "reason": "planned switchover (drill " + r.s.Name + ")", "planned": true, "dryRun": false, "timeoutMs": timeout.Milliseconds()}
	path := "/admin/v2/meridian/failover/" + ns.Name
	var op switchoverOp
	var broker up.ProcSpec
	lastErr = nil
	for _, ps := range r.dep.Plan.Procs {
		if ps.Role != "broker" || ps.Region != sw.From {
			continue
		}
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.adm.callOneWith(c, ps, "POST", path, map[string]string{"Prefer": "respond-async"}, body, &op)
		cancel()
		if err == nil {
			broker = ps
			lastErr = nil
			break
		}
		lastErr = err
	}
	if lastErr != nil || broker.Name == "" {
		return fmt.Errorf("switchover %s to %s: asking %s: %v", ns.Name, f.To, sw.From, lastErr)
	}
	deadline := time.Now().Add(timeout + 30*time.Second)
	for op.State == "running" && op.StatusURL != "" {
		if time.Now().After(deadline) {
			return fmt.Errorf("switchover %s to %s: still running %s after it was asked", ns.Name, f.To, timeout+30*time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := r.adm.callOne(c, broker, "GET", op.StatusURL, nil, &op)
		cancel()
		if err != nil {
			return fmt.Errorf("switchover %s to %s: its status: %w", ns.Name, f.To, err)
		}
	}
	res := op.Result
	sw.HoldMs, sw.DrainMs, sw.Topics = res.HoldMs, res.DrainMs, len(res.Topics)
	switch {
	case op.State == "succeeded" && res.State == "committed" && res.Record != nil:
		sw.State, sw.Epoch = "committed", res.Record.Epoch
		sw.CommittedAt = time.UnixMilli(res.Record.SinceMs).Sub(r.start).Seconds()
		return nil
	case op.State == "failed" && strings.Contains(op.Error, "aborted"):
		sw.State, sw.Error = "aborted", op.Error
		return fmt.Errorf("%s", op.Error)
	default:
		return fmt.Errorf("switchover %s to %s: operation %s: %s", ns.Name, f.To, op.State, op.Error)
	}
}

// activeAfter is namespace ns's active region as region's brokers see it
// now ("" if none answers).
func (r *runner) activeAfter(ctx context.Context, ns, region string) string {
	c, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	a, err := r.adm.activeRegion(c, region, ns)
	if err != nil {
		return ""
	}
	return a
}

// addEpoch adds e to es unless its (namespace, epoch) is known.
func addEpoch(es []check.Epoch, e check.Epoch) []check.Epoch {
	if slices.ContainsFunc(es, func(x check.Epoch) bool { return x.Namespace == e.Namespace && x.Epoch == e.Epoch }) {
		return es
	}
	return append(es, e)
}

// activeStandby lists the drill's namespaces that have an active region.
func (s *Scenario) activeStandby() []Namespace {
	var out []Namespace
	for _, ns := range s.Namespaces {
		if len(ns.Regions) > 1 && ns.Replication["failover"] == "active-standby" {
			out = append(out, ns)
		}
	}
	return out
}

// sampleEpochs reads the failover record of each active-standby namespace
// from every region and keeps each epoch it has not seen (with its
// since): an epoch that lasted less than the sampling period can be
// missed, and the report says so (missedEpochs).
func (r *runner) sampleEpochs(ctx context.Context) {
	for _, ns := range r.s.activeStandby() {
		for _, reg := range ns.Regions {
			c, cancel := context.WithTimeout(ctx, time.Second)
			var recs []struct {
				Namespace string `json:"namespace"`
				Active    string `json:"active"`
				Epoch     uint64 `json:"epoch"`
				SinceMs   int64  `json:"sinceMs"`
			}
			err := r.adm.call(c, reg, "GET", "/admin/v2/meridian/failover/"+ns.Name, nil, &recs)
			cancel()
			if err != nil {
				continue
			}
			r.mu.Lock()
			for _, rec := range recs {
				if rec.Namespace != ns.Name || rec.Active == "" {
					continue
				}
				var since time.Time
				if rec.SinceMs > 0 {
					since = time.UnixMilli(rec.SinceMs)
				}
				r.epochs = addEpoch(r.epochs, check.Epoch{Namespace: ns.Name, Epoch: rec.Epoch, Active: rec.Active, Since: since})
			}
			r.mu.Unlock()
		}
	}
}

// missedEpochs names the epochs between the first and the last seen of a
// namespace that were never seen (their receipts count under the epoch
// before).
func missedEpochs(es []check.Epoch) []string {
	seen := map[string][]uint64{}
	for _, e := range es {
		seen[e.Namespace] = append(seen[e.Namespace], e.Epoch)
	}
	var out []string
	for ns, ep := range seen {
		slices.Sort(ep)
		for i := 1; i < len(ep); i++ {
			for m := ep[i-1] + 1; m < ep[i]; m++ {
				out = append(out, fmt.Sprintf("%s epoch %d", ns, m))
			}
		}
	}
	slices.Sort(out)
	return out
}
