package broker_test

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/meridian-mq/meridian/bookie/autorecovery"
	"github.com/meridian-mq/meridian/broker"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// promqlKeywords are PromQL's words that are not metric names.
var promqlKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
	"group_right": true, "and": true, "or": true, "unless": true, "bool": true, "offset": true}

var (
	promqlStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlIdent     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promqlNumberish = regexp.MustCompile(`^(?:[0-9]|e[0-9]|Inf$|NaN$)`)
)

// selectedMetrics returns the metric names a PromQL expression selects:
// its identifiers, less strings, label matchers, ranges, grouping label
// lists, keywords and function names (an identifier before "(").
func selectedMetrics(expr string) []string {
	e := promqlStrings.ReplaceAllString(expr, `""`)
	e = promqlMatchers.ReplaceAllString(e, " ")
	e = promqlRanges.ReplaceAllString(e, " ")
	e = promqlGrouping.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range promqlIdent.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		if promqlKeywords[id] || promqlNumberish.MatchString(id) || strings.HasPrefix(strings.TrimSpace(e[loc[1]:]), "(") {
			continue
		}
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.') {
			continue // a number's suffix (1e3, 5m)
		}
		out = append(out, id)
	}
	return out
}

func TestSelectedMetrics(t *testing.T) {
	got := selectedMetrics(`sum by (cluster) (increase(a_total{kind=~"x|y"}[10m])) > 0 unless on(cluster) max(b) / c_d > 0.9 and changes(max by (ns) (e)[15m:]) > 1e3`)
	want := []string{"a_total", "b", "c_d", "e"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("selectedMetrics = %v, want %v", got, want)
	}
}

// Issue 29: every metric an alert of deploy/monitoring/alerts.yaml
// selects exists — a series in a real standalone's scrape (broker and
// bookie /metrics), or, for what a standalone does not have (other
// regions, failover, a CounterVec's kinds before the first event), a
// metric the broker's or the auto-recovery's registry describes. Prometheus's
// own `up` aside. No alert on a metric that does not exist.
func TestAlertsSelectExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../deploy/monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	bookieMetrics := testutil.FreeAddr(t)
	s := testutil.StartStandalone(t, t.TempDir(), "--bookies", "1", "--bookie-metrics", bookieMetrics)
	scraped := map[string]bool{"up": true}
	for _, u := range []string{s.AdminURL + "/metrics", "http://" + bookieMetrics + "/metrics"} {
		for name := range scrape(t, u) {
			scraped[name] = true
		}
	}
	described := describedMetrics()
	var onlyDescribed []string
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			names := selectedMetrics(r.Expr)
			if len(names) == 0 {
				t.Errorf("%s: no metric found in %q", r.Alert, r.Expr)
			}
			for _, name := range names {
				n++
				switch {
				case scraped[name]:
				case described[name]:
					onlyDescribed = append(onlyDescribed, name)
				default:
					t.Errorf("%s selects %s: no process exports it", r.Alert, name)
				}
			}
		}
	}
	sort.Strings(onlyDescribed)
	t.Logf("%d selectors; registered but without a series in a standalone: %v", n, onlyDescribed)
}

// describedMetrics names every metric the broker's and the auto-recovery's
// registries describe (what a standalone's scrape may lack: other
// regions, failover, a CounterVec's kinds before their first event).
func describedMetrics() map[string]bool {
	described := broker.MetricNamesForTest()
	ch := make(chan *prometheus.Desc, 64)
	go func() { autorecovery.NewMetrics("x").Gatherer().(prometheus.Collector).Describe(ch); close(ch) }()
	for d := range ch {
		s := d.String()
		s = s[strings.Index(s, `fqName: "`)+len(`fqName: "`):]
		described[s[:strings.IndexByte(s, '"')]] = true
	}
	return described
}
