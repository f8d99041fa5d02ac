package tlsutil

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"slices"
	"testing"
)

// HostLeaf (meridian admin tls create-cert, deploy/compose/init.sh): each
// --host becomes a DNS name or an IP SAN, comma-separated lists too, the
// region a URI SAN, each role a role URI; a host that is neither is
// refused by name, and so is a role Meridian has not.
func TestHostLeafNamesEveryHost(t *testing.T) {
	l, err := HostLeaf("east-broker-1", "east", []string{"east-broker-1,localhost", " 127.0.0.1", "::1", "*.east.example.com"}, RoleBroker)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := LocalPKI(dir, map[string]Leaf{"east-broker-1": l})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(files["east-broker-1"].CertFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"east-broker-1", "localhost", "*.east.example.com"}; !slices.Equal(c.DNSNames, want) {
		t.Errorf("DNS names %v, want %v", c.DNSNames, want)
	}
	if len(c.IPAddresses) != 2 || c.IPAddresses[0].String() != "127.0.0.1" || c.IPAddresses[1].String() != "::1" {
		t.Errorf("IPs %v, want 127.0.0.1 ::1", c.IPAddresses)
	}
	if r, err := RegionOf(c); err != nil || r != "east" {
		t.Errorf("region %q %v, want east", r, err)
	}
	if got := RolesOf(c); !slices.Equal(got, []string{RoleBroker}) {
		t.Errorf("roles %v, want [broker]", got)
	}
	if _, err := HostLeaf("x", "", []string{"x"}, "superuser"); err == nil {
		t.Error("role \"superuser\" accepted")
	}
	for _, bad := range []string{"bad_name", "-x.example.com", "a..b"} {
		if _, err := HostLeaf("x", "", []string{bad}); err == nil {
			t.Errorf("host %q accepted", bad)
		}
	}
}
