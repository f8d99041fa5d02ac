package broker_test

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Security issue test 2 (the rest): a certificate of the deployment's CA
// carrying a region URI is a super-user only when it is a broker's
// (meridian://role/broker) of a registered region. Over a real TLS
// standalone with tokens and authorization on, the cluster-wide GET
// /admin/v2/tenants (super-users only) is refused 401 to a user's
// certificate carrying the region URI, to a bookie's certificate of the
// region, and to a broker's certificate of a region not in the registry;
// a broker's certificate of the region (what brokers present to each
// other) and the standalone's own are served.
func TestRegionCertificateSuperUserNeedsABrokerOfARegisteredRegion(t *testing.T) {
	s := testutil.StartSecureStandalone(t, t.TempDir())
	dir := filepath.Join(s.DataDir, "tls")
	ca, err := tlsutil.LoadCA(s.CAFile, filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	odir := t.TempDir()
	issue := func(name string, leaf tlsutil.Leaf) tlsutil.Files {
		f, err := ca.IssueFiles(odir, name, s.CAFile, leaf)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	get := func(f tlsutil.Files) int {
		src, err := tlsutil.NewSource(f)
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: src.ClientConfig("")}}
		resp, err := c.Get(s.AdminURL + "/admin/v2/tenants")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name string
		f    tlsutil.Files
		want int
	}{
		{"a user's certificate with the region URI", issue("mallory", tlsutil.LocalLeaf("mallory", "standalone")), 401},
		{"a bookie's certificate of the region", issue("a-bookie", tlsutil.LocalLeaf("a-bookie", "standalone", tlsutil.RoleBookie)), 401},
		{"a broker's certificate of an unregistered region", issue("mars-broker", tlsutil.LocalLeaf("mars-broker", "mars", tlsutil.RoleBroker)), 401},
		{"a broker's certificate of the region", issue("a-broker", tlsutil.LocalLeaf("a-broker", "standalone", tlsutil.RoleBroker)), 200},
		{"the standalone's own certificate", tlsutil.Files{CertFile: filepath.Join(dir, "standalone.pem"), KeyFile: filepath.Join(dir, "standalone-key.pem"), CAFile: s.CAFile}, 200},
	} {
		if got := get(c.f); got != c.want {
			t.Errorf("GET /admin/v2/tenants with %s: %d, want %d", c.name, got, c.want)
		}
	}
}
