package health

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/proto/metapb"
)

// This file is the pure core of gossip membership: a View is built by
// Build from member records and a time, with no sockets or clocks,
// so every rule here is tested with tables (health_test.go). membership.go is
// the shell that feeds it serf's members.

// Role is what a member does, published as its "role" tag.
type Role string

// Roles of Meridian processes.
const (
	RoleBroker  Role = "broker"
	RoleBookie  Role = "bookie"
	RoleWitness Role = "witness"
	RoleEtcd    Role = "etcd"
	// RoleAutorecovery: a `meridian autorecovery` process (it gossips only
	// to see bookies fail).
	RoleAutorecovery Role = "autorecovery"
)

// Valid reports whether r is a role of a Meridian process.
func (r Role) Valid() bool {
	switch r {
	case RoleBroker, RoleBookie, RoleWitness, RoleEtcd, RoleAutorecovery:
		return true
	}
	return false
}

// Gossip tag keys.
const (
	TagRegion = "region"
	TagRack   = "rack"
	TagRole   = "role"
	// TagAddr is the member's service address: a broker's Pulsar listener,
	// a bookie's gRPC address.
	TagAddr = "addr"
	// TagAdmin is the member's admin/metrics HTTP address.
	TagAdmin = "admin"
	// TagProbe is the result of the member's latest write probe, "ok" or
	// "fail"; TagProbeAt is when it was taken, in Unix milliseconds. Set
	// both with SetTags(ProbeTags(...)).
	TagProbe   = "probe"
	TagProbeAt = "probe_at"
)

// ProbeTags returns the tags that publish a write-probe result taken at at.
func ProbeTags(ok bool, at time.Time) map[string]string {
	res := "fail"
	if ok {
		res = "ok"
	}
	return map[string]string{TagProbe: res, TagProbeAt: strconv.FormatInt(at.UnixMilli(), 10)}
}

// MemberState is a member's state as this process sees it.
type MemberState uint8

const (
	// MemberAlive: serf has the member alive and memberlist does not
	// suspect it.
	MemberAlive MemberState = iota + 1
	// MemberSuspect: serf still has the member alive, but memberlist has
	// missed its probes and is waiting for it to refute before declaring it
	// failed (see suspectReader for how this is read).
	MemberSuspect
	// MemberFailed: memberlist declared it failed (crash, partition); serf
	// keeps it as failed for ReconnectTimeout, then reaps it.
	MemberFailed
	// MemberLeft: it left gracefully, or announced it is leaving (serf's
	// "leaving", which lasts about LeavePropagateDelay). Kept for
	// TombstoneTimeout, then reaped.
	MemberLeft
)

func (s MemberState) String() string {
	switch s {
	case MemberAlive:
		return "alive"
	case MemberSuspect:
		return "suspect"
	case MemberFailed:
		return "failed"
	case MemberLeft:
		return "left"
	}
	return fmt.Sprintf("MemberState(%d)", uint8(s))
}

// MemberRecord is one member as the membership shell reports it: the input
// of Build.
type MemberRecord struct {
	Name       string
	GossipAddr string
	// Tags are read, not retained.
	Tags  map[string]string
	State MemberState
}

// ProbeResult is a write-probe result published in gossip tags.
type ProbeResult struct {
	OK bool
	At time.Time // zero: no result
	By string    // the member that published it
}

// Known reports whether there is a result.
func (p ProbeResult) Known() bool { return !p.At.IsZero() }

func parseProbe(by string, tags map[string]string) ProbeResult {
	ms, err := strconv.ParseInt(tags[TagProbeAt], 10, 64)
	if err != nil || ms <= 0 {
		return ProbeResult{}
	}
	switch tags[TagProbe] {
	case "ok":
		return ProbeResult{OK: true, At: time.UnixMilli(ms), By: by}
	case "fail":
		return ProbeResult{At: time.UnixMilli(ms), By: by}
	}
	return ProbeResult{}
}

// Member is one member in a View. It is a value; its tags are
// reachable only through Tag and Tags, so a view cannot be changed through
// it.
type Member struct {
	// Name is the serf node name, unique across regions; a bookie's is its
	// bookie id.
	Name         string
	Region, Rack string
	Role         Role
	// Addr is the "addr" tag: the service address.
	Addr string
	// GossipAddr is the host:port serf listens on.
	GossipAddr string
	State      MemberState
	// Since is when this process saw the member enter State: at most a
	// detection delay after the real transition (its poll period for
	// suspicion). For members already known when this process joined,
	// the time it learned of them.
	Since time.Time
	// Probe is the member's latest published write-probe result.
	Probe ProbeResult

	tags map[string]string
}

// Tag returns one of the member's gossip tags ("" if unset).
func (m Member) Tag(key string) string { return m.tags[key] }

// Tags returns a copy of the member's gossip tags.
func (m Member) Tags() map[string]string { return maps.Clone(m.tags) }

