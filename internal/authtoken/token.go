// Package authtoken creates and verifies JWT tokens as Apache Pulsar
// issues them, so a token made by `pulsar tokens create` works against
// Meridian and one made by `meridian admin tokens create` against Pulsar:
//
//   - a secret key is raw bytes (HS256 for 32 bytes, HS384 for 48, HS512
//     for 64 and more), as `pulsar tokens create-secret-key` writes it;
//   - a key pair is a private key in PKCS#8 DER and a public key in X.509
//     SubjectPublicKeyInfo DER (`pulsar tokens create-key-pair`), RSA
//     (RS256) or EC P-256 (ES256); PEM files are accepted too;
//   - a key is named as Pulsar's broker config names it: "data:;base64,…",
//     "file:///path", a plain path, or the key itself in base64;
//   - the token's "sub" claim is the role; "exp", if present, is when it
//     stops being accepted.
//
// The package is pure: no logging, no clocks of its own (Verify takes the
// time).
package authtoken

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Errors of Verify. Callers match them with errors.Is; the message of the
// wrapped error says what exactly was wrong (never the token itself).
var (
	// ErrNoToken: no token was presented.
	ErrNoToken = errors.New("authtoken: no token")
	// ErrExpired: the token's "exp" is past.
	ErrExpired = errors.New("authtoken: token expired")
	// ErrInvalid: the token does not parse, its signature does not verify
	// with the configured key, its algorithm does not match the key, or it
	// has no subject.
	ErrInvalid = errors.New("authtoken: invalid token")
)

// Algorithms of key pairs.
const (
	RS256 = "RS256"
	ES256 = "ES256"
)

// SecretKeyBytes is the size of a generated secret key (HS256, as
// `pulsar tokens create-secret-key`).
const SecretKeyBytes = 32

// NewSecretKey returns a random secret key.
func NewSecretKey() ([]byte, error) {
	k := make([]byte, SecretKeyBytes)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	return k, nil
}

// NewKeyPair returns a new key pair for alg (RS256: RSA 2048; ES256: EC
// P-256): the private key in PKCS#8 DER, the public key in X.509
// SubjectPublicKeyInfo DER.
func NewKeyPair(alg string) (private, public []byte, err error) {
	var priv crypto.Signer
	switch alg {
	case RS256, "":
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		return nil, nil, fmt.Errorf("authtoken: key pair algorithm %q: want RS256 or ES256", alg)
	}
	if err != nil {
		return nil, nil, err
	}
	if private, err = x509.MarshalPKCS8PrivateKey(priv); err != nil {
		return nil, nil, err
	}
	if public, err = x509.MarshalPKIXPublicKey(priv.Public()); err != nil {
		return nil, nil, err
	}
	return private, public, nil
}

// ReadKey reads a key named as Pulsar's tokenSecretKey / tokenPublicKey
// settings name it: "data:[type][;base64],DATA", "file:///path" (or
// "file:path"), a path to an existing file, or the key itself in base64.
func ReadKey(spec string) ([]byte, error) {
	switch {
	case spec == "":
		return nil, errors.New("authtoken: empty key setting")
	case strings.HasPrefix(spec, "data:"):
		head, data, ok := strings.Cut(strings.TrimPrefix(spec, "data:"), ",")
		if !ok {
			return nil, errors.New("authtoken: data: key without a ','")
		}
		if strings.HasSuffix(head, ";base64") {
			b, err := base64.StdEncoding.DecodeString(data)
			if err != nil {
				return nil, fmt.Errorf("authtoken: data: key: %w", err)
			}
			return b, nil
		}
		s, err := url.PathUnescape(data)
		if err != nil {
			return nil, fmt.Errorf("authtoken: data: key: %w", err)
		}
		return []byte(s), nil
	case strings.HasPrefix(spec, "file:"):
		u, err := url.Parse(spec)
		if err != nil {
			return nil, fmt.Errorf("authtoken: key URL: %w", err)
		}
		p := u.Path
		if p == "" {
			p = u.Opaque
		}
		return readFile(p)
	}
	if _, err := os.Stat(spec); err == nil {
		return readFile(spec)
	}
	b, err := base64.StdEncoding.DecodeString(spec)
	if err != nil {
		return nil, fmt.Errorf("authtoken: key %q is neither a file nor base64", abbreviate(spec))
	}
	return b, nil
}

