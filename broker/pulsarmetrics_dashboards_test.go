package broker_test

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	dto "github.com/prometheus/client_model/go"

	"github.com/meridian-mq/meridian/deploy/monitoring"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Issue 29: every metric a Grafana dashboard of
// deploy/monitoring/grafana/dashboards selects — in any panel's query or
// any template variable's, the variables substituted — exists, as
// TestAlertsSelectExportedMetrics holds for the alerts: a series in a
// real standalone's scrape (broker and bookie /metrics), or a metric the
// broker's or the auto-recovery's registry describes (other regions,
// failover, a Vec before its first event). A histogram's or summary's
// _bucket, _sum and _count are its family's. Prometheus's own `up`
// aside. A renamed metric leaves a dead panel: this test fails.
//
// The standalone is given a topic with a producer and a subscription,
// then killed (kill -9) and restarted, and the topic loaded again — its
// open ledger recovered, so fenced on the bookie — so that the topic,
// subscription and fence series are scraped, not only described.
func TestDashboardsSelectExportedMetrics(t *testing.T) {
	qs, err := monitoring.Queries(monitoring.Dashboards, monitoring.DashboardDir)
	if err != nil {
		t.Fatal(err)
	}
	bookieMetrics := testutil.FreeAddr(t)
	s := testutil.StartStandalone(t, t.TempDir(), "--bookies", "1", "--bookie-metrics", bookieMetrics)
	const topic = "persistent://public/default/dashboards"
	load := func() (closeAll func()) {
		c, err := pulsar.NewClient(pulsar.ClientOptions{URL: s.URL, OperationTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "dash"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		produce(t, p, 5, nil)
		return func() { p.Close(); cons.Close(); c.Close() }
	}
	load()()
	s.Restart()
	t.Cleanup(load())
	scraped := map[string]dto.MetricType{"up": dto.MetricType_GAUGE}
	for _, u := range []string{s.AdminURL + "/metrics", "http://" + bookieMetrics + "/metrics"} {
		for name, mf := range scrape(t, u) {
			scraped[name] = mf.GetType()
		}
	}
	described := describedMetrics()
	// exists says whether name is exported, and whether only described.
	exists := func(name string) (ok, onlyDescribed bool) {
		if _, ok := scraped[name]; ok {
			return true, false
		}
		if described[name] {
			return true, true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base, found := strings.CutSuffix(name, suffix)
			if !found {
				continue
			}
			switch typ, ok := scraped[base]; {
			case ok && (typ == dto.MetricType_HISTOGRAM || typ == dto.MetricType_SUMMARY && suffix != "_bucket"):
				return true, false
			case !ok && described[base]:
				return true, true
			}
		}
		return false, false
	}
	var onlyDescribed []string
	n := 0
	for _, q := range qs {
		names := selectedMetrics(q.Expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric found in %q", q.Where, q.Expr)
		}
		for _, name := range names {
			n++
			ok, only := exists(name)
			switch {
			case !ok:
				t.Errorf("%s selects %s: no process exports it (%s)", q.Where, name, q.Raw)
			case only:
				onlyDescribed = append(onlyDescribed, name)
			}
		}
	}
	sort.Strings(onlyDescribed)
	t.Logf("%d queries, %d selectors; registered but without a series in a standalone: %v", len(qs), n, onlyDescribed)
}
