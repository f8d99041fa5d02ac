package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/authtoken"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
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

// connAuth is a connection's authentication state.
type connAuth struct {
	mu       sync.Mutex
	role     string
	method   string
	expires  time.Time // zero: never
	refresh  bool      // the client supports AUTH_CHALLENGE
	challAt  time.Time // when an unanswered AUTH_CHALLENGE was sent (zero: none)
	loopOnce sync.Once
}

// role is the connection's authenticated role ("" when auth is off).
func (c *conn) role() string {
	c.auth.mu.Lock()
	defer c.auth.mu.Unlock()
	return c.auth.role
}

// credentials checks CONNECT's (or AUTH_RESPONSE's) credentials.
func (c *conn) credentials(method string, data []byte) (authtoken.Claims, error) {
	now := time.Now()
	switch method {
	case "token":
		tok := strings.TrimPrefix(strings.TrimSpace(string(data)), "Bearer ")
		cl, err := c.b.cfg.Security.Tokens.Verify(tok, now)
		if err != nil {
			return cl, fmt.Errorf("%w: %v", meta.ErrAuthentication, err)
		}
		return cl, nil
	case "tls":
		tc, ok := c.nc.(*tls.Conn)
		if !ok {
			return authtoken.Claims{}, fmt.Errorf("%w: %w: tls on a plaintext connection", meta.ErrAuthentication, errAuthMethod)
		}
		cs := tc.ConnectionState()
		role, ok := certRole(&cs)
		if !ok {
			return authtoken.Claims{}, fmt.Errorf("%w: no client certificate from the CA", meta.ErrAuthentication)
		}
		return authtoken.Claims{Role: role, Expires: cs.PeerCertificates[0].NotAfter}, nil
	case "", "none":
		return authtoken.Claims{}, fmt.Errorf("%w: %w: this broker requires a token (auth method \"token\")", meta.ErrAuthentication, authtoken.ErrNoToken)
	default:
		return authtoken.Claims{}, fmt.Errorf("%w: %w %q: use \"token\" or \"tls\"", meta.ErrAuthentication, errAuthMethod, method)
	}
}

// authenticate runs CONNECT's authentication; false means refused (the
// refusal is already written and the caller closes the connection).
func (c *conn) authenticate(m *pb.CommandConnect) bool {
	if !c.b.authnOn() {
		return true
	}
	cl, err := c.credentials(m.GetAuthMethodName(), m.GetAuthData())
	if err != nil {
		c.b.authFailed(err)
		c.log.Info("authentication refused", "method", m.GetAuthMethodName(), "err", err)
		c.writeNow(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
			RequestId: proto.Uint64(0), Error: pb.ServerError_AuthenticationError.Enum(), Message: proto.String(err.Error())}})
		return false
	}
	c.auth.mu.Lock()
	c.auth.role, c.auth.method, c.auth.expires = cl.Role, m.GetAuthMethodName(), cl.Expires
	c.auth.refresh = m.GetFeatureFlags().GetSupportsAuthRefresh()
	c.auth.mu.Unlock()
	if !cl.Expires.IsZero() {
		c.auth.loopOnce.Do(func() { go c.refreshLoop() })
	}
	return true
}

// writeNow writes one frame straight to the socket: before CONNECTED
// nothing else is queued on the connection, and the caller closes it
// right after (a queued frame could be lost to the close).
func (c *conn) writeNow(cmd *pb.BaseCommand) {
	f, err := codec.AppendCommand(nil, cmd)
	if err != nil {
		return
	}
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.nc.Write(f)
}

// refreshLoop challenges the connection when its token expired, and
// closes it when no valid token comes back.
func (c *conn) refreshLoop() {
	every := c.b.cfg.Security.AuthRefreshCheck
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.closed:
			return
		case now := <-t.C:
			switch c.refreshStep(now) {
			case refreshChallenge:
				c.b.sec.authRefresh.WithLabelValues("challenged").Inc()
				c.send(&pb.BaseCommand{Type: pb.BaseCommand_AUTH_CHALLENGE.Enum(), AuthChallenge: &pb.CommandAuthChallenge{
					ServerVersion:   proto.String("Meridian"),
					ProtocolVersion: proto.Int32(protocolVersion),
					Challenge:       &pb.AuthData{AuthMethodName: proto.String(c.authMethod()), AuthData: []byte("refresh")},
				}})
			case refreshClose:
				c.b.sec.authRefresh.WithLabelValues("closed").Inc()
				c.log.Info("closing connection: its credentials expired and were not refreshed")
				c.close("credentials expired")
				return
			}
		}
	}
}

func (c *conn) authMethod() string {
	c.auth.mu.Lock()
	defer c.auth.mu.Unlock()
	return c.auth.method
}

type refreshAction int

const (
	refreshNothing refreshAction = iota
	refreshChallenge
	refreshClose
)

// refreshStep decides, at now, what the refresh loop does.
func (c *conn) refreshStep(now time.Time) refreshAction {
	a := &c.auth
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.expires.IsZero() || now.Before(a.expires):
		return refreshNothing
	case !a.refresh || a.method != "token":
		return refreshClose
	case a.challAt.IsZero():
		a.challAt = now
		return refreshChallenge
	case now.Sub(a.challAt) >= c.b.cfg.Security.AuthRefreshCheck:
		return refreshClose
	}
	return refreshNothing
}

// handleAuthResponse takes a client's answer to AUTH_CHALLENGE: a valid
// token of the connection's role extends it; anything else closes it.
func (c *conn) handleAuthResponse(m *pb.CommandAuthResponse) bool {
	if !c.b.authnOn() {
		return true
	}
	r := m.GetResponse()
	cl, err := c.credentials(r.GetAuthMethodName(), r.GetAuthData())
	a := &c.auth
	a.mu.Lock()
	if err == nil && cl.Role != a.role {
		err = fmt.Errorf("%w: the role may not change on a connection (%q, now %q)", meta.ErrAuthentication, a.role, cl.Role)
	}
	if err == nil {
		a.expires, a.challAt = cl.Expires, time.Time{}
	}
	a.mu.Unlock()
	if err != nil {
		c.b.authFailed(err)
		c.b.sec.authRefresh.WithLabelValues("refused").Inc()
		c.log.Info("closing connection: refreshed credentials refused", "err", err)
		return false
	}
	c.b.sec.authRefresh.WithLabelValues("refreshed").Inc()
	return true
}

// tlsHandshake completes a TLS connection's handshake within 10 s (a
// client that never finishes it holds nothing longer); true for a
// plaintext one.
func (c *conn) tlsHandshake() bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return true
	}
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		c.b.metrics.rejectedFrames.Inc()
		c.log.Debug("TLS handshake failed", "err", err)
		return false
	}
	tc.SetDeadline(time.Time{})
	return true
}

// schemaAllowed checks a schema request's authorization; a refusal is
// answered here.
func (c *conn) schemaAllowed(respType pb.BaseCommand_Type, reqID uint64, topic string, op authOp) bool {
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.authorizeTopic(ctx, topic, op); err != nil {
		schemaError(c, respType, reqID, serverError(err), err.Error())
		return false
	}
	return true
}
