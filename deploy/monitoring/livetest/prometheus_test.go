package livetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"gopkg.in/yaml.v3"

	"github.com/meridian-mq/meridian/deploy/monitoring"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/meridian-mq/meridian/tools/up"
	"github.com/meridian-mq/meridian/tools/wanproxy"
)

// prometheusBinary returns the Prometheus server's path: missing, the
// test fails in CI (CI set; .ci/run installs Debian's prometheus package,
// which holds the server and promtool) and is skipped elsewhere, as
// deploy/monitoring's promtool tests do.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("prometheus not installed in CI: .ci/run must install Debian's prometheus package")
		}
		t.Skip("prometheus not installed; apt-get install prometheus to run the server against a deployment")
	}
	return p
}

// forClause is a rule's `for:` line in alerts.yaml.
var forClause = regexp.MustCompile(`(?m)^(\s+for:\s*)(\S+)\s*$`)

type rulesFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Alert, Expr, For string
		}
	}
}

// shortFor is alerts.yaml with every `for:` at 3 s — long enough to see
// each alert pending for several 1 s evaluations, short enough for a test
// of seconds — and nothing else changed: the expressions, labels and
// annotations are the shipped ones (checked here). The `for:` windows
// themselves are promtool test rules' (alerts_test.yaml).
func shortFor(t *testing.T, src []byte) (out []byte, rules int) {
	t.Helper()
	out = forClause.ReplaceAll(src, []byte("${1}3s"))
	var a, b rulesFile
	if err := yaml.Unmarshal(src, &a); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(out, &b); err != nil {
		t.Fatal(err)
	}
	withFor := 0
	for i, g := range a.Groups {
		for j, r := range g.Rules {
			rules++
			if r.For != "" {
				withFor++
			}
			s := b.Groups[i].Rules[j]
			if s.Alert != r.Alert || s.Expr != r.Expr || (r.For != "") != (s.For == "3s") {
				t.Fatalf("rewriting for: changed %s: %+v → %+v", r.Alert, r, s)
			}
		}
	}
	if n := len(forClause.FindAll(src, -1)); n != withFor || withFor == 0 {
		t.Fatalf("%d for: lines rewritten, %d rules have one", n, withFor)
	}
	return out, rules
}

// lagThreshold is MeridianReplicationLagHigh's bound in alerts.yaml (60 s;
// the only expression ending "> 60", checked by lowLagThreshold).
var lagThreshold = regexp.MustCompile(`(?m)^(\s+expr:.*>\s*)60(\s*)$`)

// lowLagThreshold is alerts.yaml with MeridianReplicationLagHigh's bound
// at secs seconds instead of 60 — a link blocked for a few seconds then
// makes it fire — and nothing else changed (checked here: every other
// rule, and that rule but for that number, as shipped).
func lowLagThreshold(t *testing.T, src []byte, secs int) []byte {
	t.Helper()
	if n := len(lagThreshold.FindAll(src, -1)); n != 1 {
		t.Fatalf("an expression ending with MeridianReplicationLagHigh's bound (%s) found %d times in alerts.yaml, want once", lagThreshold, n)
	}
	out := lagThreshold.ReplaceAll(src, []byte("${1}"+strconv.Itoa(secs)+"${2}"))
	var a, b rulesFile
	if err := yaml.Unmarshal(src, &a); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(out, &b); err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i, g := range a.Groups {
		for j, r := range g.Rules {
			s := b.Groups[i].Rules[j]
			if s == r {
				continue
			}
			changed++
			want := r
			want.Expr = strings.Replace(r.Expr, "> 60", "> "+strconv.Itoa(secs), 1)
			if r.Alert != "MeridianReplicationLagHigh" || s != want {
				t.Fatalf("lowering the lag bound changed %s: %+v → %+v", r.Alert, r, s)
			}
		}
	}
	if changed != 1 {
		t.Fatalf("lowering the lag bound changed %d rules, want MeridianReplicationLagHigh alone", changed)
	}
	return out
}

// promAPI answers Prometheus' HTTP API calls.
type promAPI struct {
	t    *testing.T
	base string
}

