package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/authtoken"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/prometheus/client_golang/prometheus"
)

// No name makes a super-user (issue "Security hardening", item 2): a
// token whose subject is a region role, or a certificate from the CA whose
// common name is one and which carries no region URI, is refused — on the
// protocol and on the admin API. Only a certificate's region URI makes the
// region role.
func TestRegionRoleComesOnlyFromARegionCertificate(t *testing.T) {
	key, v := testVerifier(t)
	g := New(Config{Tokens: v, Authorization: true}, nil, "test", prometheus.NewRegistry())
	forged, err := authtoken.CreateWithSecret(key, "meridian.region.east", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	var a ConnAuth
	if _, err := g.Authenticate(&a, c1, "token", []byte(forged), false); !errors.Is(err, meta.ErrAuthentication) || !errors.Is(err, errReservedRole) {
		t.Fatalf("CONNECT with a token whose subject is a region role: %v, want refused as reserved", err)
	}
	if a.Role() != "" {
		t.Fatalf("the refused connection has role %q", a.Role())
	}
	r := httptest.NewRequest("GET", "/admin/v2/tenants", nil)
	r.Header.Set("Authorization", "Bearer "+forged)
	if _, err := g.AuthorizeAdmin(r, "GET /admin/v2/tenants"); !errors.Is(err, meta.ErrAuthentication) || !errors.Is(err, errReservedRole) {
		t.Fatalf("admin request with that token: %v, want refused as reserved", err)
	}

	// A certificate whose common name is a region role and which has no
	// region URI.
	cn := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "meridian.region.east"}}}}
	cn.VerifiedChains = [][]*x509.Certificate{cn.PeerCertificates}
	if role, _, err := certRole(cn); !errors.Is(err, errReservedRole) {
		t.Fatalf("certificate named meridian.region.east without a region URI: role %q, %v; want refused as reserved", role, err)
	}
	r = httptest.NewRequest("GET", "/admin/v2/tenants", nil)
	r.TLS = cn
	if _, err := g.AuthorizeAdmin(r, "GET /admin/v2/tenants"); !errors.Is(err, meta.ErrAuthentication) {
		t.Fatalf("admin request with that certificate: %v, want an authentication error", err)
	}

	// A broker's certificate the deployment issued to region east (its
	// region URI and the role broker), east in the registry: the region's
	// super-user role.
	g = New(Config{Tokens: v, Authorization: true}, regionsOnly{"east"}, "test", prometheus.NewRegistry())
	ca, err := tlsutil.NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(leaf tlsutil.Leaf) *tls.ConnectionState {
		certPEM, _, err := ca.Issue(leaf)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(certPEM)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}, VerifiedChains: [][]*x509.Certificate{{c}}}
	}
	region := issue(tlsutil.LocalLeaf("east-broker-1", "east", tlsutil.RoleBroker))
	if role, err := g.certRole(region); err != nil || role != "meridian.region.east" || !g.isSuperUser(role) {
		t.Fatalf("a broker's certificate of east: role %q, %v; want the super-user meridian.region.east", role, err)
	}
	// The same region without the role broker (a bookie's, a user's
	// certificate carrying a region URI): refused, not a super-user, not
	// its common name either.
	for _, leaf := range []tlsutil.Leaf{tlsutil.LocalLeaf("east-bookie-1", "east", tlsutil.RoleBookie), tlsutil.LocalLeaf("mallory", "east")} {
		if role, err := g.certRole(issue(leaf)); !errors.Is(err, errRegionNotBroker) || !errors.Is(err, meta.ErrAuthentication) {
			t.Fatalf("certificate %s of region east with roles %v: role %q, %v; want refused (not a broker's)", leaf.CommonName, leaf.Roles, role, err)
		}
	}
	// A broker's certificate of a region the registry does not hold.
	if role, err := g.certRole(issue(tlsutil.LocalLeaf("mars-broker-1", "mars", tlsutil.RoleBroker))); !errors.Is(err, errRegionUnknown) {
		t.Fatalf("a broker's certificate of the unregistered region mars: role %q, %v; want refused", role, err)
	}
	// An ordinary user's name still works.
	user, err := authtoken.CreateWithSecret(key, "alice", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Authenticate(&a, c1, "token", []byte(user), false); err != nil || a.Role() != "alice" {
		t.Fatalf("alice's token: %v, role %q", err, a.Role())
	}
}

// regionsOnly is a registry holding these regions (and nothing else).
type regionsOnly []string

func (r regionsOnly) GetTenant(context.Context, string) (meta.TenantInfo, error) {
	return meta.TenantInfo{}, meta.ErrNotFound
}
func (r regionsOnly) GetPolicies(context.Context, string) (meta.Policies, error) {
	return meta.Policies{}, meta.ErrNotFound
}
func (r regionsOnly) ListRegions(context.Context) ([]string, error) { return r, nil }
