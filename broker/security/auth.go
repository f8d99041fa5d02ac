package security

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/authtoken"
)

// Authentication on the Pulsar protocol (SecurityConfig.Tokens):
//
//   - CONNECT carries auth_method_name "token" and the JWT in auth_data
//     (pulsar.NewAuthenticationToken), or "tls" with a client certificate
//     from the CA on a TLS connection. Anything else — no credentials, an
//     expired or bad token — is answered ERROR AuthenticationError with
//     the reason (never the token) and the connection closed; nothing
//     else is read from it. The Go client logs the reason and retries the
//     connection until its operation timeout.
//   - A token's expiry is checked every AuthRefreshCheck. An expired one
//     is challenged (AUTH_CHALLENGE "refresh") if the client announced
//     supports_auth_refresh; its AUTH_RESPONSE must carry a valid token of
//     the same role (a role never changes on a connection, as Pulsar).
//     No answer within another AuthRefreshCheck, a bad one, or a client
//     that cannot refresh: the connection is closed (its producers and
//     consumers reconnect, and must authenticate again).
//
// Tokens are never logged.

// errAuthMethod: an auth method this broker does not take.
var errAuthMethod = errors.New("unsupported authentication method")

// ConnAuth is a connection's authentication state: its role, the method
// and when its credentials expire. The zero value is a connection not
// authenticated yet. Safe for concurrent use.
type ConnAuth struct {
	mu      sync.Mutex
	role    string
	method  string
	expires time.Time // zero: never
	refresh bool      // the client supports AUTH_CHALLENGE
	challAt time.Time // when an unanswered AUTH_CHALLENGE was sent (zero: none)
}

// Role is the connection's authenticated role ("" when auth is off).
func (a *ConnAuth) Role() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.role
}

// Method is the auth method the connection authenticated with.
func (a *ConnAuth) Method() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.method
}

// credentials checks CONNECT's (or AUTH_RESPONSE's) credentials, which
// arrived on nc.
func (g *Guard) credentials(nc net.Conn, method string, data []byte) (authtoken.Claims, error) {
	now := time.Now()
	switch method {
	case "token":
		tok := strings.TrimPrefix(strings.TrimSpace(string(data)), "Bearer ")
		cl, err := g.cfg.Tokens.Verify(tok, now)
		if err != nil {
			return cl, fmt.Errorf("%w: %v", meta.ErrAuthentication, err)
		}
		if err := tokenRole(cl); err != nil {
			return authtoken.Claims{}, err
		}
		return cl, nil
	case "tls":
		tc, ok := nc.(*tls.Conn)
		if !ok {
			return authtoken.Claims{}, fmt.Errorf("%w: %w: tls on a plaintext connection", meta.ErrAuthentication, errAuthMethod)
		}
		cs := tc.ConnectionState()
		role, err := g.certRole(&cs)
		if err != nil {
			return authtoken.Claims{}, err
		}
		return authtoken.Claims{Role: role, Expires: cs.PeerCertificates[0].NotAfter}, nil
	case "", "none":
		return authtoken.Claims{}, fmt.Errorf("%w: %w: this broker requires a token (auth method \"token\")", meta.ErrAuthentication, authtoken.ErrNoToken)
	default:
		return authtoken.Claims{}, fmt.Errorf("%w: %w %q: use \"token\" or \"tls\"", meta.ErrAuthentication, errAuthMethod, method)
	}
}

// Authenticate runs CONNECT's authentication of the connection nc into a.
// An error is the refusal, counted already: the caller answers ERROR
// AuthenticationError with it and closes the connection. expires reports
// credentials that expire: the caller then runs the refresh loop
// (RefreshStep every RefreshCheck). With authentication off it does
// nothing.
func (g *Guard) Authenticate(a *ConnAuth, nc net.Conn, method string, data []byte, supportsRefresh bool) (expires bool, err error) {
	if !g.AuthnOn() {
		return false, nil
	}
	if err := g.throttle(remoteOf(nc)); err != nil {
		return false, err
	}
	cl, err := g.credentials(nc, method, data)
	if err != nil {
		g.authFailed("pulsar", remoteOf(nc), err)
		return false, err
	}
	a.mu.Lock()
	a.role, a.method, a.expires = cl.Role, method, cl.Expires
	a.refresh = supportsRefresh
	a.mu.Unlock()
	return !cl.Expires.IsZero(), nil
}

// RefreshCheck is how often a connection's expiry is checked
// (Config.AuthRefreshCheck).
func (g *Guard) RefreshCheck() time.Duration { return g.cfg.AuthRefreshCheck }

// CountRefresh counts one step of a token refresh by result: challenged,
// refreshed, refused or closed.
func (g *Guard) CountRefresh(result string) { g.sec.authRefresh.WithLabelValues(result).Inc() }

// RefreshAction is what the refresh loop does at one check.
type RefreshAction int

// What RefreshStep decides.
const (
	RefreshNothing RefreshAction = iota
	RefreshChallenge
	RefreshClose
)

// RefreshStep decides, at now, what the refresh loop of a does.
func (g *Guard) RefreshStep(a *ConnAuth, now time.Time) RefreshAction {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.expires.IsZero() || now.Before(a.expires):
		return RefreshNothing
	case !a.refresh || a.method != "token":
		return RefreshClose
	case a.challAt.IsZero():
		a.challAt = now
		return RefreshChallenge
	case now.Sub(a.challAt) >= g.cfg.AuthRefreshCheck:
		return RefreshClose
	}
	return RefreshNothing
}

// AuthResponse takes a client's answer to AUTH_CHALLENGE on nc: a valid
// token of the connection's role extends it (nil); anything else is an
// error, counted, and the caller closes the connection. With
// authentication off it does nothing.
func (g *Guard) AuthResponse(a *ConnAuth, nc net.Conn, method string, data []byte) error {
	if !g.AuthnOn() {
		return nil
	}
	cl, err := g.credentials(nc, method, data)
	a.mu.Lock()
	if err == nil && cl.Role != a.role {
		err = fmt.Errorf("%w: the role may not change on a connection (%q, now %q)", meta.ErrAuthentication, a.role, cl.Role)
	}
	if err == nil {
		a.expires, a.challAt = cl.Expires, time.Time{}
	}
	a.mu.Unlock()
	if err != nil {
		g.authFailed("pulsar", remoteOf(nc), err)
		g.CountRefresh("refused")
		return err
	}
	g.CountRefresh("refreshed")
	return nil
}
