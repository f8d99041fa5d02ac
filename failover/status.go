package failover

import (
	"strings"

	"github.com/meridian-mq/meridian/cluster/health"
)

// StatusOf derives the core's RegionStatus for region from a health view
// (pure: the view is an immutable snapshot). caughtUp is the shell's
// judgement of the region's replication lag for the namespace.
//
//   - Healthy is RegionHealth.Healthy().
//   - Suspected: not healthy, at least one member suspect, and it would be
//     healthy if suspect members counted as alive (enough alive-or-suspect
//     brokers and bookies, no recent failed probe).
//   - ProbeOK: the newest write probe succeeded and was taken within the
//     rules' ProbeFailWindow before the view's AsOf (always false when the
//     window is 0: probes ignored).
func StatusOf(v health.View, region string, caughtUp bool) RegionStatus {
	rh := v.Region(region)
	rules := v.Rules()
	probe := rh.Probe()
	st := RegionStatus{
		Name:                region,
		Healthy:             rh.Healthy(),
		LastProbe:           probe.At,
		ReplicationCaughtUp: caughtUp,
		Detail:              strings.Join(rh.Problems(), "; "),
	}
	recent := rules.ProbeFailWindow > 0 && probe.Known() && v.AsOf().Sub(probe.At) <= rules.ProbeFailWindow
	st.ProbeOK = recent && probe.OK
	if !st.Healthy && len(rh.Suspect("")) > 0 {
		brokers := rh.Count(health.RoleBroker, health.MemberAlive) + rh.Count(health.RoleBroker, health.MemberSuspect)
		bookies := rh.Count(health.RoleBookie, health.MemberAlive) + rh.Count(health.RoleBookie, health.MemberSuspect)
		probeFailed := recent && !probe.OK
		st.Suspected = brokers >= rules.MinAliveBrokers && bookies >= rules.MinAliveBookies && !probeFailed
	}
	return st
}

// StatusesOf returns StatusOf for every region of the policy; caughtUp
// reports each region's replication (nil: none caught up).
func StatusesOf(v health.View, p Policy, caughtUp func(region string) bool) []RegionStatus {
	out := make([]RegionStatus, 0, len(p.Regions))
	for _, r := range p.Regions {
		out = append(out, StatusOf(v, r, caughtUp != nil && caughtUp(r)))
	}
	return out
}