func readFile(p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("authtoken: read key: %w", err)
	}
	return b, nil
}

// abbreviate keeps an error message from quoting a whole key.
func abbreviate(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// ParsePrivateKey decodes a private key: PKCS#8 DER (Pulsar's format), or
// PEM (PKCS#8, PKCS#1 RSA or SEC 1 EC).
func ParsePrivateKey(b []byte) (crypto.Signer, error) {
	der := b
	if blk, _ := pem.Decode(b); blk != nil {
		der = blk.Bytes
	}
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, fmt.Errorf("authtoken: private key of type %T cannot sign", k)
	}
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k, nil
	}
	return nil, errors.New("authtoken: private key is not PKCS#8, PKCS#1 or SEC 1 (DER or PEM)")
}

// ParsePublicKey decodes a public key: X.509 SubjectPublicKeyInfo DER
// (Pulsar's format) or PEM ("PUBLIC KEY", or a certificate).
func ParsePublicKey(b []byte) (crypto.PublicKey, error) {
	der := b
	if blk, _ := pem.Decode(b); blk != nil {
		der = blk.Bytes
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, fmt.Errorf("authtoken: public key certificate: %w", err)
			}
			return c.PublicKey, nil
		}
	}
	if k, err := x509.ParsePKIXPublicKey(der); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PublicKey(der); err == nil {
		return k, nil
	}
	return nil, errors.New("authtoken: public key is not X.509 SubjectPublicKeyInfo (DER or PEM)")
}

// hmacMethod is the HMAC algorithm jjwt (Pulsar) picks for a key size.
func hmacMethod(key []byte) jwt.SigningMethod {
	switch {
	case len(key) >= 64:
		return jwt.SigningMethodHS512
	case len(key) >= 48:
		return jwt.SigningMethodHS384
	default:
		return jwt.SigningMethodHS256
	}
}

// CreateWithSecret signs a token for subject with a secret key; expires
// zero means no "exp" claim.
func CreateWithSecret(secret []byte, subject string, expires time.Time) (string, error) {
	if len(secret) < 32 {
		return "", fmt.Errorf("authtoken: secret key of %d bytes: at least 32 (HS256) are needed", len(secret))
	}
	return sign(hmacMethod(secret), secret, subject, expires)
}

// CreateWithPrivateKey signs a token for subject with a private key (RS256
// for RSA, ES256 for EC P-256).
func CreateWithPrivateKey(key crypto.Signer, subject string, expires time.Time) (string, error) {
	var m jwt.SigningMethod
	switch k := key.(type) {
	case *rsa.PrivateKey:
		m = jwt.SigningMethodRS256
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return "", errors.New("authtoken: EC keys must be on P-256 (ES256)")
		}
		m = jwt.SigningMethodES256
	default:
		return "", fmt.Errorf("authtoken: cannot sign with a %T", key)
	}
	return sign(m, key, subject, expires)
}

func sign(m jwt.SigningMethod, key any, subject string, expires time.Time) (string, error) {
	if subject == "" {
		return "", errors.New("authtoken: empty subject")
	}
	claims := jwt.RegisteredClaims{Subject: subject}
	if !expires.IsZero() {
		claims.ExpiresAt = jwt.NewNumericDate(expires)
	}
	t := jwt.NewWithClaims(m, claims)
	// Pulsar's tokens carry only "alg" in their header.
	delete(t.Header, "typ")
	return t.SignedString(key)
}

// Verifier checks tokens against one key. Safe for concurrent use; it
// never changes after it is made (WithAudience returns a copy).
type Verifier struct {
	secret  []byte
	public  crypto.PublicKey
	methods []string
	// audience, if set, must be in the token's "aud" claim (Pulsar's
	// tokenAudience, with tokenAudienceClaim "aud").
	audience string
}

// MaxIssuedAtSkew is how far in the future a token's "iat" may be (a
// clock of the issuer slightly ahead): a token issued later than that is
// refused as not issued yet — a forged or mis-minted one.
const MaxIssuedAtSkew = time.Minute

// WithAudience returns a verifier that also requires aud in a token's
// "aud" claim ("" requires nothing: any audience, or none, is accepted).
func (v *Verifier) WithAudience(aud string) *Verifier {
	c := *v
	c.audience = aud
	return &c
}