func (p promAPI) get(path string, params url.Values, out any) error {
	resp, err := http.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("GET %s: HTTP %d %s", path, resp.StatusCode, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s %v: %s", path, params, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

type sample struct {
	Metric map[string]string
	Value  float64
}

// query evaluates expr now (an instant vector, or a scalar as one sample).
func (p promAPI) query(expr string) ([]sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	parse := func(v []any) float64 {
		s, _ := v[1].(string)
		f, _ := strconv.ParseFloat(s, 64)
		return f
	}
	switch data.ResultType {
	case "vector":
		var r []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &r); err != nil {
			return nil, err
		}
		out := make([]sample, len(r))
		for i, s := range r {
			out[i] = sample{s.Metric, parse(s.Value)}
		}
		return out, nil
	case "scalar":
		var v []any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, err
		}
		return []sample{{nil, parse(v)}}, nil
	}
	return nil, fmt.Errorf("query %q: result type %s", expr, data.ResultType)
}

type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func (p promAPI) alerts() []alert {
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", nil, &data); err != nil {
		p.t.Log(err)
		return nil
	}
	return data.Alerts
}

// state is the state of the alert named name whose labels include want
// ("" when none is active).
func state(as []alert, name string, want map[string]string) string {
	best := ""
	for _, a := range as {
		if a.Labels["alertname"] != name {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && a.Labels[k] == v
		}
		if ok && (best == "" || a.State == "firing") {
			best = a.State
		}
	}
	return best
}

// lagBound is MeridianReplicationLagHigh's bound in the test's rules
// (lowLagThreshold), in seconds: the shipped 60 s is a test of minutes.
const lagBound = 3

// fedSeries is a PromQL selector (or a rate of one) that must give at
// least one series, each above zero, while the load runs.
type fedSeries struct{ what, expr string }

// fedUnderLoad are the series of the loaded topic (east active, producing
// and consuming 50 messages a second, replicating to west) that the
// dashboards plot as rates, throughputs, counters and sizes, and that a
// region feeding them must keep above zero: exported but never fed, a
// dashboard shows a flat line. The counters are checked as the
// dashboards plot them, by their rate (a counter stuck at its first value
// is as flat). Left out, as legitimately zero under this load: what is
// behind (pulsar_msg_backlog, pulsar_subscription_back_log,
// pulsar_subscription_unacked_messages, pulsar_storage_backlog_size,
// pulsar_replication_backlog — the consumer and west keep up;
// pulsar_replication_delay_in_seconds, made non-zero by the blocked
// link, where MeridianReplicationLagHigh checks it), pulsar_subscription_delayed
// (no delayed delivery), pulsar_storage_backlog_quota_limit (no quota
// set: not exported), and west's topic's rates out and its producer,
// consumer and subscription counts (west serves no client while east is
// active).
func fedUnderLoad(ns, topic string) []fedSeries {
	east := `{cluster="east", namespace="` + ns + `", topic="` + topic + `"}`
	sub := `{cluster="east", namespace="` + ns + `", topic="` + topic + `", subscription="load"}`
	toWest := `{cluster="east", namespace="` + ns + `", topic="` + topic + `", remote_cluster="west"}`
	fromEast := `{cluster="west", namespace="` + ns + `", topic="` + topic + `", remote_cluster="east"}`
	var out []fedSeries
	for _, m := range []string{"pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out",
		"pulsar_storage_size", "pulsar_storage_write_latency_count", "pulsar_storage_write_latency_sum",
		"pulsar_producers_count", "pulsar_consumers_count", "pulsar_subscriptions_count"} {
		out = append(out, fedSeries{m + " (east)", m + east})
	}
	for _, m := range []string{"pulsar_in_messages_total", "pulsar_in_bytes_total", "pulsar_out_messages_total", "pulsar_out_bytes_total"} {
		out = append(out, fedSeries{"rate of " + m + " (east)", "rate(" + m + east + "[5s])"})
	}
	for _, m := range []string{"pulsar_subscription_msg_rate_out", "pulsar_subscription_msg_throughput_out", "pulsar_subscription_consumers_count"} {
		out = append(out, fedSeries{m + " (east, subscription load)", m + sub})
	}
	for _, m := range []string{"pulsar_replication_rate_out", "pulsar_replication_throughput_out", "pulsar_replication_connected_count"} {
		out = append(out, fedSeries{m + " (east → west)", m + toWest})
	}
	for _, m := range []string{"pulsar_replication_rate_in", "pulsar_replication_throughput_in"} {
		out = append(out, fedSeries{m + " (west, from east)", m + fromEast})
	}
	// West, the standby, persists what east replicates: its topic's
	// rate in is that, as in Pulsar (whose replicator is one of the
	// remote topic's producers).
	west := `{cluster="west", namespace="` + ns + `", topic="` + topic + `"}`
	for _, m := range []string{"pulsar_rate_in", "pulsar_throughput_in", "pulsar_storage_size"} {
		out = append(out, fedSeries{m + " (west)", m + west})
	}
	for _, m := range []string{"pulsar_in_messages_total", "pulsar_in_bytes_total"} {
		out = append(out, fedSeries{"rate of " + m + " (west)", "rate(" + m + west + "[5s])"})
	}
	return out
}

