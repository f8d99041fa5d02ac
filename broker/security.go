package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/authtoken"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Security: TLS on every listener and link, token authentication (auth.go)
// and role-based authorization (authz.go). Everything is off in the zero
// SecurityConfig: plaintext, anyone may do anything, as before.
//
// With TLS on (SecurityConfig.TLS):
//   - the Pulsar listener (Config.ListenAddr) speaks TLS only, and the
//     broker's service URL — in lookups, ownership records and redirects —
//     is pulsar+ssl://ADVERTISED (both BrokerServiceUrl and
//     BrokerServiceUrlTls carry it);
//   - the admin API is https;
//   - the replication gRPC service requires client certificates from the
//     CA and accepts a stream only from a certificate naming a region
//     (tlsutil.RegionOf) that is the stream's source region
//     (replication.go, replAuthorize); this broker's replication clients
//     present its certificate;
//   - the certificate files are re-read when they change (tlsutil).

// SecurityConfig configures TLS, authentication and authorization. Read
// once by New; the zero value turns everything off.
type SecurityConfig struct {
	// TLS is the broker's certificate, key and trusted CAs (nil: no TLS).
	TLS *tlsutil.Source
	// Tokens verifies JWT tokens: CONNECT with auth method "token", and
	// the admin API's "Authorization: Bearer TOKEN". nil: authentication
	// off (every client is the anonymous role ""). With Tokens set and TLS
	// on, a client may also authenticate with a certificate from the CA
	// (auth method "tls"; the role is its common name, as Pulsar's
	// AuthenticationProviderTls).
	Tokens *authtoken.Verifier
	// Authorization enforces roles' permissions (authz.go); needs Tokens.
	Authorization bool
	// SuperUserRoles may do everything, on every tenant.
	SuperUserRoles []string
	// AuthRefreshCheck: how often each connection's token expiry is
	// checked; a connection whose token expired is sent AUTH_CHALLENGE
	// (clients that announced supports_auth_refresh; others are closed)
	// and closed if it does not answer with a valid token of the same role
	// within another AuthRefreshCheck. Default 60s (Pulsar's
	// authenticationRefreshCheckSeconds); so an expired token is used at
	// most about 2 × AuthRefreshCheck past its expiry.
	AuthRefreshCheck time.Duration
	// GossipKeys, if set, serves the gossip keyring at
	// /admin/v2/meridian/gossip/keys (gossipkeys.go; super-users).
	GossipKeys GossipKeyring
}

func (s SecurityConfig) withDefaults() SecurityConfig {
	if s.AuthRefreshCheck == 0 {
		s.AuthRefreshCheck = 60 * time.Second
	}
	return s
}

// Validate checks the security settings.
func (s SecurityConfig) Validate() error {
	if s.Authorization && s.Tokens == nil {
		return errors.New("broker: authorization needs token authentication (Security.Tokens)")
	}
	if s.AuthRefreshCheck < 0 {
		return errors.New("broker: Security.AuthRefreshCheck must be >= 0")
	}
	return nil
}

// secMetrics count refusals (no log line per occurrence).
type secMetrics struct {
	authFailures *prometheus.CounterVec // by reason
	authRefresh  *prometheus.CounterVec // by result
	denied       *prometheus.CounterVec // by operation
	replRefused  prometheus.Counter
}

func newSecMetrics(cluster string, reg *prometheus.Registry) *secMetrics {
	l := prometheus.Labels{"cluster": cluster}
	m := &secMetrics{
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "meridian", Subsystem: "broker", Name: "auth_failures_total",
			Help: "Refused authentications (protocol and admin API), by reason: missing, expired, invalid, method.", ConstLabels: l}, []string{"reason"}),
		authRefresh: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "meridian", Subsystem: "broker", Name: "auth_refresh_total",
			Help: "Token refreshes of connections (AUTH_CHALLENGE), by result.", ConstLabels: l}, []string{"result"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "meridian", Subsystem: "broker", Name: "authorization_denied_total",
			Help: "Requests refused for want of a permission, by operation.", ConstLabels: l}, []string{"operation"}),
		replRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "meridian", Subsystem: "broker", Name: "replication_streams_refused_total",
			Help: "Incoming replication streams refused because the peer's certificate does not speak for the source region.", ConstLabels: l}),
	}
	for _, r := range []string{"missing", "expired", "invalid", "method"} {
		m.authFailures.WithLabelValues(r)
	}
	reg.MustRegister(m.authFailures, m.authRefresh, m.denied, m.replRefused)
	return m
}

// authFailed counts one refused authentication.
func (b *Broker) authFailed(err error) {
	reason := "invalid"
	switch {
	case errors.Is(err, authtoken.ErrNoToken):
		reason = "missing"
	case errors.Is(err, authtoken.ErrExpired):
		reason = "expired"
	case errors.Is(err, errAuthMethod):
		reason = "method"
	}
	b.sec.authFailures.WithLabelValues(reason).Inc()
}

