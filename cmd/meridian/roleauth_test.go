package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Requirement (issue 30, item 3, the roles that do not verify tokens):
// `meridian bookie` and `meridian etcd` refuse a configuration asking for
// client authentication they could not enforce, naming the key to set —
// --require-client-auth without TLS; TLS files set in part (a certificate
// and key without the CA: no caller's certificate can be checked); etcd
// with TLS files and an http:// URL, which etcd served in plaintext,
// ignoring the certificate — before they listen or connect to anything.
func TestBookieAndEtcdRefuseAuthTheyCannotEnforce(t *testing.T) {
	bin := testutil.MeridianBinary(t)
	dir := t.TempDir()
	cert, key, ca := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), filepath.Join(dir, "ca.pem")
	bookie := []string{"bookie", "--region", "east", "--etcd", "http://127.0.0.1:1", "--data-dir", filepath.Join(dir, "b")}
	etcd := []string{"etcd", "--data-dir", filepath.Join(dir, "e")}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"bookie, required without TLS", append(bookie, "--require-client-auth"),
			[]string{"bookie.require_client_auth", "TLS is off", "security.tls.cert_file, security.tls.key_file, security.tls.ca_file"}},
		{"bookie, certificate without a CA", append(bookie, "--tls-cert-file", cert, "--tls-key-file", key),
			[]string{"security.tls.ca_file", "without the CA no caller can be authenticated"}},
		{"bookie, CA without a certificate", append(bookie, "--tls-trust-certs-file", ca),
			[]string{"security.tls.cert_file", "security.tls.key_file"}},
		{"etcd, required without TLS", append(etcd, "--require-client-auth"),
			[]string{"etcd.require_client_auth", "TLS is off", "etcd.tls.cert_file, etcd.tls.key_file, etcd.tls.ca_file"}},
		{"etcd, certificate without a CA", append(etcd, "--tls-cert-file", cert, "--tls-key-file", key, "--client-url", "https://127.0.0.1:1", "--peer-url", "https://127.0.0.1:2"),
			[]string{"etcd.tls.ca_file", "without the CA"}},
		{"etcd, TLS on a plaintext client URL", append(etcd, "--tls-cert-file", cert, "--tls-key-file", key, "--tls-trust-certs-file", ca, "--peer-url", "https://127.0.0.1:2"),
			[]string{"etcd.client_url", "is not https://", "plaintext"}},
		{"etcd, TLS on a plaintext peer URL", append(etcd, "--tls-cert-file", cert, "--tls-key-file", key, "--tls-trust-certs-file", ca, "--client-url", "https://127.0.0.1:1"),
			[]string{"etcd.peer_url", "is not https://"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, bin, c.args...).CombinedOutput()
		started := ctx.Err() != nil
		cancel()
		if started {
			t.Fatalf("%s: meridian %v did not exit within 20 s (it started):\n%s", c.name, c.args, out)
		}
		if err == nil {
			t.Errorf("%s: exited 0:\n%s", c.name, out)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: no %q in the refusal:\n%s", c.name, w, out)
			}
		}
	}
}

