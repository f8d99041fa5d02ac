package failoverctl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/cluster"
)

// Planned switchover (issue 33, item 1): `meridian admin failover NS --to
// R --planned` moves an active-standby namespace with nothing lost and
// nothing delivered twice, even when it replicates asynchronously. Run by
// a broker of the active region:
//
//  1. every broker of the region holds the namespace (Host.SwitchoverHold):
//     new sends wait unanswered in order (the client sees a pause, not an
//     error), dispatch stops; a hold ends by itself at its deadline (the
//     timeout plus holdGrace) if its coordinator died, resuming unless the
//     record moved meanwhile;
//  2. it polls every broker (Host.SwitchoverReadiness) until each loaded
//     topic of the namespace is ready: no append in flight, every
//     delivery acknowledged, every local entry acknowledged by the
//     target's replicator and every subscription's exact position read
//     back from the target;
//  3. one compare-and-swap of the record commits the new epoch for the
//     whole namespace (CatchUp, so the target serves once the old
//     region's replicators report nothing left, which they already do);
//  4. the hold ends moved: held sends are dropped unanswered and the
//     clients closed, so they look up again and land in the target,
//     where the producers' resends are new entries.
//
// If step 2 does not end within the timeout, or the commit fails, the
// hold ends aborted (the held sends are appended, dispatch resumes) and
// the region stays active: never a half move. "Bump the epoch before
// redirecting": no client is released towards the target before step 3.

// DefaultSwitchoverTimeout bounds a planned switchover's drain.
const DefaultSwitchoverTimeout = 30 * time.Second

// holdGrace: a broker's hold outlives the coordinator's timeout by this
// much, so the coordinator's release (or the record's watch) reaches it
// before it would end the hold by itself.
const holdGrace = 5 * time.Second

// Hold is a planned switchover's hold of a namespace on one broker.
type Hold struct {
	ID         string `json:"id"`
	Target     string `json:"target"`
	DeadlineMs int64  `json:"deadlineMs"` // unix ms: the broker ends the hold by itself then
}

// TopicReadiness is one loaded topic's state for a switchover to Target.
type TopicReadiness struct {
	Topic  string `json:"topic"`
	Broker string `json:"broker"`
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
	Held   bool   `json:"held"`
	// HeldSends: sends waiting; InFlight: appends admitted before the
	// hold and not answered yet; Unacked: entries dispatched and not
	// acknowledged.
	HeldSends int `json:"heldSends"`
	InFlight  int `json:"inFlight"`
	Unacked   int `json:"unacked"`
	// The replication to the target.
	Connected      bool    `json:"connected"`
	BacklogEntries int64   `json:"backlogEntries"`
	BacklogBytes   int64   `json:"backlogBytes"`
	SecondsBehind  float64 `json:"secondsBehind"`
	// OldestUnreplicated: the broker publish time of the oldest entry the
	// target has not acknowledged (what an unplanned failover now would
	// lose begins there); absent when nothing is behind.
	OldestUnreplicated string `json:"oldestUnreplicated,omitempty"`
	Subscriptions      int    `json:"subscriptions"`
}

// SwitchoverOptions are a switchover's request.
type SwitchoverOptions struct {
	Timeout time.Duration
	DryRun  bool
	Reason  string
}

// SwitchoverReport is what a switchover did, or with DryRun what it would
// find now.
type SwitchoverReport struct {
	Namespace string `json:"namespace"`
	From      string `json:"from"`
	To        string `json:"to"`
	// State: "committed", "aborted" (answered beside the abort's error:
	// what the hold and the drain cost, the topics' last readiness) or
	// "dry-run".
	State  string               `json:"state"`
	Record *meta.FailoverRecord `json:"record,omitempty"`
	// HoldMs: from the hold in place to the commit (the produce pause of
	// the old region, up to the clients' reconnect); DrainMs: of it, the
	// wait for every topic to be ready. Aborted: HoldMs from the hold
	// to the abort, DrainMs the wait (all of it when the drain did not
	// finish).
	HoldMs  int64 `json:"holdMs,omitempty"`
	DrainMs int64 `json:"drainMs,omitempty"`
	// Dry run: what an unplanned failover to To would lose now, and the
	// pause a planned one would cost (the largest replication lag plus
	// the commit's).
	AtRiskMessages  int64            `json:"atRiskMessages"`
	AtRiskBytes     int64            `json:"atRiskBytes"`
	ExpectedPauseMs int64            `json:"expectedPauseMs,omitempty"`
	Topics          []TopicReadiness `json:"topics"`
}