func (b *Broker) tlsOn() bool { return b.cfg.Security.TLS != nil }

func (b *Broker) authnOn() bool { return b.cfg.Security.Tokens != nil }

func (b *Broker) isSuperUser(role string) bool {
	return slices.Contains(b.cfg.Security.SuperUserRoles, role) || isRegionRole(role)
}

// The role of a Meridian process: a certificate naming region R
// (tlsutil.RegionOf) authenticates as "meridian.region.R", a super-user:
// the deployment's own processes hold the data anyway. Never issue such a
// certificate to a user.
const regionRolePrefix = "meridian.region."

func isRegionRole(role string) bool { return strings.HasPrefix(role, regionRolePrefix) }

// certRole is the role a verified client certificate authenticates as.
func certRole(cs *tls.ConnectionState) (string, bool) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return "", false
	}
	leaf := cs.PeerCertificates[0]
	if r, err := tlsutil.RegionOf(leaf); err == nil {
		return regionRolePrefix + r, true
	}
	if leaf.Subject.CommonName == "" {
		return "", false
	}
	return leaf.Subject.CommonName, true
}

// listen opens the Pulsar listener: TLS when configured.
func (b *Broker) listen() (net.Listener, string, error) {
	lis, err := net.Listen("tcp", b.cfg.ListenAddr)
	if err != nil {
		return nil, "", fmt.Errorf("broker: listen %s: %w", b.cfg.ListenAddr, err)
	}
	if !b.tlsOn() {
		return lis, "pulsar://", nil
	}
	return tls.NewListener(lis, b.cfg.Security.TLS.ServerConfig(tlsutil.VerifyClientCertIfGiven)), "pulsar+ssl://", nil
}

// listenAdmin opens the admin listener: https when TLS is on.
func (b *Broker) listenAdmin(lis net.Listener) (net.Listener, string) {
	if !b.tlsOn() {
		return lis, "http://"
	}
	return tls.NewListener(lis, b.cfg.Security.TLS.ServerConfig(tlsutil.VerifyClientCertIfGiven, "http/1.1")), "https://"
}

// tlsURL is the BrokerServiceUrlTls to send beside a service URL: the URL
// itself when it is a TLS one (with TLS on, every broker's URL is).
func tlsURL(u string) *string {
	if strings.HasPrefix(u, "pulsar+ssl://") {
		return proto.String(u)
	}
	return nil
}

// grpcServerOptions are the replication server's transport options.
func (b *Broker) grpcServerOptions() []grpc.ServerOption {
	if !b.tlsOn() {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(b.cfg.Security.TLS.GRPCServer(tlsutil.RequireClientCert))}
}

// grpcDialOptions are the replication clients' transport options (they
// come after the plaintext default, which they override).
func (b *Broker) grpcDialOptions() []grpc.DialOption {
	if !b.tlsOn() {
		return nil
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(b.cfg.Security.TLS.GRPCClient())}
}

// peerHTTP is the client for other brokers' admin APIs: over TLS it
// presents this broker's certificate (a region role: a super-user).
func (b *Broker) peerHTTP(timeout time.Duration) *http.Client {
	c := &http.Client{Timeout: timeout}
	if b.tlsOn() {
		c.Transport = &http.Transport{TLSClientConfig: b.cfg.Security.TLS.ClientConfig("")}
	}
	return c
}

// handshakeConn dials a broker's Pulsar listener for a reachability
// check: over TLS when its URL is pulsar+ssl://.
func (b *Broker) handshakeConn(u, host string, timeout time.Duration) (net.Conn, error) {
	if strings.HasPrefix(u, "pulsar+ssl://") && b.tlsOn() {
		return b.cfg.Security.TLS.DialTLS(host, timeout)
	}
	return net.DialTimeout("tcp", host, timeout)
}

// replAuthorize admits an incoming replication stream from region source:
// with TLS, the peer's certificate (verified against the CA by the
// handshake) must name that region. (Replicate then checks that the
// namespace replicates between source and this region.)
func (b *Broker) replAuthorize(ctx context.Context, source string) error {
	if !b.tlsOn() {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		b.sec.replRefused.Inc()
		return status.Error(codes.Unauthenticated, "replication: no peer information")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		b.sec.replRefused.Inc()
		return status.Error(codes.Unauthenticated, "replication: the peer presented no certificate")
	}
	region, err := tlsutil.RegionOf(ti.State.PeerCertificates[0])
	if err != nil || region != source {
		b.sec.replRefused.Inc()
		return status.Errorf(codes.PermissionDenied, "replication: the peer's certificate does not speak for region %s (%v; names %q)", source, err, region)
	}
	return nil
}
