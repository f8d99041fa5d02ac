package security

import (
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/authtoken"
	"github.com/prometheus/client_golang/prometheus"
)

// Issue 29: Pulsar's authenticateMetricsEndpoint, decided per request.
// Off (the default), /metrics needs nothing, even with authentication and
// authorization on; on, a request without a valid token is refused as
// unauthenticated (401), and with authorization on only a super-user or
// a role granted metrics is served — any other role is refused as
// unauthorized (403); with authorization off, any authenticated role.
func TestMetricsEndpointSwitch(t *testing.T) {
	secret, err := authtoken.NewSecretKey()
	if err != nil {
		t.Fatal(err)
	}
	v, err := authtoken.NewSecretVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	tok := func(role string) string {
		s, err := authtoken.CreateWithSecret(secret, role, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := Config{Tokens: v, SuperUserRoles: []string{"admin"}, AuthFailureLimit: -1, Audit: slog.New(slog.DiscardHandler)}
	off := base
	off.Authorization = true
	on := off
	on.AuthenticateMetricsEndpoint, on.MetricsRoles = true, []string{"scraper"}
	onNoAuthz := base
	onNoAuthz.AuthenticateMetricsEndpoint = true
	const none, bad = "", "not-a-token"
	for _, tc := range []struct {
		name  string
		cfg   Config
		token string
		want  error // nil: served
	}{
		{"off, no token", off, none, nil},
		{"off, a bad token", off, bad, nil},
		{"off, any role", off, tok("nobody"), nil},
		{"on, no token", on, none, meta.ErrAuthentication},
		{"on, a bad token", on, bad, meta.ErrAuthentication},
		{"on, a super-user", on, tok("admin"), nil},
		{"on, a role granted metrics", on, tok("scraper"), nil},
		{"on, another role", on, tok("nobody"), meta.ErrAuthorization},
		{"on without authorization, any role", onNoAuthz, tok("nobody"), nil},
		{"on without authorization, no token", onNoAuthz, none, meta.ErrAuthentication},
	} {
		g := New(tc.cfg.WithDefaults(), nil, "test", prometheus.NewRegistry())
		r := httptest.NewRequest("GET", "/metrics", nil)
		if tc.token != "" {
			r.Header.Set("Authorization", "Bearer "+tc.token)
		}
		_, err := g.AuthorizeAdmin(r, MetricsPattern)
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// The switch's settings are checked at start: on without token
// authentication could never serve a scrape, and metrics roles without
// the switch and authorization would be granted nothing.
func TestMetricsEndpointSettingsValidated(t *testing.T) {
	v, err := authtoken.NewSecretVerifier([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" valid
	}{
		{"on without tokens", Config{AuthenticateMetricsEndpoint: true}, "needs token authentication"},
		{"roles without the switch", Config{Tokens: v, Authorization: true, MetricsRoles: []string{"s"}}, "metrics roles"},
		{"roles without authorization", Config{Tokens: v, AuthenticateMetricsEndpoint: true, MetricsRoles: []string{"s"}}, "metrics roles"},
		{"on with tokens", Config{Tokens: v, AuthenticateMetricsEndpoint: true}, ""},
		{"on with roles", Config{Tokens: v, Authorization: true, AuthenticateMetricsEndpoint: true, MetricsRoles: []string{"s"}}, ""},
	} {
		err := tc.cfg.WithDefaults().Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error about %q", tc.name, err, tc.want)
		}
	}
}
