package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

var roleNames = []string{"etcd", "bookie", "broker", "autorecovery", "standalone"}

// testValue is a value for f other than its default, of its type.
func testValue(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "bool":
		if f.DefValue == "true" {
			return "false"
		}
		return "true"
	case "int", "int64":
		return "7"
	case "float64":
		return "0.5"
	case "duration":
		return "7s"
	case "stringSlice":
		return "h1:1,h2:2"
	}
	return "h9:9"
}

// yamlFor is a config file setting key to v.
func yamlFor(key, v string) []byte {
	parts := strings.Split(key, ".")
	var m any = v
	for i := len(parts) - 1; i >= 0; i-- {
		m = map[string]any{parts[i]: m}
	}
	b, _ := yaml.Marshal(m)
	return b
}

// Requirement (issue 28): the file and the environment can set every
// setting a role's flags set. Iterates the flag sets, so a flag added
// later without a key — or of a type a file value cannot set — fails.
func TestConfigEveryFlagOfEveryRoleIsSettable(t *testing.T) {
	dir := t.TempDir()
	n := 0
	for _, role := range roleNames {
		roleCommands()[role].Flags().VisitAll(func(f *pflag.Flag) {
			if !config.IsSetting(f) {
				return
			}
			n++
			key := config.Key(f)
			if key == "" {
				t.Errorf("%s --%s: no config key", role, f.Name)
				return
			}
			want := testValue(f)
			// From the file.
			path := filepath.Join(dir, "c.yaml")
			if err := os.WriteFile(path, yamlFor(key, want), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := roleCommands()[role]
			eff, err := loadRoleConfig(cmd, path, noEnv, nil)
			if err != nil {
				t.Errorf("%s --%s from file key %s: %v", role, f.Name, key, err)
				return
			}
			if s, _ := eff.Get(key); s.Source != config.FromFile || s.Value != want || valueOf(cmd, f.Name) != want {
				t.Errorf("%s --%s from file key %s=%s: got %q from %v", role, f.Name, key, want, s.Value, s.Source)
			}
			// From the environment.
			cmd = roleCommands()[role]
			name := config.EnvName(key)
			eff, err = loadRoleConfig(cmd, "", func(k string) (string, bool) { return want, k == name }, []string{name + "=" + want})
			if err != nil {
				t.Errorf("%s --%s from %s: %v", role, f.Name, name, err)
				return
			}
			if s, _ := eff.Get(key); s.Source != config.FromEnv || valueOf(cmd, f.Name) != want {
				t.Errorf("%s --%s from %s=%s: got %q from %v", role, f.Name, name, want, s.Value, s.Source)
			}
		})
	}
	if n < 100 {
		t.Fatalf("only %d settings over the roles: the flag sets were not iterated", n)
	}
}

func noEnv(string) (string, bool) { return "", false }

func valueOf(cmd *cobra.Command, flag string) string {
	f := cmd.Flags().Lookup(flag)
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return strings.Join(sv.GetSlice(), ",")
	}
	return f.Value.String()
}

// A key means one thing in every role that has it (one file can serve
// several roles): the same type everywhere (the flag's name may differ:
// the broker's --recovery-workers is autorecovery's --workers); and no
// two keys share an environment variable.
func TestConfigKeysMeanOneThingAcrossRoles(t *testing.T) {
	type use struct{ role, flag, typ string }
	byKey := map[string]use{}
	byEnv := map[string]string{}
	for _, role := range roleNames {
		roleCommands()[role].Flags().VisitAll(func(f *pflag.Flag) {
			k := config.Key(f)
			if k == "" {
				return
			}
			u := use{role, f.Name, f.Value.Type()}
			if prev, ok := byKey[k]; ok && (prev.typ != u.typ || prev.flag != u.flag && !strings.HasPrefix(k, "recovery.")) {
				t.Errorf("key %s: %s --%s (%s) but %s --%s (%s)", k, prev.role, prev.flag, prev.typ, role, f.Name, u.typ)
			}
			byKey[k] = u
			if other, ok := byEnv[config.EnvName(k)]; ok && other != k {
				t.Errorf("%s and %s share %s", k, other, config.EnvName(k))
			}
			byEnv[config.EnvName(k)] = k
		})
	}
}

