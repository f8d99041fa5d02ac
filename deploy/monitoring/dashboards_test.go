package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The dashboards Pulsar's operators expect (Pulsar's Grafana dashboards:
// overview, topic, bookkeeper, jvm) and Meridian's DR ones.
var wantDashboards = []string{"meridian-overview.json", "meridian-topic.json", "meridian-replication.json",
	"meridian-failover.json", "meridian-bookies.json", "meridian-process.json"}

// Issue 29: Grafana cannot be installed here, so the dashboards are
// checked as Grafana would load them: each file is a dashboard model with
// a unique uid and a title; every panel has a unique id, sits inside the
// 24-column grid without overlapping another, queries the dashboard's
// `datasource` variable, and every non-row panel has at least one target
// with an expression and a unique refId; every variable the expressions
// use is defined; the provisioning files name this folder.
func TestDashboardsAreWellFormed(t *testing.T) {
	ds, err := ReadDashboards(Dashboards, DashboardDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range wantDashboards {
		if ds[f] == nil {
			t.Errorf("dashboard %s missing", f)
		}
	}
	uids := map[string]string{}
	for file, d := range ds {
		if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
			t.Errorf("%s: uid %q, title %q, schemaVersion %d: all needed", file, d.UID, d.Title, d.SchemaVersion)
		}
		if other, ok := uids[d.UID]; ok {
			t.Errorf("%s and %s share uid %s", file, other, d.UID)
		}
		uids[d.UID] = file
		hasDS := false
		for _, v := range d.Templating.List {
			if v.Type == "datasource" && v.Name == "datasource" {
				hasDS = true
			}
			if v.Type == "query" && v.AllValue == "" {
				t.Errorf("%s variable %s: no allValue (an \"All\" would expand to a regex of every value)", file, v.Name)
			}
		}
		if !hasDS {
			t.Errorf("%s: no datasource variable", file)
		}
		ids := map[int]bool{}
		var cells [][4]int
		var walk func(ps []Panel)
		walk = func(ps []Panel) {
			for _, p := range ps {
				where := fmt.Sprintf("%s panel %d %q", file, p.ID, p.Title)
				if p.ID == 0 || ids[p.ID] {
					t.Errorf("%s: id missing or repeated", where)
				}
				ids[p.ID] = true
				g := p.GridPos
				if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
					t.Errorf("%s: gridPos %+v outside the 24-column grid", where, g)
				}
				for _, c := range cells {
					if g.X < c[0]+c[2] && c[0] < g.X+g.W && g.Y < c[1]+c[3] && c[1] < g.Y+g.H {
						t.Errorf("%s: gridPos %+v overlaps another panel's %v", where, g, c)
					}
				}
				cells = append(cells, [4]int{g.X, g.Y, g.W, g.H})
				if p.Type == "row" {
					walk(p.Panels)
					continue
				}
				if p.Title == "" {
					t.Errorf("%s: no title", where)
				}
				if !strings.Contains(string(p.Datasource), "${datasource}") {
					t.Errorf("%s: datasource %s, want the ${datasource} variable", where, p.Datasource)
				}
				if len(p.Targets) == 0 {
					t.Errorf("%s: no targets", where)
				}
				refs := map[string]bool{}
				for _, tg := range p.Targets {
					if tg.RefID == "" || refs[tg.RefID] || strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("%s: target %q without expr, or refId missing or repeated", where, tg.RefID)
					}
					refs[tg.RefID] = true
				}
			}
		}
		walk(d.Panels)
	}
	if _, err := Queries(Dashboards, DashboardDir); err != nil {
		t.Error(err)
	}

	var dsProv struct {
		Datasources []struct{ Name, Type, URL string } `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/meridian.yaml", &dsProv)
	if len(dsProv.Datasources) != 1 || dsProv.Datasources[0].Type != "prometheus" || dsProv.Datasources[0].URL == "" {
		t.Errorf("datasource provisioning: %+v, want one prometheus data source with a url", dsProv)
	}
	var dbProv struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Type    string
			Options struct{ Path string }
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/meridian.yaml", &dbProv)
	if dbProv.APIVersion != 1 || len(dbProv.Providers) != 1 || dbProv.Providers[0].Type != "file" || dbProv.Providers[0].Options.Path == "" {
		t.Errorf("dashboards provisioning: %+v, want apiVersion 1 and one file provider with a path", dbProv)
	}
}

// recordName makes a recording rule's name of a query's place (a metric
// name: letters, digits, _ and :).
var notMetricChar = regexp.MustCompile(`[^a-zA-Z0-9_:]+`)

// Issue 29: every PromQL expression of every dashboard (panel targets and
// the variables' selectors, template variables substituted) is valid
// PromQL for Prometheus's own parser: written as recording rules of one
// file and checked by `promtool check rules`, which parses each.
func TestDashboardQueriesParse(t *testing.T) {
	p := promtool(t)
	qs, err := Queries(Dashboards, DashboardDir)
	if err != nil {
		t.Fatal(err)
	}
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, q := range qs {
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:%s:%d", notMetricChar.ReplaceAllString(q.Where, "_"), i), Expr: q.Expr})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboards", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, p, "check", "rules", f)
	if len(qs) < 50 {
		t.Fatalf("only %d queries found in the dashboards: the walk misses some", len(qs))
	}
	t.Logf("%d dashboard queries parse", len(qs))
}

// Substitute expands Grafana's variable forms and refuses an undefined one.
func TestSubstitute(t *testing.T) {
	vars := []Variable{{Name: "cluster", Type: "query", AllValue: ".*"}, {Name: "datasource", Type: "datasource"}}
	got, err := Substitute(`rate(x{cluster=~"$cluster",a=~"${cluster}",b=~"${cluster:regex}"}[$__rate_interval])`, vars)
	if want := `rate(x{cluster=~".*",a=~".*",b=~".*"}[1m])`; err != nil || got != want {
		t.Fatalf("Substitute = %q, %v; want %q", got, err, want)
	}
	if _, err := Substitute(`x{a=~"$nope"}`, vars); err == nil {
		t.Fatal("an undefined variable was substituted")
	}
	// A variable in a dashboard's JSON is found wherever it sits.
	var d Dashboard
	json.Unmarshal([]byte(`{"templating":{"list":[{"name":"v","type":"query","allValue":".*","query":{"query":"label_values(up{job=~\"m.*\"}, job)"}}]}}`), &d)
	if q := d.Templating.List[0].QueryString(); !labelValues.MatchString(q) || labelValues.FindStringSubmatch(q)[1] != `up{job=~"m.*"}` {
		t.Fatalf("label_values selector of %q: %v", q, labelValues.FindStringSubmatch(q))
	}
}