// checkFed fails the test for each of fed that is not, within timeout,
// at least one series all above zero.
func checkFed(t *testing.T, api promAPI, fed []fedSeries, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var flat []string
		for _, f := range fed {
			ss, err := api.query(f.expr)
			switch {
			case err != nil:
				flat = append(flat, fmt.Sprintf("%s: %v", f.what, err))
			case len(ss) == 0:
				flat = append(flat, fmt.Sprintf("%s: no series (%s)", f.what, f.expr))
			default:
				for _, s := range ss {
					if !(s.Value > 0) {
						flat = append(flat, fmt.Sprintf("%s: %v for %v", f.what, s.Value, s.Metric))
					}
				}
			}
		}
		if len(flat) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("under load, %d of the %d series the dashboards plot are not above zero:\n%s", len(flat), len(fed), strings.Join(flat, "\n"))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Issue 29: a real Prometheus (Debian's) scrapes a real two-region
// deployment under load every second, with the shipped alerting rules
// loaded (their `for:` at 3 s, shortFor): every rule loads healthy, every
// target is up, the Pulsar metrics carry the load, no rate, throughput or
// counter a dashboard plots for the loaded topic is zero (fedUnderLoad),
// every dashboard query is evaluated by Prometheus' own engine without
// error. East's replication to west is blocked for a few seconds
// (a proxy on the link): MeridianReplicationLagHigh, its bound at
// lagBound, goes pending then firing for east → west of the namespace,
// and resolves once the link is back, with no alert about a region or a
// failover active meanwhile or after. Then every east process is
// killed (kill -9): MeridianRegionDown{region=east} goes pending then
// firing, MeridianTargetDown fires for each of east's targets,
// MeridianFailoverHappened fires for the active-standby namespace, and
// the failover epoch metric, as Prometheus holds it, moved up with west
// as its active region.
func TestAlertsFireInARealPrometheusWhenARegionDies(t *testing.T) {
	promBin := prometheusBinary(t)
	bin := testutil.MeridianBinary(t)
	start := time.Now()
	plan, err := up.NewPlan(up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3,
		RacksPerRegion: 3, DataDir: t.TempDir(), GossipProfile: "fast", OwnershipTTL: "3s", ReplicationProxies: true})
	if err != nil {
		t.Fatal(err)
	}
	// Replication reaches each broker through a proxy in front of its
	// replication gRPC (tools/wanproxy); west's, blocked, let east's
	// replication fall behind while gossip, etcd and the clients' links
	// stay up. East's only carry west's streams back, never blocked.
	var westLinks []*wanproxy.Proxy
	for _, ps := range plan.Procs {
		if ps.ReplProxy == "" {
			continue
		}
		px, err := wanproxy.Start(ps.ReplProxy, ps.Repl)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		if ps.Region == "west" {
			westLinks = append(westLinks, px)
		}
	}
	blockWest := func(on bool) {
		for _, px := range westLinks {
			if on {
				px.SetRTT(time.Minute) // nothing east sends arrives
			} else {
				px.SetRTT(0) // what was held is delivered at once, in order
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, err := up.Start(ctx, plan, bin, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(5 * time.Second) })
	e := d.Endpoints()
	t.Logf("deployment up in %s", time.Since(start).Round(time.Millisecond))

	// An active-standby namespace, east active, replicated to west.
	const ns = "public/as"
	body, _ := json.Marshal(map[string]any{
		"replication_clusters": []string{"east", "west"},
		"meridian_replication": map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"},
	})
	req, _ := http.NewRequest(http.MethodPut, e.Regions[0].AdminURL+"/admin/v2/namespaces/"+ns, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode/100 != 2 {
		t.Fatalf("create %s: HTTP %d %s", ns, resp.StatusCode, b)
	}
	resp.Body.Close()

	// Load: a producer and a consumer on the multi-region URL, 50
	// messages a second, until the test ends.
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: e.ServiceURL, ConnectionTimeout: 5 * time.Second,
		Logger: plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	const topic = "persistent://" + ns + "/load"
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "load"})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for loadCtx.Err() == nil {
			prod.SendAsync(loadCtx, &pulsar.ProducerMessage{Payload: []byte("load")}, func(pulsar.MessageID, *pulsar.ProducerMessage, error) {})
			select {
			case <-tick.C:
			case <-loadCtx.Done():
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			m, err := cons.Receive(loadCtx)
			if err != nil {
				return
			}
			cons.Ack(m)
		}
	}()
	t.Cleanup(func() { stopLoad(); wg.Wait(); client.Close() })

	// Prometheus: 1 s scrapes and evaluations, 127.0.0.1 only, data in
	// a temp dir; stopped by its pid (SIGTERM, then the harness's SIGKILL).
	src, err := os.ReadFile("../alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules, nRules := shortFor(t, lowLagThreshold(t, src, lagBound))
	pdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(pdir, "alerts.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	var brokers, bookies []string
	east := map[string]bool{}
	for _, r := range e.Regions {
		for _, p := range r.Processes {
			var target string
			switch p.Role {
			case "broker":
				target = p.Admin
				brokers = append(brokers, target)
			case "bookie":
				target = p.Metrics
				bookies = append(bookies, target)
			}
			if target != "" && r.Name == "east" {
				east[target] = true
			}
		}
	}
	cfg, _ := yaml.Marshal(map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
		"rule_files": []string{filepath.Join(pdir, "alerts.yaml")},
		"scrape_configs": []any{
			map[string]any{"job_name": "meridian-broker", "static_configs": []any{map[string]any{"targets": brokers}}},
			map[string]any{"job_name": "meridian-bookie", "static_configs": []any{map[string]any{"targets": bookies}}},
		},
	})
	if err := os.WriteFile(filepath.Join(pdir, "prometheus.yml"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreeAddr(t)
	prom := testutil.StartProc(t, "prometheus", promBin, "--config.file="+filepath.Join(pdir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(pdir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	t.Cleanup(func() {
		prom.Signal(syscall.SIGTERM)
		if !prom.Wait(10 * time.Second) {
			t.Errorf("prometheus (pid %d) did not stop on SIGTERM", prom.Pid())
		}
	})
	api := promAPI{t: t, base: "http://" + addr}
	testutil.WaitHTTP(t, api.base+"/-/ready", 30*time.Second)

	// Every shipped rule loaded and evaluates without error.
	testutil.Eventually(t, 15*time.Second, "every alerting rule loaded and evaluated healthy", func() bool {
		var data struct {
			Groups []struct {
				Rules []struct{ Name, Health, LastError string }
			}
		}
		if err := api.get("/api/v1/rules", nil, &data); err != nil {
			return false
		}
		n := 0
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				if r.Health != "ok" {
					return false
				}
				n++
			}
		}
		return n == nRules
	})
	// Every target up, the load visible under Pulsar's names, east active.
	var epochBefore float64
	testutil.Eventually(t, 60*time.Second, "every target up, the load's rate in, east's epoch for "+ns, func() bool {
		ups, err1 := api.query(`up{job=~"meridian.*"} == 1`)
		rate, err2 := api.query(`sum(pulsar_rate_in{namespace="` + ns + `"}) > 0`)
		ep, err3 := api.query(`max(meridian_failover_epoch{namespace="` + ns + `", active_region="east"})`)
		if err1 != nil || err2 != nil || err3 != nil || len(ups) != len(brokers)+len(bookies) || len(rate) != 1 || len(ep) != 1 {
			return false
		}
		epochBefore = ep[0].Value
		return true
	})
	t.Logf("scraped and loaded at %s; epoch of %s %v", time.Since(start).Round(time.Millisecond), ns, epochBefore)

	// No series a dashboard plots for the loaded topic is exported and
	// never fed (a flat line at zero under load): each is above zero.
	checkFed(t, api, fedUnderLoad(ns, topic), 20*time.Second)

	// Every dashboard query is valid for Prometheus' engine.
	qs, err := monitoring.Queries(monitoring.Dashboards, monitoring.DashboardDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if _, err := api.query(q.Expr); err != nil {
			t.Errorf("%s: %v", q.Where, err)
		}
	}

	// Replication falls behind: east → west blocked for a few seconds.
	// MeridianReplicationLagHigh (its bound at lagBound) goes pending,
	// then fires for east → west of ns, and resolves once the link is
	// back; nothing about a region or a failover becomes active.
	lagLabels := map[string]string{"alertname": "MeridianReplicationLagHigh", "severity": "warning",
		"cluster": "east", "namespace": ns, "remote_cluster": "west"}
	noRegionAlert := func(when string) {
		for _, a := range api.alerts() {
			switch a.Labels["alertname"] {
			case "MeridianRegionDown", "MeridianRegionSuspected", "MeridianTargetDown", "MeridianFailoverHappened", "MeridianRegionFenced":
				t.Fatalf("%s: %s %s %v", when, a.Labels["alertname"], a.State, a.Labels)
			}
		}
	}
	for _, a := range api.alerts() {
		if a.Labels["alertname"] == "MeridianReplicationLagHigh" {
			t.Fatalf("before the link is blocked: MeridianReplicationLagHigh %s %v", a.State, a.Labels)
		}
	}
	blocked := time.Now()
	blockWest(true)
	linkBack := sync.OnceFunc(func() { blockWest(false) })
	defer linkBack()
	sawLagPending := false
	var lagFiring time.Duration
	var firing alert
	testutil.Eventually(t, 30*time.Second, "MeridianReplicationLagHigh firing for east → west of "+ns, func() bool {
		noRegionAlert("replication east → west blocked")
		for _, a := range api.alerts() {
			if a.Labels["alertname"] != "MeridianReplicationLagHigh" {
				continue
			}
			switch a.State {
			case "pending":
				sawLagPending = true
			case "firing":
				firing, lagFiring = a, time.Since(blocked)
				return true
			}
		}
		time.Sleep(200 * time.Millisecond)
		return false
	})
	if !sawLagPending {
		t.Error("MeridianReplicationLagHigh fired without being seen pending (its for: clause did not hold it)")
	}
	if fmt.Sprint(firing.Labels) != fmt.Sprint(lagLabels) {
		t.Errorf("MeridianReplicationLagHigh firing with labels %v, want %v", firing.Labels, lagLabels)
	}
	if lagFiring < lagBound*time.Second {
		t.Errorf("MeridianReplicationLagHigh fired %v after the link was blocked, before the lag could pass its %d s bound", lagFiring, lagBound)
	}
	linkBack()
	unblocked := time.Now()
	testutil.Eventually(t, 30*time.Second, "MeridianReplicationLagHigh resolved once east → west is back", func() bool {
		noRegionAlert("replication east → west back")
		time.Sleep(200 * time.Millisecond)
		return state(api.alerts(), "MeridianReplicationLagHigh", nil) == ""
	})
	t.Logf("replication lag alert firing %s after the link was blocked (labels %v), resolved %s after it was back",
		lagFiring.Round(time.Millisecond), firing.Labels, time.Since(unblocked).Round(time.Millisecond))

	// Nothing about a region or a failover is active yet.
	noRegionAlert("before east is killed")

	// kill -9 every east process.
	killed := time.Now()
	for _, p := range e.Regions[0].Processes {
		if pid := d.Pid(p.Name); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	sawPending := false
	var downFiring time.Duration
	testutil.Eventually(t, 90*time.Second, "MeridianRegionDown{region=east} firing", func() bool {
		switch state(api.alerts(), "MeridianRegionDown", map[string]string{"region": "east"}) {
		case "pending":
			sawPending = true
		case "firing":
			downFiring = time.Since(killed)
			return true
		}
		time.Sleep(200 * time.Millisecond)
		return false
	})
	if !sawPending {
		t.Error("MeridianRegionDown fired without being seen pending (its for: clause did not hold it)")
	}
	for target := range east {
		testutil.Eventually(t, 30*time.Second, "MeridianTargetDown firing for east's "+target, func() bool {
			return state(api.alerts(), "MeridianTargetDown", map[string]string{"instance": target}) == "firing"
		})
	}
	testutil.Eventually(t, 60*time.Second, "MeridianFailoverHappened firing for "+ns, func() bool {
		return state(api.alerts(), "MeridianFailoverHappened", map[string]string{"namespace": ns}) == "firing"
	})
	ep, err := api.query(`max by (active_region) (meridian_failover_epoch{namespace="` + ns + `"})`)
	if err != nil {
		t.Fatal(err)
	}
	if len(ep) != 1 || ep[0].Metric["active_region"] != "west" || ep[0].Value <= epochBefore {
		t.Fatalf("failover epoch of %s after east died: %+v, want one series, active_region west, above %v", ns, ep, epochBefore)
	}
	for _, a := range api.alerts() {
		if a.Labels["alertname"] == "MeridianTargetDown" && !east[a.Labels["instance"]] {
			t.Errorf("MeridianTargetDown for %s, which is not east's", a.Labels["instance"])
		}
	}
	t.Logf("region down firing %s after the kill; epoch %v → %v (west); whole test %s",
		downFiring.Round(time.Millisecond), epochBefore, ep[0].Value, time.Since(start).Round(time.Millisecond))
}
