package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/authtoken"
	"github.com/spf13/cobra"
)

// meridian admin tokens ...: Pulsar's `pulsar tokens` (same key files, so
// Pulsar-issued tokens work with Meridian and the other way round).
func newTokensCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tokens", Short: "Create JWT token keys and tokens (as `pulsar tokens`)"}
	var out string
	var b64 bool
	secret := &cobra.Command{
		Use:   "create-secret-key",
		Short: "Create a secret key (HS256) for signing and verifying tokens",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			k, err := authtoken.NewSecretKey()
			if err != nil {
				return err
			}
			if b64 {
				k = []byte(base64.StdEncoding.EncodeToString(k))
			}
			if out == "" {
				_, err = os.Stdout.Write(k)
				return err
			}
			return writeSecret(out, k)
		},
	}
	secret.Flags().StringVar(&out, "output", "", "file to write the key to (mode 0600; default: stdout)")
	secret.Flags().BoolVar(&b64, "base64", false, "write the key base64-encoded (default: raw bytes, as Pulsar)")

	var privOut, pubOut, alg string
	pair := &cobra.Command{
		Use:   "create-key-pair",
		Short: "Create a key pair (RS256 or ES256): sign tokens with the private key, brokers verify with the public key",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if privOut == "" || pubOut == "" {
				return errors.New("--output-private-key and --output-public-key are required")
			}
			priv, pub, err := authtoken.NewKeyPair(alg)
			if err != nil {
				return err
			}
			if err := writeSecret(privOut, priv); err != nil {
				return err
			}
			return os.WriteFile(pubOut, pub, 0o644)
		},
	}
	pair.Flags().StringVar(&privOut, "output-private-key", "", "file for the private key (PKCS#8 DER, mode 0600)")
	pair.Flags().StringVar(&pubOut, "output-public-key", "", "file for the public key (X.509 DER)")
	pair.Flags().StringVarP(&alg, "signature-algorithm", "a", authtoken.RS256, "RS256 or ES256")

	var secretKey, privateKey, subject, expiry string
	create := &cobra.Command{
		Use:   "create --subject ROLE (--secret-key KEY | --private-key KEY) [--expiry 1h]",
		Short: "Create a token for a role, printed on stdout",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if subject == "" {
				return errors.New("--subject is required")
			}
			var exp time.Time
			if expiry != "" {
				d, err := parseRelativeTime(expiry)
				if err != nil {
					return fmt.Errorf("--expiry: %w", err)
				}
				exp = time.Now().Add(d)
			}
			var tok string
			switch {
			case secretKey != "" && privateKey != "":
				return errors.New("give --secret-key or --private-key, not both")
			case secretKey != "":
				k, err := authtoken.ReadKey(secretKey)
				if err != nil {
					return err
				}
				if tok, err = authtoken.CreateWithSecret(k, subject, exp); err != nil {
					return err
				}
			case privateKey != "":
				b, err := authtoken.ReadKey(privateKey)
				if err != nil {
					return err
				}
				k, err := authtoken.ParsePrivateKey(b)
				if err != nil {
					return err
				}
				if tok, err = authtoken.CreateWithPrivateKey(k, subject, exp); err != nil {
					return err
				}
			default:
				return errors.New("--secret-key or --private-key is required")
			}
			fmt.Println(tok)
			return nil
		},
	}
	create.Flags().StringVar(&secretKey, "secret-key", "", "secret key (file:///path, a path, or data:;base64,...)")
	create.Flags().StringVar(&privateKey, "private-key", "", "private key (file:///path, a path, or data:;base64,...)")
	create.Flags().StringVarP(&subject, "subject", "s", "", "the token's role (sub claim)")
	create.Flags().StringVarP(&expiry, "expiry", "e", "", "lifetime, e.g. 30m, 1h, 7d, 1y (default: never expires)")
	create.Flags().StringVar(&expiry, "expiry-time", "", "same as --expiry (Pulsar's name)")
	cmd.AddCommand(secret, pair, create)
	return cmd
}

// parseRelativeTime parses Pulsar's relative times: a number and one of
// s, m, h, d, w, y (also Go durations such as 1h30m).
func parseRelativeTime(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	if len(s) < 2 {
		return 0, fmt.Errorf("%q: want a number and a unit (s, m, h, d, w, y)", s)
	}
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q: want a positive number and a unit (s, m, h, d, w, y)", s)
	}
	unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour, 'y': 365 * 24 * time.Hour}[s[len(s)-1]]
	if unit == 0 {
		return 0, fmt.Errorf("%q: unit must be s, m, h, d, w or y", s)
	}
	return time.Duration(n) * unit, nil
}

