package monitoring

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
)

// Dashboards holds the Grafana dashboards (grafana/dashboards/*.json),
// for the tests that check their queries against real processes.
//
//go:embed grafana/dashboards/*.json
var Dashboards embed.FS

// DashboardDir is where Dashboards keeps the dashboards' files.
const DashboardDir = "grafana/dashboards"

// Query is one PromQL expression of a dashboard: a panel's target or a
// template variable's query.
type Query struct {
	// Where names it: "<file> panel <id> "<title>" target <refId>" or
	// "<file> variable <name>".
	Where string
	// Raw is the expression as the dashboard holds it.
	Raw string
	// Expr is Raw with the template variables substituted as Grafana
	// would with "All" selected (Substitute); for a variable's
	// label_values(selector, label), the selector alone.
	Expr string
}

// Dashboard is the part of a Grafana dashboard's JSON model the checks read.
type Dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []Panel `json:"panels"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is a dashboard panel (a row holds its panels when collapsed).
type Panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource json.RawMessage          `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Targets    []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// Variable is a template variable.
type Variable struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	AllValue string `json:"allValue"`
	// Query: a string, or (Grafana 9+) {"query": "...", "refId": ...}.
	Query json.RawMessage `json:"query"`
}

// QueryString is the variable's query whichever shape it has.
func (v Variable) QueryString() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	json.Unmarshal(v.Query, &o)
	return o.Query
}

// ReadDashboards parses every *.json of dir in fsys, by file name.
func ReadDashboards(fsys fs.FS, dir string) (map[string]*Dashboard, error) {
	files, err := fs.Glob(fsys, path.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("monitoring: no dashboards in %s", dir)
	}
	out := map[string]*Dashboard{}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		var d Dashboard
		dec := json.NewDecoder(strings.NewReader(string(b)))
		if err := dec.Decode(&d); err != nil {
			return nil, fmt.Errorf("monitoring: %s: %w", f, err)
		}
		out[path.Base(f)] = &d
	}
	return out, nil
}

// builtinIntervals are Grafana's interval variables, substituted by an
// interval long enough for rate() at any scrape interval up to 15 s.
var builtinIntervals = map[string]string{"__rate_interval": "1m", "__interval": "1m", "__range": "1h"}

var templateVar = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z0-9_]+)`)

// Substitute replaces a dashboard's template variables in expr as Grafana
// does with every variable at "All": a variable by its allValue (".*"
// for ours), Grafana's interval variables by 1m (1h for $__range). It
// fails on a variable the dashboard does not define.
func Substitute(expr string, vars []Variable) (string, error) {
	all := map[string]string{}
	for _, v := range vars {
		all[v.Name] = v.AllValue
		if v.Type == "datasource" {
			all[v.Name] = "prometheus"
		}
	}
	var bad []string
	out := templateVar.ReplaceAllStringFunc(expr, func(m string) string {
		sub := templateVar.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		if iv, ok := builtinIntervals[name]; ok {
			return iv
		}
		if v, ok := all[name]; ok && v != "" {
			return v
		}
		bad = append(bad, m)
		return m
	})
	if len(bad) > 0 {
		return "", fmt.Errorf("undefined template variable (or one without an allValue) %s in %q", strings.Join(bad, ", "), expr)
	}
	return out, nil
}

// labelValues matches a variable's label_values(selector, label).
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// Queries lists every PromQL expression of every dashboard in dir: each
// panel target's (rows' nested panels included) and each query
// variable's selector, substituted (Substitute). Sorted by Where.
func Queries(fsys fs.FS, dir string) ([]Query, error) {
	ds, err := ReadDashboards(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Query
	for file, d := range ds {
		vars := d.Templating.List
		add := func(where, raw, expr string) error {
			e, err := Substitute(expr, vars)
			if err != nil {
				return fmt.Errorf("monitoring: %s: %w", where, err)
			}
			out = append(out, Query{Where: where, Raw: raw, Expr: e})
			return nil
		}
		for _, v := range vars {
			if v.Type != "query" {
				continue
			}
			q := v.QueryString()
			m := labelValues.FindStringSubmatch(q)
			if m == nil {
				return nil, fmt.Errorf("monitoring: %s variable %s: query %q is not label_values(selector, label)", file, v.Name, q)
			}
			if err := add(fmt.Sprintf("%s variable %s", file, v.Name), q, m[1]); err != nil {
				return nil, err
			}
		}
		var walk func(ps []Panel) error
		walk = func(ps []Panel) error {
			for _, p := range ps {
				for _, t := range p.Targets {
					if err := add(fmt.Sprintf("%s panel %d %q target %s", file, p.ID, p.Title, t.RefID), t.Expr, t.Expr); err != nil {
						return err
					}
				}
				if err := walk(p.Panels); err != nil {
					return err
				}
			}
			return nil
		}
		if err := walk(d.Panels); err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Where < out[j].Where })
	return out, nil
}
