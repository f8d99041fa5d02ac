package security

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/authtoken"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Security: TLS on every listener and link, token authentication (auth.go)
// and role-based authorization (authz.go). Everything is off in the zero
// Config: plaintext, anyone may do anything, as before.
//
// With TLS on (SecurityConfig.TLS):
//   - the Pulsar listener (Config.ListenAddr) speaks TLS only, and the
//     broker's service URL — in lookups, ownership records and redirects —
//     is pulsar+ssl://ADVERTISED (both BrokerServiceUrl and
//     BrokerServiceUrlTls carry it);
//   - the admin API is https;
//   - the replication gRPC service requires client certificates from the
//     CA and accepts a stream only from a broker's certificate
//     (tlsutil.RoleBroker) naming a region (tlsutil.RegionOf) that is the
//     stream's source region (ReplAuthorize); this broker's replication
//     clients present its certificate;
//   - the certificate files are re-read when they change (tlsutil).

// Config configures TLS, authentication and authorization. Read once by
// New; the zero value turns everything off.
type Config struct {
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
	// AuthenticateMetricsEndpoint is Pulsar's authenticateMetricsEndpoint:
	// false (the default, as Pulsar's) serves the admin port's /metrics
	// to anyone, so a Prometheus scrapes it without credentials even
	// with authentication on; true asks a scrape for credentials (a token,
	// or a client certificate of the CA) — 401 without valid ones — and,
	// with Authorization on, for a super-user or one of MetricsRoles —
	// 403 for any other role. Needs Tokens (authentication on).
	AuthenticateMetricsEndpoint bool
	// MetricsRoles are granted /metrics (AuthenticateMetricsEndpoint on,
	// Authorization on) besides the super-users: a scraper's role that
	// may do nothing else.
	MetricsRoles []string
	// AuthRefreshCheck: how often each connection's token expiry is
	// checked; a connection whose token expired is sent AUTH_CHALLENGE
	// (clients that announced supports_auth_refresh; others are closed)
	// and closed if it does not answer with a valid token of the same role
	// within another AuthRefreshCheck. Default 60s (Pulsar's
	// authenticationRefreshCheckSeconds); so an expired token is used at
	// most about 2 × AuthRefreshCheck past its expiry.
	AuthRefreshCheck time.Duration
	// Audit receives the audit trail (audit.go): admin changes and
	// refusals, authentication failures. Default: slog.Default() with
	// log=audit.
	Audit *slog.Logger
	// AuthFailureLimit: after this many authentication failures from one
	// IP within AuthFailureWindow, that IP's attempts are refused
	// unchecked until the window ends (audit.go). 0: 100; < 0: no limit.
	AuthFailureLimit int
	// AuthFailureWindow is the limit's window. 0: 1m.
	AuthFailureWindow time.Duration
	// GossipKeys, if set, serves the gossip keyring at
	// /admin/v2/meridian/gossip/keys (the admin API; super-users).
	GossipKeys GossipKeyring
}

// WithDefaults fills in the defaults.
func (s Config) WithDefaults() Config {
	if s.AuthRefreshCheck == 0 {
		s.AuthRefreshCheck = 60 * time.Second
	}
	if s.Audit == nil {
		s.Audit = slog.Default().With("log", "audit")
	}
	if s.AuthFailureLimit == 0 {
		s.AuthFailureLimit = DefaultAuthFailureLimit
	}
	if s.AuthFailureWindow == 0 {
		s.AuthFailureWindow = DefaultAuthFailureWindow
	}
	return s
}

