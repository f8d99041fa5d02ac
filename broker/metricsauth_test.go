package broker_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Issue 29: Pulsar's authenticateMetricsEndpoint is off by default — a
// real standalone with TLS, token authentication and authorization on
// serves its /metrics to a scrape without credentials (as Pulsar's does),
// and to one with a token of a role that may do nothing else.
func TestMetricsEndpointOpenByDefault(t *testing.T) {
	s := testutil.StartSecureStandalone(t, t.TempDir())
	for name, token := range map[string]string{"no credentials": "", "a role without grants": s.Token("nobody", time.Minute)} {
		code, body := s.Admin(token, "GET", "/metrics", "")
		if code != 200 || !strings.Contains(body, "go_goroutines") {
			t.Errorf("GET /metrics with %s: HTTP %d %.200s, want the metrics", name, code, body)
		}
	}
}

// Issue 29: --authenticate-metrics-endpoint on a real standalone (TLS,
// token authentication, authorization): /metrics is refused 401 without
// credentials or with a forged token, 403 to a role neither super-user
// nor granted metrics, and served to the super-user, to a role of
// --metrics-roles presenting a token, and to one presenting a client
// certificate of the CA (TLS authentication: the role is its common
// name).
func TestMetricsEndpointAuthenticated(t *testing.T) {
	s := testutil.StartSecureStandalone(t, t.TempDir(), "--authenticate-metrics-endpoint", "--metrics-roles", "scraper,cert-scraper")
	for _, c := range []struct {
		name, token string
		want        int
	}{
		{"no credentials", "", http.StatusUnauthorized},
		{"a forged token", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzY3JhcGVyIn0.forged", http.StatusUnauthorized},
		{"a role without the grant", s.Token("nobody", time.Minute), http.StatusForbidden},
		{"the super-user", s.Token(testutil.SuperUser, time.Minute), http.StatusOK},
		{"a metrics role's token", s.Token("scraper", time.Minute), http.StatusOK},
	} {
		code, body := s.Admin(c.token, "GET", "/metrics", "")
		if code != c.want {
			t.Errorf("GET /metrics with %s: HTTP %d %.200s, want %d", c.name, code, body, c.want)
		}
		if code == http.StatusOK && !strings.Contains(body, "go_goroutines") {
			t.Errorf("GET /metrics with %s: no metrics in %.200s", c.name, body)
		}
	}
	ca, err := tlsutil.LoadCA(s.CAFile, filepath.Join(s.DataDir, "tls", "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	odir := t.TempDir()
	for _, c := range []struct {
		role string
		want int
	}{{"cert-scraper", http.StatusOK}, {"cert-nobody", http.StatusForbidden}} {
		f, err := ca.IssueFiles(odir, c.role, s.CAFile, tlsutil.LocalLeaf(c.role, ""))
		if err != nil {
			t.Fatal(err)
		}
		src, err := tlsutil.NewSource(f)
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: src.ClientConfig("")}}
		resp, err := hc.Get(s.AdminURL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET /metrics with the client certificate of %s: HTTP %d, want %d", c.role, resp.StatusCode, c.want)
		}
	}
}
