package tlsutil

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

func newPKI(t *testing.T, dir string) (*CA, string) {
	t.Helper()
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := ca.Write(caFile, filepath.Join(dir, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	return ca, caFile
}

func localLeaf(name, region string) Leaf {
	dns, ips := LocalNames()
	return Leaf{CommonName: name, DNSNames: dns, IPs: ips, Region: region}
}

// echoServer serves TLS with src; every connection echoes lines.
func echoServer(t *testing.T, src *Source, auth ClientAuth) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	tl := tls.NewListener(lis, src.ServerConfig(auth))
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return lis.Addr().String()
}

func roundTrip(t *testing.T, c *tls.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || strings.TrimSpace(got) != msg {
		t.Fatalf("echo: %q %v", got, err)
	}
}

// Issue test 4 at the unit level: replace the files, new connections use
// the new certificate without a restart, existing ones keep working.
func TestRotationWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	ca, caFile := newPKI(t, dir)
	files, err := ca.IssueFiles(dir, "server", caFile, localLeaf("server", ""))
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(files)
	if err != nil {
		t.Fatal(err)
	}
	addr := echoServer(t, src, NoClientCert)
	clientFiles, _ := ca.IssueFiles(dir, "client", caFile, localLeaf("client", ""))
	client, _ := NewSource(clientFiles)

	old, err := client.DialTLS(addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	roundTrip(t, old, "before")
	first := old.ConnectionState().PeerCertificates[0].SerialNumber

	// Rotate: a new certificate (same CA) over the same files.
	if _, err := ca.IssueFiles(dir, "server", caFile, localLeaf("server", "")); err != nil {
		t.Fatal(err)
	}
	nc, err := client.DialTLS(addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	roundTrip(t, nc, "after")
	second := nc.ConnectionState().PeerCertificates[0].SerialNumber
	if second.Cmp(first) == 0 {
		t.Fatal("a new connection still got the old certificate")
	}
	if src.Certificate().SerialNumber.Cmp(second) != 0 {
		t.Fatal("source does not report the served certificate")
	}
	roundTrip(t, old, "old connection still works")

	// A half-written rotation (a key that does not match the certificate)
	// is ignored: the last good certificate is served.
	other, _ := ca.IssueFiles(t.TempDir(), "x", caFile, localLeaf("x", ""))
	copyFile(t, other.KeyFile, files.KeyFile)
	c3, err := client.DialTLS(addr, 5*time.Second)
	if err != nil {
		t.Fatalf("handshake during a half-written rotation: %v", err)
	}
	defer c3.Close()
	if c3.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(second) != 0 {
		t.Fatal("a mismatched key/certificate pair was loaded")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := readAll(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Mutual TLS: a client without a certificate, or with one from another CA,
// is refused; one from the CA is accepted and its region is known.
func TestMutualTLSAndRegion(t *testing.T) {
	dir := t.TempDir()
	ca, caFile := newPKI(t, dir)
	sf, _ := ca.IssueFiles(dir, "server", caFile, localLeaf("server", "east"))
	src, _ := NewSource(sf)
	addr := echoServer(t, src, RequireClientCert)

	good, _ := ca.IssueFiles(dir, "good", caFile, localLeaf("good", "west"))
	gs, _ := NewSource(good)
	c, err := gs.DialTLS(addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, "hello")
	c.Close()
	if r, err := RegionOf(gs.Certificate()); err != nil || r != "west" {
		t.Fatalf("region %q %v", r, err)
	}

	// Another CA's certificate, trusting our CA (so only the server's
	// check stands in the way).
	odir := t.TempDir()
	oca, _ := newPKI(t, odir)
	bad, _ := oca.IssueFiles(odir, "bad", caFile, localLeaf("bad", "west"))
	bs, err := NewSource(bad)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := bs.DialTLS(addr, 5*time.Second); err == nil {
		// TLS 1.3: the client's handshake completes before the server
		// checked its certificate; the refusal arrives on first read.
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte("x\n"))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a certificate from another CA was accepted")
		}
		c.Close()
	}

	// No certificate at all.
	nc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: gs.clientConfig("").RootCAs, ServerName: "127.0.0.1"})
	if err == nil {
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		nc.Write([]byte("x\n"))
		if _, err := nc.Read(make([]byte, 1)); err == nil {
			t.Fatal("a client without a certificate was accepted")
		}
		nc.Close()
	}

	// A server certificate from another CA is refused by our client.
	osrc, _ := NewSource(bad)
	oaddr := echoServer(t, osrc, NoClientCert)
	if _, err := gs.DialTLS(oaddr, 5*time.Second); err == nil {
		t.Fatal("client accepted a server certificate from another CA")
	}
	// And one without the dialled name: "localhost" only, dialled by IP.
	nl, _ := ca.IssueFiles(dir, "nameless", caFile, Leaf{CommonName: "x", DNSNames: []string{"example.invalid"}})
	ns, _ := NewSource(nl)
	naddr := echoServer(t, ns, NoClientCert)
	if _, err := gs.DialTLS(naddr, 5*time.Second); err == nil {
		t.Fatal("client accepted a certificate that does not name the host")
	}
}

func TestRegionOf(t *testing.T) {
	ca, _ := NewCA("x", time.Hour)
	cp, _, _ := ca.Issue(Leaf{CommonName: "n"})
	src := mustCert(t, cp)
	if _, err := RegionOf(src); !errors.Is(err, ErrNoRegion) {
		t.Fatalf("no region: %v", err)
	}
}

func TestFilesValidate(t *testing.T) {
	if err := (Files{CertFile: "a"}).Validate(); err == nil {
		t.Fatal("incomplete files accepted")
	}
	if _, err := NewSource(Files{CertFile: "/nope", KeyFile: "/nope", CAFile: "/nope"}); err == nil {
		t.Fatal("missing files loaded")
	}
}

func readAll(p string) ([]byte, error) { return os.ReadFile(p) }

func mustCert(t *testing.T, chainPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(chainPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A certificate names its roles as URI SANs beside its region; LocalPKI
// issues again a certificate that does not carry the roles (or region)
// asked for — one made before roles existed — and keeps one that does.
func TestRolesAndLocalPKIReissue(t *testing.T) {
	dir := t.TempDir()
	files, err := LocalPKI(dir, map[string]Leaf{"b": LocalLeaf("b", "east")})
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(files["b"])
	if err != nil {
		t.Fatal(err)
	}
	old := src.Certificate()
	if roles := RolesOf(old); len(roles) != 0 || HasRole(old, RoleBroker) {
		t.Fatalf("a certificate issued without roles names %v", roles)
	}
	files, err = LocalPKI(dir, map[string]Leaf{"b": LocalLeaf("b", "east", RoleBroker, RoleAutorecovery)})
	if err != nil {
		t.Fatal(err)
	}
	src, err = NewSource(files["b"])
	if err != nil {
		t.Fatal(err)
	}
	c := src.Certificate()
	if c.SerialNumber.Cmp(old.SerialNumber) == 0 {
		t.Fatal("LocalPKI kept a certificate without the roles asked for")
	}
	if r, err := RegionOf(c); err != nil || r != "east" {
		t.Fatalf("region %q %v", r, err)
	}
	if got := RolesOf(c); len(got) != 2 || got[0] != RoleBroker || got[1] != RoleAutorecovery || !HasRole(c, RoleAutorecovery, RoleBookie) || HasRole(c, RoleBookie) {
		t.Fatalf("roles %v", got)
	}
	// Asked again for the same: kept.
	files, _ = LocalPKI(dir, map[string]Leaf{"b": LocalLeaf("b", "east", RoleBroker, RoleAutorecovery)})
	src, _ = NewSource(files["b"])
	if src.Certificate().SerialNumber.Cmp(c.SerialNumber) != 0 {
		t.Fatal("LocalPKI issued again a certificate that carries what is asked")
	}
}

// RoleError refuses a gRPC caller without a certificate or without one
// of the roles, naming what is wanted, and admits one with a role.
func TestRoleErrorOverGRPCPeer(t *testing.T) {
	ca, _ := newPKI(t, t.TempDir())
	leaf := func(l Leaf) *x509.Certificate {
		p, _, err := ca.Issue(l)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(p)
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctxOf := func(c *x509.Certificate) context.Context {
		st := tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}, VerifiedChains: [][]*x509.Certificate{{c}}}
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}})
	}
	if err := RoleError(context.Background(), "m", RoleBroker); !errors.Is(err, ErrNoPeerCertificate) {
		t.Fatalf("no peer: %v", err)
	}
	if err := RoleError(peer.NewContext(context.Background(), &peer.Peer{}), "m", RoleBroker); !errors.Is(err, ErrNoPeerCertificate) {
		t.Fatalf("a peer without TLS: %v", err)
	}
	err := RoleError(ctxOf(leaf(LocalLeaf("bk", "east", RoleBookie))), "m", RoleBroker, RoleAutorecovery)
	if err == nil || !strings.Contains(err.Error(), "role broker or autorecovery") || !strings.Contains(err.Error(), "meridian://role/broker") || !strings.Contains(err.Error(), "[bookie]") {
		t.Fatalf("a bookie's certificate: %v", err)
	}
	if err := RoleError(ctxOf(leaf(LocalLeaf("br", "east", RoleBroker))), "m", RoleBroker, RoleAutorecovery); err != nil {
		t.Fatalf("a broker's certificate: %v", err)
	}
}
