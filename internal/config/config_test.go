package config

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// testFlags is a small role: four settings of one section, one with an
// older key, one secret, one list.
type testFlags struct {
	listen, advertise, secret string
	ttl                       time.Duration
	n                         int
	on                        bool
	list                      []string
}

func newTestFlags() (*pflag.FlagSet, *testFlags) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var v testFlags
	Group(fs, "broker", func() {
		fs.StringVar(&v.listen, "listen", "127.0.0.1:1", "")
		fs.StringVar(&v.advertise, "advertise", "", "")
		fs.DurationVar(&v.ttl, "ownership-ttl", 10*time.Second, "")
		fs.IntVar(&v.n, "broker-workers", 2, "")
		fs.BoolVar(&v.on, "enabled", true, "")
		fs.StringSliceVar(&v.list, "seeds", []string{"d:1"}, "")
	})
	fs.StringVar(&v.secret, "token-secret-key", "", "")
	Section(fs, "security")
	Bind(fs, "listen", "broker.listen_addr", "broker.listen")
	var cfg string
	fs.StringVar(&cfg, "config", "", "")
	Unbound(fs, "config")
	return fs, &v
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func mustParse(t *testing.T, y string) *File {
	t.Helper()
	f, err := ParseFile("c.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The keys: Bind's explicit key wins, Group and Section derive
// SECTION.NAME with the section's prefix cut, --config is no setting.
func TestConfigKeysDerivedFromFlags(t *testing.T) {
	fs, _ := newTestFlags()
	want := map[string]string{
		"listen":           "broker.listen_addr",
		"advertise":        "broker.advertise",
		"ownership-ttl":    "broker.ownership_ttl",
		"broker-workers":   "broker.workers",
		"token-secret-key": "security.token_secret_key",
		"config":           "",
	}
	for flag, key := range want {
		if got := Key(fs.Lookup(flag)); got != key {
			t.Errorf("--%s: key %q, want %q", flag, got, key)
		}
	}
	if EnvName("broker.listen_addr") != "MERIDIAN_BROKER_LISTEN_ADDR" || EnvName("security.tls.ca_file") != "MERIDIAN_SECURITY_TLS_CA_FILE" {
		t.Error("EnvName")
	}
}

// Requirement: flag > environment > file > default, for each setting.
func TestConfigPrecedenceFlagEnvFileDefault(t *testing.T) {
	fs, v := newTestFlags()
	if err := fs.Parse([]string{"--listen", "flag:1"}); err != nil {
		t.Fatal(err)
	}
	file := mustParse(t, `
broker:
  listen_addr: file:1     # loses to the flag
  advertise: file:2       # loses to the environment
  ownership_ttl: 30s      # wins over the default
  seeds: [a:1, b:2]
`)
	e, err := Apply(fs, file, env(map[string]string{
		"MERIDIAN_BROKER_LISTEN_ADDR": "env:1",
		"MERIDIAN_BROKER_ADVERTISE":   "env:2",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if v.listen != "flag:1" || v.advertise != "env:2" || v.ttl != 30*time.Second || v.n != 2 || strings.Join(v.list, ",") != "a:1,b:2" {
		t.Fatalf("values %+v", *v)
	}
	for key, src := range map[string]Source{"broker.listen_addr": FromFlag, "broker.advertise": FromEnv, "broker.ownership_ttl": FromFile, "broker.workers": Default, "broker.seeds": FromFile} {
		if s, _ := e.Get(key); s.Source != src {
			t.Errorf("%s: source %v, want %v", key, s.Source, src)
		}
	}
	if !e.Given("broker.advertise") || e.Given("broker.workers") {
		t.Error("Given")
	}
}

// A list from the file or the environment replaces the default (a
// StringSlice flag given twice on a command line appends).
func TestConfigListReplacesDefault(t *testing.T) {
	fs, v := newTestFlags()
	if _, err := Apply(fs, nil, env(map[string]string{"MERIDIAN_BROKER_SEEDS": "x:1, y:2"})); err != nil {
		t.Fatal(err)
	}
	if strings.Join(v.list, ",") != "x:1,y:2" {
		t.Fatalf("seeds %v", v.list)
	}
}

// Older keys of the same setting keep working; giving both with
// different values is an error naming both.
func TestConfigOlderKeys(t *testing.T) {
	fs, v := newTestFlags()
	if _, err := Apply(fs, mustParse(t, "broker: {listen: old:1}"), env(nil)); err != nil || v.listen != "old:1" {
		t.Fatalf("older key: %v %q", err, v.listen)
	}
	fs, _ = newTestFlags()
	_, err := Apply(fs, mustParse(t, "broker: {listen: old:1, listen_addr: new:1}"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "broker.listen=") || !strings.Contains(err.Error(), "broker.listen_addr") {
		t.Fatalf("conflict: %v", err)
	}
	fs, v = newTestFlags()
	if _, err := Apply(fs, mustParse(t, "broker: {listen: same:1, listen_addr: same:1}"), env(nil)); err != nil || v.listen != "same:1" {
		t.Fatalf("same value twice: %v", err)
	}
}

// A value its flag refuses names the key and where it came from.
func TestConfigBadValueNamesKeyAndSource(t *testing.T) {
	fs, _ := newTestFlags()
	_, err := Apply(fs, mustParse(t, "broker: {ownership_ttl: 10}"), env(nil))
	if err == nil || !strings.Contains(err.Error(), `broker.ownership_ttl="10" (file c.yaml)`) {
		t.Fatalf("file: %v", err)
	}
	fs, _ = newTestFlags()
	_, err = Apply(fs, nil, env(map[string]string{"MERIDIAN_BROKER_WORKERS": "two"}))
	if err == nil || !strings.Contains(err.Error(), "broker.workers") || !strings.Contains(err.Error(), "env MERIDIAN_BROKER_WORKERS") {
		t.Fatalf("env: %v", err)
	}
}

// A flag added with no key is a wiring error, not a silent gap.
func TestConfigFlagWithoutKeyIsAnError(t *testing.T) {
	fs, _ := newTestFlags()
	fs.Int("later", 0, "")
	if _, err := Apply(fs, nil, env(nil)); err == nil || !strings.Contains(err.Error(), "--later has no config key") {
		t.Fatalf("err %v", err)
	}
}

func TestConfigCheckFileAndEnv(t *testing.T) {
	known := map[string]bool{"region": true, "broker.listen_addr": true, "security.tls.ca_file": true}
	if err := CheckFile(mustParse(t, "region: e\nbroker: {listen_addr: a:1}\nsecurity: {tls: {ca_file: x}}\n"), known); err != nil {
		t.Fatal(err)
	}
	err := CheckFile(mustParse(t, "region: e\nbroker:\n  listn: a:1\n"), known)
	if err == nil || !strings.Contains(err.Error(), "line 3: unknown key broker.listn") {
		t.Fatalf("unknown key: %v", err)
	}
	err = CheckEnv([]string{"MERIDIAN_BROKER_LISTEN_ADDR=a", "MERIDIAN_BROKER_LISTN=a", "MERIDIAN_TEST_KEEP_LOGS=1", "MERIDIAN_REGIONS=x", "PATH=/bin"}, known)
	if err == nil || !strings.Contains(err.Error(), "MERIDIAN_BROKER_LISTN") || strings.Contains(err.Error(), "TEST") || strings.Contains(err.Error(), "REGIONS") {
		t.Fatalf("env: %v", err)
	}
}

func TestConfigFileForms(t *testing.T) {
	for _, y := range []string{"", "# nothing\n", "~\n"} {
		if f, err := ParseFile("x", []byte(y)); err != nil || len(f.Keys()) != 0 {
			t.Errorf("%q: %v", y, err)
		}
	}
	for _, y := range []string{"- a\n", "a: [{b: 1}]\n", "a: 1\na: 2\n", "a: {b: 1}\na: {b: 2}\n"} {
		if _, err := ParseFile("x", []byte(y)); err == nil {
			t.Errorf("%q: no error", y)
		}
	}
	f := mustParse(t, "a:\n  b: ''\n  c:\n  d: &x 5\n  e: *x\n")
	if v, ok := f.Get("a.b"); !ok || v != "" {
		t.Error("empty string is a value")
	}
	if _, ok := f.Get("a.c"); ok {
		t.Error("null is no value")
	}
	if v, _ := f.Get("a.e"); v != "5" {
		t.Error("alias")
	}
}

// --print-config: secrets masked (but a file:// path shown), each value's
// source, flag and variable named, and the output reads back as a file
// giving the same values.
func TestConfigPrintMasksSecretsAndReadsBack(t *testing.T) {
	fs, _ := newTestFlags()
	e, err := Apply(fs, mustParse(t, "broker: {ownership_ttl: 1m}\nsecurity: {token_secret_key: 'data:;base64,c2VjcmV0c2VjcmV0'}\n"), env(map[string]string{"MERIDIAN_BROKER_ADVERTISE": "yes"}))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := e.PrintTo(&out, "t"); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if strings.Contains(s, "c2VjcmV0") || !strings.Contains(s, "token_secret_key: '******'") && !strings.Contains(s, `token_secret_key: "******"`) {
		t.Fatalf("secret not masked:\n%s", s)
	}
	for _, want := range []string{"ownership_ttl: 1m0s # file c.yaml · --ownership-ttl · MERIDIAN_BROKER_OWNERSHIP_TTL", "# env · --advertise", "workers: 2 # default"} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in\n%s", want, s)
		}
	}
	back, err := ParseFile("out", out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range e.Settings {
		if v, ok := back.Get(st.Key); !IsSecret(st.Key) && (!ok || v != st.Value) {
			t.Errorf("%s reads back %q, want %q", st.Key, v, st.Value)
		}
	}
	if Mask("file:///etc/k.pem") != "file:///etc/k.pem" || Mask("") != "" || Mask("abc") == "abc" {
		t.Error("Mask")
	}
	for k, want := range map[string]bool{"gossip.key": true, "gossip.key_file": false, "security.token_secret_key": true, "security.token_public_key": true,
		"security.token_audience": false, "security.etcd_password_file": false, "x.password": true, "security.tls.key_file": false, "broker.listen_addr": false} {
		if IsSecret(k) != want {
			t.Errorf("IsSecret(%s) = %v", k, !want)
		}
	}
}

func TestConfigQuorums(t *testing.T) {
	for _, c := range []struct {
		e, qw, qa int
		ok        bool
	}{{3, 3, 2, true}, {1, 1, 1, true}, {5, 3, 3, true}, {3, 5, 7, false}, {3, 3, 0, false}, {2, 3, 2, false}, {3, 2, 3, false}} {
		if err := Quorums(c.e, c.qw, c.qa); (err == nil) != c.ok {
			t.Errorf("E=%d Qw=%d Qa=%d: %v", c.e, c.qw, c.qa, err)
		}
	}
}

func TestConfigRules(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Rule
		v    string
		ok   bool
	}{
		{"int range", IntRange(1, 100, "x"), "100", true},
		{"int range low", IntRange(1, 100, "x"), "0", false},
		{"int range high", IntRange(1, 100, "x"), "101", false},
		{"int range word", IntRange(1, 100, "x"), "5MiB", false},
		{"hostport", HostPort(false), "127.0.0.1:6650", true},
		{"hostport v6", HostPort(false), "[::1]:0", true},
		{"hostport no port", HostPort(false), "127.0.0.1", false},
		{"hostport big port", HostPort(false), "h:70000", false},
		{"hostport empty", HostPort(false), "", false},
		{"hostport optional", HostPort(true), "", true},
		{"list", HostPortList, "a:1, b:2", true},
		{"list bad", HostPortList, "a:1,b", false},
		{"urls", URLList(true), "http://a:2379,https://b:2379", true},
		{"urls named", URLList(true), "east=http://a:2379,west=http://b:2379", true},
		{"urls scheme", URLList(true), "a:2379", false},
		{"urls empty", URLList(true), "", false},
		{"name", Name, "east-1", true},
		{"name slash", Name, "east/1", false},
		{"name space", Name, "east 1", false},
		{"name dash end", Name, "east-", false},
		{"name empty", Name, "", false},
		{"optional name", OptionalName, "", true},
		{"positive", Positive, "1ms", true},
		{"positive 0", Positive, "0s", false},
		{"min 0", DurationMin(0, ""), "0s", true},
		{"min neg", DurationMin(0, ""), "-1s", false},
		{"port", Port, "65535", true},
		{"port neg", Port, "-1", false},
		{"oneof", OneOf("a", "b"), "c", false},
	} {
		if err := c.r(c.v); (err == nil) != c.ok {
			t.Errorf("%s %q: %v", c.name, c.v, err)
		}
	}
}

// Validate names the key, the value and its source; a rule for a key
// the role lacks is reported (it must not silently stop applying).
func TestConfigValidateNamesKey(t *testing.T) {
	fs, _ := newTestFlags()
	e, err := Apply(fs, mustParse(t, "broker: {ownership_ttl: 0s}"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	err = e.Validate(map[string]Rule{"broker.ownership_ttl": Positive, "broker.gone": Positive})
	if err == nil || !strings.Contains(err.Error(), `broker.ownership_ttl="0s" (file c.yaml): want a duration > 0`) || !strings.Contains(err.Error(), "broker.gone") {
		t.Fatalf("%v", err)
	}
}
