package security

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/authtoken"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The per-IP failure limit on a simulated clock: the limit-th failure
// crosses it (once), the IP is then refused until its window ends, other
// IPs are not, and a limit <= 0 never refuses.
func TestFailureLimiter(t *testing.T) {
	l := &failureLimiter{limit: 3, window: time.Minute}
	t0 := time.Unix(1_000_000, 0)
	for i := range 3 {
		if b, _ := l.blocked("a", t0); b {
			t.Fatalf("blocked after %d failures", i)
		}
		crossed, until := l.failed("a", t0.Add(time.Duration(i)*time.Second))
		if crossed != (i == 2) {
			t.Fatalf("failure %d: crossed=%v", i+1, crossed)
		}
		if !until.Equal(t0.Add(time.Minute)) {
			t.Fatalf("window ends %v, want %v", until, t0.Add(time.Minute))
		}
	}
	if b, until := l.blocked("a", t0.Add(59*time.Second)); !b || !until.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after 3 failures: blocked=%v until %v", b, until)
	}
	if b, _ := l.blocked("b", t0.Add(time.Second)); b {
		t.Fatal("another IP blocked")
	}
	if b, _ := l.blocked("a", t0.Add(time.Minute)); b {
		t.Fatal("still blocked once the window ended")
	}
	if crossed, _ := l.failed("a", t0.Add(time.Minute)); crossed {
		t.Fatal("a new window's first failure crossed the limit")
	}
	off := &failureLimiter{limit: 0, window: time.Minute}
	for range 10 {
		off.failed("a", t0)
	}
	if b, _ := off.blocked("a", t0); b {
		t.Fatal("limit 0 blocked")
	}
}

type auditLine map[string]any

func auditLines(t *testing.T, buf *bytes.Buffer) []auditLine {
	t.Helper()
	var out []auditLine
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m auditLine
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		out = append(out, m)
	}
	buf.Reset()
	return out
}

// The audit trail and the per-IP limit through the admin API's entry
// points: failures are audited with where and from where; the limit-th
// failure from an IP throttles it (logged once), after which even a valid
// token from that IP is refused with 429 unchecked and unlogged while
// another IP's is not; admin changes are audited with the role, reads are
// not; tokens never appear in the trail.
func TestAuditTrailAndFailureLimit(t *testing.T) {
	key, v := testVerifier(t)
	good, err := authtoken.CreateWithSecret(key, "alice", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	g := New(Config{Tokens: v, Audit: slog.New(slog.NewJSONHandler(&buf, nil)), AuthFailureLimit: 3, AuthFailureWindow: time.Hour}, nil, "test", reg)
	req := func(method, from, token string) *http.Request {
		r := httptest.NewRequest(method, "/admin/v2/tenants/acme", nil)
		r.RemoteAddr = from
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return r
	}
	for i := range 3 {
		if _, err := g.AuthorizeAdmin(req("PUT", "10.0.0.1:1000", "not-a-token"), "PUT /admin/v2/tenants/{tenant}"); !errors.Is(err, meta.ErrAuthentication) {
			t.Fatalf("bad token %d: %v", i, err)
		}
	}
	lines := auditLines(t, &buf)
	if len(lines) != 4 {
		t.Fatalf("audit lines after 3 failures with limit 3: %v, want 3 auth_failure and 1 auth_throttled", lines)
	}
	for _, l := range lines[:3] {
		if l["event"] != "auth_failure" || l["where"] != "admin" || l["remote"] != "10.0.0.1:1000" || l["reason"] != "invalid" {
			t.Fatalf("failure line %v", l)
		}
	}
	if l := lines[3]; l["event"] != "auth_throttled" || l["ip"] != "10.0.0.1" {
		t.Fatalf("throttle line %v", l)
	}

	_, err = g.AuthorizeAdmin(req("PUT", "10.0.0.1:1001", good), "PUT /admin/v2/tenants/{tenant}")
	var se meta.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusTooManyRequests || !errors.Is(err, errThrottled) || !errors.Is(err, meta.ErrAuthentication) {
		t.Fatalf("a valid token from the throttled IP: %v, want 429 throttled", err)
	}
	if lines := auditLines(t, &buf); len(lines) != 0 {
		t.Fatalf("a throttled refusal was logged: %v", lines)
	}
	var m dto.Metric
	if err := g.sec.authFailures.WithLabelValues("throttled").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		n := m.GetCounter().GetValue()
		t.Fatalf("throttled refusals counted %v, want 1", n)
	}

	r := req("PUT", "10.0.0.2:2000", good)
	role, err := g.AuthorizeAdmin(r, "PUT /admin/v2/tenants/{tenant}")
	if err != nil || role != "alice" {
		t.Fatalf("a valid token from another IP: role %q, %v", role, err)
	}
	g.AuditAdmin(r, role, "PUT /admin/v2/tenants/{tenant}", http.StatusNoContent, nil)
	g.AuditAdmin(req("GET", "10.0.0.2:2000", good), role, "GET /admin/v2/tenants/{tenant}", http.StatusOK, nil)
	lines = auditLines(t, &buf)
	if len(lines) != 1 {
		t.Fatalf("audit lines for a PUT and a GET: %v, want the PUT only", lines)
	}
	if l := lines[0]; l["event"] != "admin_change" || l["role"] != "alice" || l["method"] != "PUT" || l["path"] != "/admin/v2/tenants/acme" ||
		l["status"] != float64(http.StatusNoContent) || l["remote"] != "10.0.0.2:2000" {
		t.Fatalf("change line %v", l)
	}
	g.AuditAdmin(r, "bob", "PUT /admin/v2/tenants/{tenant}", http.StatusForbidden, g.notAuthorized("bob", OpAdmin, "acme"))
	if l := auditLines(t, &buf); len(l) != 1 || l[0]["event"] != "admin_denied" || l[0]["role"] != "bob" {
		t.Fatalf("denied line %v", l)
	}
	if strings.Contains(buf.String(), good) {
		t.Fatal("a token in the audit trail")
	}
}

// testVerifier makes a secret key and its token verifier.
func testVerifier(t *testing.T) ([]byte, *authtoken.Verifier) {
	t.Helper()
	key, err := authtoken.NewSecretKey()
	if err != nil {
		t.Fatal(err)
	}
	v, err := authtoken.NewSecretVerifier(key)
	if err != nil {
		t.Fatal(err)
	}
	return key, v
}
