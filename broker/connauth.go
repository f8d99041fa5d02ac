package broker

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/security"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// A connection's side of security (broker/security decides; this file
// speaks the protocol): CONNECT's authentication, the token refresh loop,
// AUTH_RESPONSE, the TLS handshake and schema requests' authorization.
// Tokens are never logged.

// role is the connection's authenticated role ("" when auth is off).
func (c *conn) role() string { return c.auth.Role() }

// authenticate runs CONNECT's authentication; false means refused (the
// refusal is already written and the caller closes the connection).
func (c *conn) authenticate(m *pb.CommandConnect) bool {
	expires, err := c.b.guard.Authenticate(&c.auth, c.nc, m.GetAuthMethodName(), m.GetAuthData(), m.GetFeatureFlags().GetSupportsAuthRefresh())
	if err != nil {
		c.peerLog(slog.LevelInfo, "authentication refused", "method", m.GetAuthMethodName(), "err", err)
		c.writeNow(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
			RequestId: proto.Uint64(0), Error: pb.ServerError_AuthenticationError.Enum(), Message: proto.String(err.Error())}})
		return false
	}
	if expires {
		c.authLoop.Do(func() { go c.refreshLoop() })
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
	g := c.b.guard
	t := time.NewTicker(g.RefreshCheck())
	defer t.Stop()
	for {
		select {
		case <-c.closed:
			return
		case now := <-t.C:
			switch g.RefreshStep(&c.auth, now) {
			case security.RefreshChallenge:
				g.CountRefresh("challenged")
				c.send(&pb.BaseCommand{Type: pb.BaseCommand_AUTH_CHALLENGE.Enum(), AuthChallenge: &pb.CommandAuthChallenge{
					ServerVersion:   proto.String("Meridian"),
					ProtocolVersion: proto.Int32(protocolVersion),
					Challenge:       &pb.AuthData{AuthMethodName: proto.String(c.auth.Method()), AuthData: []byte("refresh")},
				}})
			case security.RefreshClose:
				g.CountRefresh("closed")
				c.peerLog(slog.LevelInfo, "closing connection: its credentials expired and were not refreshed")
				c.close("credentials expired")
				return
			}
		}
	}
}

// handleAuthResponse takes a client's answer to AUTH_CHALLENGE: a valid
// token of the connection's role extends it; anything else closes it.
func (c *conn) handleAuthResponse(m *pb.CommandAuthResponse) bool {
	r := m.GetResponse()
	if err := c.b.guard.AuthResponse(&c.auth, c.nc, r.GetAuthMethodName(), r.GetAuthData()); err != nil {
		c.peerLog(slog.LevelInfo, "closing connection: refreshed credentials refused", "err", err)
		return false
	}
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
		c.peerLog(slog.LevelDebug, "TLS handshake failed", "err", err)
		return false
	}
	tc.SetDeadline(time.Time{})
	return true
}

// authorizeTopic checks that the connection's role may op on topic (as
// the client named it). nil when authorization is off.
func (c *conn) authorizeTopic(ctx context.Context, topic string, op security.Op) error {
	return c.b.guard.AuthorizeTopic(ctx, c.role(), topic, op)
}

// authorizeNamespace checks that the connection's role may op on ns.
func (c *conn) authorizeNamespace(ctx context.Context, ns string, op security.Op) error {
	return c.b.guard.AuthorizeNamespace(ctx, c.role(), ns, op)
}

// schemaAllowed checks a schema request's authorization; a refusal is
// answered here.
func (c *conn) schemaAllowed(respType pb.BaseCommand_Type, reqID uint64, topic string, op security.Op) bool {
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.authorizeTopic(ctx, topic, op); err != nil {
		schemaError(c, respType, reqID, serverError(err), err.Error())
		return false
	}
	return true
}
