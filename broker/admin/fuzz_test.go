package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/broker/meta"
)

// FuzzAdminJSON feeds hostile bodies to what the admin handlers decode and
// validate before touching etcd (readJSON into each body type, the policy
// checks, the name parsers): no panic, every refusal a 400 (a 412 for a
// message TTL, as Pulsar) or ErrInvalidName, and what is accepted is safe to use (a valid name
// round-trips and holds no path tricks; valid policies build their bundle
// boundaries).
func FuzzAdminJSON(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `null`, `4`, `-1`, `1e300`, `"x"`, `[]`,
		`{"adminRoles":["a"],"allowedClusters":["standalone"]}`,
		`{"replication_clusters":["standalone"],"numBundles":8,"retention_policies":{"retentionTimeInMinutes":-1,"retentionSizeInMB":10}}`,
		`{"numBundles":1099511627776}`, `{"numBundles":-3}`,
		`{"message_ttl_in_seconds":-5}`, `{"message_ttl_in_seconds":2147483648}`,
		`{"retention_policies":{"retentionTimeInMinutes":9223372036854775807,"retentionSizeInMB":1}}`,
		`{"persistence":{"bookkeeperEnsemble":3,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":2}}`,
		`{"persistence":{"bookkeeperEnsemble":1,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":0}}`,
		`{"backlog_quota_map":{"destination_storage":{"limit":1024,"policy":"producer_exception"}}}`,
		`{"limitSize":10,"limitTime":-1,"policy":"producer_request_hold"}`,
		`{"auth_policies":{"x":[1,2,{"y":null}]},"deduplicationEnabled":true}`,
		`{"a":` + strings.Repeat(`[`, 2000), `"\ud800"`, "\xff\xfe",
		"persistent://public/default/t", "public/default", "t/ns/../x", "public/default/t-partition-3",
		"non-persistent://a/b/c", "a//b", "%2e%2e/x",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := func() *http.Request { return httptest.NewRequest("PUT", "/admin/v2/x", bytes.NewReader(body)) }
		check := func(what string, v any, err error) {
			var pf meta.StatusError
			if what == "policies" && errors.As(err, &pf) && pf.Status == http.StatusPreconditionFailed {
				return // a message TTL out of range, as Pulsar answers it
			}
			if err == nil {
				if _, err := json.Marshal(v); err != nil {
					t.Fatalf("%s: accepted %q but cannot marshal it back: %v", what, body, err)
				}
				return
			}
			var he meta.StatusError
			if !errors.As(err, &he) || he.Status != http.StatusBadRequest {
				t.Fatalf("%s: error %v is not a 400", what, err)
			}
			w := httptest.NewRecorder()
			writeAdmin(w, nil, err)
			if w.Code != http.StatusBadRequest {
				t.Fatalf("%s: answered %d, want 400", what, w.Code)
			}
		}
		var ti meta.TenantInfo
		check("tenant", &ti, readJSON(req(), &ti, true))
		var p meta.Policies
		if err := readJSON(req(), &p, true); err != nil {
			check("policies", &p, err)
		} else if err := meta.ValidatePolicies(p); err != nil {
			check("policies", &p, err)
		} else if bs := meta.EvenBoundaries(p.Bundles); len(bs) < 2 || bs[len(bs)-1] != 0xffffffff {
			t.Fatalf("policies %q: boundaries %v", body, bs)
		}
		var q meta.BacklogQuota
		check("backlog quota", &q, readJSON(req(), &q, false))
		var ps meta.Persistence
		check("persistence", &ps, readJSON(req(), &ps, false))
		var rt meta.Retention
		check("retention", &rt, readJSON(req(), &rt, false))
		var n int
		check("partitions", &n, readJSON(req(), &n, true))

		s := string(body)
		if tn, err := meta.ParseTopic(s); err != nil {
			if !errors.Is(err, meta.ErrInvalidName) {
				t.Fatalf("ParseTopic(%q): %v is not ErrInvalidName", s, err)
			}
		} else {
			for _, part := range []string{tn.Tenant, tn.Namespace, tn.Local} {
				if part == "" || part == "." || part == ".." || strings.ContainsAny(part, "/\\%\x00") {
					t.Fatalf("ParseTopic(%q) accepted part %q", s, part)
				}
			}
			if again, err := meta.ParseTopic(tn.String()); err != nil || again != tn {
				t.Fatalf("ParseTopic(%q) = %+v does not round-trip: %+v, %v", s, tn, again, err)
			}
			if err := meta.ValidateNamespace(tn.NamespaceName()); err != nil {
				t.Fatalf("ParseTopic(%q) accepted namespace %q that ValidateNamespace refuses: %v", s, tn.NamespaceName(), err)
			}
		}
		if err := meta.ValidateNamespace(s); err != nil && !errors.Is(err, meta.ErrInvalidName) {
			t.Fatalf("ValidateNamespace(%q): %v is not ErrInvalidName", s, err)
		}
		if err := meta.ValidateTenant(s); err == nil && (strings.Contains(s, "/") || s == ".." || s == ".") {
			t.Fatalf("ValidateTenant accepted %q", s)
		}
	})
}
