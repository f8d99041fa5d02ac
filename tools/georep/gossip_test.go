package georep

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/meridian-mq/meridian/tools/up"
)

type keyring struct {
	Members     int
	Keys        map[string]int
	PrimaryKeys map[string]int
}

// members is the gossip view of east's brokers (admin API).
func (d *deployment) members() map[string]string {
	ms, err := d.health("east")
	if err != nil {
		d.t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range ms {
		out[m.Name] = m.State
	}
	return out
}

// intruder tries to join the gossip cluster with key (nil: none) and
// reports whether it got in within wait.
func intruder(t *testing.T, name string, seeds []string, key []byte, wait time.Duration) bool {
	t.Helper()
	c := cluster.FastLocalConfig()
	c.NodeName, c.Role, c.Region, c.Rack = name, cluster.RoleBroker, "east", "r1"
	c.Seeds, c.SecretKey = seeds, key
	c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := cluster.JoinMembership(c)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	select {
	case <-m.Joined():
		return true
	case <-time.After(wait):
		return len(m.Members()) > 1
	}
}

// Security issue test 6: gossip is encrypted with the deployment's key; a
// process without it (or with another key) is ignored — it learns nobody
// and nobody learns it — and a key rotation done with `meridian admin
// gossip keys install|use|remove` keeps every member's membership, after
// which the old key no longer gets in.
func TestGossipKeyRotationThroughAdmin(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east"}, BrokersPerRegion: 2, BookiesPerRegion: 3, RacksPerRegion: 3, TLS: true})
	var seeds, names []string
	for _, ps := range d.d.Plan.Procs {
		if ps.Gossip != "" {
			names = append(names, ps.Name)
			if ps.Role == "broker" {
				seeds = append(seeds, ps.Gossip)
			}
		}
	}
	allAlive := func() bool {
		m := d.members()
		for _, n := range names {
			if m[n] != "alive" {
				return false
			}
		}
		return len(m) == len(names)
	}
	testutil.Eventually(t, 60*time.Second, "every process alive in the gossip view", allAlive)
	// During and after the rotation a member may be suspect for a moment:
	// on a loaded machine a probe is missed and refuted, rotation or not
	// (seen before any keyring operation in a kept run). A rotation that
	// broke the keyring makes members unreadable to each other: they are
	// failed within the 1.2 s suspicion, and stay failed, which the check
	// after the 3 s below sees.
	noneFailed := func() (map[string]string, bool) {
		m := d.members()
		for _, n := range names {
			if m[n] != "alive" && m[n] != "suspect" {
				return m, false
			}
		}
		return m, len(m) == len(names)
	}
	oldKey, err := os.ReadFile(up.GossipKeyFile(d.dir))
	if err != nil {
		t.Fatal(err)
	}
	oldB64 := strings.TrimSpace(string(oldKey))
	var kr keyring
	if err := d.admin("east", "GET", "/admin/v2/meridian/gossip/keys", nil, &kr); err != nil {
		t.Fatal(err)
	}
	if kr.Members != len(names) || kr.Keys[oldB64] != len(names) || len(kr.Keys) != 1 {
		t.Fatalf("keyring before: %+v (%d members)", kr, len(names))
	}

	// Outsiders: no key, a wrong key.
	wrong := make([]byte, 32)
	rand.Read(wrong)
	for name, key := range map[string][]byte{"no-key": nil, "wrong-key": wrong} {
		if intruder(t, "intruder-"+name, seeds, key, 3*time.Second) {
			t.Fatalf("a process with %s joined", name)
		}
		if _, seen := d.members()["intruder-"+name]; seen {
			t.Fatalf("the brokers list the %s intruder", name)
		}
	}

	// Rotate with the CLI, as an operator would.
	newKey := make([]byte, 32)
	rand.Read(newKey)
	newB64 := base64.StdEncoding.EncodeToString(newKey)
	keyFile := t.TempDir() + "/new.key"
	if err := os.WriteFile(keyFile, []byte(newB64), 0o600); err != nil {
		t.Fatal(err)
	}
	oldFile := up.GossipKeyFile(d.dir)
	admin := d.region("east").AdminURL
	cli := func(args ...string) {
		t.Helper()
		// The keyring is a secret: the operator authenticates with the
		// deployment's client certificate (authentication is off here).
		cf := up.ClientFiles(d.dir)
		base := []string{"admin", "--url", admin, "--tls-trust-certs-file", d.e.TLSTrustCertsFile,
			"--tls-cert-file", cf.CertFile, "--tls-key-file", cf.KeyFile, "gossip", "keys"}
		var out bytes.Buffer
		cmd := exec.Command(testutil.MeridianBinary(t), append(base, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("meridian %v: %v\n%s", args, err, out.String())
		}
		if strings.Contains(out.String(), newB64) || strings.Contains(out.String(), oldB64) {
			t.Fatalf("meridian %v printed a key: %s", args, out.String())
		}
	}
	// Without credentials the keyring is neither shown nor changed.
	for _, args := range [][]string{{"list"}, {"install", "--key-file", keyFile}} {
		var out bytes.Buffer
		cmd := exec.Command(testutil.MeridianBinary(t), append([]string{"admin", "--url", admin, "--tls-trust-certs-file", d.e.TLSTrustCertsFile, "gossip", "keys"}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err == nil || !strings.Contains(out.String(), "403") || strings.Contains(out.String(), oldB64) {
			t.Fatalf("meridian admin gossip keys %v without credentials: err %v, output %s; want a 403", args, err, out.String())
		}
	}
	for _, step := range [][]string{{"install", "--key-file", keyFile}, {"use", "--key-file", keyFile}, {"remove", "--key-file", oldFile}} {
		cli(step...)
		if m, ok := noneFailed(); !ok {
			t.Fatalf("after %v: membership %v", step[0], m)
		}
	}
	kr = keyring{} // decoding into a used map would merge the keys
	if err := d.admin("east", "GET", "/admin/v2/meridian/gossip/keys", nil, &kr); err != nil {
		t.Fatal(err)
	}
	if kr.Members != len(names) || len(kr.Keys) != 1 || kr.Keys[newB64] != len(names) || kr.PrimaryKeys[newB64] != len(names) {
		t.Fatalf("keyring after the rotation: %+v", kr)
	}
	// Membership held through the rotation and after it.
	time.Sleep(3 * time.Second)
	if m, ok := noneFailed(); !ok {
		t.Fatalf("membership after the rotation: %v", m)
	}
	old, _ := base64.StdEncoding.DecodeString(oldB64)
	if intruder(t, "old-key", seeds, old, 3*time.Second) {
		t.Fatal("a process with the removed key joined")
	}
	if !intruder(t, "new-key", seeds, newKey, 10*time.Second) {
		t.Fatal("a process with the new key could not join")
	}
	// Secrets are not in endpoints.json or plan.json.
	for _, f := range []string{"endpoints.json", "plan.json"} {
		b, err := os.ReadFile(d.dir + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{oldB64, newB64, "PRIVATE KEY"} {
			if bytes.Contains(b, []byte(secret)) {
				t.Fatalf("%s holds a secret", f)
			}
		}
	}
}
