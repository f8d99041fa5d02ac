// Package tlsutil holds Meridian's TLS material: a process's certificate,
// key and trusted CAs read from PEM files and re-read when the files
// change (rotation without a restart), the tls.Config and gRPC credentials
// built on them, region identities carried in certificates, and a local
// certificate authority for `meridian standalone --tls` and `meridian up
// --tls`.
//
// Rotation: every new handshake of a server config, and of a gRPC client
// or server credential, stats the three files (a few microseconds) and
// re-reads them when a modification time or size changed. A set of files
// that does not load (a certificate written, its key not yet) is ignored:
// the last good one stays in use, and the next handshake tries again.
// Connections already open keep the certificate they were made with.
// (ClientConfig, used for the etcd client, pins the CAs when it is built:
// only its client certificate follows the files.)
//
// Caller's duties:
//  1. NewSource with the files; it fails if they do not load now.
//  2. Build the configs it needs from it: ServerConfig for a TLS listener,
//     GRPCServer/GRPCClient for gRPC, ClientConfig for other clients.
//  3. To rotate, write the new files (best: write elsewhere, then rename
//     over the old ones, the key first).
package tlsutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// ErrNoRegion: a peer's certificate names no region (RegionOf).
var ErrNoRegion = errors.New("tlsutil: certificate names no region")

// Files names a process's TLS material (PEM).
type Files struct {
	// CertFile is the certificate chain presented to peers, leaf first.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the leaf's private key.
	KeyFile string `yaml:"key_file"`
	// CAFile holds the CA certificates peers' certificates must chain to.
	CAFile string `yaml:"ca_file"`
}

// Enabled reports whether any file is set.
func (f Files) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" }

// Validate checks that all three are set.
func (f Files) Validate() error {
	if f.CertFile == "" || f.KeyFile == "" || f.CAFile == "" {
		return errors.New("tlsutil: TLS needs a certificate, its key and a CA file")
	}
	return nil
}

type stamp struct {
	mod  time.Time
	size int64
}

func statOf(p string) (stamp, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return stamp{}, err
	}
	return stamp{fi.ModTime(), fi.Size()}, nil
}

// Source is a process's TLS material, re-read when its files change. Safe
// for concurrent use.
type Source struct {
	files Files

	mu      sync.Mutex
	stamps  [3]stamp
	cert    *tls.Certificate
	pool    *x509.CertPool
	reloads int
}

// NewSource loads the files.
func NewSource(f Files) (*Source, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	s := &Source{files: f}
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// Files returns the files the source reads.
func (s *Source) Files() Files { return s.files }

func (s *Source) stampsNow() ([3]stamp, error) {
	var st [3]stamp
	for i, p := range []string{s.files.CertFile, s.files.KeyFile, s.files.CAFile} {
		v, err := statOf(p)
		if err != nil {
			return st, err
		}
		st[i] = v
	}
	return st, nil
}

// load reads the files; s.mu must be held or s unshared.
func (s *Source) load() error {
	st, err := s.stampsNow()
	if err != nil {
		return fmt.Errorf("tlsutil: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(s.files.CertFile, s.files.KeyFile)
	if err != nil {
		return fmt.Errorf("tlsutil: certificate %s / key %s: %w", s.files.CertFile, s.files.KeyFile, err)
	}
	if cert.Leaf == nil && len(cert.Certificate) > 0 {
		cert.Leaf, _ = x509.ParseCertificate(cert.Certificate[0])
	}
	caPEM, err := os.ReadFile(s.files.CAFile)
	if err != nil {
		return fmt.Errorf("tlsutil: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("tlsutil: no certificate in CA file %s", s.files.CAFile)
	}
	s.cert, s.pool, s.stamps = &cert, pool, st
	s.reloads++
	return nil
}

// current returns the material, re-reading the files if they changed
// since the last good load (a bad set keeps the last good one).
func (s *Source) current() (*tls.Certificate, *x509.CertPool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, err := s.stampsNow(); err == nil && st != s.stamps {
		_ = s.load()
	}
	return s.cert, s.pool
}

// Loads returns how many times the files were (re)loaded successfully.
func (s *Source) Loads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloads
}

// Certificate returns the current leaf certificate.
func (s *Source) Certificate() *x509.Certificate {
	c, _ := s.current()
	return c.Leaf
}

// ClientAuth says what a server asks of its clients' certificates.
type ClientAuth int

const (
	// NoClientCert: clients present none (token-authenticated clients).
	NoClientCert ClientAuth = iota
	// VerifyClientCertIfGiven: a client may present one; if it does, it
	// must chain to the CA (the Pulsar listener: a client certificate
	// is optional there, "tls" authentication uses it).
	VerifyClientCertIfGiven
	// RequireClientCert: mutual TLS, between Meridian's processes.
	RequireClientCert
)

func (a ClientAuth) tls() tls.ClientAuthType {
	switch a {
	case VerifyClientCertIfGiven:
		return tls.VerifyClientCertIfGiven
	case RequireClientCert:
		return tls.RequireAndVerifyClientCert
	}
	return tls.NoClientCert
}

// serverConfig is a fresh server config with the current material.
func (s *Source) serverConfig(auth ClientAuth, nextProtos []string) *tls.Config {
	cert, pool := s.current()
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{*cert},
		ClientCAs:    pool,
		ClientAuth:   auth.tls(),
		NextProtos:   nextProtos,
	}
}

// ServerConfig returns a config for a TLS listener: every handshake uses
// the files as they are then. nextProtos are the ALPN protocols offered
// (none for the Pulsar protocol; "h2", "http/1.1" for HTTPS).
func (s *Source) ServerConfig(auth ClientAuth, nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.serverConfig(auth, nextProtos), nil
		},
	}
}