// Requirement (issue 30, item 3): a bookie and an etcd member say, in
// their start-up line and on /metrics, whether their callers are
// authenticated — meridian_bookie_client_auth_required on the bookie's
// metrics port, meridian_etcd_client_cert_required and
// meridian_etcd_auth_enabled on etcd's client URL — 1 with mutual TLS, 0
// in plaintext; and with --require-client-auth and TLS they start.
func TestBookieAndEtcdSayWhetherTheyAuthenticate(t *testing.T) {
	bin := testutil.MeridianBinary(t)
	dir := t.TempDir()
	pki, err := tlsutil.LocalPKI(filepath.Join(dir, "tls"), map[string]tlsutil.Leaf{
		"etcd":   tlsutil.LocalLeaf("etcd", "east", tlsutil.RoleEtcd),
		"bookie": tlsutil.LocalLeaf("bookie", "east", tlsutil.RoleBookie),
		"client": tlsutil.LocalLeaf("client", ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	tlsArgs := func(f tlsutil.Files) []string {
		return []string{"--tls-cert-file", f.CertFile, "--tls-key-file", f.KeyFile, "--tls-trust-certs-file", f.CAFile}
	}
	caPEM, err := os.ReadFile(pki["client"].CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	clientCert, err := tls.LoadX509KeyPair(pki["client"].CertFile, pki["client"].KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	httpsClient := func(cert bool) *http.Client {
		tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if cert {
			tc.Certificates = []tls.Certificate{clientCert}
		}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	}
	// metric waits for url's /metrics to answer and returns the value of
	// the series named name (its first line).
	metric := func(hc *http.Client, url, name string) string {
		t.Helper()
		var val string
		testutil.Eventually(t, 60*time.Second, name+" on "+url, func() bool {
			resp, err := hc.Get(url)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, name+" ") || strings.HasPrefix(l, name+"{") {
					val = l[strings.LastIndexByte(l, ' ')+1:]
					return true
				}
			}
			return false
		})
		return val
	}
	logHas := func(p *testutil.Proc, want string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, p.Name+" logging "+want, func() bool {
			b, _ := os.ReadFile(p.LogPath())
			return strings.Contains(string(b), want)
		})
	}

	// Mutual TLS, required.
	client, peer := testutil.FreeAddr(t), testutil.FreeAddr(t)
	etcdTLS := testutil.StartProc(t, "etcd-tls", bin, append([]string{"etcd", "--name", "etcd", "--data-dir", filepath.Join(dir, "etcd-tls"),
		"--client-url", "https://" + client, "--peer-url", "https://" + peer, "--require-client-auth"}, tlsArgs(pki["etcd"])...)...)
	if v := metric(httpsClient(true), "https://"+client+"/metrics", "meridian_etcd_client_cert_required"); v != "1" {
		t.Errorf("TLS etcd: meridian_etcd_client_cert_required %s, want 1", v)
	}
	if v := metric(httpsClient(true), "https://"+client+"/metrics", "meridian_etcd_auth_enabled"); v != "0" {
		t.Errorf("TLS etcd without etcd users: meridian_etcd_auth_enabled %s, want 0", v)
	}
	if _, err := httpsClient(false).Get("https://" + client + "/metrics"); err == nil {
		t.Errorf("TLS etcd served a caller without a certificate")
	}
	logHas(etcdTLS, `client_auth="mutual TLS: clients and peers need a certificate of the CA"`)
	bookieMetrics := testutil.FreeAddr(t)
	bookieTLS := testutil.StartProc(t, "bookie-tls", bin, append([]string{"bookie", "--region", "east", "--etcd", "https://" + client,
		"--id", "bookie-tls", "--listen", testutil.FreeAddr(t), "--metrics", bookieMetrics, "--data-dir", filepath.Join(dir, "bookie-tls"),
		"--require-client-auth"}, tlsArgs(pki["bookie"])...)...)
	if v := metric(httpsClient(false), "https://"+bookieMetrics+"/metrics", "meridian_bookie_client_auth_required"); v != "1" {
		t.Errorf("TLS bookie: meridian_bookie_client_auth_required %s, want 1", v)
	}
	logHas(bookieTLS, `client_auth="mutual TLS: adds, reads and fencing only for a certificate of the CA naming role broker or autorecovery"`)

	// Plaintext.
	etcdPlain, url := testutil.StartEtcdProc(t, "etcd-plain")
	if v := metric(http.DefaultClient, url+"/metrics", "meridian_etcd_client_cert_required"); v != "0" {
		t.Errorf("plaintext etcd: meridian_etcd_client_cert_required %s, want 0", v)
	}
	logHas(etcdPlain, `client_auth="none: plaintext`)
	plainMetrics := testutil.FreeAddr(t)
	bookiePlain := testutil.StartProc(t, "bookie-plain", bin, "bookie", "--region", "east", "--etcd", url, "--id", "bookie-plain",
		"--listen", testutil.FreeAddr(t), "--metrics", plainMetrics, "--data-dir", filepath.Join(dir, "bookie-plain"))
	if v := metric(http.DefaultClient, "http://"+plainMetrics+"/metrics", "meridian_bookie_client_auth_required"); v != "0" {
		t.Errorf("plaintext bookie: meridian_bookie_client_auth_required %s, want 0", v)
	}
	logHas(bookiePlain, `client_auth="none: plaintext, any caller may add, read and fence"`)
}
