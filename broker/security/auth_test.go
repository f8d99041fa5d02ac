package security

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/authtoken"
	"github.com/prometheus/client_golang/prometheus"
)

// The token refresh of a connection, step by step on a simulated clock:
// nothing before expiry; past it a client that can refresh is challenged
// once, and closed if no valid token came back within another
// AuthRefreshCheck; one that cannot refresh (or a tls connection) is
// closed at once.
func TestRefreshStep(t *testing.T) {
	g := New(Config{AuthRefreshCheck: time.Minute}, nil, "test", prometheus.NewRegistry())
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name  string
		auth  func() *ConnAuth
		steps []time.Duration // offsets from t0
		want  []RefreshAction
	}{
		{"never expires", func() *ConnAuth { return &ConnAuth{method: "token", refresh: true} },
			[]time.Duration{0, time.Hour}, []RefreshAction{RefreshNothing, RefreshNothing}},
		{"refreshing client", func() *ConnAuth { return &ConnAuth{method: "token", refresh: true, expires: t0.Add(time.Minute)} },
			[]time.Duration{30 * time.Second, time.Minute, 90 * time.Second, 2 * time.Minute},
			[]RefreshAction{RefreshNothing, RefreshChallenge, RefreshNothing, RefreshClose}},
		{"client without refresh", func() *ConnAuth { return &ConnAuth{method: "token", expires: t0.Add(time.Minute)} },
			[]time.Duration{time.Minute}, []RefreshAction{RefreshClose}},
		{"tls connection", func() *ConnAuth { return &ConnAuth{method: "tls", refresh: true, expires: t0.Add(time.Minute)} },
			[]time.Duration{time.Minute}, []RefreshAction{RefreshClose}},
	} {
		a := tc.auth()
		for i, d := range tc.steps {
			if got := g.RefreshStep(a, t0.Add(d)); got != tc.want[i] {
				t.Errorf("%s: at +%v got %v, want %v", tc.name, d, got, tc.want[i])
			}
		}
	}
}

// With authentication off every connection passes as the anonymous role
// and nothing expires; with it on, a connection without credentials is
// refused as missing, and the refusal is counted.
func TestAuthenticate(t *testing.T) {
	off := New(Config{}, nil, "test", prometheus.NewRegistry())
	var a ConnAuth
	if expires, err := off.Authenticate(&a, nil, "", nil, false); err != nil || expires || a.Role() != "" {
		t.Fatalf("auth off: expires=%v err=%v role=%q", expires, err, a.Role())
	}
	_, v := testVerifier(t)
	on := New(Config{Tokens: v}, nil, "test", prometheus.NewRegistry())
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	if _, err := on.Authenticate(&a, c1, "", nil, false); !errors.Is(err, meta.ErrAuthentication) || !errors.Is(err, authtoken.ErrNoToken) {
		t.Fatalf("no credentials: %v, want an authentication error for a missing token", err)
	}
	if _, err := on.Authenticate(&a, c1, "tls", nil, false); !errors.Is(err, meta.ErrAuthentication) {
		t.Fatalf("tls on a plaintext connection: %v", err)
	}
	r := httptest.NewRequest("GET", "/admin/v2/tenants", nil)
	if _, err := on.AuthorizeAdmin(r, "GET /admin/v2/tenants"); !errors.Is(err, meta.ErrAuthentication) {
		t.Fatalf("admin request without a token: %v", err)
	}
}

// The gossip keyring goes only to an authenticated caller: with token
// authentication on, a super-user (authorization on or off); with it off,
// nobody over plain http — never to an anonymous caller.
func TestAuthorizeSecret(t *testing.T) {
	req := func(token string) *http.Request {
		r := httptest.NewRequest("GET", "/admin/v2/meridian/gossip/keys", nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return r
	}
	off := New(Config{}, nil, "test", prometheus.NewRegistry())
	var se meta.StatusError
	if err := off.AuthorizeSecret(req("")); !errors.As(err, &se) || se.Status != http.StatusForbidden {
		t.Fatalf("authentication off, plain http: %v, want 403", err)
	}
	key, v := testVerifier(t)
	tok := func(role string) string {
		s, err := authtoken.CreateWithSecret(key, role, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, authz := range []bool{false, true} {
		on := New(Config{Tokens: v, Authorization: authz, SuperUserRoles: []string{"admin"}}, nil, "test", prometheus.NewRegistry())
		if err := on.AuthorizeSecret(req("")); !errors.Is(err, meta.ErrAuthentication) {
			t.Errorf("authorization=%t, no token: %v", authz, err)
		}
		if err := on.AuthorizeSecret(req(tok("alice"))); !errors.Is(err, meta.ErrAuthorization) {
			t.Errorf("authorization=%t, a user's token: %v, want refused", authz, err)
		}
		if err := on.AuthorizeSecret(req(tok("admin"))); err != nil {
			t.Errorf("authorization=%t, a super-user's token: %v", authz, err)
		}
	}
}