// clientConfig is a fresh client config with the current material.
func (s *Source) clientConfig(serverName string) *tls.Config {
	cert, pool := s.current()
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      pool,
		ServerName:   serverName,
		Certificates: []tls.Certificate{*cert},
	}
}

// ClientConfig returns a client config: it verifies the server's
// certificate against the CAs as they are now and for serverName ("" =
// the dialled host, as tls.Dial does), and presents the current client
// certificate at every handshake.
func (s *Source) ClientConfig(serverName string) *tls.Config {
	c := s.clientConfig(serverName)
	c.Certificates = nil
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		cert, _ := s.current()
		return cert, nil
	}
	return c
}

// DialTLS dials addr and completes a TLS handshake within timeout, with
// the current material (the server name is addr's host).
func (s *Source) DialTLS(addr string, timeout time.Duration) (*tls.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: timeout}
	return tls.DialWithDialer(d, "tcp", addr, s.clientConfig(host))
}

// grpcCreds are gRPC transport credentials that build a fresh TLS config
// at every handshake, so new connections follow rotated files.
type grpcCreds struct {
	s    *Source
	auth ClientAuth
}

// GRPCServer returns server credentials requiring (auth) client
// certificates from the CA.
func (s *Source) GRPCServer(auth ClientAuth) credentials.TransportCredentials {
	return &grpcCreds{s: s, auth: auth}
}

// GRPCClient returns client credentials: the server's certificate must
// chain to the CA and carry the dialled host (an IP address, or a name).
func (s *Source) GRPCClient() credentials.TransportCredentials { return &grpcCreds{s: s} }

func (g *grpcCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(g.s.clientConfig("")).ClientHandshake(ctx, authority, raw)
}

func (g *grpcCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(g.s.serverConfig(g.auth, nil)).ServerHandshake(raw)
}

func (g *grpcCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}

func (g *grpcCreds) Clone() credentials.TransportCredentials { c := *g; return &c }

func (g *grpcCreds) OverrideServerName(string) error { return nil }

// Region identities: a Meridian process's certificate carries the URI SAN
// meridian://region/NAME, so the other side of a replication stream knows
// which region it talks to (a certificate is issued per region by the
// deployment's CA; IssueCert's Region).
const regionURIScheme, regionURIHost = "meridian", "region"

// RegionURI is the URI SAN naming region.
func RegionURI(region string) *url.URL {
	return &url.URL{Scheme: regionURIScheme, Host: regionURIHost, Path: "/" + region}
}

