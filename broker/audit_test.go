package broker_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/meridian-mq/meridian/tools/testutil"
)

// readAudit reads the audit trail's JSON lines.
func readAudit(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func auditEvents(lines []map[string]any, event string) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if l["event"] == event {
			out = append(out, l)
		}
	}
	return out
}

// Security issue item 8 on a real standalone (TLS, tokens, authorization):
// the audit trail (--audit-log) holds each admin change with its role,
// each refused one, and each authentication failure of the admin API and
// of the Pulsar listener (the unmodified Go client with a forged token),
// from where, never a token; after --auth-failure-limit failures from
// 127.0.0.1 even the super-user's valid token is refused (429, and the Go
// client fails to connect) until --auth-failure-window ends, and then
// works again.
func TestAuditTrailAndAuthFailureLimit(t *testing.T) {
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	const limit = 6
	s := testutil.StartSecureStandalone(t, t.TempDir(), "--audit-log", auditLog,
		"--auth-failure-limit", "6", "--auth-failure-window", "15s")
	su := s.Token(testutil.SuperUser, time.Hour)
	s.MustAdmin(su, "PUT", "/admin/v2/tenants/audited", `{"adminRoles":["alice"],"allowedClusters":["standalone"]}`)
	if code, body := s.Admin(s.Token("mallory", time.Hour), "PUT", "/admin/v2/tenants/stolen", `{}`); code != 403 {
		t.Fatalf("a role without rights creating a tenant: %d %s", code, body)
	}
	if code, _ := s.Admin("forged."+su[strings.IndexByte(su, '.')+1:], "DELETE", "/admin/v2/tenants/audited", ""); code != 401 {
		t.Fatalf("a forged token deleting a tenant: %d", code)
	}
	bad := s.ClientOptions(pulsar.NewAuthenticationToken("not-a-token"))
	bad.OperationTimeout, bad.ConnectionTimeout, bad.Logger = 3*time.Second, 3*time.Second, quietLogger()
	c, err := pulsar.NewClient(bad)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://audited/x/t"}); err == nil {
		p.Close()
		t.Fatal("a client with a bad token created a producer")
	}
	c.Close()

	lines := readAudit(t, auditLog)
	changes := auditEvents(lines, "admin_change")
	if len(changes) != 1 || changes[0]["role"] != testutil.SuperUser || changes[0]["method"] != "PUT" ||
		changes[0]["path"] != "/admin/v2/tenants/audited" || !strings.HasPrefix(changes[0]["remote"].(string), "127.0.0.1:") {
		t.Fatalf("admin changes in the trail: %v", changes)
	}
	denied := auditEvents(lines, "admin_denied")
	if len(denied) != 2 || denied[0]["role"] != "mallory" || denied[0]["status"] != float64(403) || denied[1]["status"] != float64(401) {
		t.Fatalf("refused admin changes in the trail: %v", denied)
	}
	failures := auditEvents(lines, "auth_failure")
	where := map[string]int{}
	for _, f := range failures {
		where[f["where"].(string)]++
	}
	if where["admin"] != 1 || where["pulsar"] == 0 {
		t.Fatalf("authentication failures by where: %v, want admin 1 and pulsar at least 1 (%v)", where, failures)
	}
	raw, _ := os.ReadFile(auditLog)
	if strings.Contains(string(raw), su) {
		t.Fatal("a token in the audit trail")
	}

	// Push 127.0.0.1 over the limit with forged tokens on the admin API
	// (the client's own retries may have done it already).
	for n := 0; ; n++ {
		code, _ := s.Admin("x.y.z", "GET", "/admin/v2/tenants", "")
		if code == 429 {
			break
		}
		if code != 401 || n > limit {
			t.Fatalf("forged token %d: HTTP %d, want 401 until the limit, then 429", n, code)
		}
	}
	if code, body := s.Admin(su, "GET", "/admin/v2/tenants", ""); code != 429 || !strings.Contains(body, "too many authentication failures") {
		t.Fatalf("the super-user's valid token from a throttled address: %d %s, want 429", code, body)
	}
	good := s.ClientOptions(pulsar.NewAuthenticationToken(su))
	good.OperationTimeout, good.ConnectionTimeout, good.Logger = 2*time.Second, 2*time.Second, quietLogger()
	gc, err := pulsar.NewClient(good)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := gc.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://audited/x/t"}); err == nil {
		p.Close()
		t.Fatal("a Pulsar client from a throttled address connected")
	}
	gc.Close()
	if th := auditEvents(readAudit(t, auditLog), "auth_throttled"); len(th) != 1 || th[0]["ip"] != "127.0.0.1" {
		t.Fatalf("throttle lines: %v, want one for 127.0.0.1", th)
	}

	// The window ends: the valid token works again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _ := s.Admin(su, "GET", "/admin/v2/tenants", "")
		if code == 200 {
			break
		}
		if code != 429 || time.Now().After(deadline) {
			t.Fatalf("the super-user after the window: %d", code)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := secureMetric(t, s, "meridian_broker_auth_failures_total", `reason="throttled"`); n < 2 {
		t.Fatalf("throttled refusals counted %v, want at least 2 (the admin call and the client)", n)
	}
}
