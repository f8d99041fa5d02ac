package failoverctl

import (
	"maps"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/cluster/health"
)

// The controller sleeps until the earliest of: the poll, any Core's
// Output.Wake, any held lease's renewal falling due — and never less than
// minControlGap, so a renewal that stays due does not spin the loop.
func TestNextControlStepObeysTheCoresWake(t *testing.T) {
	now := time.Unix(1000, 0)
	poll, renew := 250*time.Millisecond, time.Second
	for _, tc := range []struct {
		name  string
		cores map[string]*nsControl
		want  time.Time
	}{
		{"no cores: the poll", nil, now.Add(poll)},
		{"a Wake before the poll", map[string]*nsControl{"a": {wake: now.Add(40 * time.Millisecond)}}, now.Add(40 * time.Millisecond)},
		{"a Wake after the poll", map[string]*nsControl{"a": {wake: now.Add(time.Second)}}, now.Add(poll)},
		{"the earliest of two", map[string]*nsControl{"a": {wake: now.Add(90 * time.Millisecond)}, "b": {wake: now.Add(30 * time.Millisecond)}}, now.Add(30 * time.Millisecond)},
		{"a renewal due", map[string]*nsControl{"a": {leaseID: 7, renewed: now.Add(-900 * time.Millisecond)}}, now.Add(100 * time.Millisecond)},
		{"no lease: no renewal", map[string]*nsControl{"a": {renewed: now.Add(-900 * time.Millisecond)}}, now.Add(poll)},
		{"overdue: the gap", map[string]*nsControl{"a": {leaseID: 7, renewed: now.Add(-5 * time.Second)}, "b": {wake: now.Add(-time.Second)}}, now.Add(minControlGap)},
	} {
		if got := nextControlStep(now, poll, renew, tc.cores); !got.Equal(tc.want) {
			t.Errorf("%s: next step at %v after now, want %v", tc.name, got.Sub(now), tc.want.Sub(now))
		}
	}
}

// A gossip view that changes what the Core reads (a region's health, its
// suspects) changes the signature, so the controller steps at once; one
// that only republishes a probe tag does not.
func TestHealthSignatureChangesOnlyWithHealth(t *testing.T) {
	t0 := time.Unix(2000, 0)
	member := func(name, region string, role health.Role, st health.MemberState, tags map[string]string) health.MemberRecord {
		tg := map[string]string{health.TagRegion: region, health.TagRole: string(role), health.TagRack: "r1", health.TagAddr: name + ":6650"}
		maps.Copy(tg, tags)
		return health.MemberRecord{Name: name, GossipAddr: "127.0.0.1:7946", Tags: tg, State: st}
	}
	region := func(st health.MemberState, probeAt time.Time) []health.MemberRecord {
		recs := []health.MemberRecord{member("west-br", "west", health.RoleBroker, health.MemberAlive, cluster.ProbeTags(true, probeAt))}
		for _, n := range []string{"e-br", "e-bk1", "e-bk2", "e-bk3"} {
			role := health.RoleBookie
			if n == "e-br" {
				role = health.RoleBroker
			}
			recs = append(recs, member(n, "east", role, st, cluster.ProbeTags(true, probeAt)))
		}
		return recs
	}
	rules := cluster.DefaultHealthRules()
	healthy := healthSignature(cluster.BuildHealthView(cluster.HealthView{}, region(health.MemberAlive, t0), t0, rules))
	retagged := healthSignature(cluster.BuildHealthView(cluster.HealthView{}, region(health.MemberAlive, t0.Add(time.Second)), t0.Add(time.Second), rules))
	suspect := healthSignature(cluster.BuildHealthView(cluster.HealthView{}, region(health.MemberSuspect, t0), t0, rules))
	failed := healthSignature(cluster.BuildHealthView(cluster.HealthView{}, region(health.MemberFailed, t0), t0, rules))
	if healthy != retagged {
		t.Errorf("a republished probe tag changed the signature: %q → %q", healthy, retagged)
	}
	if suspect == healthy || failed == healthy || failed == suspect {
		t.Errorf("signatures do not tell health apart: healthy %q, suspect %q, failed %q", healthy, suspect, failed)
	}
}
