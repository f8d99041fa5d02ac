package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/broker/security"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/authtoken"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

// Security wiring: flags and config sections → tlsutil sources, token
// verifiers and client options. Secrets (keys, tokens, passwords) come
// from files named by flags; they are never logged.

// SecurityFileConfig is the config file's "security" section, as the
// flags (registerTLS, registerBroker) hold it.
type SecurityFileConfig struct {
	// TLS: this process's certificate, key and trusted CAs (PEM files).
	// With them, every listener of the process is TLS and every link to
	// another Meridian process mutual TLS.
	TLS tlsutil.Files `yaml:"tls"`
	// TokenSecretKey / TokenPublicKey (broker): the key tokens are
	// verified with, as Pulsar's tokenSecretKey / tokenPublicKey
	// ("file:///path", a path, "data:;base64,…"; prefer a file: a flag's
	// value is visible to every user of the machine in ps).
	TokenSecretKey string `yaml:"token_secret_key"`
	TokenPublicKey string `yaml:"token_public_key"`
	// TokenAudience (broker): when set, a token is accepted only if its
	// "aud" claim names it, as Pulsar's tokenAudience (a token minted for
	// another deployment or service with the same key is refused).
	TokenAudience string `yaml:"token_audience"`
	// Authorization (broker): enforce roles' permissions.
	Authorization bool `yaml:"authorization"`
	// SuperUserRoles (broker): roles that may do everything.
	SuperUserRoles []string `yaml:"superuser_roles"`
	// AuthenticateMetricsEndpoint (broker): Pulsar's
	// authenticateMetricsEndpoint; false (default) serves /metrics to
	// anyone.
	AuthenticateMetricsEndpoint bool `yaml:"authenticate_metrics_endpoint"`
	// MetricsRoles (broker): roles granted /metrics besides the
	// super-users (with AuthenticateMetricsEndpoint and Authorization).
	MetricsRoles []string `yaml:"metrics_roles"`
	// AuthRefreshCheck (broker): how often connections' token expiry is
	// checked (0: 60s).
	AuthRefreshCheck time.Duration `yaml:"auth_refresh_check"`
	// AuditLog (broker): the audit trail's file (JSON lines, appended,
	// mode 0600): admin changes and refusals, authentication failures
	// (default: the process's log, with log=audit).
	AuditLog string `yaml:"audit_log"`
	// AuthFailureLimit and AuthFailureWindow (broker): after this many
	// authentication failures from one IP within the window, that IP is
	// refused unchecked until the window ends (0: 100 per 1m; a negative
	// limit: none).
	AuthFailureLimit  int           `yaml:"auth_failure_limit"`
	AuthFailureWindow time.Duration `yaml:"auth_failure_window"`
	// EtcdUser and EtcdPasswordFile authenticate to etcd (regional and
	// global store) with a password; without them, with the TLS
	// certificate's common name when etcd checks client certificates.
	EtcdUser         string `yaml:"etcd_user"`
	EtcdPasswordFile string `yaml:"etcd_password_file"`
}

// securityFlags are the security flags of the server roles.
type securityFlags struct {
	fc SecurityFileConfig
	// broker only
	superUsers, metricsRoles string
}

