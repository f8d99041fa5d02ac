package authtoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// A token signed by Pulsar's tooling (jjwt, HS256, header {"alg":"HS256"},
// payload {"sub":"test-user"}) with a known secret verifies here: built by
// hand from the JWS spec, not with the library Verify uses.
func TestVerifiesHandMadePulsarHS256Token(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." + enc.EncodeToString([]byte(`{"sub":"test-user"}`))
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(signing))
	tok := signing + "." + enc.EncodeToString(mac.Sum(nil))
	v, err := NewSecretVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(tok, now)
	if err != nil {
		t.Fatal(err)
	}
	if c.Role != "test-user" || !c.Expires.IsZero() {
		t.Fatalf("claims %+v", c)
	}
	// One byte of the signature changed: refused.
	bad := tok[:len(tok)-2] + flip(tok[len(tok)-2])
	if _, err := v.Verify(bad, now); !errors.Is(err, ErrInvalid) {
		t.Fatalf("tampered token: %v", err)
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func TestSecretRoundTripAndExpiry(t *testing.T) {
	k, err := NewSecretKey()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := CreateWithSecret(k, "alice", now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := NewSecretVerifier(k)
	c, err := v.Verify(tok, now)
	if err != nil || c.Role != "alice" || !c.Expires.Equal(now.Add(time.Hour)) {
		t.Fatalf("verify: %+v %v", c, err)
	}
	if _, err := v.Verify(tok, now.Add(time.Hour+time.Second)); !errors.Is(err, ErrExpired) {
		t.Fatalf("after exp: %v", err)
	}
	other, _ := NewSecretKey()
	v2, _ := NewSecretVerifier(other)
	if _, err := v2.Verify(tok, now); !errors.Is(err, ErrInvalid) {
		t.Fatalf("other key: %v", err)
	}
	if _, err := v.Verify("", now); !errors.Is(err, ErrNoToken) {
		t.Fatalf("empty: %v", err)
	}
	if _, err := v.Verify("not.a.jwt", now); !errors.Is(err, ErrInvalid) {
		t.Fatalf("garbage: %v", err)
	}
	// The header is Pulsar's: alg only.
	h, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	if string(h) != `{"alg":"HS256"}` {
		t.Fatalf("header %s", h)
	}
}

func TestKeyPairs(t *testing.T) {
	for _, alg := range []string{RS256, ES256} {
		t.Run(alg, func(t *testing.T) {
			priv, pub, err := NewKeyPair(alg)
			if err != nil {
				t.Fatal(err)
			}
			sk, err := ParsePrivateKey(priv)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := CreateWithPrivateKey(sk, "bob", time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			pk, err := ParsePublicKey(pub)
			if err != nil {
				t.Fatal(err)
			}
			v, err := NewPublicKeyVerifier(pk)
			if err != nil {
				t.Fatal(err)
			}
			if c, err := v.Verify(tok, now); err != nil || c.Role != "bob" {
				t.Fatalf("verify: %+v %v", c, err)
			}
			// PEM of the same public key works too.
			pemPub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
			if pk2, err := ParsePublicKey(pemPub); err != nil {
				t.Fatal(err)
			} else if v2, _ := NewPublicKeyVerifier(pk2); v2 == nil {
				t.Fatal("no verifier from PEM")
			}
			// A key pair's verifier refuses an HMAC token signed with
			// the public key's bytes (the classic algorithm confusion).
			hs, err := CreateWithSecret(append(pub, pub...), "mallory", time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.Verify(hs, now); !errors.Is(err, ErrInvalid) {
				t.Fatalf("HS token against a public key: %v", err)
			}
			// Another pair's token is refused.
			priv2, _, _ := NewKeyPair(alg)
			sk2, _ := ParsePrivateKey(priv2)
			tok2, _ := CreateWithPrivateKey(sk2, "bob", time.Time{})
			if _, err := v.Verify(tok2, now); !errors.Is(err, ErrInvalid) {
				t.Fatalf("other pair: %v", err)
			}
		})
	}
}

func TestReadKeyForms(t *testing.T) {
	key := []byte{0, 1, 2, 250, 251, 252}
	dir := t.TempDir()
	p := filepath.Join(dir, "k.key")
	if err := os.WriteFile(p, key, 0o600); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString(key)
	for _, spec := range []string{"file://" + p, "file:" + p, p, "data:;base64," + b64, b64} {
		got, err := ReadKey(spec)
		if err != nil || string(got) != string(key) {
			t.Fatalf("%s: %v %v", spec, got, err)
		}
	}
	if _, err := ReadKey("/no/such/file"); err == nil {
		t.Fatal("missing file read")
	}
	if _, err := VerifierFromSettings("x", "y"); err == nil {
		t.Fatal("both keys accepted")
	}
}

func FuzzVerify(f *testing.F) {
	k := []byte("0123456789abcdef0123456789abcdef")
	tok, _ := CreateWithSecret(k, "seed", now.Add(time.Hour))
	f.Add(tok)
	f.Add("a.b.c")
	f.Add("")
	v, _ := NewSecretVerifier(k)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := v.Verify(s, now)
		if err == nil && c.Role == "" {
			t.Fatal("accepted a token without a role")
		}
	})
}

// handMade signs payload (JSON) with secret as HS256, as Pulsar's tooling
// does, built from the JWS spec.
func handMade(secret []byte, payload string) string {
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." + enc.EncodeToString([]byte(payload))
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil))
}