func (m Member) same(o Member) bool {
	return m.Name == o.Name && m.GossipAddr == o.GossipAddr && m.State == o.State &&
		m.Since.Equal(o.Since) && maps.Equal(m.tags, o.tags)
}

// Rules are what Region.Healthy requires of a region.
type Rules struct {
	// MinAliveBrokers: alive (not suspect) brokers a healthy region has.
	// Default 1: one broker can serve every topic.
	MinAliveBrokers int
	// MinAliveBookies: alive (not suspect) bookies a healthy region has.
	// Default 3, the managed ledger's default ensemble size: with fewer, new
	// ledgers (rollover, new topics) cannot be placed in the region.
	MinAliveBookies int
	// ProbeFailWindow: a failed write probe makes its region unhealthy for
	// this long after it was taken, unless a newer result says ok. Default
	// 30 s. A prober that dies stops publishing, so its last failure
	// expires rather than condemning the region for ever (its death shows
	// in the counts instead). 0: probe results are ignored.
	ProbeFailWindow time.Duration
}

// DefaultRules returns the rules described on Rules' fields.
func DefaultRules() Rules {
	return Rules{MinAliveBrokers: 1, MinAliveBookies: 3, ProbeFailWindow: 30 * time.Second}
}

// Validate checks the rules.
func (r Rules) Validate() error {
	if r.MinAliveBrokers < 0 || r.MinAliveBookies < 0 || r.ProbeFailWindow < 0 {
		return errors.New("MinAliveBrokers, MinAliveBookies and ProbeFailWindow must be >= 0")
	}
	return nil
}

func (r Rules) String() string {
	return fmt.Sprintf("min-alive-brokers=%d min-alive-bookies=%d probe-fail-window=%s", r.MinAliveBrokers, r.MinAliveBookies, r.ProbeFailWindow)
}

// View is an immutable snapshot of every member of every region, as
// one process sees it at one time. The zero value is an empty view. Safe to
// share between goroutines; nothing reachable from it changes.
type View struct {
	asOf    time.Time
	rules   Rules
	members []Member         // sorted by name
	byName  map[string]int   // index into members
	regions map[string][]int // indexes into members, in name order
}

