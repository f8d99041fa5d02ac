package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Issue 29: what Meridian does not serve is answered with a 4xx and a
// JSON reason, never the router's bare "404 page not found" or its
// plain-text 405; the routes register without overlapping (the mux
// panics on two patterns neither of which is more specific).
func TestUnservedCallsAnswerWithAReason(t *testing.T) {
	h := New(Config{Cluster: "east", Metrics: prometheus.NewRegistry()}).Handler()
	for _, c := range []struct {
		method, path string
		code         int
		reason       string
	}{
		{"GET", "/admin/v2/persistent/t/ns/x/retention", 405, "Topic level policies is disabled"},
		{"POST", "/admin/v2/persistent/t/ns/x/messageTTL", 405, "Topic level policies is disabled"},
		{"POST", "/admin/v2/persistent/t/ns/x/terminate", 405, "does not terminate"},
		{"POST", "/admin/v2/persistent/t/ns/x/permissions/role", 405, "namespaces"},
		{"POST", "/admin/v2/namespaces/t/ns/maxProducersPerTopic", 405, "maxProducersPerTopic"},
		{"PUT", "/admin/v2/non-persistent/t/ns/x", 405, "non-persistent"},
		{"GET", "/admin/v3/functions/t/ns", 405, "Functions"},
		{"PUT", "/admin/v2/clusters/east", 405, "register"},
		{"GET", "/admin/v2/clusters/east/failureDomains", 405, "failure domains"},
		{"POST", "/admin/v2/brokers/configuration/x/1", 405, "dynamic"},
		{"GET", "/admin/v2/clusters/east/peers", 405, "peer clusters"},
		{"GET", "/admin/v2/namespaces/t/ns/permissions/subscription", 405, "subscription permissions"},
		{"POST", "/admin/v2/namespaces/t/ns/persistence/bookieAffinity", 405, "bookie affinity"},
		{"DELETE", "/admin/v2/namespaces/t/ns/0x00000000_0x40000000", 405, "bundle"},
		{"GET", "/admin/v2/brokers/configuration/runtime", 405, "dynamic"},
		{"PUT", "/admin/v2/persistent/t/ns/x/partitions", 405, "topic properties"},
		{"GET", "/admin/v2/no/such/thing", 404, "has no GET /admin/v2/no/such/thing"},
		{"PATCH", "/admin/v2/tenants/x", 404, "has no PATCH"},
	} {
		rec := httptest.NewRecorder()
		body := ""
		if strings.HasSuffix(c.path, "/partitions") {
			body = `{"partitions":2,"properties":{"k":"v"}}`
		}
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, strings.NewReader(body)))
		var answer struct{ Reason string }
		if rec.Code != c.code || json.Unmarshal(rec.Body.Bytes(), &answer) != nil || !strings.Contains(answer.Reason, c.reason) {
			t.Errorf("%s %s: %d %q, want %d with a reason containing %q", c.method, c.path, rec.Code, rec.Body.String(), c.code, c.reason)
		}
	}
}

// pulsaradmin's Topics().Create(t, n) sends Pulsar's partitioned-topic
// metadata; `meridian admin` and Pulsar's REST API a bare number.
func TestReadPartitions(t *testing.T) {
	for body, want := range map[string]int{`3`: 3, `{"partitions":3,"properties":null}`: 3, ` {"partitions": 7} `: 7} {
		n, err := readPartitions(httptest.NewRequest("PUT", "/", strings.NewReader(body)))
		if err != nil || n != want {
			t.Errorf("%s: %d %v, want %d", body, n, err, want)
		}
	}
	for _, body := range []string{``, `{}`, `{"partitions":"x"}`, `"3"`} {
		if _, err := readPartitions(httptest.NewRequest("PUT", "/", strings.NewReader(body))); err == nil {
			t.Errorf("%q accepted", body)
		}
	}
}

// CreateNsWithNumBundles sends {"bundles": {"numBundles": 8}}: the count
// is kept; boundaries other than the even split are refused.
func TestReadNamespaceBundles(t *testing.T) {
	req := func(body string) *http.Request { return httptest.NewRequest("PUT", "/", strings.NewReader(body)) }
	p, err := readNamespacePolicies(req(`{"bundles":{"boundaries":null,"numBundles":8},"message_ttl_in_seconds":null,"auth_policies":{"namespace_auth":{}}}`))
	if err != nil || p.Bundles != 8 {
		t.Fatalf("%+v %v", p, err)
	}
	p, err = readNamespacePolicies(req(`{"bundles":{"boundaries":["0x00000000","0x80000000","0xffffffff"],"numBundles":2}}`))
	if err != nil || p.Bundles != 2 {
		t.Fatalf("even boundaries: %+v %v", p, err)
	}
	if _, err := readNamespacePolicies(req(`{"bundles":{"boundaries":["0x00000000","0x10000000","0xffffffff"]}}`)); err == nil {
		t.Fatal("uneven boundaries accepted")
	}
	if p, err := readNamespacePolicies(req(`{"numBundles":5}`)); err != nil || p.Bundles != 5 {
		t.Fatalf("Meridian's numBundles: %+v %v", p, err)
	}
}
