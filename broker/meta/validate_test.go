package meta

import (
	"errors"
	"math"
	"net/http"
	"testing"
)

// Issue 29: policies are validated as Pulsar validates them, and what
// would overflow when applied is refused before it is stored (a retention
// of max int64 minutes was stored, then every topic of the namespace
// failed to load).
func TestPolicyValidation(t *testing.T) {
	status := func(err error) int {
		var se StatusError
		if errors.As(err, &se) {
			return se.Status
		}
		if err != nil {
			return -1
		}
		return 0
	}
	for _, c := range []struct {
		name string
		p    Policies
		want int
	}{
		{"no policies", Policies{}, 0},
		{"ttl 60", Policies{MessageTTLInSeconds: 60}, 0},
		{"ttl -5", Policies{MessageTTLInSeconds: -5}, http.StatusPreconditionFailed},
		{"ttl past int32", Policies{MessageTTLInSeconds: math.MaxInt32 + 1}, http.StatusPreconditionFailed},
		{"retention -1/-1", Policies{Retention: &Retention{-1, -1}}, 0},
		{"retention 0/0", Policies{Retention: &Retention{0, 0}}, 0},
		{"retention 60/100", Policies{Retention: &Retention{60, 100}}, 0},
		{"retention -7 minutes", Policies{Retention: &Retention{-7, 10}}, http.StatusBadRequest},
		{"retention -2 MB", Policies{Retention: &Retention{10, -2}}, http.StatusBadRequest},
		{"retention 0 minutes 10 MB", Policies{Retention: &Retention{0, 10}}, http.StatusBadRequest},
		{"retention max int64 minutes", Policies{Retention: &Retention{math.MaxInt64, 10}}, http.StatusBadRequest},
		{"retention the longest duration", Policies{Retention: &Retention{int(MaxRetentionMinutes), 10}}, 0},
		{"retention max int64 MB", Policies{Retention: &Retention{10, math.MaxInt64}}, http.StatusBadRequest},
		{"persistence 3/2/2", Policies{Persistence: &Persistence{3, 2, 2}}, 0},
		{"persistence 1/2/1", Policies{Persistence: &Persistence{1, 2, 1}}, http.StatusBadRequest},
		{"persistence 2/2/0", Policies{Persistence: &Persistence{2, 2, 0}}, http.StatusBadRequest},
	} {
		if got := status(ValidatePolicies(c.p)); got != c.want {
			t.Errorf("%s: status %d (%v), want %d", c.name, got, ValidatePolicies(c.p), c.want)
		}
	}
}

// Pulsar's AdminResource.checkBacklogQuota, case by case: a retention with
// no positive limit takes any quota; otherwise each positive limit of the
// retention must exceed the quota's (size in MiB against bytes, time in
// minutes against seconds).
func TestBacklogQuotaFitsRetention(t *testing.T) {
	q := func(size, secs int64) *BacklogQuota {
		return &BacklogQuota{LimitSize: size, LimitTime: secs, Policy: "producer_request_hold"}
	}
	for _, c := range []struct {
		name string
		q    *BacklogQuota
		r    Retention
		want bool
	}{
		{"no quota", nil, Retention{10, 10}, true},
		{"retention off", q(1<<40, 1<<30), Retention{0, 0}, true},
		{"retention unlimited", q(1<<40, 1<<30), Retention{-1, -1}, true},
		{"size under", q(10<<20-1, -1), Retention{-1, 10}, true},
		{"size equal", q(10<<20, -1), Retention{-1, 10}, false},
		{"size over", q(11<<20, -1), Retention{-1, 10}, false},
		{"size over, retention size unlimited", q(11<<20, -1), Retention{60, -1}, true},
		{"deprecated limit field over", &BacklogQuota{Limit: 11 << 20, Policy: "producer_exception"}, Retention{-1, 10}, false},
		{"time under", q(-1, 599), Retention{10, -1}, true},
		{"time equal", q(-1, 600), Retention{10, -1}, false},
		{"time over, retention time unlimited", q(-1, 6000), Retention{-1, 10}, true},
		{"largest retention", q(math.MaxInt64, math.MaxInt64), Retention{int(MaxRetentionMinutes), MaxRetentionSizeMB}, false},
	} {
		if got := BacklogQuotaFitsRetention(c.q, c.r); got != c.want {
			t.Errorf("%s: quota %+v, retention %+v: %v, want %v", c.name, c.q, c.r, got, c.want)
		}
	}
	for _, in := range []string{"", BacklogQuotaStorage, BacklogQuotaMessageAge, "everything"} {
		kind, err := ParseBacklogQuotaType(in)
		switch {
		case in == "" && kind != BacklogQuotaStorage, in == "everything" && err == nil, in != "everything" && err != nil:
			t.Errorf("ParseBacklogQuotaType(%q) = %q, %v", in, kind, err)
		}
	}
}

// A stored numBundles outside 0..4096 is not applied (DefaultBundles, with
// an error to warn with), and EvenBoundaries never makes a table for it:
// 2^40 would be 4 TiB, max int64 overflowed its length (a panic).
func TestBundleCountOutOfRange(t *testing.T) {
	for _, c := range []struct{ stored, want int }{
		{0, DefaultBundles}, {1, 1}, {4096, 4096}, {-1, DefaultBundles}, {4097, DefaultBundles},
		{1_000_000, DefaultBundles}, {1 << 40, DefaultBundles}, {math.MaxInt64, DefaultBundles},
	} {
		n, err := Policies{Bundles: c.stored}.BundleCount()
		if n != c.want || (err != nil) != (c.stored < 0 || c.stored > 4096) {
			t.Errorf("numBundles %d: %d, %v; want %d", c.stored, n, err, c.want)
		}
		if bs := EvenBoundaries(c.stored); len(bs) != c.want+1 || bs[0] != 0 || bs[len(bs)-1] != 0xffffffff {
			t.Errorf("EvenBoundaries(%d): %d boundaries, want %d", c.stored, len(bs), c.want+1)
		}
	}
}
