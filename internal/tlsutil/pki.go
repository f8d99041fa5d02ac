package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A local certificate authority, made with Go's crypto only: ECDSA P-256
// keys, certificates valid for both server and client authentication (a
// Meridian process is both). For `meridian standalone --tls` and `meridian
// up --tls`; a production deployment brings certificates from its own CA.

// CA is a certificate authority able to issue certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
}

// NewCA makes a self-signed CA valid for validity.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"Meridian"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadCA reads a CA written by CA.Write.
func LoadCA(certFile, keyFile string) (*CA, error) {
	cp, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	kp, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(cp)
	kb, _ := pem.Decode(kp)
	if cb == nil || kb == nil {
		return nil, errors.New("tlsutil: CA files are not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: cp}, nil
}

// Write writes the CA's certificate (0644) and key (0600).
func (ca *CA) Write(certFile, keyFile string) error {
	kder, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return err
	}
	if err := writeFile(certFile, ca.CertPEM, 0o644); err != nil {
		return err
	}
	return writeFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}

// Leaf describes a certificate to issue.
type Leaf struct {
	// CommonName of the subject (a process or client name).
	CommonName string
	// DNSNames and IPs: the names a client may dial the holder by.
	DNSNames []string
	IPs      []net.IP
	// Region, if set, adds the URI SAN meridian://region/REGION
	// (RegionOf): the holder speaks for that region on replication links.
	Region string
	// Roles add the URI SANs meridian://role/ROLE (RolesOf): the ports
	// the holder may use (a bookie's ledger operations want RoleBroker or
	// RoleAutorecovery, a replication stream RoleBroker). None: a user's
	// or a tool's certificate.
	Roles []string
	// Validity: how long from now. Default one year.
	Validity time.Duration
}

// Issue signs a certificate for l: it returns the certificate chain (leaf,
// then the CA) and the leaf's key, both PEM.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if l.Validity == 0 {
		l.Validity = 365 * 24 * time.Hour
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.CommonName, Organization: []string{"Meridian"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(l.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
	}
	if l.Region != "" {
		tmpl.URIs = []*url.URL{RegionURI(l.Region)}
	}
	for _, r := range l.Roles {
		tmpl.URIs = append(tmpl.URIs, RoleURI(r))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	certPEM = append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), ca.CertPEM...)
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// IssueFiles issues a certificate for l and writes it and its key (0600)
// into dir as NAME.pem and NAME-key.pem; it returns the files with the
// CA file caFile.
func (ca *CA) IssueFiles(dir, name, caFile string, l Leaf) (Files, error) {
	c, k, err := ca.Issue(l)
	if err != nil {
		return Files{}, err
	}
	f := Files{CertFile: filepath.Join(dir, name+".pem"), KeyFile: filepath.Join(dir, name+"-key.pem"), CAFile: caFile}
	// The key first: a reloading reader that sees the new certificate
	// finds its key already there.
	if err := writeFile(f.KeyFile, k, 0o600); err != nil {
		return Files{}, err
	}
	if err := writeFile(f.CertFile, c, 0o644); err != nil {
		return Files{}, err
	}
	return f, nil
}

// LocalNames are the names every certificate of a deployment on this
// machine carries: clients dial 127.0.0.1 or localhost, and the Go client
// checks every broker against the first host of its service URL.
func LocalNames() ([]string, []net.IP) {
	dns := []string{"localhost"}
	if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
		dns = append(dns, h)
	}
	return dns, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
}

// writeFile writes b to p through a temporary file and a rename, so a
// reader never sees half a file.
func writeFile(p string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("tlsutil: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("tlsutil: random serial: %v", err))
	}
	return n.Add(n, big.NewInt(1))
}

// LocalPKI makes (or, when its files are there, reuses) a CA in dir and a
// certificate per name of leaves, for a deployment on this machine:
// dir/ca.pem, dir/ca-key.pem (0600), dir/NAME.pem, dir/NAME-key.pem
// (0600). It returns each name's files.
func LocalPKI(dir string, leaves map[string]Leaf) (map[string]Files, error) {
	caFile, caKey := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	ca, err := LoadCA(caFile, caKey)
	fresh := err != nil
	if fresh {
		if ca, err = NewCA("Meridian local CA", 10*365*24*time.Hour); err != nil {
			return nil, err
		}
		if err := ca.Write(caFile, caKey); err != nil {
			return nil, err
		}
	}
	out := map[string]Files{}
	for name, l := range leaves {
		f := Files{CertFile: filepath.Join(dir, name+".pem"), KeyFile: filepath.Join(dir, name+"-key.pem"), CAFile: caFile}
		if src, err := NewSource(f); err == nil && !fresh && matches(src.Certificate(), l) {
			out[name] = f
			continue
		}
		if f, err = ca.IssueFiles(dir, name, caFile, l); err != nil {
			return nil, err
		}
		out[name] = f
	}
	return out, nil
}

// matches reports whether an issued certificate carries what l asks for:
// its common name, region and roles (a certificate made before roles
// existed is issued again).
func matches(c *x509.Certificate, l Leaf) bool {
	if c == nil || c.Subject.CommonName != l.CommonName {
		return false
	}
	region, _ := RegionOf(c)
	return region == l.Region && slices.Equal(RolesOf(c), l.Roles)
}

// LocalLeaf is a leaf for a process of a deployment on this machine: its
// name, the local names (LocalNames), its region and its roles.
func LocalLeaf(name, region string, roles ...string) Leaf {
	dns, ips := LocalNames()
	return Leaf{CommonName: name, DNSNames: dns, IPs: ips, Region: region, Roles: roles}
}

// HostLeaf is a leaf for a process on another host or in a container: its
// name, the DNS names and IP addresses of hosts (each may be a
// comma-separated list), its region ("" for none) and its roles (none for
// a user's or a tool's certificate).
func HostLeaf(name, region string, hosts []string, roles ...string) (Leaf, error) {
	for _, r := range roles {
		if !slices.Contains(AllRoles, r) {
			return Leaf{}, fmt.Errorf("tlsutil: role %q: want one of %s", r, strings.Join(AllRoles, ", "))
		}
	}
	l := Leaf{CommonName: name, Region: region, Roles: roles}
	for _, h := range hosts {
		for _, s := range strings.Split(h, ",") {
			s = strings.TrimSpace(s)
			switch {
			case s == "":
			case net.ParseIP(s) != nil:
				l.IPs = append(l.IPs, net.ParseIP(s))
			case validDNSName(s):
				l.DNSNames = append(l.DNSNames, s)
			default:
				return Leaf{}, fmt.Errorf("tlsutil: host %q is neither an IP address nor a DNS name", s)
			}
		}
	}
	return l, nil
}

// validDNSName: labels of letters, digits and '-' (a leading "*." for a
// wildcard), each 1-63 long, not starting or ending with '-'.
func validDNSName(s string) bool {
	s = strings.TrimPrefix(s, "*.")
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, lab := range strings.Split(s, ".") {
		if len(lab) == 0 || len(lab) > 63 || lab[0] == '-' || lab[len(lab)-1] == '-' {
			return false
		}
		for _, c := range lab {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
