package meta

import (
	"fmt"
	"slices"
	"strings"
)

// A namespace's geo-replication policy: its regions
// (Policies.ReplicationClusters) and how its topics travel between them
// (Policies.Replication). ValidateReplication refuses, at policy time,
// what cannot work; every refusal is an HTTP 400 whose message says why.
//
// What is refused:
//   - no region, a duplicate region, a malformed region name;
//   - a region that is not registered in the global store (a region
//     registers itself when its first broker starts; GET
//     /admin/v2/clusters lists them);
//   - an unknown mode (async, sync, stretched), failover (active-standby,
//     active-active), syncOnUnreachable (strict, degrade) or startAt
//     (earliest, latest);
//   - a primary that is not one of the namespace's regions;
//   - sync or stretched with fewer than 2 regions (there is nothing to be
//     synchronous with);
//   - minRegions below 0 or above the number of regions; minRegions above
//     1 with async (async acknowledges after local persistence); exactly
//     1 with sync or stretched (the receipt would wait for no other
//     region: that is async);
//   - a negative syncTimeoutMs or backlogQuotaBytes;
//   - a negative maxReplicationLagMs or maxReplicationLagBytes, an
//     unknown maxReplicationLagAction (hold, refuse), an action without a
//     budget, or a budget with a mode other than async;
//   - stretched with a persistence policy whose write quorum is below the
//     number of regions each entry must reach (one copy per region at
//     least), or whose ack quorum exceeds its write quorum;
//   - stretched with syncOnUnreachable strict and a persistence policy
//     whose ack quorum the loss of one region makes unreachable: with the
//     write quorum W spread evenly over k = min(regions, W) regions, the
//     largest region holds ceil(W/k) copies, and if fewer than the ack
//     quorum remain without it every write would stop. Such a namespace
//     must use degrade or a lower ack quorum. Without a persistence policy
//     the broker's default quorums apply, which are not known here: the
//     check is left to the placement at ledger creation.

// Defaults of a replication policy's fields (Policies.Effective).
const (
	SyncStrict  = "strict"
	SyncDegrade = "degrade"

	StartAtEarliest = "earliest"
	StartAtLatest   = "latest"

	LagHold   = "hold"
	LagRefuse = "refuse"

	OrphansReplicate  = "replicate"
	OrphansQuarantine = "quarantine"

	DefaultSyncTimeoutMs = 30000
)

// Effective returns the namespace's replication policy with every default
// filled in: mode async, failover active-standby, primary the first region,
// syncOnUnreachable strict, syncTimeoutMs 30000, startAt earliest, and
// minRegions 1 for async and every region of the namespace for sync and
// stretched (0 means "all").
func (p Policies) Effective() ReplicationPolicy {
	var r ReplicationPolicy
	if p.Replication != nil {
		r = *p.Replication
	}
	if r.Mode == "" {
		r.Mode = ReplicationAsync
	}
	if r.Failover == "" {
		r.Failover = FailoverActiveStandby
	}
	if r.Primary == "" && len(p.ReplicationClusters) > 0 {
		r.Primary = p.ReplicationClusters[0]
	}
	if r.SyncOnUnreachable == "" {
		r.SyncOnUnreachable = SyncStrict
	}
	if r.SyncTimeoutMs == 0 {
		r.SyncTimeoutMs = DefaultSyncTimeoutMs
	}
	if r.StartAt == "" {
		r.StartAt = StartAtEarliest
	}
	if r.MinRegions == 0 {
		if r.Mode == ReplicationAsync {
			r.MinRegions = 1
		} else {
			r.MinRegions = len(p.ReplicationClusters)
		}
	}
	return r
}

// validateRegionName checks a region's name: it becomes an etcd key and a
// path element of the admin API.
func ValidateRegionName(name string) error {
	if err := validPart("region", name); err != nil {
		return err
	}
	if strings.ContainsAny(name, ",/") {
		return fmt.Errorf("%w: region name %q has ',' or '/'", ErrInvalidName, name)
	}
	return nil
}

