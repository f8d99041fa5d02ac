package monitoring

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// promtool returns promtool's path: missing, the test fails in CI (CI
// set; .ci/run installs Debian's prometheus package) and is skipped
// elsewhere, as proto's TestGeneratedCodeIsFresh does with protoc.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not installed in CI: .ci/run must install Debian's prometheus package")
		}
		t.Skip("promtool not installed; apt-get install prometheus to check the alerting rules")
	}
	return p
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// Issue 29: the alerting rules are valid Prometheus rules
// (`promtool check rules`), and each fires on synthetic series shaped as
// the processes export them, and not where it should not (`promtool test
// rules alerts_test.yaml`).
func TestAlertRulesPassPromtool(t *testing.T) {
	p := promtool(t)
	run(t, p, "check", "rules", "alerts.yaml")
	run(t, p, "test", "rules", "alerts_test.yaml")
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// Issue 29: every alert has a runbook — its annotation names the section
// of docs/operations.md titled with the alert's name, and that section
// exists — and alerts_test.yaml shows it firing at least once.
func TestEveryAlertHasARunbookAndFiresInATest(t *testing.T) {
	var rf ruleFile
	readYAML(t, "alerts.yaml", &rf)
	var rt ruleTests
	readYAML(t, "alerts_test.yaml", &rt)
	fires := map[string]bool{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile(`(?m)^#+ +(Meridian[A-Za-z]+)\s*$`)
	sections := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(string(ops), -1) {
		sections[m[1]] = true
	}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if want := "docs/operations.md#" + strings.ToLower(r.Alert); r.Annotations["runbook"] != want {
				t.Errorf("%s: runbook annotation %q, want %q", r.Alert, r.Annotations["runbook"], want)
			}
			if !sections[r.Alert] {
				t.Errorf("%s: no section titled %s in docs/operations.md", r.Alert, r.Alert)
			}
			if !fires[r.Alert] {
				t.Errorf("%s: alerts_test.yaml never expects it to fire", r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts in alerts.yaml")
	}
}
