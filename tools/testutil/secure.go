package testutil

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/internal/authtoken"
)

// SecureStandalone is `meridian standalone --tls` with token
// authentication and authorization on: a secret key made for the test,
// super-user role "admin".
type SecureStandalone struct {
	*Proc
	URL      string // pulsar+ssl://127.0.0.1:PORT
	AdminURL string // https://127.0.0.1:PORT
	DataDir  string
	CAFile   string // the local CA clients trust
	Secret   []byte // the token secret key
	t        testing.TB
}

// SuperUser is the super-user role of a SecureStandalone.
const SuperUser = "admin"

// StartSecureStandalone starts `meridian standalone --tls
// --token-secret-key ... --authorization --superuser-roles admin` on
// dataDir and waits until its admin API answers the super-user.
func StartSecureStandalone(t testing.TB, dataDir string, extra ...string) *SecureStandalone {
	t.Helper()
	secret, err := authtoken.NewSecretKey()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "secret.key")
	if err := os.WriteFile(keyFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	addr, admin := FreeAddr(t), FreeAddr(t)
	args := append([]string{"standalone", "--tls", "--data-dir", dataDir, "--listen", addr, "--admin", admin,
		"--etcd-client-url", "http://" + FreeAddr(t), "--etcd-peer-url", "http://" + FreeAddr(t),
		"--bookie-base-port", "0", "--replication-listen", FreeAddr(t), "--log-level", "warn",
		"--token-secret-key", "file://" + keyFile, "--authorization", "--superuser-roles", SuperUser}, extra...)
	s := &SecureStandalone{Proc: StartProc(t, "standalone-tls", MeridianBinary(t), args...),
		URL: "pulsar+ssl://" + addr, AdminURL: "https://" + admin, DataDir: dataDir,
		CAFile: filepath.Join(dataDir, "tls", "ca.pem"), Secret: secret, t: t}
	Eventually(t, 90*time.Second, "secure standalone ready", func() bool {
		if _, err := os.Stat(s.CAFile); err != nil {
			return false
		}
		code, _ := s.Admin(s.Token(SuperUser, 0), "GET", "/admin/v2/tenants", "")
		return code == 200
	})
	return s
}

// Token returns a token for role, expiring after ttl (0: never).
func (s *SecureStandalone) Token(role string, ttl time.Duration) string {
	s.t.Helper()
	var exp time.Time
	if ttl != 0 {
		exp = time.Now().Add(ttl)
	}
	tok, err := authtoken.CreateWithSecret(s.Secret, role, exp)
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// HTTPClient trusts the standalone's CA.
func (s *SecureStandalone) HTTPClient() *http.Client {
	return TLSHTTPClient(s.t, s.CAFile)
}

// TLSHTTPClient is an https client trusting caFile.
func TLSHTTPClient(t testing.TB, caFile string) *http.Client {
	t.Helper()
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// Admin sends one admin request with token ("" for none) and returns the
// status and body.
func (s *SecureStandalone) Admin(token, method, path, body string) (int, string) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.AdminURL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// MustAdmin is Admin that fails the test on a status outside 2xx.
func (s *SecureStandalone) MustAdmin(token, method, path, body string) string {
	s.t.Helper()
	code, out := s.Admin(token, method, path, body)
	if code/100 != 2 {
		s.t.Fatalf("%s %s: HTTP %d %s", method, path, code, out)
	}
	return out
}

// ClientOptions are pulsar.ClientOptions for the standalone with auth
// (nil: no credentials), hostname verification on.
func (s *SecureStandalone) ClientOptions(auth pulsar.Authentication) pulsar.ClientOptions {
	return pulsar.ClientOptions{
		URL:                   s.URL,
		TLSTrustCertsFilePath: s.CAFile,
		TLSValidateHostname:   true,
		Authentication:        auth,
		ConnectionTimeout:     5 * time.Second,
		OperationTimeout:      10 * time.Second,
	}
}
