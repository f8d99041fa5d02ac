package failover

import (
	"fmt"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
)

// StatusOf reads a cluster.HealthView built from member records, without
// serf: membership states and write-probe tags become the core's status.
func TestStatusOf(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	members := func(broker, bookie cluster.MemberState, probeOK *bool) []cluster.MemberRecord {
		var recs []cluster.MemberRecord
		add := func(name string, role cluster.Role, st cluster.MemberState) {
			tags := map[string]string{cluster.TagRegion: "east", cluster.TagRole: string(role)}
			if probeOK != nil && role == cluster.RoleBroker {
				for k, v := range cluster.ProbeTags(*probeOK, now.Add(-time.Second)) {
					tags[k] = v
				}
			}
			recs = append(recs, cluster.MemberRecord{Name: name, Tags: tags, State: st})
		}
		add("b1", cluster.RoleBroker, broker)
		for i := range 3 {
			add(fmt.Sprintf("k%d", i), cluster.RoleBookie, bookie)
		}
		return recs
	}
	yes, no := true, false
	cases := []struct {
		name   string
		recs   []cluster.MemberRecord
		want   Condition
		probe  bool
		health bool
	}{
		{"all alive, probe ok", members(cluster.MemberAlive, cluster.MemberAlive, &yes), Up, true, true},
		{"all alive, no probe", members(cluster.MemberAlive, cluster.MemberAlive, nil), Up, false, true},
		{"broker suspect, probe ok: slow", members(cluster.MemberSuspect, cluster.MemberAlive, &yes), Up, true, false},
		{"broker suspect, no probe", members(cluster.MemberSuspect, cluster.MemberAlive, nil), Suspect, false, false},
		{"broker suspect, probe failed", members(cluster.MemberSuspect, cluster.MemberAlive, &no), Down, false, false},
		{"alive, probe failed", members(cluster.MemberAlive, cluster.MemberAlive, &no), Down, false, false},
		{"broker failed", members(cluster.MemberFailed, cluster.MemberAlive, nil), Down, false, false},
		{"no members", nil, Down, false, false},
	}
	for _, c := range cases {
		v := cluster.BuildHealthView(cluster.HealthView{}, c.recs, now, cluster.DefaultHealthRules())
		s := StatusOf(v, "east", true)
		if s.Condition() != c.want || s.ProbeOK != c.probe || s.Healthy != c.health || !s.ReplicationCaughtUp || s.Name != "east" {
			t.Errorf("%s: %+v: condition %s, want %s", c.name, s, s.Condition(), c.want)
		}
		if !s.Healthy && s.Detail == "" {
			t.Errorf("%s: unhealthy without detail", c.name)
		}
	}
	// A probe older than the window no longer counts as ok.
	v := cluster.BuildHealthView(cluster.HealthView{}, members(cluster.MemberSuspect, cluster.MemberAlive, &yes), now, cluster.DefaultHealthRules())
	if s := StatusOf(v.At(now.Add(time.Minute)), "east", false); s.ProbeOK || s.Condition() != Suspect {
		t.Errorf("stale probe: %+v", s)
	}
	if got := StatusesOf(v, DefaultPolicy("east", "west"), nil); len(got) != 2 || got[1].Condition() != Down {
		t.Errorf("StatusesOf: %+v", got)
	}
}
