package admin

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/meridian-mq/meridian/broker/meta"
)

// FuzzNamespacePolicyBodies feeds hostile bodies to every namespace policy
// route's applier (policyBodies: POST .../retention, messageTTL,
// backlogQuota, deduplication, persistence) and to a namespace create's
// decoder and validation (readNamespacePolicies, meta.ValidatePolicies).
// No panic; a refusal is a 4xx (400, or 412 for a message TTL and for a
// backlog quota reaching the retention, as Pulsar)
// and leaves the policies as they were; what is accepted is a policy a
// namespace create accepts too and that the broker can apply: durations
// that do not overflow, an ensemble within meta.MaxEnsembleSize, auth
// policies that decode with valid role names.
func FuzzNamespacePolicyBodies(f *testing.F) {
	routes := slices.Sorted(func(yield func(string) bool) {
		for k := range policyBodies {
			if !yield(k) {
				return
			}
		}
	})
	for i, body := range []string{
		`{"retentionTimeInMinutes":60,"retentionSizeInMB":100}`,
		`{"retentionTimeInMinutes":9223372036854775807,"retentionSizeInMB":1}`,
		`{"retentionTimeInMinutes":-1,"retentionSizeInMB":-1}`,
		`{"retentionTimeInMinutes":0,"retentionSizeInMB":5}`,
		`3600`, `-5`, `2147483648`, `1e3`,
		`{"limitSize":1048576,"limitTime":-1,"policy":"producer_request_hold"}`,
		`{"limit":-7,"policy":"producer_exception"}`,
		`{"limitSize":10485760,"limitTime":-1,"policy":"producer_request_hold"}`,
		`{"limitSize":10,"policy":"drop_everything"}`,
		`true`, `false`, `null`, `"yes"`,
		`{"bookkeeperEnsemble":3,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":2}`,
		`{"bookkeeperEnsemble":1000000,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":2}`,
		`{"bookkeeperEnsemble":2,"bookkeeperWriteQuorum":3,"bookkeeperAckQuorum":0}`,
		`{}`, ``, `[`, "\xff",
	} {
		f.Add(uint8(i), []byte(body), "")
	}
	f.Add(uint8(0), []byte(`{"limitSize":1,"policy":"producer_exception"}`), "message_age")
	f.Add(uint8(0), []byte(`{"limitSize":1,"policy":"producer_exception"}`), "everything")
	for _, body := range []string{
		`{"auth_policies":{"namespace_auth":{"alice":["produce"]}}}`,
		`{"auth_policies":{"namespace_auth":{"a\nb":["produce"]}}}`,
		`{"auth_policies":{"namespace_auth":{"alice":["own"]}}}`,
		`{"auth_policies":{"x":[1,2,{"y":null}]}}`, `{"auth_policies":5}`,
		`{"auth_policies":{"destination_auth":{"persistent://a/b/c":{"r":["consume"]}},"subscription_auth_roles":{"s":["r"]}}}`,
		`{"backlog_quota_map":{"destination_storage":{"limit":-9,"policy":"producer_exception"}}}`,
		`{"persistence":{"bookkeeperEnsemble":64,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":2}}`,
		`{"bundles":{"numBundles":8}}`, `{"numBundles":5000}`, `{"message_ttl_in_seconds":-1}`,
	} {
		f.Add(uint8(255), []byte(body), "")
	}
	base := func() meta.Policies {
		dedup := true
		return meta.Policies{ReplicationClusters: []string{"east"}, MessageTTLInSeconds: 60, Deduplication: &dedup,
			Retention: &meta.Retention{RetentionTimeInMinutes: 10, RetentionSizeInMB: 10}}
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte, quotaType string) {
		var p meta.Policies
		var err error
		what := "namespace create"
		if int(route) < len(routes) {
			what = "POST .../" + routes[route]
			p = base()
			err = policyBodies[routes[route]](&p, body, url.Values{"backlogQuotaType": {quotaType}})
		} else {
			req := httptest.NewRequest("PUT", "/admin/v2/namespaces/t/ns", bytes.NewReader(body))
			if p, err = readNamespacePolicies(req); err == nil {
				err = meta.ValidatePolicies(p)
			}
		}
		if err != nil {
			var se meta.StatusError
			if !errors.As(err, &se) || (se.Status != http.StatusBadRequest && se.Status != http.StatusPreconditionFailed) {
				t.Fatalf("%s %q: %v is not a 400 or 412", what, body, err)
			}
			w := httptest.NewRecorder()
			writeAdmin(w, nil, err)
			if w.Code != se.Status || !strings.Contains(w.Body.String(), "reason") {
				t.Fatalf("%s %q: answered %d %s", what, body, w.Code, w.Body)
			}
			if int(route) < len(routes) && !reflect.DeepEqual(p, base()) {
				t.Fatalf("%s %q: refused (%v) but changed the policies to %+v", what, body, err, p)
			}
			return
		}
		// Accepted: a namespace create would take it too, and the broker
		// can apply it.
		if err := meta.ValidatePolicies(p); err != nil {
			t.Fatalf("%s %q accepted policies a create refuses: %v", what, body, err)
		}
		if r := p.Retention; r != nil && r.RetentionTimeInMinutes > 0 && time.Duration(r.RetentionTimeInMinutes)*time.Minute <= 0 {
			t.Fatalf("%s %q: retention %d minutes overflows a Duration", what, body, r.RetentionTimeInMinutes)
		}
		if q, ok := p.BacklogQuotas[meta.BacklogQuotaStorage]; ok && p.Retention != nil && int(route) < len(routes) && !meta.BacklogQuotaFitsRetention(&q, *p.Retention) {
			t.Fatalf("%s %q: accepted a backlog quota %+v reaching the retention %+v (Pulsar: 412)", what, body, q, *p.Retention)
		}
		if s := p.MessageTTLInSeconds; s > 0 && meta.MessageTTL(s) != time.Duration(s)*time.Second {
			t.Fatalf("%s %q: TTL %d s not applied as is", what, body, s)
		}
		if v := p.Persistence; v != nil && (v.EnsembleSize > meta.MaxEnsembleSize || v.AckQuorum < 1) {
			t.Fatalf("%s %q: persistence %+v", what, body, *v)
		}
		ap, err := meta.DecodeAuthPolicies(p)
		if err != nil {
			t.Fatalf("%s %q: accepted auth_policies that do not decode: %v", what, body, err)
		}
		for role := range ap.NamespaceAuth {
			if role == "" || strings.ContainsFunc(role, unicode.IsControl) {
				t.Fatalf("%s %q: accepted role %q", what, body, role)
			}
		}
		if bs := meta.EvenBoundaries(p.Bundles); len(bs) < 2 || bs[len(bs)-1] != 0xffffffff {
			t.Fatalf("%s %q: boundaries %v", what, body, bs)
		}
	})
}