// NewSecretVerifier verifies HS256/384/512 tokens signed with secret,
// which must be at least 32 bytes (HS256's key size, as CreateWithSecret
// and `pulsar tokens create-secret-key` require): a short secret is
// guessed offline from any one token.
func NewSecretVerifier(secret []byte) (*Verifier, error) {
	if len(secret) < SecretKeyBytes {
		return nil, fmt.Errorf("authtoken: secret key of %d bytes: at least %d are needed", len(secret), SecretKeyBytes)
	}
	return &Verifier{secret: append([]byte(nil), secret...), methods: []string{"HS256", "HS384", "HS512"}}, nil
}

// NewPublicKeyVerifier verifies tokens signed with the private key of pub
// (RS256/384/512 for RSA, ES256/384/512 for EC).
func NewPublicKeyVerifier(pub crypto.PublicKey) (*Verifier, error) {
	switch pub.(type) {
	case *rsa.PublicKey:
		return &Verifier{public: pub, methods: []string{"RS256", "RS384", "RS512"}}, nil
	case *ecdsa.PublicKey:
		return &Verifier{public: pub, methods: []string{"ES256", "ES384", "ES512"}}, nil
	default:
		return nil, fmt.Errorf("authtoken: public key of type %T: want RSA or EC", pub)
	}
}

// VerifierFromSettings builds the verifier of a broker's settings: exactly
// one of secretKey and publicKey (each as ReadKey takes it).
func VerifierFromSettings(secretKey, publicKey string) (*Verifier, error) {
	switch {
	case secretKey != "" && publicKey != "":
		return nil, errors.New("authtoken: set a secret key or a public key, not both")
	case secretKey != "":
		b, err := ReadKey(secretKey)
		if err != nil {
			return nil, err
		}
		return NewSecretVerifier(b)
	case publicKey != "":
		b, err := ReadKey(publicKey)
		if err != nil {
			return nil, err
		}
		pub, err := ParsePublicKey(b)
		if err != nil {
			return nil, err
		}
		return NewPublicKeyVerifier(pub)
	}
	return nil, errors.New("authtoken: no secret key and no public key")
}

// Claims is what a verified token says.
type Claims struct {
	// Role is the "sub" claim.
	Role string
	// Expires is the "exp" claim; zero when the token never expires.
	Expires time.Time
}

// Verify checks token at time now and returns its claims. A token is
// accepted up to its "exp" (no leeway: Meridian's processes and the
// token's issuer share NTP-synchronised clocks, and an accepted expired
// token is what refresh exists to prevent).
func (v *Verifier) Verify(token string, now time.Time) (Claims, error) {
	token = strings.TrimSpace(token)
	if token == "" {
		return Claims{}, ErrNoToken
	}
	var rc jwt.RegisteredClaims
	opts := []jwt.ParserOption{jwt.WithValidMethods(v.methods), jwt.WithTimeFunc(func() time.Time { return now })}
	if v.audience != "" {
		opts = append(opts, jwt.WithAudience(v.audience))
	}
	p := jwt.NewParser(opts...)
	_, err := p.ParseWithClaims(token, &rc, func(t *jwt.Token) (any, error) {
		if v.secret != nil {
			return v.secret, nil
		}
		return v.public, nil
	})
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		exp := ""
		if rc.ExpiresAt != nil {
			exp = " at " + rc.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return Claims{}, fmt.Errorf("%w%s", ErrExpired, exp)
	case err != nil:
		return Claims{}, fmt.Errorf("%w: %s", ErrInvalid, describe(err))
	case rc.Subject == "":
		return Claims{}, fmt.Errorf("%w: no subject (sub) claim", ErrInvalid)
	case rc.IssuedAt != nil && rc.IssuedAt.After(now.Add(MaxIssuedAtSkew)):
		return Claims{}, fmt.Errorf("%w: issued in the future (iat %s)", ErrInvalid, rc.IssuedAt.UTC().Format(time.RFC3339))
	}
	c := Claims{Role: rc.Subject}
	if rc.ExpiresAt != nil {
		c.Expires = rc.ExpiresAt.Time
	}
	return c, nil
}

// describe turns a jwt error into a short reason without token content.
func describe(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrSignatureInvalid):
		return "signature does not verify with this broker's key (or its algorithm does not match the key)"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "not valid yet (nbf)"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "issued in the future (iat)"
	case errors.Is(err, jwt.ErrTokenInvalidAudience), errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "not for this audience (aud)"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "unverifiable: algorithm does not match this broker's key"
	default:
		return "rejected"
	}
}
