package failoverctl

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/broker/admin"
	"github.com/meridian-mq/meridian/broker/meta"
)

// The namespace's replication policy sets the failover core's delays:
// absent fields take the defaults, switchBackDelayMs 0 (or -1)
// never switches back.
func TestCorePolicyDelays(t *testing.T) {
	for _, tc := range []struct {
		rp                   meta.ReplicationPolicy
		failover, switchBack time.Duration
	}{
		{meta.ReplicationPolicy{}, 2 * time.Second, 30 * time.Second},
		{meta.ReplicationPolicy{FailoverDelayMs: 500, SwitchBackDelayMs: ptr(int64(5000))}, 500 * time.Millisecond, 5 * time.Second},
		{meta.ReplicationPolicy{SwitchBackDelayMs: ptr(int64(0))}, 2 * time.Second, 0},
		{meta.ReplicationPolicy{SwitchBackDelayMs: ptr(int64(-1))}, 2 * time.Second, 0},
	} {
		rp := tc.rp
		p := corePolicy(meta.Policies{ReplicationClusters: []string{"west", "east"}, Replication: &rp})
		if p.FailoverDelay != tc.failover || p.SwitchBackDelay != tc.switchBack {
			t.Errorf("%+v: failover delay %v, switch-back %v; want %v, %v", tc.rp, p.FailoverDelay, p.SwitchBackDelay, tc.failover, tc.switchBack)
		}
		if len(p.Regions) != 2 || p.Regions[0] != "west" || !p.CatchUpRequired {
			t.Errorf("%+v: regions %v, catch-up %t", tc.rp, p.Regions, p.CatchUpRequired)
		}
	}
}

// An explicit switchBackDelayMs 0 (never) survives the admin API's update
// and the policies' trip through the global store as JSON: it is not
// taken for an absent field (the default, 30 s).
func TestSwitchBackDelayZeroMeansNever(t *testing.T) {
	for body, want := range map[string]time.Duration{
		`{"switchBackDelayMs": 0}`:    0,
		`{"switchBackDelayMs": 4000}`: 4 * time.Second,
		`{"failoverDelayMs": 700}`:    30 * time.Second,
	} {
		u, err := admin.ParseReplicationUpdate([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		var pol meta.Policies
		pol.ReplicationClusters = []string{"east", "west"}
		u.Apply(&pol)
		b, err := json.Marshal(pol)
		if err != nil {
			t.Fatal(err)
		}
		var stored meta.Policies
		if err := json.Unmarshal(b, &stored); err != nil {
			t.Fatal(err)
		}
		if got := corePolicy(stored).SwitchBackDelay; got != want {
			t.Errorf("%s: stored as %s, switch-back delay %v, want %v", body, b, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
