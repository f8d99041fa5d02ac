package failover

import (
	"testing"
	"time"
)

// The lease rule: a holder acknowledges only before renewedAt +
// ttl·(1-ρ)/(1+ρ) - margin (LeaseRules).
func TestMayAcknowledge(t *testing.T) {
	r := DefaultLeaseRules()
	g := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	safe := SafeLeaseDuration(r.TTL, r)
	if want := time.Duration(4400990099); safe != want {
		t.Fatalf("SafeLeaseDuration(5s) = %s, want %s (5s·0.99/1.01 − 500ms)", safe, want)
	}
	cases := []struct {
		name string
		now  time.Time
		want bool
	}{
		{"at renewal", g, true},
		{"just before the deadline", g.Add(safe - 1), true},
		{"at the deadline", g.Add(safe), false},
		{"after the TTL", g.Add(r.TTL), false},
		{"clock went backwards", g.Add(-time.Millisecond), false},
	}
	for _, c := range cases {
		if got := MayAcknowledge(c.now, g, r.TTL, r); got != c.want {
			t.Errorf("%s: MayAcknowledge = %t, want %t", c.name, got, c.want)
		}
	}
	if MayAcknowledge(g, time.Time{}, r.TTL, r) {
		t.Error("no lease (zero renewedAt) must not acknowledge")
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
}

// The safe duration never exceeds what the store can guarantee for any
// clock rates within ±ρ: D/(1-ρ) ≤ TTL/(1+ρ).
func TestSafeLeaseDurationBound(t *testing.T) {
	for _, rho := range []float64{0, 0.0001, 0.001, 0.01, 0.1, 0.3} {
		for _, ttl := range []time.Duration{time.Second, 5 * time.Second, time.Minute, 17*time.Second + 3} {
			r := LeaseRules{TTL: ttl, RenewEvery: time.Millisecond, MaxDriftRate: rho}
			d := SafeLeaseDuration(ttl, r)
			if float64(d)/(1-rho) > float64(ttl)/(1+rho) {
				t.Errorf("ρ=%v ttl=%s: D=%s too long", rho, ttl, d)
			}
		}
	}
	if d := SafeLeaseDuration(time.Second, LeaseRules{MaxDriftRate: 0.01, Margin: 2 * time.Second}); d != 0 {
		t.Errorf("margin above the TTL: %s, want 0", d)
	}
}

func TestLeaseRulesValidate(t *testing.T) {
	for _, r := range []LeaseRules{
		{},
		{TTL: time.Second, RenewEvery: time.Second, MaxDriftRate: 0.01},
		{TTL: 5 * time.Second, RenewEvery: time.Second, MaxDriftRate: 0.5},
		{TTL: 5 * time.Second, RenewEvery: time.Second, MaxDriftRate: -1},
		{TTL: 5 * time.Second, RenewEvery: time.Second, Margin: -1},
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v: no error", r)
		}
	}
}