// Validate checks the security settings.
func (s Config) Validate() error {
	if s.Authorization && s.Tokens == nil {
		return errors.New("broker: authorization needs token authentication (Security.Tokens)")
	}
	if s.AuthenticateMetricsEndpoint && s.Tokens == nil {
		return errors.New("broker: authenticating the metrics endpoint needs token authentication (Security.Tokens: a token key): without it no scrape could authenticate")
	}
	if len(s.MetricsRoles) > 0 && (!s.AuthenticateMetricsEndpoint || !s.Authorization) {
		return errors.New("broker: metrics roles are granted only with the metrics endpoint authenticated and authorization on (Security.AuthenticateMetricsEndpoint, Security.Authorization)")
	}
	if s.AuthRefreshCheck < 0 {
		return errors.New("broker: Security.AuthRefreshCheck must be >= 0")
	}
	if s.AuthFailureWindow < 0 {
		return errors.New("broker: Security.AuthFailureWindow must be >= 0")
	}
	return nil
}

// metrics count refusals (no log line per occurrence).
type metrics struct {
	authFailures *prometheus.CounterVec // by reason
	authRefresh  *prometheus.CounterVec // by result
	denied       *prometheus.CounterVec // by operation
	replRefused  prometheus.Counter
}

func newMetrics(cluster string, reg prometheus.Registerer) *metrics {
	l := prometheus.Labels{"cluster": cluster}
	m := &metrics{
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

// Metadata is what the guard reads of the global store: tenants' admin
// roles and namespaces' permissions (meta.Metadata). Safe for concurrent
// use.
type Metadata interface {
	GetTenant(ctx context.Context, name string) (meta.TenantInfo, error)
	GetPolicies(ctx context.Context, ns string) (meta.Policies, error)
	// ListRegions lists the regions registered in the global store (a
	// region certificate speaks only for one of them).
	ListRegions(ctx context.Context) ([]string, error)
}

// Guard answers every security question of the broker: listeners and
// links (TLS), who a connection or an admin request is (authentication)
// and what it may do (authorization). Safe for concurrent use; immutable
// after New.
type Guard struct {
	cfg     Config
	meta    Metadata
	sec     *metrics
	limiter *failureLimiter
	// regions remembers the regions found registered (a region is never
	// unregistered), so a region certificate costs one registry read per
	// region, not one per authentication.
	regions sync.Map // region name → struct{}
}

// New returns the guard of cfg (with defaults filled in), reading
// permissions from md and registering its counters on reg with the
// region's name as the cluster label.
func New(cfg Config, md Metadata, cluster string, reg prometheus.Registerer) *Guard {
	cfg = cfg.WithDefaults()
	return &Guard{cfg: cfg, meta: md, sec: newMetrics(cluster, reg),
		limiter: &failureLimiter{limit: cfg.AuthFailureLimit, window: cfg.AuthFailureWindow}}
}

// TLSOn reports whether TLS is on.
func (g *Guard) TLSOn() bool { return g.cfg.TLS != nil }

// AuthnOn reports whether authentication is on.
func (g *Guard) AuthnOn() bool { return g.cfg.Tokens != nil }

func (g *Guard) isSuperUser(role string) bool {
	return slices.Contains(g.cfg.SuperUserRoles, role) || isRegionRole(role)
}

// The role of a Meridian process: a broker's certificate — one naming the
// role broker (tlsutil.RoleBroker) and region R in its region URI
// (tlsutil.RegionOf), R a region of the registry — authenticates as
// "meridian.region.R", a super-user: brokers call each other's admin API
// (a planned switchover's hold and release, partitioned stats, the
// region's replication status) with it. Never issue such a certificate to
// a user.
//
// Nothing else makes that role. The prefix is reserved: a token whose
// subject, or a certificate whose common name, starts with it is refused
// (errReservedRole), so no name an operator mints for a user can make a
// super-user; a certificate with a region URI and no broker role (a
// bookie's, an etcd member's, a user's certificate wrongly given one) is
// refused (errRegionNotBroker), and so is one naming a region the
// registry does not hold (errRegionUnknown): a region identity comes only
// from a broker's certificate of the deployment's CA for one of its
// regions.
const regionRolePrefix = "meridian.region."

func isRegionRole(role string) bool { return strings.HasPrefix(role, regionRolePrefix) }

// errReservedRole: a role that names a region, from anything but a
// region certificate.
var errReservedRole = errors.New("the role prefix " + regionRolePrefix + " is reserved for the deployment's own region certificates")

// errRegionNotBroker: a certificate with a region URI that does not name
// the role broker.
var errRegionNotBroker = errors.New("a certificate with a region URI authenticates here only as a broker's (URI " + tlsutil.RoleURI(tlsutil.RoleBroker).String() + ")")

// errRegionUnknown: a broker's certificate of a region the registry does
// not hold.
var errRegionUnknown = errors.New("the certificate's region is not registered")

// errNoCertificate: no verified client certificate from the CA.
var errNoCertificate = errors.New("no client certificate from the CA")

// certRole is the role a verified client certificate authenticates as:
// its region role when it carries a region URI and the role broker (the
// region, for the registry check: regionRole), else its common name.
// errRegionNotBroker for a region URI without the broker role;
// errReservedRole for a common name that is a region role's.
func certRole(cs *tls.ConnectionState) (role, region string, err error) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return "", "", errNoCertificate
	}
	leaf := cs.PeerCertificates[0]
	r, rerr := tlsutil.RegionOf(leaf)
	switch {
	case rerr == nil && tlsutil.HasRole(leaf, tlsutil.RoleBroker):
		return regionRolePrefix + r, r, nil
	case rerr == nil:
		return "", "", fmt.Errorf("certificate %q names region %s and roles %v: %w", leaf.Subject.CommonName, r, tlsutil.RolesOf(leaf), errRegionNotBroker)
	case !errors.Is(rerr, tlsutil.ErrNoRegion):
		return "", "", fmt.Errorf("certificate %q: %w: %w", leaf.Subject.CommonName, rerr, errReservedRole)
	}
	switch cn := leaf.Subject.CommonName; {
	case cn == "":
		return "", "", errNoCertificate
	case isRegionRole(cn):
		return "", "", fmt.Errorf("certificate common name %q: %w", cn, errReservedRole)
	default:
		return cn, "", nil
	}
}

