package helmtest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// setting is one line of `meridian ROLE --print-config`:
//
//	admin_addr: 0.0.0.0:8080 # env · --admin · MERIDIAN_BROKER_ADMIN_ADDR
type setting struct {
	key, value string
	source     string // default, env, flag, file PATH
	flag, env  string
}

type effective map[string]setting

func (e effective) value(key string) string { return e[key].value }

// parsePrintConfig reads --print-config's YAML with its line comments
// (the keys nest two spaces a level).
func parsePrintConfig(out string) (effective, error) {
	eff := effective{}
	var stack []string
	for n, line := range strings.Split(out, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := (len(line) - len(strings.TrimLeft(line, " "))) / 2
		if indent > len(stack) {
			return nil, fmt.Errorf("--print-config line %d: %q: unexpected indentation", n+1, line)
		}
		stack = stack[:indent]
		body, comment, hasComment := cut(trimmed, " # ")
		name, val, ok := strings.Cut(body, ":")
		if !ok {
			return nil, fmt.Errorf("--print-config line %d: %q: no key", n+1, line)
		}
		if !hasComment { // a section
			stack = append(stack, name)
			continue
		}
		parts := strings.Split(comment, " · ")
		if len(parts) != 3 || !strings.HasPrefix(parts[1], "--") {
			return nil, fmt.Errorf("--print-config line %d: %q: want `# SOURCE · --FLAG · ENV`", n+1, line)
		}
		v, err := unquote(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("--print-config line %d: %v", n+1, err)
		}
		key := strings.Join(append(append([]string{}, stack...), name), ".")
		eff[key] = setting{key: key, value: v, source: parts[0], flag: strings.TrimPrefix(parts[1], "--"), env: parts[2]}
	}
	if len(eff) == 0 {
		return nil, fmt.Errorf("--print-config printed no setting:\n%s", out)
	}
	return eff, nil
}

// cut at the last sep (a value holds no " # ").
func cut(s, sep string) (string, string, bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

func unquote(v string) (string, error) {
	switch {
	case strings.HasPrefix(v, `"`):
		return strconv.Unquote(v)
	case strings.HasPrefix(v, "'") && strings.HasSuffix(v, "'") && len(v) >= 2:
		return strings.ReplaceAll(v[1:len(v)-1], "''", "'"), nil
	}
	return v, nil
}

func TestParsePrintConfig(t *testing.T) {
	out := `# meridian broker: effective configuration
# Precedence: flag > environment > file > default. Secrets are masked.

region: east # file /x/meridian.yaml · --region · MERIDIAN_REGION
broker:
  admin_addr: 0.0.0.0:8080 # env · --admin · MERIDIAN_BROKER_ADMIN_ADDR
  advertised_addr: "" # default · --advertise · MERIDIAN_BROKER_ADVERTISED_ADDR
security:
  tls:
    ca_file: /etc/meridian-tls/ca.crt # file /x/meridian.yaml · --tls-trust-certs-file · MERIDIAN_SECURITY_TLS_CA_FILE
  token_secret_key: '******' # env · --token-secret-key · MERIDIAN_SECURITY_TOKEN_SECRET_KEY
`
	eff, err := parsePrintConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]setting{
		"region":                    {key: "region", value: "east", source: "file /x/meridian.yaml", flag: "region", env: "MERIDIAN_REGION"},
		"broker.admin_addr":         {key: "broker.admin_addr", value: "0.0.0.0:8080", source: "env", flag: "admin", env: "MERIDIAN_BROKER_ADMIN_ADDR"},
		"broker.advertised_addr":    {key: "broker.advertised_addr", value: "", source: "default", flag: "advertise", env: "MERIDIAN_BROKER_ADVERTISED_ADDR"},
		"security.tls.ca_file":      {key: "security.tls.ca_file", value: "/etc/meridian-tls/ca.crt", source: "file /x/meridian.yaml", flag: "tls-trust-certs-file", env: "MERIDIAN_SECURITY_TLS_CA_FILE"},
		"security.token_secret_key": {key: "security.token_secret_key", value: "******", source: "env", flag: "token-secret-key", env: "MERIDIAN_SECURITY_TOKEN_SECRET_KEY"},
	}
	if len(eff) != len(want) {
		t.Errorf("got %d settings, want %d: %v", len(eff), len(want), eff)
	}
	for k, w := range want {
		if eff[k] != w {
			t.Errorf("%s: got %+v, want %+v", k, eff[k], w)
		}
	}
}