// The config variables' namespace cannot collide with the other MERIDIAN_
// variables (MERIDIAN_TEST_*, MERIDIAN_FAULT_*, MERIDIAN_PPROF_DIR, the
// client's MERIDIAN_TOKEN…): every MERIDIAN_ name in the repository that
// is no config variable starts with a word that is no config section.
// A variable added later in a section's namespace (MERIDIAN_BROKER_X read
// by os.Getenv) fails this, as does a section named TEST.
func TestConfigEnvNamespaceCannotCollide(t *testing.T) {
	sections := map[string]string{}
	configNames := map[string]bool{}
	for k := range knownKeys() {
		sections[config.SectionWord(k)] = k
		configNames[config.EnvName(k)] = true
	}
	for _, w := range []string{"TEST", "FAULT", "PPROF"} {
		if k, ok := sections[w]; ok {
			t.Errorf("section word %s (key %s) is the namespace of MERIDIAN_%s_*", w, k, w)
		}
	}
	re := regexp.MustCompile(`MERIDIAN_[A-Z0-9_]*[A-Z0-9]`)
	found := 0
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == "data" || n == "bin" || n == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, "cmd/meridian/config_test.go") || strings.HasSuffix(path, "internal/config/config_test.go") {
			return nil // they make up wrong names on purpose
		}
		switch filepath.Ext(path) {
		case ".go", ".sh", ".md", ".yaml", ".yml", ".json", "":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil || len(b) > 4<<20 {
			return nil
		}
		for _, name := range re.FindAllString(string(b), -1) {
			found++
			if configNames[name] {
				continue
			}
			w, _, _ := strings.Cut(strings.TrimPrefix(name, config.EnvPrefix), "_")
			if k, ok := sections[w]; ok {
				t.Errorf("%s: %s lies in the namespace of config section %s (key %s): rename one", path, name, w, k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 20 {
		t.Fatalf("found %d MERIDIAN_ names: the scan missed the repository", found)
	}
}

// The example config of every role under deploy/ loads through its role
// with no unknown key, and its values land in the role's flags.
func TestConfigDeployExamplesLoad(t *testing.T) {
	files, _ := filepath.Glob("../../deploy/*.yaml")
	if len(files) == 0 {
		t.Fatal("no deploy/*.yaml examples")
	}
	for _, f := range files {
		role := strings.TrimSuffix(filepath.Base(f), ".yaml")
		cmd, ok := roleCommands()[role]
		if !ok {
			t.Errorf("%s: no role %s", f, role)
			continue
		}
		eff, err := loadRoleConfig(cmd, f, noEnv, nil)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, s := range eff.Settings {
			if s.Source != config.FromFile && s.Source != config.Default {
				t.Errorf("%s: %s from %v", f, s.Key, s.Source)
			}
		}
		want := map[string]map[string]string{
			"bookie":       {"region": "east", "bookie.rack": "r1", "bookie.disk_check_interval": "1s", "bookie.mem_table_size_bytes": "67108864", "metadata.endpoints": "http://127.0.0.1:2379"},
			"broker":       {"region": "east", "broker.ensemble_size": "3", "broker.ack_quorum": "2", "broker.ownership_ttl": "10s", "broker.id": "east-broker-1"},
			"etcd":         {"etcd.name": "east-1", "etcd.data_dir": "./data/etcd-east-1"},
			"autorecovery": {"autorecovery.id": "east-recovery-1", "recovery.lost_bookie_delay": "1m0s", "gossip.seeds": ""},
			"standalone":   {"standalone.bookies": "3", "broker.listen_addr": "127.0.0.1:6650", "standalone.tls": "false", "broker.max_message_size": "5242880"},
		}[role]
		for k, v := range want {
			if s, _ := eff.Get(k); s.Value != v || s.Source != config.FromFile {
				t.Errorf("%s: %s=%q from %v, want %q from the file", f, k, s.Value, s.Source, v)
			}
		}
	}
}

// runRole runs `meridian ARGS` in-process (no network: --print-config,
// or a validation error before anything starts).
func runRole(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// Requirement (issue 28): ensemble_size 3, write_quorum 5, ack_quorum 7
// is refused at start, naming the key; so are a bad duration, port,
// address and region name. An ensemble larger than the region's live
// bookies is not a start-up error (nothing here asks the bookies).
func TestConfigValidationNamesTheKey(t *testing.T) {
	dir := t.TempDir()
	write := func(y string) string {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		role, yaml, want string
	}{
		{"broker", "broker: {ensemble_size: 3, write_quorum: 5, ack_quorum: 7}", "broker.ack_quorum"},
		{"broker", "broker: {ensemble_size: 2, write_quorum: 3, ack_quorum: 2}", "broker.write_quorum"},
		{"broker", "broker: {ensemble_size: 2}", "broker.ensemble_size"},
		{"broker", "broker: {ack_quorum: 0}", "broker.ack_quorum"},
		{"broker", "broker: {ownership_ttl: 0s}", "broker.ownership_ttl"},
		{"broker", "broker: {listen_addr: 'localhost:99999'}", "broker.listen_addr"},
		{"broker", "metadata: {endpoints: [127.0.0.1:2379]}", "metadata.endpoints"},
		{"broker", "region: east/1", "region"},
		{"broker", "broker: {rack: 'r 1'}", "broker.rack"},
		{"bookie", "bookie: {disk_usage_threshold: 1.5}", "bookie.disk_usage_threshold"},
		{"bookie", "bookie: {rack: -r1}", "bookie.rack"},
		{"etcd", "etcd: {cluster_state: old}", "etcd.cluster_state"},
		{"autorecovery", "recovery: {workers: 0}", "recovery.workers"},
		{"standalone", "standalone: {bookie_base_port: 70000}", "standalone.bookie_base_port"},
		{"standalone", "broker: {max_message_size: 104857601}", "broker.max_message_size"},
		{"broker", "broker: {max_message_size: 0}", "broker.max_message_size"},
		{"broker", "gossip: {addr: nohost}", "gossip.addr"},
		{"broker", "log: {level: loud}", "log.level"},
		{"broker", "broker: {advertised_listeners: ['pulsar://h:1']}", "broker.advertised_listeners"},
		{"broker", "broker: {advertised_listeners: ['a:pulsar://h:1', 'b:pulsar://h:1']}", "broker.advertised_listeners"},
		{"broker", "broker: {advertised_listeners: ['a:pulsar://h:1'], internal_listener_name: b}", "broker.internal_listener_name"},
		{"broker", "broker: {advertised_listeners: ['a:pulsar://h:1'], advertised_addr: 'h:2'}", "broker.advertised_addr"},
		{"broker", "broker: {advertised_listeners: ['a:pulsar://h:1'], bind_addresses: ['b:pulsar://0.0.0.0:2']}", "broker.bind_addresses"},
		{"broker", "security: {tls: {cert_file: c.pem}}\nbroker: {advertised_listeners: ['a:pulsar://h:1']}", "broker.advertised_listeners"},
		{"standalone", "broker: {bind_addresses: ['a:pulsar://0.0.0.0:2']}", "broker.bind_addresses"},
		{"broker", "broker: {advertised_listeners: ['a:pulsar://h:1', 'a:http://h:2', 'a:http://h:3']}", "broker.advertised_listeners"},
		{"broker", "broker: {advertised_listeners: ['a:pulsar://h:1', 'b:https://h:2']}", "broker.advertised_listeners"},
		{"broker", "broker: {advertised_listeners: ['a:pulsar://h:1', 'a:http://h:2/admin']}", "broker.advertised_listeners"},
		{"broker", "broker: {advertised_listeners: ['a:http://h:2']}", "broker.advertised_listeners"},
		{"broker", "gossip: {advertise_addr: nohost}", "gossip.advertise_addr"},
		{"etcd", "etcd: {advertise_peer_url: '127.0.0.1:2380'}", "etcd.advertise_peer_url"},
	} {
		_, err := runRole(t, c.role, "--config", write(c.yaml), "--print-config")
		if err == nil || !strings.Contains(err.Error(), "config "+c.want+"=") {
			t.Errorf("%s %s: %v, want an error naming %s", c.role, c.yaml, err, c.want)
		}
	}
	// Listeners as Pulsar writes them: valid.
	if _, err := runRole(t, "broker", "--config", write("broker: {advertised_listeners: 'internal:pulsar://10.0.0.5:6650,external:pulsar://b1.example.com:6652', bind_addresses: ['external:pulsar://0.0.0.0:6652']}"), "--print-config"); err != nil {
		t.Errorf("advertised listeners: %v", err)
	}
	// With web service URLs per listener (Pulsar's form): valid.
	if _, err := runRole(t, "broker", "--config", write("broker: {advertised_listeners: 'internal:pulsar://10.0.0.5:6650,internal:http://10.0.0.5:8080,external:pulsar://b1.example.com:6652,external:http://b1.example.com:8080,external:https://b1.example.com:8443'}"), "--print-config"); err != nil {
		t.Errorf("advertised listeners with http and https URLs: %v", err)
	}
	// Valid, and more than a region of 3 bookies could hold: fine at start.
	if _, err := runRole(t, "broker", "--config", write("broker: {ensemble_size: 9, write_quorum: 5, ack_quorum: 3}"), "--print-config"); err != nil {
		t.Errorf("E=9 Qw=5 Qa=3: %v", err)
	}
	// A flag of the root (--log-level, a global variable) survives the
	// checks that build every role's flags afresh.
	if out, err := runRole(t, "broker", "--log-level", "debug", "--print-config"); err != nil || !strings.Contains(out, "level: debug # flag") {
		t.Errorf("--log-level debug: %v\n%s", err, out)
	}
	// Every role's defaults are valid.
	for _, role := range roleNames {
		if _, err := runRole(t, role, "--print-config"); err != nil {
			t.Errorf("%s defaults: %v", role, err)
		}
	}
}

// Requirement (issue 28): the real binary takes env + file + flag with
// flag > env > file > default, --print-config says where each value came
// from and masks secrets; a broker given an invalid quorum exits
// non-zero naming the key, before connecting to anything.
func TestConfigBinaryPrecedenceMaskingAndBadQuorum(t *testing.T) {
	bin := testutil.MeridianBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "broker.yaml")
	secret := "data:;base64,c3VwZXJzZWNyZXRrZXlzdXBlcnNlY3JldGtleQ=="
	gossipKey := "MDEyMzQ1Njc4OWFiY2RlZg=="
	if err := os.WriteFile(cfg, []byte(`
region: east
broker:
  listen_addr: 10.0.0.1:6650    # the flag wins
  admin_addr: 10.0.0.1:8080     # the environment wins
  rack: r2                      # the file wins
metadata:
  endpoints: https://10.0.0.1:2379
security:
  token_secret_key: "`+secret+`"
  tls: {cert_file: /etc/m/broker.pem, key_file: /etc/m/broker-key.pem, ca_file: /etc/m/ca.pem}
gossip:
  key: `+gossipKey+`
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "broker", "--config", cfg, "--listen", "10.0.0.9:6650", "--print-config")
	cmd.Env = append(os.Environ(), "MERIDIAN_BROKER_ADMIN_ADDR=10.0.0.8:8080", "MERIDIAN_BROKER_LISTEN_ADDR=10.0.0.7:6650")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []string{
		"listen_addr: 10.0.0.9:6650 # flag · --listen",
		"admin_addr: 10.0.0.8:8080 # env · --admin · MERIDIAN_BROKER_ADMIN_ADDR",
		"rack: r2 # file " + cfg,
		"ownership_ttl: 10s # default",
		"region: east # file",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in\n%s", want, s)
		}
	}
	if strings.Contains(s, "c3VwZXJzZWNyZXRrZXk") || strings.Contains(s, gossipKey) {
		t.Errorf("a secret is printed:\n%s", s)
	}
	if !regexp.MustCompile(`token_secret_key: ["']\*+["']`).MatchString(s) || !regexp.MustCompile(`\bkey: ["']\*+["']`).MatchString(s) {
		t.Errorf("secrets not shown as masked:\n%s", s)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("broker:\n  ensemble_size: 3\n  write_quorum: 5\n  ack_quorum: 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// No etcd listens on the default endpoint's port here: a broker that
	// got past validation would wait 30 s for it; this one must not.
	out, err = exec.Command(bin, "broker", "--config", bad, "--etcd", "http://127.0.0.1:1").CombinedOutput()
	if err == nil {
		t.Fatalf("broker with E=3 Qw=5 Qa=7 exited 0:\n%s", out)
	}
	if !strings.Contains(string(out), "broker.ack_quorum") || !strings.Contains(string(out), "file "+bad) {
		t.Fatalf("the error does not name the key and the file:\n%s", out)
	}
}

// Requirement (issue 28): docs/configuration.md lists every key of every
// role, its flag, variable, default and meaning, generated from the flag
// sets: a flag added, renamed, re-defaulted or re-worded without `make
// docs` fails here, so the doc cannot drift from the code.
func TestConfigDocIsFresh(t *testing.T) {
	var want bytes.Buffer
	if err := config.WriteDoc(&want, docRoles()); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want.String(), "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("docs/configuration.md disagrees with the code (run make docs); first at line %d:\n doc:  %s\n code: %s", i+1, g, w)
			}
		}
	}
	// Every setting of every role is in it.
	n := 0
	for _, r := range docRoles() {
		r.Flags.VisitAll(func(f *pflag.Flag) {
			if config.IsSetting(f) {
				n++
				if !bytes.Contains(got, []byte("| `"+config.Key(f)+"` | `--"+f.Name+"` | `"+config.EnvName(config.Key(f))+"` |")) {
					t.Errorf("%s --%s (%s) is not in docs/configuration.md", r.Name, f.Name, config.Key(f))
				}
			}
		})
	}
	if n < 100 {
		t.Fatalf("only %d settings: the roles were not read", n)
	}
}
