package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/testutil"
)

func TestValidateReplication(t *testing.T) {
	known := []string{"east", "north", "west"}
	two := []string{"east", "west"}
	three := []string{"east", "west", "north"}
	pers := func(e, w, a int) *meta.Persistence {
		return &meta.Persistence{EnsembleSize: e, WriteQuorum: w, AckQuorum: a}
	}
	cases := []struct {
		name    string
		regions []string
		rp      *meta.ReplicationPolicy
		pers    *meta.Persistence
		wantErr string // "" = accepted; else a substring of the error
	}{
		// Acceptances.
		{name: "one region, no policy", regions: []string{"east"}},
		{name: "two regions, no policy", regions: two},
		{name: "async explicit", regions: two, rp: &meta.ReplicationPolicy{Mode: "async", Failover: "active-standby", Primary: "west"}},
		{name: "active-active", regions: two, rp: &meta.ReplicationPolicy{Failover: "active-active"}},
		{name: "sync strict", regions: two, rp: &meta.ReplicationPolicy{Mode: "sync", SyncOnUnreachable: "strict", SyncTimeoutMs: 5000}},
		{name: "sync degrade", regions: two, rp: &meta.ReplicationPolicy{Mode: "sync", SyncOnUnreachable: "degrade"}},
		{name: "sync min-regions 2 of 3", regions: three, rp: &meta.ReplicationPolicy{Mode: "sync", MinRegions: 2}},
		{name: "sync min-regions all", regions: three, rp: &meta.ReplicationPolicy{Mode: "sync", MinRegions: 3}},
		{name: "async min-regions 1", regions: two, rp: &meta.ReplicationPolicy{MinRegions: 1}},
		{name: "start-at latest", regions: two, rp: &meta.ReplicationPolicy{StartAt: "latest"}},
		{name: "start-at earliest", regions: two, rp: &meta.ReplicationPolicy{StartAt: "earliest"}},
		{name: "backlog quota", regions: two, rp: &meta.ReplicationPolicy{BacklogQuotaBytes: 10 << 30}},
		{name: "stretched, no persistence", regions: two, rp: &meta.ReplicationPolicy{Mode: "stretched"}},
		{name: "stretched 4/4/2 strict", regions: two, rp: &meta.ReplicationPolicy{Mode: "stretched"}, pers: pers(4, 4, 2)},
		{name: "stretched 3/3/1 strict", regions: two, rp: &meta.ReplicationPolicy{Mode: "stretched"}, pers: pers(3, 3, 1)},
		{name: "stretched 2/2/2 degrade", regions: two, rp: &meta.ReplicationPolicy{Mode: "stretched", SyncOnUnreachable: "degrade"}, pers: pers(2, 2, 2)},
		{name: "stretched 3 regions 3/3/2 strict", regions: three, rp: &meta.ReplicationPolicy{Mode: "stretched"}, pers: pers(3, 3, 2)},
		{name: "stretched min-regions 2 of 3 with write quorum 2", regions: three, rp: &meta.ReplicationPolicy{Mode: "stretched", MinRegions: 2, SyncOnUnreachable: "degrade"}, pers: pers(2, 2, 2)},

		// Refusals.
		{name: "no region", regions: nil, wantErr: "at least one region"},
		{name: "unknown region", regions: []string{"east", "mars"}, wantErr: `region "mars" is not registered`},
		{name: "duplicate region", regions: []string{"east", "east"}, wantErr: "listed twice"},
		{name: "malformed region", regions: []string{"ea/st"}, wantErr: "region"},
		{name: "bad mode", regions: two, rp: &meta.ReplicationPolicy{Mode: "eventually"}, wantErr: `mode "eventually"`},
		{name: "bad failover", regions: two, rp: &meta.ReplicationPolicy{Failover: "hot"}, wantErr: `failover "hot"`},
		{name: "primary not a region", regions: two, rp: &meta.ReplicationPolicy{Primary: "north"}, wantErr: `primary "north"`},
		{name: "bad sync-on-unreachable", regions: two, rp: &meta.ReplicationPolicy{Mode: "sync", SyncOnUnreachable: "wait"}, wantErr: `syncOnUnreachable "wait"`},
		{name: "negative sync timeout", regions: two, rp: &meta.ReplicationPolicy{Mode: "sync", SyncTimeoutMs: -1}, wantErr: "syncTimeoutMs -1"},
		{name: "bad start-at", regions: two, rp: &meta.ReplicationPolicy{StartAt: "middle"}, wantErr: `startAt "middle"`},
		{name: "bad orphans policy", regions: two, rp: &meta.ReplicationPolicy{Orphans: "drop"}, wantErr: `orphans "drop"`},
		{name: "switch-back below -1", regions: two, rp: &meta.ReplicationPolicy{SwitchBackDelayMs: ptr(int64(-2))}, wantErr: "switchBackDelayMs -2"},
		{name: "negative failover delay", regions: two, rp: &meta.ReplicationPolicy{FailoverDelayMs: -1}, wantErr: "failoverDelayMs -1"},
		{name: "negative backlog quota", regions: two, rp: &meta.ReplicationPolicy{BacklogQuotaBytes: -5}, wantErr: "backlogQuotaBytes -5"},
		{name: "sync one region", regions: []string{"east"}, rp: &meta.ReplicationPolicy{Mode: "sync"}, wantErr: "needs at least 2 regions"},
		{name: "stretched one region", regions: []string{"east"}, rp: &meta.ReplicationPolicy{Mode: "stretched"}, wantErr: "needs at least 2 regions"},
		{name: "min-regions negative", regions: two, rp: &meta.ReplicationPolicy{Mode: "sync", MinRegions: -1}, wantErr: "minRegions -1"},
		{name: "min-regions above regions", regions: two, rp: &meta.ReplicationPolicy{Mode: "sync", MinRegions: 3}, wantErr: "minRegions 3"},
		{name: "min-regions with async", regions: two, rp: &meta.ReplicationPolicy{MinRegions: 2}, wantErr: "needs mode sync or stretched"},
		{name: "min-regions 1 with sync", regions: two, rp: &meta.ReplicationPolicy{Mode: "sync", MinRegions: 1}, wantErr: "use async"},
		{name: "stretched ack above write", regions: two, rp: &meta.ReplicationPolicy{Mode: "stretched", SyncOnUnreachable: "degrade"}, pers: pers(3, 2, 3), wantErr: "exceeds write quorum"},
		{name: "stretched write quorum below regions", regions: three, rp: &meta.ReplicationPolicy{Mode: "stretched", SyncOnUnreachable: "degrade"}, pers: pers(2, 2, 1), wantErr: "cannot put each entry in 3 regions"},
		{name: "stretched 2/2/2 strict", regions: two, rp: &meta.ReplicationPolicy{Mode: "stretched"}, pers: pers(2, 2, 2), wantErr: "every write would stop"},
		{name: "stretched 3/3/2 strict two regions", regions: two, rp: &meta.ReplicationPolicy{Mode: "stretched", SyncOnUnreachable: "strict"}, pers: pers(3, 3, 2), wantErr: "lower the ack quorum to 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := meta.ValidateReplication(meta.Policies{ReplicationClusters: tc.regions, Replication: tc.rp, Persistence: tc.pers}, known)
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
			var he meta.StatusError
			if !errors.As(err, &he) || he.Status != http.StatusBadRequest {
				t.Fatalf("error %v is not an HTTP 400", err)
			}
		})
	}
}