// commitPauseEstimate: what a switchover adds to the drain, for the dry
// run's expected pause (the commit, the old lease's release, the new
// region's lease and its clients' lookups; measured in
// TestPlannedSwitchoverUnderProduce).
const commitPauseEstimate = 1500 * time.Millisecond

// Switchover runs a planned switchover of namespace ns to region to (see
// above), or with o.DryRun its pre-flight.
func (sh *Shell) Switchover(ctx context.Context, ns, to string, o SwitchoverOptions) (SwitchoverReport, error) {
	rep := SwitchoverReport{Namespace: ns, To: to, Topics: []TopicReadiness{}}
	pol, err := sh.meta.GetPolicies(ctx, ns)
	if err != nil {
		return rep, err
	}
	if !meta.ActiveStandby(pol) {
		return rep, meta.BadRequest(fmt.Errorf("namespace %s is not active-standby over several regions (failover %s, regions %v): nothing to switch over", ns, pol.Effective().Failover, pol.ReplicationClusters))
	}
	if !slices.Contains(pol.ReplicationClusters, to) {
		return rep, meta.BadRequest(fmt.Errorf("region %s is not one of namespace %s's regions %v", to, ns, pol.ReplicationClusters))
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultSwitchoverTimeout
	}
	cur, rev, err := sh.readRecord(ctx, ns, pol)
	if err != nil {
		return rep, err
	}
	rep.From = cur.Active
	if cur.Active == to {
		return rep, meta.StatusError{Status: http.StatusConflict, Err: fmt.Errorf("namespace %s is already active in %s (epoch %d)", ns, to, cur.Epoch)}
	}
	if cur.Active != sh.cfg.Cluster {
		return rep, meta.StatusError{Status: http.StatusConflict, Err: fmt.Errorf("namespace %s is active in region %s: a planned switchover runs there (this broker is in %s); ask a broker of %s", ns, cur.Active, sh.cfg.Cluster, cur.Active)}
	}
	if o.DryRun {
		return sh.dryRun(ctx, ns, to, rep)
	}
	if o.Reason == "" {
		o.Reason = "planned switchover"
	}
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	start := time.Now()
	hold := Hold{ID: id, Target: to, DeadlineMs: start.Add(o.Timeout + holdGrace).UnixMilli()}
	release := func(rec *meta.FailoverRecord) {
		// Not under ctx: an abort must end the hold even when the request
		// was cancelled.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := sh.host.SwitchoverRelease(rctx, ns, id, rec); err != nil {
			sh.log.Warn("switchover: release not acknowledged by every broker (their holds end by themselves)", "namespace", ns, "err", err)
		}
	}
	aborted := func() {
		rep.State, rep.HoldMs = "aborted", time.Since(start).Milliseconds()
	}
	if err := sh.host.SwitchoverHold(ctx, ns, hold); err != nil {
		release(nil)
		aborted()
		return rep, fmt.Errorf("%w: switchover of %s aborted, %s stays active: not every broker holds: %v", meta.ErrServiceNotReady, ns, sh.cfg.Cluster, err)
	}
	sh.log.Warn("switchover: holding", "namespace", ns, "from", cur.Active, "to", to, "id", id, "timeout", o.Timeout)
	deadline := start.Add(o.Timeout)
	var last []TopicReadiness
	for {
		rs, err := sh.host.SwitchoverReadiness(ctx, ns, to, false)
		if err == nil {
			last = rs
			if allReady(rs) {
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			release(nil)
			rep.Topics = last
			aborted()
			rep.DrainMs = rep.HoldMs
			sh.log.Warn("switchover: aborted", "namespace", ns, "to", to, "id", id, "why", notReady(last, err))
			sh.alert("switchover-aborted")
			return rep, meta.StatusError{Status: http.StatusConflict, Err: fmt.Errorf("switchover of %s to %s aborted after %v, %s stays active and serving: the drain did not finish: %s",
				ns, to, time.Since(start).Round(time.Millisecond), sh.cfg.Cluster, notReady(last, err))}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	rep.DrainMs = time.Since(start).Milliseconds()
	next := meta.FailoverRecord{Namespace: ns, Active: to, Epoch: cur.Epoch + 1, Previous: cur.Active, CatchUp: true, SinceMs: time.Now().UnixMilli(), Reason: o.Reason}
	if err := sh.casRecord(ctx, ns, next, rev); err != nil {
		release(nil)
		rep.Topics = last
		aborted()
		return rep, fmt.Errorf("%w: switchover of %s aborted, %s stays active: the epoch did not commit: %v", meta.ErrServiceNotReady, ns, sh.cfg.Cluster, err)
	}
	rep.HoldMs = time.Since(start).Milliseconds()
	sh.log.Warn("switchover: committed", "namespace", ns, "from", cur.Active, "to", to, "epoch", next.Epoch, "hold_ms", rep.HoldMs, "drain_ms", rep.DrainMs)
	sh.alert("switchover-committed")
	sh.fo.committed(next)
	sh.nudgeControl()
	release(&next)
	rep.State, rep.Record, rep.Topics = "committed", &next, last
	return rep, nil
}

// dryRun answers the pre-flight: nothing is held.
func (sh *Shell) dryRun(ctx context.Context, ns, to string, rep SwitchoverReport) (SwitchoverReport, error) {
	rs, err := sh.host.SwitchoverReadiness(ctx, ns, to, true)
	if err != nil {
		return rep, err
	}
	rep.State, rep.Topics = "dry-run", rs
	var lag float64
	for _, r := range rs {
		rep.AtRiskMessages += r.BacklogEntries
		rep.AtRiskBytes += r.BacklogBytes
		lag = max(lag, r.SecondsBehind)
	}
	rep.ExpectedPauseMs = (time.Duration(lag*float64(time.Second)) + commitPauseEstimate).Milliseconds()
	return rep, nil
}

func allReady(rs []TopicReadiness) bool {
	for _, r := range rs {
		if !r.Ready {
			return false
		}
	}
	return true
}

// notReady says which topics are not ready, and why (the first few).
func notReady(rs []TopicReadiness, err error) string {
	var b strings.Builder
	n := 0
	for _, r := range rs {
		if r.Ready {
			continue
		}
		if n < 5 {
			fmt.Fprintf(&b, "%s: %s; ", r.Topic, r.Reason)
		}
		n++
	}
	if n > 5 {
		fmt.Fprintf(&b, "and %d more topics; ", n-5)
	}
	if err != nil {
		fmt.Fprintf(&b, "last readiness read: %v", err)
	}
	if b.Len() == 0 {
		return "no readiness read"
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// readRecord reads the namespace's record from the global store (the
// primary at epoch 0 when none is stored) and its revision (0: none).
func (sh *Shell) readRecord(ctx context.Context, ns string, pol meta.Policies) (meta.FailoverRecord, int64, error) {
	cur := meta.FailoverRecord{Namespace: ns, Active: pol.Effective().Primary}
	kv, err := sh.cfg.GlobalStore.Get(ctx, meta.FailoverKey+ns)
	switch {
	case err == nil:
		if err := json.Unmarshal(kv.Value, &cur); err != nil {
			return cur, 0, err
		}
		return cur, kv.ModRevision, nil
	case errors.Is(err, cluster.ErrNotFound):
		return cur, 0, nil
	default:
		return cur, 0, fmt.Errorf("%w: global store: %v", meta.ErrServiceNotReady, err)
	}
}

// casRecord writes next if the record is still at revision rev (0:
// absent).
func (sh *Shell) casRecord(ctx context.Context, ns string, next meta.FailoverRecord, rev int64) error {
	v, _ := json.Marshal(next)
	var err error
	if rev == 0 {
		_, err = sh.cfg.GlobalStore.Create(ctx, meta.FailoverKey+ns, v)
	} else {
		_, err = sh.cfg.GlobalStore.CAS(ctx, meta.FailoverKey+ns, v, rev)
	}
	return err
}

// Committed takes a record known to be committed (a switchover's
// release carries it to the region's brokers before their watch does).
func (sh *Shell) Committed(r meta.FailoverRecord) {
	if sh.fo != nil {
		sh.fo.committed(r)
	}
}
