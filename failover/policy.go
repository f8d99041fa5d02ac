package failover

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrInvalidPolicy is wrapped by every error Policy.Validate returns.
var ErrInvalidPolicy = errors.New("failover: invalid policy")

// Mode is how a namespace's regions share its traffic.
type Mode string

const (
	// ActiveStandby: one region at a time (the active region, named by the
	// committed Record) accepts the namespace's produce and subscriptions;
	// the others redirect. Moves bump the epoch.
	ActiveStandby Mode = "active-standby"
	// ActiveActive: every region serves the namespace; nothing moves, no
	// epoch, no lease. Failover is the client's business (it retries the
	// hosts of its service URL).
	ActiveActive Mode = "active-active"
)

// Default delays; the reasons are on Policy's fields.
const (
	DefaultFailoverDelay   = 2 * time.Second
	DefaultSwitchBackDelay = 30 * time.Second
	DefaultLookupHold      = 5 * time.Second
)

// Policy is one namespace's failover policy, stored with its other policies
// in the global store. Immutable once handed to a Core.
type Policy struct {
	Mode Mode
	// Regions, in order of preference. ActiveStandby: the first region
	// that is up is made active; failover goes to the next one that is up;
	// switch-back returns to an earlier one. ActiveActive: the regions that
	// serve. At least one; no duplicates.
	Regions []string
	// FailoverDelay: the active region must be seen continuously not up
	// (suspect or failed), and failed at the end, for this long before a
	// standby proposes to replace it. Flapping shorter than this never
	// moves the namespace. Default 2 s: on top of gossip's own detection
	// time (memberlist's suspicion timeout), so a failover takes about
	// detection + 2 s + whatever is left of the old lease. 0: fail over as
	// soon as gossip says failed (and the old lease is gone).
	FailoverDelay time.Duration
	// SwitchBackDelay: a more preferred region that came back must be seen
	// continuously up for this long, and the current epoch must be this
	// old, before the active region hands the namespace back to it.
	// Default 30 s, so a region that flaps on its way back does not drag
	// clients along (each move closes every producer and consumer). 0:
	// never switch back on its own; an operator moves it back with
	// `meridian admin failover NAMESPACE --to REGION`.
	SwitchBackDelay time.Duration
	// LookupHold: while the active region is suspected (or failed, but not
	// for FailoverDelay yet), a standby holds a lookup for at most this
	// long after the active region first looked bad, instead of
	// redirecting the client to a region that may be dying. Default 5 s:
	// longer than FailoverDelay, so a failover decided meanwhile is
	// answered directly, and well below the Go client's 30 s operation
	// timeout. 0: never hold.
	LookupHold time.Duration
	// CatchUpRequired: a planned move (switch-back, or a manual failover
	// while the old active region is up) waits for the target's
	// replication to have caught up: switch-back is proposed only when it
	// has, and the new active region answers RetryLater until it has (or
	// until the old one is seen failed). Default true: a planned move loses
	// nothing. false: planned moves behave like failovers (RPO = the lag at
	// the moment of the move).
	CatchUpRequired bool
}

// DefaultPolicy returns an active-standby policy over regions with the
// defaults described on Policy's fields.
func DefaultPolicy(regions ...string) Policy {
	return Policy{
		Mode:            ActiveStandby,
		Regions:         slices.Clone(regions),
		FailoverDelay:   DefaultFailoverDelay,
		SwitchBackDelay: DefaultSwitchBackDelay,
		LookupHold:      DefaultLookupHold,
		CatchUpRequired: true,
	}
}

// Validate returns an error wrapping ErrInvalidPolicy that says what is
// wrong, or nil.
func (p Policy) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPolicy, fmt.Sprintf(format, args...))
	}
	switch p.Mode {
	case ActiveStandby, ActiveActive:
	case "":
		return bad("mode is empty; want %q or %q", ActiveStandby, ActiveActive)
	default:
		return bad("unknown mode %q; want %q or %q", p.Mode, ActiveStandby, ActiveActive)
	}
	if len(p.Regions) == 0 {
		return bad("no regions")
	}
	seen := map[string]bool{}
	for _, r := range p.Regions {
		if r == "" || strings.ContainsAny(r, ", \t\n") {
			return bad("region name %q is empty or contains a comma or space", r)
		}
		if seen[r] {
			return bad("region %q listed twice", r)
		}
		seen[r] = true
	}
	if p.FailoverDelay < 0 || p.SwitchBackDelay < 0 || p.LookupHold < 0 {
		return bad("failover-delay %s, switch-back %s and lookup-hold %s must be >= 0", p.FailoverDelay, p.SwitchBackDelay, p.LookupHold)
	}
	return nil
}

// String prints the policy as the datadriven tests write it.
func (p Policy) String() string {
	if p.Mode == ActiveActive {
		return fmt.Sprintf("mode=%s regions=%s", p.Mode, strings.Join(p.Regions, ","))
	}
	sb := "never"
	if p.SwitchBackDelay > 0 {
		sb = p.SwitchBackDelay.String()
	}
	return fmt.Sprintf("mode=%s regions=%s failover-delay=%s switch-back=%s lookup-hold=%s catch-up=%t",
		p.Mode, strings.Join(p.Regions, ","), p.FailoverDelay, sb, p.LookupHold, p.CatchUpRequired)
}

// rank returns region's index in the preference order, or -1.
func (p Policy) rank(region string) int { return slices.Index(p.Regions, region) }