// A secret key shorter than HS256's 32 bytes is refused: it could be
// guessed offline from any one token it signed.
func TestSecretVerifierWantsAtLeast32Bytes(t *testing.T) {
	for _, n := range []int{0, 1, 16, 31} {
		if _, err := NewSecretVerifier(make([]byte, n)); err == nil {
			t.Errorf("a %d-byte secret key was accepted", n)
		}
	}
	if _, err := NewSecretVerifier(make([]byte, 32)); err != nil {
		t.Errorf("a 32-byte secret key: %v", err)
	}
}

// With an audience configured (Pulsar's tokenAudience), a token must name
// it in "aud" (a string or one of a list); without one, "aud" is ignored.
func TestAudience(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	base, err := NewSecretVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	v := base.WithAudience("meridian-east")
	for _, c := range []struct {
		payload string
		ok      bool
	}{
		{`{"sub":"u","aud":"meridian-east"}`, true},
		{`{"sub":"u","aud":["other","meridian-east"]}`, true},
		{`{"sub":"u","aud":"other"}`, false},
		{`{"sub":"u"}`, false},
	} {
		_, err := v.Verify(handMade(secret, c.payload), now)
		if (err == nil) != c.ok {
			t.Errorf("%s with audience meridian-east: err %v, want accepted=%t", c.payload, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v is not ErrInvalid", c.payload, err)
		}
		if _, err := base.Verify(handMade(secret, c.payload), now); err != nil {
			t.Errorf("%s without an audience configured: %v", c.payload, err)
		}
	}
}

// A token issued later than MaxIssuedAtSkew from now is refused; a clock
// a little ahead is tolerated.
func TestIssuedAtInTheFuture(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	v, _ := NewSecretVerifier(secret)
	for _, c := range []struct {
		iat time.Time
		ok  bool
	}{
		{now.Add(-time.Hour), true},
		{now.Add(30 * time.Second), true},
		{now.Add(2 * time.Minute), false},
		{now.Add(24 * 365 * time.Hour), false},
	} {
		tok := handMade(secret, `{"sub":"u","iat":`+strconv.FormatInt(c.iat.Unix(), 10)+`}`)
		_, err := v.Verify(tok, now)
		if (err == nil) != c.ok {
			t.Errorf("iat %v from now: err %v, want accepted=%t", c.iat.Sub(now), err, c.ok)
		}
	}
}
