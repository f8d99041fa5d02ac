package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/prometheus/client_golang/prometheus"
)

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
	srv := httptest.NewServer(New(Config{Cluster: "east", Meta: meta.NewMetadata(global), Metrics: prometheus.NewRegistry()}).Handler())
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