func TestReplicationEffective(t *testing.T) {
	got := meta.Policies{ReplicationClusters: []string{"west", "east"}}.Effective()
	want := meta.ReplicationPolicy{Mode: "async", Failover: "active-standby", Primary: "west", SyncOnUnreachable: "strict", SyncTimeoutMs: 30000, StartAt: "earliest", MinRegions: 1}
	if got != want {
		t.Fatalf("defaults: got %+v, want %+v", got, want)
	}
	set := meta.ReplicationPolicy{Mode: "sync", Failover: "active-active", Primary: "east", SyncOnUnreachable: "degrade", SyncTimeoutMs: 100, StartAt: "latest", MinRegions: 2, BacklogQuotaBytes: 7}
	if got := (meta.Policies{ReplicationClusters: []string{"west", "east", "north"}, Replication: &set}).Effective(); got != set {
		t.Fatalf("explicit values changed: got %+v, want %+v", got, set)
	}
	if got := (meta.Policies{ReplicationClusters: []string{"west", "east", "north"}, Replication: &meta.ReplicationPolicy{Mode: "stretched"}}).Effective(); got.MinRegions != 3 {
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
				errs <- meta.NewMetadata(testutil.Store(t, url, prefix)).EnsureDefaults(ctx, region)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		m := meta.NewMetadata(testutil.Store(t, url, prefix))
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
		if p.Replication == nil || p.Replication.Mode != meta.ReplicationAsync || p.Replication.Failover != meta.FailoverActiveStandby || p.Replication.Primary != p.ReplicationClusters[0] {
			t.Fatalf("public/default policy %+v", p.Replication)
		}
		ti, err := m.GetTenant(ctx, "public")
		if err != nil || !slices.Equal(slices.Sorted(slices.Values(ti.AllowedClusters)), []string{"east", "west"}) {
			t.Fatalf("tenant public %+v, %v", ti, err)
		}
		if err := meta.ValidateReplication(p, regions); err != nil {
			t.Fatalf("the default policy is refused: %v", err)
		}
	}

	// Sequential starts, and a region an operator removed stays removed
	// across its brokers' restarts.
	m := meta.NewMetadata(testutil.Store(t, url, "/seq"))
	for _, r := range []string{"east", "west"} {
		if err := m.EnsureDefaults(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	p, _ := m.GetPolicies(ctx, "public/default")
	if !slices.Equal(p.ReplicationClusters, []string{"east", "west"}) || p.Replication.Primary != "east" {
		t.Fatalf("public/default %+v %+v", p.ReplicationClusters, p.Replication)
	}
	if err := m.UpdatePolicies(ctx, "public/default", func(p *meta.Policies) { p.ReplicationClusters = []string{"east"} }); err != nil {
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
	m := meta.NewMetadata(testutil.Store(t, url, "/cas"))
	if err := m.EnsureDefaults(ctx, "east"); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m2 := meta.NewMetadata(testutil.Store(t, url, "/cas"))
			if err := m2.UpdatePolicies(ctx, "public/default", func(p *meta.Policies) { p.MessageTTLInSeconds++ }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	p, _ := m.GetPolicies(ctx, "public/default")
	if p.MessageTTLInSeconds != n {
		t.Fatalf("%d concurrent increments gave %d", n, p.MessageTTLInSeconds)
	}
	if err := m.UpdatePolicies(ctx, "public/none", func(*meta.Policies) {}); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("update of a missing namespace: %v", err)
	}
}

func replAdmin(t *testing.T, method, url string, body any) (int, string) {
	t.Helper()
	var rd *bytes.Reader
	if s, ok := body.(string); ok {
		rd = bytes.NewReader([]byte(s))
	} else if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.String()
}

// The admin API of a broker of region east on a global store where east
// and west are registered (the handler in process, on a real etcd).
func TestReplicationAdminAPI(t *testing.T) {
	url := testutil.StartEtcd(t)
	ctx := context.Background()
	global := testutil.Store(t, url, "/global")
	for _, r := range []string{"east", "west"} {
		if err := meta.NewMetadata(global).EnsureDefaults(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	b := &Broker{cfg: Config{Cluster: "east"}, meta: meta.NewMetadata(global)}
	b.metrics = newMetrics("east", b)
	srv := httptest.NewServer(b.AdminHandler())
	defer srv.Close()
	api := srv.URL + "/admin/v2"
	expect := func(code int, body string, wantCode int, wantIn ...string) {
		t.Helper()
		if code != wantCode {
			t.Fatalf("HTTP %d (want %d): %s", code, wantCode, body)
		}
		for _, w := range wantIn {
			if !strings.Contains(body, w) {
				t.Fatalf("answer %s does not contain %q", body, w)
			}
		}
	}
	getPolicies := func(ns string) meta.Policies {
		t.Helper()
		code, body := replAdmin(t, "GET", api+"/namespaces/"+ns, nil)
		expect(code, body, 200)
		var p meta.Policies
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}

	code, body := replAdmin(t, "GET", api+"/clusters", nil)
	expect(code, body, 200)
	var regions []string
	json.Unmarshal([]byte(body), &regions)
	if !slices.Equal(regions, []string{"east", "west"}) {
		t.Fatalf("clusters %s", body)
	}

	// Create with registered regions and a policy.
	code, body = replAdmin(t, "PUT", api+"/namespaces/public/geo", map[string]any{
		"replication_clusters": []string{"east", "west"},
		"meridian_replication": map[string]any{"mode": "sync", "syncOnUnreachable": "degrade"},
	})
	expect(code, body, 204)
	p := getPolicies("public/geo")
	if !slices.Equal(p.ReplicationClusters, []string{"east", "west"}) || p.Replication == nil || p.Replication.Mode != "sync" || p.Replication.SyncOnUnreachable != "degrade" {
		t.Fatalf("stored %+v %+v", p.ReplicationClusters, p.Replication)
	}
	// An unknown region is refused, naming it.
	code, body = replAdmin(t, "PUT", api+"/namespaces/public/mars", map[string]any{"replication_clusters": []string{"east", "mars"}})
	expect(code, body, 400, `\"mars\" is not registered`)
	if code, _ := replAdmin(t, "GET", api+"/namespaces/public/mars", nil); code != 404 {
		t.Fatalf("a refused namespace exists: %d", code)
	}
	// An invalid policy is refused at create.
	code, body = replAdmin(t, "PUT", api+"/namespaces/public/one", map[string]any{"meridian_replication": map[string]any{"mode": "sync"}})
	expect(code, body, 400, "needs at least 2 regions")
	// Without regions the broker's region is the default.
	code, body = replAdmin(t, "PUT", api+"/namespaces/public/plain", nil)
	expect(code, body, 204)
	if p := getPolicies("public/plain"); !slices.Equal(p.ReplicationClusters, []string{"east"}) {
		t.Fatalf("default regions %v", p.ReplicationClusters)
	}

	// Pulsar's /replication round-trips.
	code, body = replAdmin(t, "POST", api+"/namespaces/public/plain/replication", []string{"west", "east"})
	expect(code, body, 204)
	code, body = replAdmin(t, "GET", api+"/namespaces/public/plain/replication", nil)
	expect(code, body, 200)
	json.Unmarshal([]byte(body), &regions)
	if !slices.Equal(regions, []string{"west", "east"}) {
		t.Fatalf("replication %s", body)
	}
	code, body = replAdmin(t, "POST", api+"/namespaces/public/plain/replication", []string{"west", "mars"})
	expect(code, body, 400, "mars")
	code, body = replAdmin(t, "POST", api+"/namespaces/public/plain/replication", "not json")
	expect(code, body, 400)
	code, body = replAdmin(t, "POST", api+"/namespaces/public/nothere/replication", []string{"east"})
	expect(code, body, 404)
	// Removing the region that is the explicit primary is refused.
	code, body = replAdmin(t, "POST", api+"/namespaces/public/default/replication", []string{"west"})
	expect(code, body, 400, `primary \"east\"`)

	// meridian-replication: absent fields keep their values.
	code, body = replAdmin(t, "POST", api+"/namespaces/public/geo/meridian-replication", map[string]any{"failover": "active-active", "syncTimeoutMs": 5000})
	expect(code, body, 204)
	p = getPolicies("public/geo")
	if want := (meta.ReplicationPolicy{Mode: "sync", Failover: "active-active", SyncOnUnreachable: "degrade", SyncTimeoutMs: 5000}); p.Replication == nil || *p.Replication != want || !slices.Equal(p.ReplicationClusters, []string{"east", "west"}) {
		t.Fatalf("after partial update: %v %+v", p.ReplicationClusters, p.Replication)
	}
	code, body = replAdmin(t, "POST", api+"/namespaces/public/geo/meridian-replication", map[string]any{"regions": []string{"east"}})
	expect(code, body, 400, "needs at least 2 regions")
	code, body = replAdmin(t, "POST", api+"/namespaces/public/geo/meridian-replication", map[string]any{"regions": []string{"east"}, "mode": "async"})
	expect(code, body, 204)
	code, body = replAdmin(t, "POST", api+"/namespaces/public/geo/meridian-replication", map[string]any{"syncTimeout": 5})
	expect(code, body, 400, "syncTimeout")
	code, body = replAdmin(t, "GET", api+"/namespaces/public/geo/meridian-replication", nil)
	expect(code, body, 200, `"regions":["east"]`, `"mode":"async"`, `"primary":"east"`, `"startAt":"earliest"`)

	// A persistence change that makes a stretched policy unworkable is
	// refused, and nothing is written.
	code, body = replAdmin(t, "POST", api+"/namespaces/public/geo/meridian-replication", map[string]any{"regions": []string{"east", "west"}, "mode": "stretched", "syncOnUnreachable": "strict"})
	expect(code, body, 204)
	code, body = replAdmin(t, "POST", api+"/namespaces/public/geo/persistence", map[string]int{"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2})
	expect(code, body, 400, "every write would stop")
	if p := getPolicies("public/geo"); p.Persistence != nil {
		t.Fatalf("a refused persistence was stored: %+v", p.Persistence)
	}
	code, body = replAdmin(t, "POST", api+"/namespaces/public/geo/persistence", map[string]int{"bookkeeperEnsemble": 4, "bookkeeperWriteQuorum": 4, "bookkeeperAckQuorum": 2})
	expect(code, body, 204)
}

// The CLI against a real `meridian standalone`.
func TestReplicationCLIRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	s := testutil.StartStandalone(t, t.TempDir())
	bin := testutil.MeridianBinary(t)
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"admin", "--url", s.AdminURL}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := cli("regions", "list")
	if err != nil || !strings.Contains(out, `"standalone"`) {
		t.Fatalf("regions list: %v\n%s", err, out)
	}
	out, err = cli("namespaces", "create", "public/geo", "--regions", "standalone", "--replication", "async", "--failover", "active-active",
		"--start-at", "latest", "--replication-backlog-quota", "10GiB", "--sync-timeout", "5s")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	out, err = cli("namespaces", "create", "public/mars", "--regions", "standalone,mars")
	if err == nil || !strings.Contains(out, "mars") || !strings.Contains(out, "400") {
		t.Fatalf("create with an unknown region: %v\n%s", err, out)
	}
	out, err = cli("namespaces", "update", "public/geo", "--start-at", "earliest")
	if err != nil {
		t.Fatalf("update: %v\n%s", err, out)
	}
	out, err = cli("namespaces", "update", "public/geo", "--replication", "sync")
	if err == nil || !strings.Contains(out, "at least 2 regions") {
		t.Fatalf("update to sync with one region: %v\n%s", err, out)
	}
	out, err = cli("namespaces", "get", "public/geo")
	if err != nil {
		t.Fatalf("get: %v\n%s", err, out)
	}
	var p meta.Policies
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("get is not JSON: %v\n%s", err, out)
	}
	want := meta.ReplicationPolicy{Mode: "async", Failover: "active-active", StartAt: "earliest", BacklogQuotaBytes: 10 << 30, SyncTimeoutMs: 5000}
	if p.Replication == nil || *p.Replication != want || !slices.Equal(p.ReplicationClusters, []string{"standalone"}) {
		t.Fatalf("stored %v %+v, want %+v", p.ReplicationClusters, p.Replication, want)
	}
	code, body := replAdmin(t, "GET", s.AdminURL+"/admin/v2/namespaces/public/default", nil)
	if code != 200 || !strings.Contains(body, `"primary":"standalone"`) {
		t.Fatalf("public/default: %d %s", code, body)
	}
}
