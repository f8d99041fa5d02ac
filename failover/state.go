package failover

import (
	"fmt"
	"time"
)

// This file holds the core's inputs and its memory. What is persisted in
// the global store (Record, StoreLease) is kept apart from what one
// process remembers between steps (memory): a restarted process loses the
// memory and rebuilds it, which only delays its next proposal.

// Record is what the global store holds for an active-standby namespace:
// its active region and epoch. It changes only by a compare-and-swap on
// Epoch (Proposal.From), so every epoch names exactly one active region.
type Record struct {
	// Active is the region that serves the namespace in this epoch.
	Active string
	// Epoch increases by one at every change of Active. 0 means no record:
	// the namespace has never had an active region.
	Epoch uint64
	// Previous is the region that was active in the epoch before ("" for
	// the first).
	Previous string
	// CatchUp: this epoch was a planned move, and Active must have caught
	// up on replication from Previous before it serves (see
	// Policy.CatchUpRequired).
	CatchUp bool
	// Reason is why the epoch began, for people.
	Reason string
	// Since is the proposer's wall-clock time of the proposal, for people
	// and `meridian admin`; the core never compares it.
	Since time.Time
}

func (r Record) String() string {
	if r.Epoch == 0 {
		return "no record"
	}
	s := fmt.Sprintf("active=%s epoch=%d", r.Active, r.Epoch)
	if r.Previous != "" {
		s += " previous=" + r.Previous
	}
	if r.CatchUp {
		s += " catch-up"
	}
	return s
}

// StoreLease is the namespace's lease key in the global store as last read:
// which region holds the lease and for which epoch. The zero value: no
// lease (none was taken, or it expired or was revoked). The store deletes
// the key when the lease expires by its own clock.
type StoreLease struct {
	Holder string
	Epoch  uint64
}

// Committed is what the shell last read from the global store for the
// namespace. Feed records in non-decreasing epoch order (a watch does).
type Committed struct {
	// Read: the shell has read the store at least once since it started.
	// false: the region started cut off from the store's majority; it
	// stays standby (RetryLater) until it has read.
	Read   bool
	Record Record
	Lease  StoreLease
}

// LocalLease is the lease this region holds, as its shell knows it.
type LocalLease struct {
	// Epoch the lease was acquired for; 0: no lease held.
	Epoch uint64
	// RenewedAt is when the last acquisition or renewal that succeeded was
	// *sent*, by the local monotonic clock (see LeaseRules).
	RenewedAt time.Time
	// TTL is the lease's TTL as granted.
	TTL time.Duration
}

// Held reports whether the shell holds a lease.
func (l LocalLease) Held() bool { return l.Epoch != 0 }

// RegionStatus is one region's health in the local region's view, derived
// by the shell from health.View (StatusOf does it) and from
// replication lag.
type RegionStatus struct {
	Name string
	// Healthy: health.Region.Healthy(): enough alive brokers and
	// bookies and no recent failed write probe.
	Healthy bool
	// Suspected: not healthy, but would be if gossip's suspect members
	// were alive: memberlist missed their probes and waits for them to
	// refute. Not failed (yet).
	Suspected bool
	// ProbeOK: the region's newest write probe succeeded recently. A
	// suspected region whose write probe succeeds is slow, not dead, and
	// counts as up.
	ProbeOK bool
	// LastProbe is when that probe was taken (the prober's wall clock);
	// printed, never compared.
	LastProbe time.Time
	// ReplicationCaughtUp: the region has applied the namespace's
	// replication from the other regions up to a lag the shell deems
	// caught up (after a planned move: up to the previous active region's
	// last acknowledged entry).
	ReplicationCaughtUp bool
	// Detail says why the region is not healthy (cluster's Problems),
	// for refusals and logs.
	Detail string
}

// Condition is how the core classifies a region's status.
type Condition uint8

const (
	// Down: failed or unknown, or alive members with a failed write probe.
	Down Condition = iota
	// Suspect: only suspected; may refute.
	Suspect
	// Up: healthy, or suspected while its write probes succeed (slow).
	Up
)

func (c Condition) String() string {
	switch c {
	case Up:
		return "up"
	case Suspect:
		return "suspect"
	}
	return "down"
}

// Condition classifies the status. Latency plays no part: a slow region
// whose members answer gossip and whose write probes succeed is up.
func (s RegionStatus) Condition() Condition {
	switch {
	case s.Healthy:
		return Up
	case s.Suspected && s.ProbeOK:
		return Up
	case s.Suspected:
		return Suspect
	}
	return Down
}

// seen is the core's memory of one region's condition: since when it has
// been continuously up, or continuously not up (hysteresis).
type seen struct {
	cond     Condition
	upSince  time.Time // zero unless cond == Up
	badSince time.Time // zero when cond == Up
	detail   string
}

// memory is what one process's core remembers between steps. Never
// persisted.
type memory struct {
	last    time.Time // latest Now seen (time never goes back in the core)
	regions map[string]*seen
	// epoch is the newest record epoch seen, epochSeenAt when it was first
	// seen: proposals wait for an epoch to settle.
	epoch       uint64
	epochSeenAt time.Time
	// leaseMissingSince: since when the store has shown no lease of the
	// current active region for the current epoch; zero while it has one.
	leaseMissingSince time.Time
}
