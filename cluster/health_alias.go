package cluster

import (
	"time"

	"github.com/meridian-mq/meridian/cluster/health"
)

// The health view is the pure core of gossip membership; it lives in
// cluster/health (no sockets, no etcd, so the failover core can import it
// alone). These names keep the membership shell and its callers reading
// as before.
type (
	Role         = health.Role
	MemberState  = health.MemberState
	MemberRecord = health.MemberRecord
	ProbeResult  = health.ProbeResult
	Member       = health.Member
	HealthRules  = health.Rules
	HealthView   = health.View
	RegionHealth = health.Region
)

// Roles of Meridian processes.
const (
	RoleBroker       = health.RoleBroker
	RoleBookie       = health.RoleBookie
	RoleWitness      = health.RoleWitness
	RoleEtcd         = health.RoleEtcd
	RoleAutorecovery = health.RoleAutorecovery
)

// Gossip tag keys.
const (
	TagRegion  = health.TagRegion
	TagRack    = health.TagRack
	TagRole    = health.TagRole
	TagAddr    = health.TagAddr
	TagAdmin   = health.TagAdmin
	TagProbe   = health.TagProbe
	TagProbeAt = health.TagProbeAt
)

// Member states.
const (
	MemberAlive   = health.MemberAlive
	MemberSuspect = health.MemberSuspect
	MemberFailed  = health.MemberFailed
	MemberLeft    = health.MemberLeft
)

// ProbeTags returns the tags that publish a write-probe result taken at at.
func ProbeTags(ok bool, at time.Time) map[string]string { return health.ProbeTags(ok, at) }

// BuildHealthView is health.Build.
func BuildHealthView(prev HealthView, recs []MemberRecord, now time.Time, rules HealthRules) HealthView {
	return health.Build(prev, recs, now, rules)
}

// DefaultHealthRules is health.DefaultRules.
func DefaultHealthRules() HealthRules { return health.DefaultRules() }