// Build returns the view of recs at now under rules. prev is the
// view built before (or the zero View): a member whose state is the
// same in prev keeps prev's Since; one that is new or changed state gets
// Since = now. Members missing from recs (reaped) are dropped. Records with
// an empty name are ignored; of two records with one name, the first wins.
func Build(prev View, recs []MemberRecord, now time.Time, rules Rules) View {
	v := View{asOf: now, rules: rules, byName: make(map[string]int, len(recs)), regions: map[string][]int{}}
	v.members = make([]Member, 0, len(recs))
	for _, r := range recs {
		if r.Name == "" {
			continue
		}
		if _, dup := v.byName[r.Name]; dup {
			continue
		}
		v.byName[r.Name] = -1
		tags := maps.Clone(r.Tags)
		if tags == nil {
			tags = map[string]string{}
		}
		m := Member{
			Name: r.Name, Region: tags[TagRegion], Rack: tags[TagRack], Role: Role(tags[TagRole]),
			Addr: tags[TagAddr], GossipAddr: r.GossipAddr, State: r.State, Since: now,
			Probe: parseProbe(r.Name, tags), tags: tags,
		}
		if p, ok := prev.Member(r.Name); ok && p.State == m.State {
			m.Since = p.Since
		}
		v.members = append(v.members, m)
	}
	slices.SortFunc(v.members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	for i, m := range v.members {
		v.byName[m.Name] = i
		v.regions[m.Region] = append(v.regions[m.Region], i)
	}
	return v
}

// AsOf is the time the view describes: the time it was built, or the time
// given to At.
func (v View) AsOf() time.Time { return v.asOf }

// At returns the same members evaluated at now: Healthy's probe window is
// measured from AsOf.
func (v View) At(now time.Time) View {
	v.asOf = now
	return v
}

// Rules returns the rules Healthy applies.
func (v View) Rules() Rules { return v.rules }

// Members returns every member, sorted by name. The slice is the caller's.
func (v View) Members() []Member { return slices.Clone(v.members) }

// Member returns a member by name.
func (v View) Member(name string) (Member, bool) {
	i, ok := v.byName[name]
	if !ok || i < 0 {
		return Member{}, false
	}
	return v.members[i], true
}

// IsFailed reports whether gossip has the member failed. Unknown members
// are not failed: gossip can only veto what it knows.
func (v View) IsFailed(name string) bool {
	m, ok := v.Member(name)
	return ok && m.State == MemberFailed
}

// Regions returns the region names of all members, sorted.
func (v View) Regions() []string {
	out := slices.Collect(maps.Keys(v.regions))
	slices.Sort(out)
	return out
}

// Unreachable returns, sorted, the regions that have members in the view
// and none of them alive (all suspect, failed or left): from here, that
// region's hosts look paused, dead or cut off. A region with one alive
// member of any role is not listed.
func (v View) Unreachable() []string {
	var out []string
	for _, r := range v.Regions() {
		if len(v.Region(r).Alive("")) == 0 {
			out = append(out, r)
		}
	}
	return out
}

// Region returns one region's health. A region with no members has an
// empty Region, which is not healthy.
func (v View) Region(name string) Region {
	rh := Region{name: name, asOf: v.asOf, rules: v.rules}
	for _, i := range v.regions[name] {
		rh.members = append(rh.members, v.members[i])
	}
	return rh
}

// ExcludeFailedBookies returns regs without the bookies gossip has failed
// or left, so new ensembles avoid a dead bookie before its etcd
// registration lease expires (DefaultRegistrationTTL later). A bookie is
// matched by its id to a gossip member of role bookie with that node name.
// Kept: bookies gossip does not know (not joined yet, or run without
// gossip), alive ones, and suspect ones (suspicion is often refuted, and
// dropping them could leave too few bookies to place a ledger). regs is not
// modified; the returned slice is new and shares the registrations.
func (v View) ExcludeFailedBookies(regs []*metapb.BookieRegistration) []*metapb.BookieRegistration {
	out := make([]*metapb.BookieRegistration, 0, len(regs))
	for _, r := range regs {
		if !v.bookieGone(r.GetId()) {
			out = append(out, r)
		}
	}
	return out
}

func (v View) bookieGone(id string) bool {
	m, ok := v.Member(id)
	return ok && m.Role == RoleBookie && (m.State == MemberFailed || m.State == MemberLeft)
}

// SameMembers reports whether two views hold the same members in the same
// states since the same times with the same tags (AsOf aside).
func SameMembers(a, b View) bool {
	return a.rules == b.rules && slices.EqualFunc(a.members, b.members, Member.same)
}

// Region is one region's members in a View. Immutable.
type Region struct {
	name    string
	asOf    time.Time
	rules   Rules
	members []Member // sorted by name
}

// Name returns the region's name.
func (r Region) Name() string { return r.name }

// Members returns the region's members of role in any state, sorted by
// name; role "" means every role.
func (r Region) Members(role Role) []Member { return r.in(role, 0) }

// Alive returns the region's alive members of role ("" = every role).
func (r Region) Alive(role Role) []Member { return r.in(role, MemberAlive) }

// Suspect returns the region's suspect members of role.
func (r Region) Suspect(role Role) []Member { return r.in(role, MemberSuspect) }

// Failed returns the region's failed members of role.
func (r Region) Failed(role Role) []Member { return r.in(role, MemberFailed) }

// Left returns the region's members of role that left.
func (r Region) Left(role Role) []Member { return r.in(role, MemberLeft) }

// Count returns how many of the region's members of role are in state.
func (r Region) Count(role Role, state MemberState) int { return len(r.in(role, state)) }

func (r Region) in(role Role, state MemberState) []Member {
	var out []Member
	for _, m := range r.members {
		if (role == "" || m.Role == role) && (state == 0 || m.State == state) {
			out = append(out, m)
		}
	}
	return out
}

// Probe returns the region's newest write-probe result published by a
// member that is alive or suspect (a failed member's tags are stale), or
// the zero ProbeResult if none publishes one.
func (r Region) Probe() ProbeResult {
	var best ProbeResult
	for _, m := range r.members {
		if (m.State == MemberAlive || m.State == MemberSuspect) && m.Probe.At.After(best.At) {
			best = m.Probe
		}
	}
	return best
}

// Problems returns why the region is not healthy at AsOf, in a fixed order;
// none when it is. The rule:
//
//  1. at least Rules.MinAliveBrokers brokers are alive (suspect ones do not
//     count);
//  2. at least Rules.MinAliveBookies bookies are alive;
//  3. the region's newest probe result (Probe) is not a failure taken
//     within Rules.ProbeFailWindow before AsOf. No result, an ok one, or a
//     failure older than the window does not count against the region.
//     Probe times are the prober's wall clock, so clock skew between hosts
//     shifts the window by as much.
//
// A region without members fails 1 (and 2 when bookies are required).
func (r Region) Problems() []string {
	var out []string
	if n := r.Count(RoleBroker, MemberAlive); n < r.rules.MinAliveBrokers {
		out = append(out, fmt.Sprintf("%d alive brokers, need %d", n, r.rules.MinAliveBrokers))
	}
	if n := r.Count(RoleBookie, MemberAlive); n < r.rules.MinAliveBookies {
		out = append(out, fmt.Sprintf("%d alive bookies, need %d", n, r.rules.MinAliveBookies))
	}
	if p := r.Probe(); r.rules.ProbeFailWindow > 0 && p.Known() && !p.OK {
		if age := r.asOf.Sub(p.At); age <= r.rules.ProbeFailWindow {
			out = append(out, fmt.Sprintf("write probe by %s failed %s ago", p.By, age.Round(time.Millisecond)))
		}
	}
	return out
}

// Healthy reports whether the region has no Problems.
func (r Region) Healthy() bool { return len(r.Problems()) == 0 }
