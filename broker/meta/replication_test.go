package meta

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meridian-mq/meridian/tools/testutil"
)

func TestValidateReplication(t *testing.T) {
	known := []string{"east", "north", "west"}
	two := []string{"east", "west"}
	three := []string{"east", "west", "north"}
	pers := func(e, w, a int) *Persistence {
		return &Persistence{EnsembleSize: e, WriteQuorum: w, AckQuorum: a}
	}
	cases := []struct {
		name    string
		regions []string
		rp      *ReplicationPolicy
		pers    *Persistence
		wantErr string // "" = accepted; else a substring of the error
	}{
		// Acceptances.
		{name: "one region, no policy", regions: []string{"east"}},
		{name: "two regions, no policy", regions: two},
		{name: "async explicit", regions: two, rp: &ReplicationPolicy{Mode: "async", Failover: "active-standby", Primary: "west"}},
		{name: "active-active", regions: two, rp: &ReplicationPolicy{Failover: "active-active"}},
		{name: "sync strict", regions: two, rp: &ReplicationPolicy{Mode: "sync", SyncOnUnreachable: "strict", SyncTimeoutMs: 5000}},
		{name: "sync degrade", regions: two, rp: &ReplicationPolicy{Mode: "sync", SyncOnUnreachable: "degrade"}},
		{name: "sync min-regions 2 of 3", regions: three, rp: &ReplicationPolicy{Mode: "sync", MinRegions: 2}},
		{name: "sync min-regions all", regions: three, rp: &ReplicationPolicy{Mode: "sync", MinRegions: 3}},
		{name: "async min-regions 1", regions: two, rp: &ReplicationPolicy{MinRegions: 1}},
		{name: "start-at latest", regions: two, rp: &ReplicationPolicy{StartAt: "latest"}},
		{name: "start-at earliest", regions: two, rp: &ReplicationPolicy{StartAt: "earliest"}},
		{name: "backlog quota", regions: two, rp: &ReplicationPolicy{BacklogQuotaBytes: 10 << 30}},
		{name: "RPO budget, hold by default", regions: two, rp: &ReplicationPolicy{MaxLagMs: 2000}},
		{name: "RPO budget in bytes, refuse", regions: two, rp: &ReplicationPolicy{MaxLagBytes: 1 << 20, MaxLagAction: "refuse"}},
		{name: "stretched, no persistence", regions: two, rp: &ReplicationPolicy{Mode: "stretched"}},
		{name: "stretched 4/4/2 strict", regions: two, rp: &ReplicationPolicy{Mode: "stretched"}, pers: pers(4, 4, 2)},
		{name: "stretched 3/3/1 strict", regions: two, rp: &ReplicationPolicy{Mode: "stretched"}, pers: pers(3, 3, 1)},
		{name: "stretched 2/2/2 degrade", regions: two, rp: &ReplicationPolicy{Mode: "stretched", SyncOnUnreachable: "degrade"}, pers: pers(2, 2, 2)},
		{name: "stretched 3 regions 3/3/2 strict", regions: three, rp: &ReplicationPolicy{Mode: "stretched"}, pers: pers(3, 3, 2)},
		{name: "stretched min-regions 2 of 3 with write quorum 2", regions: three, rp: &ReplicationPolicy{Mode: "stretched", MinRegions: 2, SyncOnUnreachable: "degrade"}, pers: pers(2, 2, 2)},

		// Refusals.
		{name: "no region", regions: nil, wantErr: "at least one region"},
		{name: "unknown region", regions: []string{"east", "mars"}, wantErr: `region "mars" is not registered`},
		{name: "duplicate region", regions: []string{"east", "east"}, wantErr: "listed twice"},
		{name: "malformed region", regions: []string{"ea/st"}, wantErr: "region"},
		{name: "bad mode", regions: two, rp: &ReplicationPolicy{Mode: "eventually"}, wantErr: `mode "eventually"`},
		{name: "bad failover", regions: two, rp: &ReplicationPolicy{Failover: "hot"}, wantErr: `failover "hot"`},
		{name: "primary not a region", regions: two, rp: &ReplicationPolicy{Primary: "north"}, wantErr: `primary "north"`},
		{name: "bad sync-on-unreachable", regions: two, rp: &ReplicationPolicy{Mode: "sync", SyncOnUnreachable: "wait"}, wantErr: `syncOnUnreachable "wait"`},
		{name: "negative sync timeout", regions: two, rp: &ReplicationPolicy{Mode: "sync", SyncTimeoutMs: -1}, wantErr: "syncTimeoutMs -1"},
		{name: "bad start-at", regions: two, rp: &ReplicationPolicy{StartAt: "middle"}, wantErr: `startAt "middle"`},
		{name: "bad orphans policy", regions: two, rp: &ReplicationPolicy{Orphans: "drop"}, wantErr: `orphans "drop"`},
		{name: "switch-back below -1", regions: two, rp: &ReplicationPolicy{SwitchBackDelayMs: ptr(int64(-2))}, wantErr: "switchBackDelayMs -2"},
		{name: "negative failover delay", regions: two, rp: &ReplicationPolicy{FailoverDelayMs: -1}, wantErr: "failoverDelayMs -1"},
		{name: "negative backlog quota", regions: two, rp: &ReplicationPolicy{BacklogQuotaBytes: -5}, wantErr: "backlogQuotaBytes -5"},
		{name: "negative RPO budget", regions: two, rp: &ReplicationPolicy{MaxLagMs: -1}, wantErr: "maxReplicationLagMs -1"},
		{name: "negative RPO budget in bytes", regions: two, rp: &ReplicationPolicy{MaxLagBytes: -1}, wantErr: "maxReplicationLagBytes -1"},
		{name: "bad RPO action", regions: two, rp: &ReplicationPolicy{MaxLagMs: 1000, MaxLagAction: "drop"}, wantErr: `maxReplicationLagAction "drop"`},
		{name: "RPO action without a budget", regions: two, rp: &ReplicationPolicy{MaxLagAction: "hold"}, wantErr: "without a budget"},
		{name: "RPO budget with sync", regions: two, rp: &ReplicationPolicy{Mode: "sync", MaxLagMs: 1000}, wantErr: "needs mode async"},
		{name: "sync one region", regions: []string{"east"}, rp: &ReplicationPolicy{Mode: "sync"}, wantErr: "needs at least 2 regions"},
		{name: "stretched one region", regions: []string{"east"}, rp: &ReplicationPolicy{Mode: "stretched"}, wantErr: "needs at least 2 regions"},
		{name: "min-regions negative", regions: two, rp: &ReplicationPolicy{Mode: "sync", MinRegions: -1}, wantErr: "minRegions -1"},
		{name: "min-regions above regions", regions: two, rp: &ReplicationPolicy{Mode: "sync", MinRegions: 3}, wantErr: "minRegions 3"},
		{name: "min-regions with async", regions: two, rp: &ReplicationPolicy{MinRegions: 2}, wantErr: "needs mode sync or stretched"},
		{name: "min-regions 1 with sync", regions: two, rp: &ReplicationPolicy{Mode: "sync", MinRegions: 1}, wantErr: "use async"},
		{name: "stretched ack above write", regions: two, rp: &ReplicationPolicy{Mode: "stretched", SyncOnUnreachable: "degrade"}, pers: pers(3, 2, 3), wantErr: "exceeds write quorum"},
		{name: "stretched write quorum below regions", regions: three, rp: &ReplicationPolicy{Mode: "stretched", SyncOnUnreachable: "degrade"}, pers: pers(2, 2, 1), wantErr: "cannot put each entry in 3 regions"},
		{name: "stretched 2/2/2 strict", regions: two, rp: &ReplicationPolicy{Mode: "stretched"}, pers: pers(2, 2, 2), wantErr: "every write would stop"},
		{name: "stretched 3/3/2 strict two regions", regions: two, rp: &ReplicationPolicy{Mode: "stretched", SyncOnUnreachable: "strict"}, pers: pers(3, 3, 2), wantErr: "lower the ack quorum to 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateReplication(Policies{ReplicationClusters: tc.regions, Replication: tc.rp, Persistence: tc.pers}, known)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want an error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			}
			var he StatusError
			if !errors.As(err, &he) || he.Status != http.StatusBadRequest {
				t.Fatalf("error %v is not an HTTP 400", err)
			}
		})
	}
}