// writeSecret writes a key to path, readable by its owner only. The bytes
// go into a new file created 0600 beside path, which then replaces path:
// a key is never written into an existing file while that file may still
// be readable by others (os.WriteFile keeps an existing file's mode).
func writeSecret(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// newPermissionCmds are `admin namespaces grant-permission|revoke-permission|permissions`.
func newPermissionCmds(call func(method, path string, body any) error) []*cobra.Command {
	var role, actions string
	grant := &cobra.Command{
		Use:   "grant-permission TENANT/NS --role ROLE --actions produce,consume",
		Short: "Let a role produce and/or consume on a namespace's topics",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, a []string) error {
			if role == "" {
				return errors.New("--role is required")
			}
			acts := splitList(actions)
			if len(acts) == 0 {
				return errors.New("--actions is required (produce, consume)")
			}
			return call("POST", "/admin/v2/namespaces/"+a[0]+"/permissions/"+role, acts)
		},
	}
	grant.Flags().StringVar(&role, "role", "", "the role")
	grant.Flags().StringVar(&actions, "actions", "", "produce, consume, or both, comma-separated")
	var rrole string
	revoke := &cobra.Command{
		Use:   "revoke-permission TENANT/NS --role ROLE",
		Short: "Take a role's permissions on a namespace away",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, a []string) error {
			if rrole == "" {
				return errors.New("--role is required")
			}
			return call("DELETE", "/admin/v2/namespaces/"+a[0]+"/permissions/"+rrole, nil)
		},
	}
	revoke.Flags().StringVar(&rrole, "role", "", "the role")
	perms := &cobra.Command{
		Use:   "permissions TENANT/NS",
		Short: "Show the roles' permissions on a namespace",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, a []string) error {
			return call("GET", "/admin/v2/namespaces/"+a[0]+"/permissions", nil)
		},
	}
	return []*cobra.Command{grant, revoke, perms}
}

// newGossipKeysCmd is `admin gossip`: the gossip keyring of every member,
// through any gossiping broker.
func newGossipKeysCmd(do func(method, path string, body any) ([]byte, error)) *cobra.Command {
	cmd := &cobra.Command{Use: "gossip", Short: "Gossip encryption keys (serf's keyring on every member)"}
	keys := &cobra.Command{Use: "keys", Short: "Rotate the gossip keys: install NEW, use NEW, remove OLD"}
	keygen := &cobra.Command{Use: "keygen", Short: "Print a new random 32-byte gossip key (base64)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			k := make([]byte, 32)
			if _, err := rand.Read(k); err != nil {
				return err
			}
			fmt.Println(base64.StdEncoding.EncodeToString(k))
			return nil
		}}
	keys.AddCommand(&cobra.Command{Use: "list", Short: "Show each key and how many members hold it and send with it", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			out, err := do("GET", "/admin/v2/meridian/gossip/keys", nil)
			if err != nil {
				return err
			}
			fmt.Println(strings.TrimSpace(string(out)))
			return nil
		}})
	for _, op := range []struct{ name, short string }{
		{"install", "Add a key to every member's keyring (accepted, not yet sent with)"},
		{"use", "Make an installed key every member's primary (sending) key"},
		{"remove", "Remove a key from every member's keyring (not the primary one)"},
	} {
		var keyFile string
		c := &cobra.Command{Use: op.name + " [KEY]", Short: op.short + "; KEY base64, or --key-file",
			Args: cobra.MaximumNArgs(1),
			RunE: func(_ *cobra.Command, a []string) error {
				key := ""
				switch {
				case keyFile != "":
					b, err := os.ReadFile(keyFile)
					if err != nil {
						return err
					}
					key = strings.TrimSpace(string(b))
				case len(a) == 1:
					key = a[0]
				default:
					return errors.New("give KEY or --key-file")
				}
				_, err := do("POST", "/admin/v2/meridian/gossip/keys", map[string]string{"op": op.name, "key": key})
				return err
			}}
		c.Flags().StringVar(&keyFile, "key-file", "", "file holding the base64 key (a key given as an argument is visible in ps)")
		keys.AddCommand(c)
	}
	cmd.AddCommand(keys, keygen)
	return cmd
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