// certRole authenticates a verified client certificate (certRole), a
// region role only for a region of the registry. An error wraps
// meta.ErrAuthentication.
func (g *Guard) certRole(cs *tls.ConnectionState) (string, error) {
	role, region, err := certRole(cs)
	if err != nil {
		return "", fmt.Errorf("%w: %w", meta.ErrAuthentication, err)
	}
	if region == "" {
		return role, nil
	}
	if _, ok := g.regions.Load(region); ok {
		return role, nil
	}
	if g.meta == nil {
		return "", fmt.Errorf("%w: region %s: %w (no registry to check)", meta.ErrAuthentication, region, errRegionUnknown)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	known, err := g.meta.ListRegions(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: region %s: the registry cannot be read: %v", meta.ErrServiceNotReady, region, err)
	}
	if !slices.Contains(known, region) {
		return "", fmt.Errorf("%w: region %s: %w (registered: %s)", meta.ErrAuthentication, region, errRegionUnknown, strings.Join(known, ", "))
	}
	g.regions.Store(region, struct{}{})
	return role, nil
}

// tokenRole checks a verified token's role: a region role is refused.
func tokenRole(cl authtoken.Claims) error {
	if isRegionRole(cl.Role) {
		return fmt.Errorf("%w: token subject %q: %w", meta.ErrAuthentication, cl.Role, errReservedRole)
	}
	return nil
}

// Listen opens the Pulsar listener on addr: TLS when configured. The
// scheme is the service URL's: pulsar:// or pulsar+ssl://.
func (g *Guard) Listen(addr string) (lis net.Listener, scheme string, err error) {
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("broker: listen %s: %w", addr, err)
	}
	if !g.TLSOn() {
		return lis, "pulsar://", nil
	}
	return tls.NewListener(lis, g.cfg.TLS.ServerConfig(tlsutil.VerifyClientCertIfGiven)), "pulsar+ssl://", nil
}