// RegionOf returns the region a certificate names (ErrNoRegion if none;
// an error if it names two).
func RegionOf(c *x509.Certificate) (string, error) {
	region := ""
	for _, u := range c.URIs {
		if u.Scheme != regionURIScheme || u.Host != regionURIHost {
			continue
		}
		r := strings.TrimPrefix(u.Path, "/")
		if r == "" || strings.Contains(r, "/") {
			return "", fmt.Errorf("tlsutil: malformed region URI %q", u)
		}
		if region != "" && region != r {
			return "", fmt.Errorf("tlsutil: certificate names regions %s and %s", region, r)
		}
		region = r
	}
	if region == "" {
		return "", ErrNoRegion
	}
	return region, nil
}

// Role identities: a Meridian process's certificate carries, beside its
// region, the URI SAN meridian://role/ROLE for each role it plays, so a
// port serves only the roles that need it: a bookie's ledger operations
// take brokers and auto-recovery (not a user's certificate from the same
// CA, which the Pulsar listener's "tls" authentication accepts, nor
// another bookie's), a replication stream only a broker of its source
// region (Leaf's Roles; a certificate may name several, as the
// standalone's, which is every role at once).
const roleURIHost = "role"

// The roles a certificate names.
const (
	// RoleBroker: a broker (ledger writer and reader, replication
	// source and target).
	RoleBroker = "broker"
	// RoleBookie: a bookie.
	RoleBookie = "bookie"
	// RoleAutorecovery: an auto-recovery process (re-replicates ledger
	// fragments: reads and writes bookies).
	RoleAutorecovery = "autorecovery"
	// RoleEtcd: a member of an etcd cluster (a region's, the global
	// store's, the witness).
	RoleEtcd = "etcd"
)

// AllRoles are every role: a process playing them all (the standalone).
var AllRoles = []string{RoleBroker, RoleBookie, RoleAutorecovery, RoleEtcd}

// RoleURI is the URI SAN naming role.
func RoleURI(role string) *url.URL {
	return &url.URL{Scheme: regionURIScheme, Host: roleURIHost, Path: "/" + role}
}

// RolesOf returns the roles a certificate names, in its order (none: a
// certificate of a user or a tool).
func RolesOf(c *x509.Certificate) []string {
	var out []string
	for _, u := range c.URIs {
		if u.Scheme != regionURIScheme || u.Host != roleURIHost {
			continue
		}
		if r := strings.TrimPrefix(u.Path, "/"); r != "" && !strings.Contains(r, "/") {
			out = append(out, r)
		}
	}
	return out
}

// HasRole reports whether a certificate names one of roles.
func HasRole(c *x509.Certificate, roles ...string) bool {
	for _, r := range RolesOf(c) {
		for _, want := range roles {
			if r == want {
				return true
			}
		}
	}
	return false
}

// Errors of PeerCertificate.
var (
	// ErrNoPeerCertificate: the caller presented no verified certificate
	// (a connection without TLS, or no client certificate).
	ErrNoPeerCertificate = errors.New("tlsutil: the caller presented no certificate")
)

// PeerCertificate returns the verified leaf certificate of a gRPC call's
// caller (ErrNoPeerCertificate without one).
func PeerCertificate(ctx context.Context) (*x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, ErrNoPeerCertificate
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.PeerCertificates) == 0 {
		return nil, ErrNoPeerCertificate
	}
	return ti.State.PeerCertificates[0], nil
}

// RoleError says why a caller's certificate may not call method (nil
// when it names one of roles): the message names what is wanted and
// what the certificate carries.
func RoleError(ctx context.Context, method string, roles ...string) error {
	c, err := PeerCertificate(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	if HasRole(c, roles...) {
		return nil
	}
	want := make([]string, len(roles))
	for i, r := range roles {
		want[i] = RoleURI(r).String()
	}
	return fmt.Errorf("%s needs a certificate naming role %s (%s); the caller's (common name %q) names %v",
		method, strings.Join(roles, " or "), strings.Join(want, " or "), c.Subject.CommonName, RolesOf(c))
}