// validateReplication checks a namespace's regions and replication policy
// against the registered regions known (see the list of refusals above).
// Errors are HTTP 400.
func ValidateReplication(p Policies, known []string) error {
	bad := func(format string, a ...any) error { return BadRequest(fmt.Errorf(format, a...)) }
	regions := p.ReplicationClusters
	if len(regions) == 0 {
		return bad("replication: a namespace needs at least one region")
	}
	seen := map[string]bool{}
	for _, r := range regions {
		if err := ValidateRegionName(r); err != nil {
			return BadRequest(err)
		}
		if seen[r] {
			return bad("replication: region %q is listed twice", r)
		}
		seen[r] = true
		if !slices.Contains(known, r) {
			return bad("replication: region %q is not registered (known regions: %s); a region registers when its first broker starts", r, strings.Join(known, ", "))
		}
	}
	var rp ReplicationPolicy
	if p.Replication != nil {
		rp = *p.Replication
	}
	mode := rp.Mode
	switch mode {
	case "":
		mode = ReplicationAsync
	case ReplicationAsync, ReplicationSync, ReplicationStretched:
	default:
		return bad("replication: mode %q: want async, sync or stretched", rp.Mode)
	}
	switch rp.Failover {
	case "", FailoverActiveStandby, FailoverActiveActive:
	default:
		return bad("replication: failover %q: want active-standby or active-active", rp.Failover)
	}
	if rp.Primary != "" && !seen[rp.Primary] {
		return bad("replication: primary %q is not one of the namespace's regions %v", rp.Primary, regions)
	}
	switch rp.SyncOnUnreachable {
	case "", SyncStrict, SyncDegrade:
	default:
		return bad("replication: syncOnUnreachable %q: want strict or degrade", rp.SyncOnUnreachable)
	}
	if rp.SyncTimeoutMs < 0 {
		return bad("replication: syncTimeoutMs %d: must be >= 0 (0 = default %d)", rp.SyncTimeoutMs, DefaultSyncTimeoutMs)
	}
	switch rp.StartAt {
	case "", StartAtEarliest, StartAtLatest:
	default:
		return bad("replication: startAt %q: want earliest or latest", rp.StartAt)
	}
	switch rp.Orphans {
	case "", OrphansReplicate, OrphansQuarantine:
	default:
		return bad("replication: orphans %q: want replicate or quarantine", rp.Orphans)
	}
	if rp.FailoverDelayMs < 0 {
		return bad("replication: failoverDelayMs %d must be >= 0 (0: the default, 2000)", rp.FailoverDelayMs)
	}
	if rp.SwitchBackDelayMs != nil && *rp.SwitchBackDelayMs < -1 {
		return bad("replication: switchBackDelayMs %d must be >= 0 (0 or -1: never switch back on its own)", *rp.SwitchBackDelayMs)
	}
	if rp.RateBytesPerSecond < 0 {
		return bad("replication: rateBytesPerSecond %d: must be >= 0 (0 = no limit)", rp.RateBytesPerSecond)
	}
	if rp.BacklogQuotaBytes < 0 {
		return bad("replication: backlogQuotaBytes %d: must be >= 0 (0 = no quota)", rp.BacklogQuotaBytes)
	}
	if rp.MaxLagMs < 0 {
		return bad("replication: maxReplicationLagMs %d: must be >= 0 (0 = no RPO budget)", rp.MaxLagMs)
	}
	if rp.MaxLagBytes < 0 {
		return bad("replication: maxReplicationLagBytes %d: must be >= 0 (0 = no RPO budget in bytes)", rp.MaxLagBytes)
	}
	switch rp.MaxLagAction {
	case "", LagHold, LagRefuse:
	default:
		return bad("replication: maxReplicationLagAction %q: want hold or refuse", rp.MaxLagAction)
	}
	if rp.MaxLagAction != "" && rp.MaxLagMs == 0 && rp.MaxLagBytes == 0 {
		return bad("replication: maxReplicationLagAction %s without a budget: set maxReplicationLagMs or maxReplicationLagBytes", rp.MaxLagAction)
	}
	if (rp.MaxLagMs > 0 || rp.MaxLagBytes > 0) && mode != ReplicationAsync {
		return bad("replication: an RPO budget (maxReplicationLag*) needs mode async: %s acknowledges only what the other regions persisted", mode)
	}
	if mode != ReplicationAsync && len(regions) < 2 {
		return bad("replication: mode %s needs at least 2 regions, the namespace has %d (%v)", mode, len(regions), regions)
	}
	if rp.MinRegions < 0 || rp.MinRegions > len(regions) {
		return bad("replication: minRegions %d: must be between 0 (all regions) and the namespace's %d regions", rp.MinRegions, len(regions))
	}
	if mode == ReplicationAsync && rp.MinRegions > 1 {
		return bad("replication: minRegions %d needs mode sync or stretched: async acknowledges after local persistence", rp.MinRegions)
	}
	if mode != ReplicationAsync && rp.MinRegions == 1 {
		return bad("replication: minRegions 1 with mode %s would acknowledge without any other region: use async, or minRegions >= 2 (0 = all regions)", mode)
	}
	if mode == ReplicationStretched && p.Persistence != nil {
		w, a := p.Persistence.WriteQuorum, p.Persistence.AckQuorum
		need := rp.MinRegions
		if need == 0 {
			need = len(regions)
		}
		if a > w {
			return bad("replication: stretched: ack quorum %d exceeds write quorum %d", a, w)
		}
		if w < need {
			return bad("replication: stretched: write quorum %d cannot put each entry in %d regions (one copy per region at least); raise the write quorum or lower minRegions", w, need)
		}
		if rp.SyncOnUnreachable != SyncDegrade {
			k := min(len(regions), w)
			largest := (w + k - 1) / k
			if w-largest < a {
				return bad("replication: stretched: with write quorum %d over %d regions, losing the region holding %d copies leaves %d, fewer than ack quorum %d, so every write would stop; lower the ack quorum to %d or set syncOnUnreachable degrade", w, k, largest, w-largest, a, w-largest)
			}
		}
	}
	return nil
}