// ListenAdmin wraps the admin listener: https when TLS is on. The scheme
// is the admin URL's: http:// or https://.
func (g *Guard) ListenAdmin(lis net.Listener) (net.Listener, string) {
	if !g.TLSOn() {
		return lis, "http://"
	}
	return tls.NewListener(lis, g.cfg.TLS.ServerConfig(tlsutil.VerifyClientCertIfGiven, "http/1.1")), "https://"
}

// TLSURL is the BrokerServiceUrlTls to send beside a service URL: the URL
// itself when it is a TLS one (with TLS on, every broker's URL is).
func TLSURL(u string) *string {
	if strings.HasPrefix(u, "pulsar+ssl://") {
		return proto.String(u)
	}
	return nil
}

// GRPCServerOptions are the replication server's transport options.
func (g *Guard) GRPCServerOptions() []grpc.ServerOption {
	if !g.TLSOn() {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(g.cfg.TLS.GRPCServer(tlsutil.RequireClientCert))}
}

// GRPCDialOptions are the replication clients' transport options (they
// come after the plaintext default, which they override).
func (g *Guard) GRPCDialOptions() []grpc.DialOption {
	if !g.TLSOn() {
		return nil
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(g.cfg.TLS.GRPCClient())}
}

// PeerHTTP is the client for other brokers' admin APIs: over TLS it
// presents this broker's certificate (a region role: a super-user).
func (g *Guard) PeerHTTP(timeout time.Duration) *http.Client {
	c := &http.Client{Timeout: timeout}
	if g.TLSOn() {
		c.Transport = &http.Transport{TLSClientConfig: g.cfg.TLS.ClientConfig("")}
	}
	return c
}

// HandshakeConn dials a broker's Pulsar listener for a reachability
// check: over TLS when its URL is pulsar+ssl://.
func (g *Guard) HandshakeConn(u, host string, timeout time.Duration) (net.Conn, error) {
	if strings.HasPrefix(u, "pulsar+ssl://") && g.TLSOn() {
		return g.cfg.TLS.DialTLS(host, timeout)
	}
	return net.DialTimeout("tcp", host, timeout)
}

// ReplAuthorize admits an incoming replication stream (or Verify call)
// from region source: with TLS, the peer's certificate (verified against
// the CA by the handshake) must name the role broker
// (tlsutil.RoleBroker: not a bookie's or an etcd member's certificate of
// that region) and that region. (Replicate then checks that the
// namespace replicates between source and this region.) Without TLS
// every caller is admitted: a broker with authentication on refuses to
// start without TLS (cmd/meridian).
func (g *Guard) ReplAuthorize(ctx context.Context, source string) error {
	if !g.TLSOn() {
		return nil
	}
	cert, err := tlsutil.PeerCertificate(ctx)
	if err != nil {
		g.sec.replRefused.Inc()
		return status.Error(codes.Unauthenticated, "replication: the peer presented no certificate")
	}
	region, err := tlsutil.RegionOf(cert)
	if err != nil || region != source {
		g.sec.replRefused.Inc()
		return status.Errorf(codes.PermissionDenied, "replication: the peer's certificate does not speak for region %s (%v; names %q)", source, err, region)
	}
	if err := tlsutil.RoleError(ctx, "replication from region "+source, tlsutil.RoleBroker); err != nil {
		g.sec.replRefused.Inc()
		return status.Error(codes.PermissionDenied, "replication: "+err.Error())
	}
	return nil
}

// GossipKeyring rotates the gossip encryption keys of every member
// (cluster.Membership: serf's KeyManager, which asks every member and
// fails unless all of them did it). Rotation: install the new key, use
// it, remove the old one, each step done everywhere before the next.
type GossipKeyring interface {
	InstallKey(key []byte) error
	UseKey(key []byte) error
	RemoveKey(key []byte) error
	ListKeys() (cluster.KeyringStatus, error)
}
