package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/authtoken"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Requirement (issue 30, item 3): with token authentication on, every
// internal port authenticates its callers, or the process does not
// start. A standalone or a broker given a token key without TLS — or a
// broker whose etcd endpoints are plaintext — exits before it listens or
// connects to anything, with a message saying what to set; with TLS on
// the same settings pass.
func TestAuthWithoutTLSRefusesToStart(t *testing.T) {
	bin := testutil.MeridianBinary(t)
	dir := t.TempDir()
	secret, err := authtoken.NewSecretKey()
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "secret.key")
	if err := os.WriteFile(key, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	tok := "file://" + key
	tlsFlags := []string{"--tls-cert-file", filepath.Join(dir, "c.pem"), "--tls-key-file", filepath.Join(dir, "k.pem"), "--tls-trust-certs-file", filepath.Join(dir, "ca.pem")}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("meridian %v did not exit within 20 s (it started):\n%s", args, out)
		}
		return string(out), err
	}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"standalone, no TLS", []string{"standalone", "--data-dir", filepath.Join(dir, "s"), "--token-secret-key", tok},
			[]string{"security.token_secret_key", "token authentication is on but TLS is off", "set --tls"}},
		{"standalone, public key, no TLS", []string{"standalone", "--data-dir", filepath.Join(dir, "s"), "--token-public-key", tok},
			[]string{"security.token_public_key", "TLS is off"}},
		{"broker, no TLS", []string{"broker", "--region", "east", "--etcd", "http://127.0.0.1:1", "--token-secret-key", tok},
			[]string{"token authentication is on but TLS is off", "--tls-cert-file, --tls-key-file and --tls-trust-certs-file"}},
		{"broker, TLS, plaintext etcd", append([]string{"broker", "--region", "east", "--etcd", "https://127.0.0.1:1", "--global-etcd", "east=http://127.0.0.1:2", "--token-secret-key", tok}, tlsFlags...),
			[]string{"metadata.global", "etcd endpoint http://127.0.0.1:2 is not https://"}},
	} {
		out, err := run(c.args...)
		if err == nil {
			t.Fatalf("%s: exited 0:\n%s", c.name, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %q in the refusal:\n%s", c.name, w, out)
			}
		}
	}
	// With TLS the same settings are valid (--print-config validates,
	// then exits).
	for _, args := range [][]string{
		{"standalone", "--tls", "--data-dir", filepath.Join(dir, "s"), "--token-secret-key", tok, "--print-config"},
		append([]string{"broker", "--region", "east", "--etcd", "https://127.0.0.1:1", "--token-secret-key", tok, "--print-config"}, tlsFlags...),
	} {
		if out, err := run(args...); err != nil {
			t.Fatalf("meridian %v: %v\n%s", args, err, out)
		}
	}
}
