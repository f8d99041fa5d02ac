package georep

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/tools/up"
	"github.com/meridian-mq/meridian/tools/wanproxy"
)

// The RPO budget (issue 33, item 2).

type rpoRead struct {
	Topic         string
	Gate          string
	Action        string
	ClosedSeconds float64
	Remotes       []struct {
		Remote        string
		State         string
		AtRiskSeconds float64
		AtRiskEntries int64
	}
}

// rpoOf reads region's RPO read of namespace ns's topic (zero when the
// topic is not listed).
func (d *deployment) rpoOf(region, ns, topic string) rpoRead {
	d.t.Helper()
	var out []rpoRead
	if err := d.admin(region, "GET", "/admin/v2/meridian/replication/rpo/"+ns, nil, &out); err != nil {
		d.t.Fatal(err)
	}
	for _, r := range out {
		if r.Topic == topic {
			return r
		}
	}
	return rpoRead{}
}

// waitGate waits until the topic's gate is want (or fails after within).
func (d *deployment) waitGate(ns, topic, want string, within time.Duration) rpoRead {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := d.rpoOf("east", ns, topic)
		if r.Gate == want {
			return r
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: gate %q after %v, want %q: %+v", topic, r.Gate, within, want, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *switchoverLoad) counts() (acked, errs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked), len(l.sendErrs)
}

// With a 1.5 s budget and the east → west link blocked: once the lag
// passes the budget, east holds the producers of a hold namespace (sends
// wait, no error) and refuses those of a refuse namespace (the unmodified
// Go client's sends fail with ProducerBlockedQuotaExceeded); both go on
// when the link recovers, and no acknowledged message is lost. Then,
// with the link blocked again, west (the standby) is killed: once the
// failover core declares it failed, the budget is suspended for it and
// east's producers go on.
func TestRPOBudgetHoldsOrRefusesProducersUntilTheLagIsBack(t *testing.T) {
	var proxies []*wanproxy.Proxy
	d := startDeploymentWith(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL, ReplicationProxies: true},
		func(plan *up.Plan) {
			for _, ps := range plan.Procs {
				if ps.ReplProxy == "" || ps.Region != "west" {
					continue
				}
				px, err := wanproxy.Start(ps.ReplProxy, ps.Repl)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { px.Close() })
				proxies = append(proxies, px)
			}
		})
	block := func(on bool) {
		for _, px := range proxies {
			if on {
				px.SetRTT(time.Minute) // east → west: nothing arrives
			} else {
				px.SetRTT(0)
			}
		}
	}
	const budget = 1500 * time.Millisecond
	const nsHold, nsRefuse = "public/rpoh", "public/rpor"
	for ns, action := range map[string]string{nsHold: "hold", nsRefuse: "refuse"} {
		d.createNamespace(ns, []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east",
			"maxReplicationLagMs": budget.Milliseconds(), "maxReplicationLagAction": action})
	}
	const topicHold, topicRefuse = "persistent://public/rpoh/orders", "persistent://public/rpor/orders"
	lh := startSwitchoverLoad(t, d, topicHold)
	lr := startSwitchoverLoad(t, d, topicRefuse)
	time.Sleep(2 * time.Second)
	for _, c := range []struct{ ns, topic string }{{nsHold, topicHold}, {nsRefuse, topicRefuse}} {
		if r := d.rpoOf("east", c.ns, c.topic); r.Gate != "open" || len(r.Remotes) != 1 || r.Remotes[0].State != "under" {
			t.Fatalf("%s with the link up: %+v, want gate open, west under the budget", c.topic, r)
		}
	}

	// The link blocked: the lag grows past the budget.
	blocked := time.Now()
	block(true)
	rh := d.waitGate(nsHold, topicHold, "hold", budget+5*time.Second)
	closedAfter := time.Since(blocked)
	rr := d.waitGate(nsRefuse, topicRefuse, "refuse", 5*time.Second)
	t.Logf("link blocked: hold after %v (%+v), refuse: %+v", closedAfter.Round(time.Millisecond), rh, rr)
	if closedAfter < budget {
		t.Fatalf("the gate closed %v after the link was blocked, before the %v budget could pass", closedAfter, budget)
	}
	if rh.Remotes[0].State != "exceeded" || rh.Remotes[0].AtRiskSeconds < budget.Seconds() {
		t.Fatalf("hold namespace over its budget: %+v, want west exceeded, at risk >= %v", rh, budget)
	}
	if m := d.metrics("east"); !regexp.MustCompile(`meridian_replication_rpo_budget_exceeded\{[^}]*namespace="public/rpoh"[^}]*remote="west"[^}]*topic="persistent://public/rpoh/orders"[^}]*\} 1`).MatchString(m) ||
		!strings.Contains(m, `meridian_replication_rpo_at_risk_seconds{`) {
		t.Fatalf("east's metrics do not show the budget exceeded for public/rpoh:\n%s", grepLines(m, "rpo"))
	}
	// Held: no receipt for a second, and no error.
	time.Sleep(300 * time.Millisecond) // a send admitted before the gate closed
	h0, e0 := lh.counts()
	time.Sleep(time.Second)
	h1, e1 := lh.counts()
	if h1 != h0 || e1 != 0 || e0 != 0 {
		t.Fatalf("hold: receipts %d then %d in a second, errors %d: want none and none", h0, h1, e1)
	}
	// Refused: the Go client surfaces the refusal.
	deadline := time.Now().Add(5 * time.Second)
	for {
		lr.mu.Lock()
		errs := strings.Join(lr.sendErrs, "; ")
		lr.mu.Unlock()
		if strings.Contains(errs, "ProducerBlockedQuotaExceeded") || strings.Contains(errs, "producer blocked") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refuse: no send failed with ProducerBlockedQuotaExceeded within 5 s; errors: %.500s", errs)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The link recovers: the lag falls under the budget, both go on.
	block(false)
	d.waitGate(nsHold, topicHold, "open", 10*time.Second)
	d.waitGate(nsRefuse, topicRefuse, "open", 10*time.Second)
	waitMore := func(l *switchoverLoad, what string, within time.Duration) {
		t.Helper()
		n0, _ := l.counts()
		deadline := time.Now().Add(within)
		for {
			if n, _ := l.counts(); n > n0+10 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no receipts in the %v after the gate opened", what, within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitMore(lh, "hold", 5*time.Second)
	waitMore(lr, "refuse", 15*time.Second) // the client's reconnect backoff
	lh.mu.Lock()
	held := lh.maxSend
	lh.mu.Unlock()
	if held < time.Second {
		t.Fatalf("hold: the longest send took %v, want the hold (>= 1 s)", held)
	}

	// Blocked again, then the standby killed: the budget is suspended
	// for it and east's producers go on.
	block(true)
	d.waitGate(nsHold, topicHold, "hold", budget+5*time.Second)
	killed := time.Now()
	d.killRegion("west")
	r := d.waitGate(nsHold, topicHold, "open", 20*time.Second)
	t.Logf("west killed: gate open after %v: %+v", time.Since(killed).Round(time.Millisecond), r)
	if r.Remotes[0].State != "suspended" {
		t.Fatalf("after west's kill: %+v, want west suspended", r)
	}
	if rr := d.waitGate(nsRefuse, topicRefuse, "open", 5*time.Second); rr.Remotes[0].State != "suspended" {
		t.Fatalf("refuse namespace after west's kill: %+v, want west suspended", rr)
	}
	waitMore(lh, "hold after west's kill", 5*time.Second)
	// It stays open with west dead, its lag past the budget.
	time.Sleep(2 * time.Second)
	if r := d.rpoOf("east", nsHold, topicHold); r.Gate != "open" || r.Remotes[0].AtRiskSeconds < budget.Seconds() {
		t.Fatalf("west dead: %+v, want the gate open with west's lag past the budget", r)
	}
	if m := d.metrics("east"); !regexp.MustCompile(`meridian_replication_rpo_budget_suspended\{[^}]*namespace="public/rpoh"[^}]*\} 1`).MatchString(m) {
		t.Fatalf("east's metrics do not show the budget suspended:\n%s", grepLines(m, "rpo"))
	}

	for _, c := range []struct {
		name string
		l    *switchoverLoad
	}{{"hold", lh}, {"refuse", lr}} {
		acked, lost, dups := c.l.finish(t)
		_, errs := c.l.counts()
		t.Logf("%s: acked %d, lost %d, duplicates %d, send errors %d", c.name, acked, lost, dups, errs)
		if lost != 0 {
			t.Errorf("%s: %d of %d acknowledged messages lost", c.name, lost, acked)
		}
		if c.name == "hold" && errs != 0 {
			t.Errorf("hold: %d send errors, want a pause only", errs)
		}
	}
}

// grepLines returns s's lines containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