func TestReplicationEffective(t *testing.T) {
	got := Policies{ReplicationClusters: []string{"west", "east"}}.Effective()
	want := ReplicationPolicy{Mode: "async", Failover: "active-standby", Primary: "west", SyncOnUnreachable: "strict", SyncTimeoutMs: 30000, StartAt: "earliest", MinRegions: 1}
	if got != want {
		t.Fatalf("defaults: got %+v, want %+v", got, want)
	}
	set := ReplicationPolicy{Mode: "sync", Failover: "active-active", Primary: "east", SyncOnUnreachable: "degrade", SyncTimeoutMs: 100, StartAt: "latest", MinRegions: 2, BacklogQuotaBytes: 7}
	if got := (Policies{ReplicationClusters: []string{"west", "east", "north"}, Replication: &set}).Effective(); got != set {
		t.Fatalf("explicit values changed: got %+v, want %+v", got, set)
	}
	if got := (Policies{ReplicationClusters: []string{"west", "east", "north"}, Replication: &ReplicationPolicy{Mode: "stretched"}}).Effective(); got.MinRegions != 3 {
		t.Fatalf("stretched default minRegions %d, want all 3 regions", got.MinRegions)
	}
}

// The region registry and public/default: brokers of two regions start at
// once on one global store, and public/default ends up replicating to both.
func TestRegionRegistryEnsureDefaults(t *testing.T) {
	url := testutil.StartEtcd(t)
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		prefix := "/global" + string(rune('a'+round))
		// Several brokers per region, all starting at the same time.
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for _, region := range []string{"east", "west", "east", "west", "east", "west"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- NewMetadata(testutil.Store(t, url, prefix)).EnsureDefaults(ctx, region)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		m := NewMetadata(testutil.Store(t, url, prefix))
		regions, err := m.ListRegions(ctx)
		if err != nil || !slices.Equal(regions, []string{"east", "west"}) {
			t.Fatalf("regions %v, %v", regions, err)
		}
		p, err := m.GetPolicies(ctx, "public/default")
		if err != nil {
			t.Fatal(err)
		}
		got := slices.Sorted(slices.Values(p.ReplicationClusters))
		if !slices.Equal(got, []string{"east", "west"}) {
			t.Fatalf("public/default regions %v, want east and west", p.ReplicationClusters)
		}
		if p.Replication == nil || p.Replication.Mode != ReplicationAsync || p.Replication.Failover != FailoverActiveStandby || p.Replication.Primary != p.ReplicationClusters[0] {
			t.Fatalf("public/default policy %+v", p.Replication)
		}
		ti, err := m.GetTenant(ctx, "public")
		if err != nil || !slices.Equal(slices.Sorted(slices.Values(ti.AllowedClusters)), []string{"east", "west"}) {
			t.Fatalf("tenant public %+v, %v", ti, err)
		}
		if err := ValidateReplication(p, regions); err != nil {
			t.Fatalf("the default policy is refused: %v", err)
		}
	}

	// Sequential starts, and a region an operator removed stays removed
	// across its brokers' restarts.
	m := NewMetadata(testutil.Store(t, url, "/seq"))
	for _, r := range []string{"east", "west"} {
		if err := m.EnsureDefaults(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	p, _ := m.GetPolicies(ctx, "public/default")
	if !slices.Equal(p.ReplicationClusters, []string{"east", "west"}) || p.Replication.Primary != "east" {
		t.Fatalf("public/default %+v %+v", p.ReplicationClusters, p.Replication)
	}
	if err := m.UpdatePolicies(ctx, "public/default", func(p *Policies) { p.ReplicationClusters = []string{"east"} }); err != nil {
		t.Fatal(err)
	}
	if err := m.EnsureDefaults(ctx, "west"); err != nil {
		t.Fatal(err)
	}
	if p, _ := m.GetPolicies(ctx, "public/default"); !slices.Equal(p.ReplicationClusters, []string{"east"}) {
		t.Fatalf("a restart put west back: %v", p.ReplicationClusters)
	}
	if created, err := m.RegisterRegion(ctx, "bad/name"); err == nil || created {
		t.Fatalf("a region name with '/' was registered")
	}
}

// UpdatePolicies is a compare-and-swap: concurrent updates lose nothing.
func TestReplicationUpdatePoliciesCAS(t *testing.T) {
	url := testutil.StartEtcd(t)
	ctx := context.Background()
	m := NewMetadata(testutil.Store(t, url, "/cas"))
	if err := m.EnsureDefaults(ctx, "east"); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m2 := NewMetadata(testutil.Store(t, url, "/cas"))
			if err := m2.UpdatePolicies(ctx, "public/default", func(p *Policies) { p.MessageTTLInSeconds++ }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	p, _ := m.GetPolicies(ctx, "public/default")
	if p.MessageTTLInSeconds != n {
		t.Fatalf("%d concurrent increments gave %d", n, p.MessageTTLInSeconds)
	}
	if err := m.UpdatePolicies(ctx, "public/none", func(*Policies) {}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of a missing namespace: %v", err)
	}
}
func ptr[T any](v T) *T { return &v }