// registerTLS adds the TLS and etcd-credential flags, keys security.tls.*
// and security.etcd_*.
func (s *securityFlags) registerTLS(cmd *cobra.Command) {
	f := cmd.Flags()
	config.Group(f, "security", func() {
		f.StringVar(&s.fc.TLS.CertFile, "tls-cert-file", "", "PEM certificate (chain) of this process; with --tls-key-file and --tls-trust-certs-file every listener is TLS and every link to another Meridian process mutual TLS (files re-read when they change)")
		f.StringVar(&s.fc.TLS.KeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
		f.StringVar(&s.fc.TLS.CAFile, "tls-trust-certs-file", "", "PEM CA certificates peers must chain to")
		f.StringVar(&s.fc.EtcdUser, "etcd-user", "", "etcd user (etcd authentication; default: the TLS certificate's common name when etcd checks client certificates)")
		f.StringVar(&s.fc.EtcdPasswordFile, "etcd-password-file", "", "file holding the etcd user's password")
	})
	config.Bind(f, "tls-cert-file", "security.tls.cert_file")
	config.Bind(f, "tls-key-file", "security.tls.key_file")
	config.Bind(f, "tls-trust-certs-file", "security.tls.ca_file")
}

// registerBroker adds registerTLS's flags and the broker's
// authentication and authorization flags (keys security.*).
func (s *securityFlags) registerBroker(cmd *cobra.Command) {
	s.registerTLS(cmd)
	f := cmd.Flags()
	config.Group(f, "security", func() {
		f.StringVar(&s.fc.TokenSecretKey, "token-secret-key", "", "verify JWT tokens with this secret key (file:///path, as Pulsar's tokenSecretKey); turns authentication on")
		f.StringVar(&s.fc.TokenPublicKey, "token-public-key", "", "verify JWT tokens with this public key (file:///path, RS256 or ES256, as Pulsar's tokenPublicKey); turns authentication on")
		f.StringVar(&s.fc.TokenAudience, "token-audience", "", "accept only tokens whose aud claim names this audience (as Pulsar's tokenAudience; default: any)")
		f.BoolVar(&s.fc.Authorization, "authorization", false, "enforce roles' permissions (super-users, tenant admins, namespace produce/consume grants); needs a token key")
		f.StringVar(&s.superUsers, "superuser-roles", "", "roles that may do everything, comma-separated")
		f.BoolVar(&s.fc.AuthenticateMetricsEndpoint, "authenticate-metrics-endpoint", false, "the admin port's /metrics asks for a token or a client certificate (401 without), and with --authorization a super-user or a --metrics-roles role (403 otherwise), as Pulsar's authenticateMetricsEndpoint; off (default): open to any scraper; needs a token key")
		f.StringVar(&s.metricsRoles, "metrics-roles", "", "roles granted /metrics besides the super-users (with --authenticate-metrics-endpoint and --authorization), comma-separated")
		f.DurationVar(&s.fc.AuthRefreshCheck, "auth-refresh-check", 0, "how often connections' token expiry is checked (0: 60s); an expired token is challenged, then the connection closed")
		f.StringVar(&s.fc.AuditLog, "audit-log", "", "file for the audit trail (JSON lines, mode 0600): admin changes and refusals, authentication failures (default: the process's log, with log=audit)")
		f.IntVar(&s.fc.AuthFailureLimit, "auth-failure-limit", 0, "authentication failures from one IP within --auth-failure-window after which that IP is refused until the window ends (0: 100; negative: no limit)")
		f.DurationVar(&s.fc.AuthFailureWindow, "auth-failure-window", 0, "the window of --auth-failure-limit (0: 1m)")
	})
}

// authRules check registerBroker's settings.
var authRules = map[string]config.Rule{
	"security.auth_refresh_check":  config.DurationMin(0, "0: 60s"),
	"security.auth_failure_window": config.DurationMin(0, "0: 1m"),
}

// settings are the security settings the flags hold (the file and the
// environment already applied to them: internal/config).
func (s *securityFlags) settings() SecurityFileConfig {
	out := s.fc
	out.SuperUserRoles = splitList(s.superUsers)
	out.MetricsRoles = splitList(s.metricsRoles)
	return out
}

// tlsSource loads the TLS files (nil when none are set).
func (c SecurityFileConfig) tlsSource() (*tlsutil.Source, error) {
	if !c.TLS.Enabled() {
		return nil, nil
	}
	return tlsutil.NewSource(c.TLS)
}

// storeConfig is the etcd client config for endpoints: TLS when they are
// https:// (with this process's certificate), and the etcd user.
func (c SecurityFileConfig) storeConfig(endpoints []string, prefix string, src *tlsutil.Source) (cluster.StoreConfig, error) {
	sc := cluster.StoreConfig{Endpoints: endpoints, Prefix: prefix}
	https := false
	for _, e := range endpoints {
		if strings.HasPrefix(e, "https://") {
			https = true
		}
	}
	if https {
		if src == nil {
			return sc, errors.New("etcd endpoints are https:// but no --tls-cert-file/--tls-key-file/--tls-trust-certs-file")
		}
		sc.TLS = src.ClientConfig("")
	}
	if c.EtcdUser != "" {
		sc.Username = c.EtcdUser
		if c.EtcdPasswordFile != "" {
			b, err := os.ReadFile(c.EtcdPasswordFile)
			if err != nil {
				return sc, fmt.Errorf("--etcd-password-file: %w", err)
			}
			sc.Password = strings.TrimSpace(string(b))
		}
	}
	return sc, nil
}

// connectStore connects to the etcd cluster at endpoints under prefix
// (storeConfig: TLS and the etcd user), waiting at most 30 s for it.
func (c SecurityFileConfig) connectStore(ctx context.Context, endpoints []string, prefix string, src *tlsutil.Source) (*cluster.Store, error) {
	sc, err := c.storeConfig(endpoints, prefix, src)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return cluster.Connect(ctx, sc)
}

// brokerSecurity builds the broker's SecurityConfig.
func (c SecurityFileConfig) brokerSecurity(src *tlsutil.Source) (security.Config, error) {
	sc := security.Config{TLS: src, Authorization: c.Authorization, SuperUserRoles: c.SuperUserRoles, AuthRefreshCheck: c.AuthRefreshCheck,
		AuthenticateMetricsEndpoint: c.AuthenticateMetricsEndpoint, MetricsRoles: c.MetricsRoles,
		AuthFailureLimit: c.AuthFailureLimit, AuthFailureWindow: c.AuthFailureWindow}
	if c.AuditLog != "" {
		f, err := os.OpenFile(c.AuditLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return sc, fmt.Errorf("--audit-log: %w", err)
		}
		sc.Audit = slog.New(slog.NewJSONHandler(f, nil)) // open for the process's life
	}
	if c.TokenSecretKey != "" || c.TokenPublicKey != "" {
		v, err := authtoken.VerifierFromSettings(c.TokenSecretKey, c.TokenPublicKey)
		if err != nil {
			return sc, err
		}
		sc.Tokens = v.WithAudience(c.TokenAudience)
	}
	return sc, nil
}

// clientFlags are the flags of the client commands (admin, produce,
// consume): how to trust a TLS broker and which token to present.
type clientFlags struct {
	token, tokenFile           string
	trustCerts, cert, key      string
	allowInsecure, noHostCheck bool
}

func (c *clientFlags) register(f interface {
	StringVar(*string, string, string, string)
	BoolVar(*bool, string, bool, string)
}) {
	f.StringVar(&c.tokenFile, "token-file", "", "file holding the JWT token to present (default: $MERIDIAN_TOKEN_FILE, or the token in $MERIDIAN_TOKEN)")
	f.StringVar(&c.token, "token", "", "JWT token to present (visible in ps: prefer --token-file)")
	f.StringVar(&c.trustCerts, "tls-trust-certs-file", "", "PEM CA certificates a pulsar+ssl:// or https:// broker must chain to (default: $MERIDIAN_TLS_TRUST_CERTS_FILE)")
	f.StringVar(&c.cert, "tls-cert-file", "", "PEM client certificate to present (TLS authentication)")
	f.StringVar(&c.key, "tls-key-file", "", "PEM key of --tls-cert-file")
	f.BoolVar(&c.noHostCheck, "tls-no-hostname-verification", false, "do not check that the broker's certificate names the first host of --url (Go client's TLSValidateHostname off)")
}

// tokenValue returns the token to present ("" for none).
func (c *clientFlags) tokenValue() (string, error) {
	if c.token != "" {
		return c.token, nil
	}
	file := c.tokenFile
	if file == "" {
		file = os.Getenv("MERIDIAN_TOKEN_FILE")
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("token file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return strings.TrimSpace(os.Getenv("MERIDIAN_TOKEN")), nil
}

func (c *clientFlags) trustFile() string {
	if c.trustCerts != "" {
		return c.trustCerts
	}
	return os.Getenv("MERIDIAN_TLS_TRUST_CERTS_FILE")
}

// pulsarOptions fills a client's TLS and token options.
func (c *clientFlags) pulsarOptions(o *pulsar.ClientOptions) error {
	if strings.HasPrefix(o.URL, "pulsar+ssl://") {
		o.TLSTrustCertsFilePath = c.trustFile()
		o.TLSValidateHostname = !c.noHostCheck
		o.TLSCertificateFile, o.TLSKeyFilePath = c.cert, c.key
	}
	tok, err := c.tokenValue()
	if err != nil {
		return err
	}
	if tok != "" {
		o.Authentication = pulsar.NewAuthenticationToken(tok)
	}
	return nil
}

// httpClient is the admin API client: it trusts the CA file for https://.
func (c *clientFlags) httpClient(timeout time.Duration) (*http.Client, error) {
	hc := &http.Client{Timeout: timeout}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f := c.trustFile(); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--tls-trust-certs-file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--tls-trust-certs-file %s: no PEM certificate", f)
		}
	}
	if c.cert != "" && c.key != "" {
		cert, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	hc.Transport = &http.Transport{TLSClientConfig: tc}
	return hc, nil
}

// authorize adds the token to an admin request.
func (c *clientFlags) authorize(req *http.Request) error {
	tok, err := c.tokenValue()
	if err != nil {
		return err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return nil
}

// ledgerDialOptions make a ledger client's bookie connections mutual TLS.
func ledgerDialOptions(src *tlsutil.Source) []grpc.DialOption {
	if src == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(src.GRPCClient())}
}

// authNeedsTLS refuses token authentication without TLS (issue 30): the
// Pulsar listener and the admin API would check tokens while the
// bookies' gRPC ports (another tenant's entries; ReadLac fencing a live
// ledger), the replication port (namespaces and their regions; writes
// into topics) and etcd (the grants) took callers with no credentials.
// With TLS each of them authenticates its callers by certificate: the
// bookies want a broker's (or auto-recovery's) role, the replication
// port a broker of the stream's source region, etcd a certificate of the
// CA (and the standalone's embedded etcd the standalone's own). So a
// broker or a standalone with a token key starts only with TLS on, and a
// broker only with https:// etcd endpoints (etcd serving mutual TLS).
func authNeedsTLS(eff *config.Effective) error {
	get := func(k string) string { s, _ := eff.Get(k); return s.Value }
	key := "security.token_secret_key"
	if get(key) == "" {
		key = "security.token_public_key"
	}
	if get(key) == "" {
		return nil
	}
	standalone := false
	if _, ok := eff.Get("standalone.tls"); ok {
		standalone = true
		if get("standalone.tls") == "true" {
			return nil
		}
	}
	tlsOn := get("security.tls.cert_file") != "" && get("security.tls.key_file") != "" && get("security.tls.ca_file") != ""
	if !tlsOn {
		set := "--tls-cert-file, --tls-key-file and --tls-trust-certs-file (security.tls.*), with certificates naming the processes' roles (docs/security.md)"
		if standalone {
			set = "--tls (a local CA in DATA-DIR/tls), or " + set
		}
		return eff.Errorf(key, "token authentication is on but TLS is off: the bookies' and the replication service's gRPC ports and etcd would serve callers without credentials; set %s", set)
	}
	if standalone {
		return nil
	}
	for _, k := range []string{"metadata.endpoints", "metadata.global"} {
		for _, u := range splitList(get(k)) {
			if _, url, named := strings.Cut(u, "="); named {
				u = url
			}
			if !strings.HasPrefix(u, "https://") {
				return eff.Errorf(k, "token authentication is on but etcd endpoint %s is not https://: etcd would serve the grants and the ledgers' metadata to callers without credentials; run etcd with mutual TLS (meridian etcd --tls-cert-file ...) and give https:// endpoints", u)
			}
		}
	}
	return nil
}

// ownRoles checks, at start, that this process's certificate names the
// role the ports it calls want (tlsutil.RolesOf): otherwise every bookie
// (and other regions' brokers) would refuse it, call after call.
func ownRoles(src *tlsutil.Source, what string, roles ...string) error {
	if src == nil {
		return nil
	}
	c := src.Certificate()
	if tlsutil.HasRole(c, roles...) {
		return nil
	}
	return fmt.Errorf("%s: the certificate of --tls-cert-file (common name %q) names no role %s (the URI SAN %s): bookies refuse its ledger operations; issue it with that URI (docs/security.md)",
		what, c.Subject.CommonName, strings.Join(roles, " or "), tlsutil.RoleURI(roles[0]))
}

// clientAuthCheck refuses, at start, a bookie's or an etcd member's
// configuration asking for client authentication the process could not
// enforce (issue 30), naming the key to set: the TLS files under
// tlsPrefix (cert_file, key_file, ca_file) set in part — without the CA
// no caller's certificate can be checked, without the certificate or its
// key nothing is served over TLS —; requireKey true with TLS off; or TLS
// on with an http:// URL among urlKeys, which etcd serves in plaintext,
// ignoring the certificate (with only a warning in its log).
func clientAuthCheck(eff *config.Effective, requireKey, tlsPrefix string, urlKeys ...string) error {
	get := func(k string) string { s, _ := eff.Get(k); return s.Value }
	keys := []string{tlsPrefix + ".cert_file", tlsPrefix + ".key_file", tlsPrefix + ".ca_file"}
	var set, missing []string
	for _, k := range keys {
		if get(k) != "" {
			set = append(set, k)
		} else {
			missing = append(missing, k)
		}
	}
	switch {
	case len(set) > 0 && len(missing) > 0:
		return eff.Errorf(missing[0], "TLS is half set (%s without %s): it needs this process's certificate, its key and the CA callers' certificates are checked against — without the CA no caller can be authenticated; set %s (--tls-cert-file, --tls-key-file, --tls-trust-certs-file)",
			strings.Join(set, ", "), strings.Join(missing, ", "), strings.Join(missing, ", "))
	case len(set) == 0 && get(requireKey) == "true":
		return eff.Errorf(requireKey, "client authentication is required but TLS is off, so any caller would be served: set %s (--tls-cert-file, --tls-key-file, --tls-trust-certs-file)", strings.Join(keys, ", "))
	case len(set) == len(keys):
		for _, k := range urlKeys {
			if u := get(k); !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "unixs://") {
				return eff.Errorf(k, "TLS is on but %s is not https://: etcd would serve it in plaintext, ignoring the certificate; give an https:// URL", u)
			}
		}
	}
	return nil
}
