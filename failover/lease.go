package failover

import (
	"fmt"
	"math"
	"time"
)

// LeaseRules are the arithmetic of the active region's lease in the global
// store. The store (etcd) expires a lease TTL after it last renewed it, by
// the store leader's clock; the holder must have stopped acknowledging
// produce before that instant, by its own monotonic clock, with nothing
// but a bound on clock rates to relate the two.
//
// The rule (MayAcknowledge): a renewal request sent at local time s that
// succeeded reaches the store at real time r >= s, so the store expires the
// lease no earlier than its clock has advanced TTL past r. With both
// clocks' rates within [1-ρ, 1+ρ] of real time:
//
//	store expiry, real time      >= r + TTL/(1+ρ) >= s + TTL/(1+ρ)
//	holder stops at local s + D, i.e. real time <= s + D/(1-ρ)
//	safe when D/(1-ρ) <= TTL/(1+ρ), i.e. D <= TTL·(1-ρ)/(1+ρ)
//
// and D = TTL·(1-ρ)/(1+ρ) - Margin leaves Margin for what happens between
// the check and the acknowledgement leaving the broker (a GC pause). With
// the defaults, TTL 5 s, ρ 1 %, Margin 500 ms: D = 5 s × 0.99/1.01 - 0.5 s
// = 4.401 s. A takeover waits for the old lease to be gone from the store
// (expired or revoked) and the new holder serves only after its own
// acquisition succeeded, so serve intervals never overlap. Delays of the
// renewal in either direction only make the holder stop earlier than it
// must; a paused holder resumes with an old s and stops at once.
type LeaseRules struct {
	// TTL is the lease's time to live as the store grants it (etcd rounds
	// up to whole seconds: use the granted TTL). Default 5 s: a dead active
	// region's lease is gone about 5 s after its last renewal, which is
	// typically before gossip has declared it failed and FailoverDelay has
	// passed, so the lease adds little to the failover time.
	TTL time.Duration
	// RenewEvery: how often the holder renews. Default TTL/3, so two
	// renewals in a row can be lost without the region fencing itself.
	RenewEvery time.Duration
	// MaxDriftRate ρ: the most a monotonic clock's rate (holder's or store
	// leader's) differs from real time, as a fraction. Default 0.01 (1 %),
	// far above a crystal's ±100 ppm plus NTP's ±500 ppm slew; it costs
	// TTL·2ρ ≈ 100 ms of a 5 s lease.
	MaxDriftRate float64
	// Margin is taken off the safe duration for the time between the check
	// and the acknowledgement's effect. Default 500 ms.
	Margin time.Duration
}

// DefaultLeaseRules returns the rules described on LeaseRules' fields.
func DefaultLeaseRules() LeaseRules {
	return LeaseRules{TTL: 5 * time.Second, RenewEvery: 5 * time.Second / 3, MaxDriftRate: 0.01, Margin: 500 * time.Millisecond}
}

// Validate reports rules under which a lease could never be used or renewed
// in time.
func (r LeaseRules) Validate() error {
	if r.TTL <= 0 || r.RenewEvery <= 0 || r.Margin < 0 {
		return fmt.Errorf("failover: lease: TTL %s and RenewEvery %s must be > 0, Margin %s >= 0", r.TTL, r.RenewEvery, r.Margin)
	}
	if r.MaxDriftRate < 0 || r.MaxDriftRate >= 0.5 || math.IsNaN(r.MaxDriftRate) {
		return fmt.Errorf("failover: lease: MaxDriftRate %v must be in [0, 0.5)", r.MaxDriftRate)
	}
	if d := SafeLeaseDuration(r.TTL, r); d <= r.RenewEvery {
		return fmt.Errorf("failover: lease: safe duration %s (TTL %s, drift %v, margin %s) must exceed RenewEvery %s", d, r.TTL, r.MaxDriftRate, r.Margin, r.RenewEvery)
	}
	return nil
}

// SafeLeaseDuration is how long after sending a renewal that succeeded the
// holder may keep acknowledging: ttl·(1-ρ)/(1+ρ) - Margin, rounded down,
// never negative. See LeaseRules for the derivation.
func SafeLeaseDuration(ttl time.Duration, r LeaseRules) time.Duration {
	rho := r.MaxDriftRate
	d := time.Duration(math.Floor(float64(ttl)*(1-rho)/(1+rho))) - r.Margin
	return max(d, 0)
}

// LeaseDeadline is the local monotonic time from which the holder must no
// longer acknowledge: renewedAt + SafeLeaseDuration(ttl, r).
func LeaseDeadline(renewedAt time.Time, ttl time.Duration, r LeaseRules) time.Time {
	return renewedAt.Add(SafeLeaseDuration(ttl, r))
}

// MayAcknowledge reports whether a broker of the lease holder may
// acknowledge a produce (or accept a subscription) at now, given that the
// last renewal (or the acquisition) that succeeded was sent at renewedAt
// (its send time, not its reply's arrival) for a lease of ttl. Both times
// are from the same monotonic clock. A zero renewedAt (no lease) and a now
// before renewedAt (a clock that went backwards) answer false.
func MayAcknowledge(now, renewedAt time.Time, ttl time.Duration, r LeaseRules) bool {
	if renewedAt.IsZero() || now.Before(renewedAt) {
		return false
	}
	return now.Before(LeaseDeadline(renewedAt, ttl, r))
}
