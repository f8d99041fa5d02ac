package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"regexp"
	"strconv"
	"time"

	"github.com/hashicorp/serf/serf"
)

// MembershipConfig configures a process's gossip membership (JoinMembership).
// It is copied at start and not read again; change it by restarting.
//
// The failure-detection fields mirror memberlist's (SWIM with Lifeguard
// suspicion) and start from memberlist.DefaultLANConfig. How they combine
// into a detection time is written out on SuspicionTimeouts and
// FailureDetectionBound; TestMembershipConfigPrint golden-tests the printed
// defaults so this comment and the code cannot drift apart.
type MembershipConfig struct {
	// NodeName is this member's name, unique across every region: e.g.
	// "east-broker-1". A bookie's node name is its bookie id, which is how
	// HealthView.ExcludeFailedBookies matches gossip members to bookie
	// registrations. Letters, digits, '-' and '.', at most 128 characters
	// (serf's rule). Required.
	NodeName string

	// Region, Rack and Role are published as the "region", "rack" and
	// "role" tags. Region and Role are required and fixed for the life of
	// the process; Rack may be empty.
	Region, Rack string
	Role         Role
	// ServiceAddr is the address clients of this member use (a broker's
	// Pulsar listener, a bookie's gRPC address), published as the "addr"
	// tag. AdminAddr (tag "admin") is its admin/metrics HTTP address. Both
	// optional.
	ServiceAddr, AdminAddr string
	// Tags are further tags to publish. They must not use the keys above
	// (region, rack, role, addr, admin). serf refuses to start when all
	// tags together encode to more than 512 bytes (memberlist.MetaMaxSize),
	// so keep them short.
	Tags map[string]string

	// BindAddr and BindPort are where gossip listens, UDP and TCP on the
	// same port. Default 0.0.0.0:7946 (memberlist's). BindPort 0 lets the
	// kernel choose (tests); Membership.GossipAddr tells which.
	BindAddr string
	BindPort int
	// AdvertiseAddr and AdvertisePort are the address other members reach
	// this one at, when it differs from the bind address (NAT, 0.0.0.0).
	// Empty/0: memberlist picks the bind address, or the first private IP
	// when bound to 0.0.0.0, and the bind port.
	AdvertiseAddr string
	AdvertisePort int

	// Seeds are host:port gossip addresses of other members, of any region.
	// JoinMembership returns at once and joins in the background, retrying
	// the whole list with backoff from JoinRetryIntervalMin to
	// JoinRetryIntervalMax until one seed answers; after that, serf's own
	// state sync and reconnects keep this member in the cluster. Seeds equal
	// to this member's own bind or advertise address are skipped. Empty: this
	// member waits for others to join it.
	Seeds []string
	// JoinRetryIntervalMin, JoinRetryIntervalMax: the join backoff. Default
	// 1 s doubling to 30 s: a restarted region finds its seeds within a
	// second once they are up, and a long outage costs one attempt per 30 s.
	JoinRetryIntervalMin, JoinRetryIntervalMax time.Duration

	// ProbeInterval: every ProbeInterval, memberlist probes one other member
	// (round-robin over a shuffled list) with a UDP ping. Default 1 s
	// (LAN). Shorter detects failures sooner at the cost of more packets:
	// each member sends about 1/ProbeInterval pings per second whatever the
	// cluster size.
	ProbeInterval time.Duration
	// ProbeTimeout: how long a direct ping waits for its ack before
	// memberlist asks IndirectChecks other members to ping the target
	// (and tries TCP) for the rest of the ProbeInterval. Must be below
	// ProbeInterval. Default 500 ms (LAN); memberlist's advice is the
	// 99th-percentile round-trip time, which across regions is far more
	// than a LAN's — the failover issue sets Meridian's value.
	ProbeTimeout time.Duration
	// IndirectChecks: members asked to ping a target that missed a direct
	// ping. Default 3 (LAN). More survives more packet loss on one path.
	IndirectChecks int
	// SuspicionMult: a member whose probe failed is "suspect" for at least
	//   SuspicionMult × max(1, log10(N)) × ProbeInterval
	// before it is declared failed (N = members known, so the time grows
	// with the cluster; memberlist's doc comment says log(N+1), its code
	// uses log10(max(1, N)) floored at 1, which this mirrors). A live member
	// refutes its suspicion in that window. Default 4 (LAN): 4 s for up to
	// 10 members. At least 2.
	SuspicionMult int
	// SuspicionMaxTimeoutMult: a suspicion starts at SuspicionMaxTimeoutMult
	// times the time above and shrinks toward it as other members confirm
	// it independently (Lifeguard); with fewer than SuspicionMult−2 other
	// members able to confirm, memberlist starts at the minimum instead.
	// Default 6 (LAN): up to 24 s with 3–10 members. At least 1.
	SuspicionMaxTimeoutMult int
	// AwarenessMaxMultiplier: a member that notices it is itself degraded
	// (missed acks, late nacks) stretches its probe interval up to this
	// factor so it does not accuse healthy peers. Default 8 (LAN).
	AwarenessMaxMultiplier int
	// GossipInterval and GossipNodes: every GossipInterval, pending
	// broadcasts (state changes, tag updates) are sent to GossipNodes random
	// members, besides riding on probes. Default 200 ms and 3 (LAN): a
	// broadcast reaches N members in about log4(N) intervals.
	GossipInterval time.Duration
	GossipNodes    int
	// RetransmitMult: each broadcast is retransmitted
	// RetransmitMult × ceil(log10(N+1)) times. Default 4 (LAN).
	RetransmitMult int
	// GossipToTheDeadTime: how long a failed member still receives gossip,
	// so it can refute a false failure. Default 30 s (LAN).
	GossipToTheDeadTime time.Duration
	// DeadNodeReclaimTime: how long after a member is declared failed its
	// name may come back from another address (a container or pod
	// restarted with a new IP). memberlist's default, 0, refuses that
	// until the dead entry is dropped after GossipToTheDeadTime, and every
	// peer logs "Conflicting address" meanwhile. Default 1 ms, at once:
	// names are one process's each, so a failed member's name at a new
	// address is that process restarted; and a longer time refuses the
	// restarted member's join, which it then repeats only at the next
	// push/pull (PushPullInterval). Must be >= 0 (0: memberlist's
	// refusal).
	DeadNodeReclaimTime time.Duration
	// PushPullInterval: a full state exchange with one random member over
	// TCP, the anti-entropy that repairs missed broadcasts. Default 30 s
	// (LAN). Must be > 0.
	PushPullInterval time.Duration
	// TCPTimeout bounds TCP connects and push/pull exchanges (joins too).
	// Default 10 s (LAN).
	TCPTimeout time.Duration

	// ReconnectInterval: how often serf tries to reconnect to failed
	// members (so two sides of a healed partition find each other again
	// after GossipToTheDeadTime). Default 30 s (serf's).
	ReconnectInterval time.Duration
	// ReconnectTimeout: a failed member is kept (as failed) and retried for
	// this long, then reaped and forgotten. Default 24 h (serf's): a region
	// down for hours still shows in the health view as failed members, not
	// as an empty region.
	ReconnectTimeout time.Duration
	// TombstoneTimeout: a member that left gracefully is remembered (as
	// left) this long, then reaped. Default 24 h (serf's).
	TombstoneTimeout time.Duration
	// ReapInterval: how often serf looks for members to reap. Default 15 s
	// (serf's).
	ReapInterval time.Duration
	// BroadcastTimeout bounds waiting for a tag update or a leave to be sent
	// out. Default 5 s (serf's).
	BroadcastTimeout time.Duration
	// LeavePropagateDelay: after announcing its leave, a member stays up
	// this long so others stop probing it before it is gone (otherwise they
	// may see a failure instead of a leave). Default 1 s (serf's).
	LeavePropagateDelay time.Duration

	// SecretKey, if set, encrypts and authenticates all gossip with AES-GCM
	// under this key (16, 24 or 32 bytes: AES-128/192/256). Messages that do
	// not decrypt under an installed key — from a process without the key,
	// or unencrypted — are dropped. Every member must share a key.
	// SecondaryKeys are further keys accepted for incoming messages (a
	// rotation in progress); SecretKey is the one used to send. Rotate a
	// running cluster with Membership.InstallKey, UseKey, RemoveKey; keys
	// are not persisted, so restart members with the new key in their
	// config. Empty: gossip is in the clear and keyring operations fail
	// with ErrGossipNotEncrypted.
	SecretKey     []byte
	SecondaryKeys [][]byte

	// Health holds the rules RegionHealth.Healthy applies.
	Health HealthRules

	// Logger receives membership changes at Info and serf/memberlist's own
	// logs: their DEBUG and INFO lines at Debug, WARN at Warn, ERR at Error,
	// each distinct message at most once per 10 s with a count of the ones
	// held back. Default: discard.
	Logger *slog.Logger

	// tuneSerf, for tests only, changes serf's config last (a fault
	// hook: a query window no answer arrives in).
	tuneSerf func(*serf.Config)
}

// DefaultMembershipConfig returns memberlist's LAN timings
// (memberlist.DefaultLANConfig) and serf's reconnect/reap defaults, with a
// reason beside each in MembershipConfig's field comments. The caller sets
// NodeName, Region, Role, (Rack, addresses,) Seeds and keys.
//
// Failure detection with these values, for N ≤ 10 members (log10 N ≤ 1):
//
//	suspicion (SuspicionTimeouts): min = 4 × 1 × 1 s = 4 s, max = 6 × 4 s = 24 s
//	typical: first probe of the dead member ≈ 1 s, probe fails ≤ 1 s,
//	  suspicion ≈ 4 s once 2 other members confirmed → ≈ 6 s
//	worst (FailureDetectionBound(4)): 5 × 1 s + 1 s + 24 s + 2 × 0.2 s = 30.4 s
//
// These are LAN numbers; memberlist's WAN profile alone has a 30 s minimum
// suspicion (6 × 5 s). Meridian's own defaults are RegionsConfig's.
func DefaultMembershipConfig() MembershipConfig {
	return MembershipConfig{
		BindAddr:                "0.0.0.0",
		BindPort:                7946,
		JoinRetryIntervalMin:    time.Second,
		JoinRetryIntervalMax:    30 * time.Second,
		ProbeInterval:           time.Second,
		ProbeTimeout:            500 * time.Millisecond,
		IndirectChecks:          3,
		SuspicionMult:           4,
		SuspicionMaxTimeoutMult: 6,
		AwarenessMaxMultiplier:  8,
		GossipInterval:          200 * time.Millisecond,
		GossipNodes:             3,
		RetransmitMult:          4,
		GossipToTheDeadTime:     30 * time.Second,
		DeadNodeReclaimTime:     time.Millisecond,
		PushPullInterval:        30 * time.Second,
		TCPTimeout:              10 * time.Second,
		ReconnectInterval:       30 * time.Second,
		ReconnectTimeout:        24 * time.Hour,
		TombstoneTimeout:        24 * time.Hour,
		ReapInterval:            15 * time.Second,
		BroadcastTimeout:        5 * time.Second,
		LeavePropagateDelay:     time.Second,
		Health:                  DefaultHealthRules(),
	}
}

// RegionsConfig returns Meridian's own defaults for a deployment whose
// members gossip across regions (the `meridian` gossip profile, the
// default of `meridian broker|bookie --gossip-profile` and `meridian up`).
// memberlist's LAN profile takes 6 s to 30 s to declare a dead member
// failed and its WAN profile at least 30 s; failover needs a dead region
// seen down within a few seconds, on 2-core hosts under load, without
// accusing live members.
//
//	ProbeInterval 500 ms: each member pings one other every 500 ms.
//	ProbeTimeout 300 ms: above a cross-region 99th-percentile round trip
//	  (≤ 150 ms between most cloud regions) with room for a busy host's
//	  scheduling; a missed direct ping is retried through 3 others.
//	SuspicionMult 3, SuspicionMaxTimeoutMult 2: a suspect member has
//	  3 × max(1, log10 N) × 500 ms = 1.5 s (N ≤ 10) to refute — three more
//	  probe rounds — and a lone suspicion lasts at most 3 s.
//	GossipInterval 100 ms: a suspicion or a probe-result tag reaches every
//	  member of a 20-member cluster in about 3 intervals.
//
// Detection of a dead region, N ≤ 10 members:
//
//	first failed probe ≈ 0.5 s + 0.3 s; region not up from then (its
//	  members are suspect)
//	failed after the suspicion: + 1.5 s (confirmed by others) .. 3 s
//	  → about 2.3 s to 3.8 s after the death
//	failover: the region must be not up for FailoverDelay (2 s, counted
//	  from the suspicion, ≈ 2.8 s after the death) and failed (≤ 3.8 s),
//	  and its lease must be gone from the store (≤ the 5 s lease TTL after
//	  its last renewal): commit ≈ 3.3 s to 5 s after the death, the lease
//	  being the longer term.
//	worst (FailureDetectionBound): see the golden test.
//
// A false suspicion needs a member to miss its direct and 3 indirect
// pings for 1.5 s: a pause of that length (a long GC, a host starved of
// CPU) is close enough to dead that failing over its region is right.
func RegionsConfig() MembershipConfig {
	c := DefaultMembershipConfig()
	c.ProbeInterval = 500 * time.Millisecond
	c.ProbeTimeout = 300 * time.Millisecond
	c.SuspicionMult = 3
	c.SuspicionMaxTimeoutMult = 2
	c.GossipInterval = 100 * time.Millisecond
	// Lifeguard's awareness stretches a member's probe interval and
	// timeouts up to this factor when its probes miss their nacks, taking
	// that for local trouble. A region that dies takes a large share of
	// the cluster's members with it, and every survivor's indirect probes
	// through them miss their nacks: with memberlist's 8 a paused region
	// was seen down only after 12 s (SIGSTOP test) instead of ~1 s. 2
	// keeps some of the protection.
	c.AwarenessMaxMultiplier = 2
	c.PushPullInterval = 15 * time.Second
	c.TCPTimeout = 5 * time.Second
	c.ReconnectInterval = 10 * time.Second
	return c
}

// FastLocalConfig returns timings for members on one machine over loopback
// (tests, `meridian up` drills): fast enough that a test sees a crash within
// a few seconds, slow enough that a busy 2-core machine running the race
// detector does not accuse live members (a false suspicion is refuted well
// inside the 600 ms minimum). It binds 127.0.0.1 on a kernel-chosen port.
//
// Failure detection with these values, for N = 4 members (log10 4 < 1):
//
//	suspicion: min = 3 × 1 × 200 ms = 600 ms, max = 2 × 600 ms = 1.2 s
//	  (k = SuspicionMult−2 = 1 confirmation expected, and N−2 = 2 ≥ 1, so a
//	  suspicion starts at 1.2 s and drops to 600 ms on the first confirmation)
//	typical: first probe ≈ 200 ms + probe fails ≤ 200 ms + ≈ 600 ms ≈ 1 s
//	worst (FailureDetectionBound(4)):
//	  (2×3−1) × 200 ms + 200 ms + 1.2 s + 2 × 50 ms = 2.5 s
func FastLocalConfig() MembershipConfig {
	c := DefaultMembershipConfig()
	c.BindAddr = "127.0.0.1"
	c.BindPort = 0                                 // kernel-chosen; see Membership.GossipAddr
	c.JoinRetryIntervalMin = 50 * time.Millisecond // loopback answers at once
	c.JoinRetryIntervalMax = 500 * time.Millisecond
	c.ProbeInterval = 200 * time.Millisecond // 5× LAN: detection in ~1 s
	c.ProbeTimeout = 100 * time.Millisecond  // loopback RTT is µs; this is scheduling slack
	c.IndirectChecks = 2                     // 4-member test clusters have 2 other peers to ask
	c.SuspicionMult = 3                      // min suspicion 600 ms, several probe rounds to refute
	c.SuspicionMaxTimeoutMult = 2            // cap a lone suspicion at 1.2 s
	c.GossipInterval = 50 * time.Millisecond // tag updates visible in ~100 ms
	c.AwarenessMaxMultiplier = 2             // see RegionsConfig
	// RetransmitMult stays 4 (LAN): memberlist's DefaultLocalConfig has 2,
	// with which a broadcast in a 4-member cluster misses one member about
	// once in 9 (each of 2 relays picks 2 of its 3 peers) until push/pull
	// repairs it 5 s later; measured as a flaky tag-propagation test.
	c.GossipToTheDeadTime = 5 * time.Second
	c.PushPullInterval = 5 * time.Second
	c.TCPTimeout = time.Second // memberlist's DefaultLocalConfig
	c.ReconnectInterval = 500 * time.Millisecond
	c.ReconnectTimeout = 30 * time.Second
	c.TombstoneTimeout = 30 * time.Second
	c.ReapInterval = 500 * time.Millisecond
	c.BroadcastTimeout = 2 * time.Second
	c.LeavePropagateDelay = 200 * time.Millisecond // one probe interval
	return c
}

// SuspicionTimeouts returns how long memberlist keeps a member of an
// n-member cluster suspect before declaring it failed:
//
//	min = SuspicionMult × max(1, log10(n)) × ProbeInterval
//	max = SuspicionMaxTimeoutMult × min
//
// A suspicion starts at max and falls toward min as the
// k = SuspicionMult−2 confirmations from other members arrive; when n−2 < k
// (too few members to confirm) it is min from the start. This is
// memberlist v0.7.0's suspicionTimeout and suspectNode, restated so the
// numbers can be printed and tested.
func (c MembershipConfig) SuspicionTimeouts(n int) (min, max time.Duration) {
	scale := math.Max(1, math.Log10(math.Max(1, float64(n))))
	min = time.Duration(c.SuspicionMult) * time.Duration(scale*1000) * c.ProbeInterval / 1000
	return min, time.Duration(c.SuspicionMaxTimeoutMult) * min
}

// suspicionStart is the timeout a fresh suspicion is armed with.
func (c MembershipConfig) suspicionStart(n int) time.Duration {
	min, max := c.SuspicionTimeouts(n)
	if k := c.SuspicionMult - 2; k < 1 || n-2 < k {
		return min
	}
	return max
}

// FailureDetectionBound returns how long after a member of an n-member
// cluster crashes every other member sees it failed, in the worst case
// without packet loss and with healthy probers (no awareness stretching):
//
//	first probe  (2(n−1)−1) × ProbeInterval  one prober's round-robin over its
//	                                          n−1 peers is reshuffled each round,
//	                                          so two probes of one peer can be
//	                                          that far apart
//	probe fails  + ProbeInterval             direct ping, then indirect and TCP
//	                                          pings until the interval ends
//	suspicion    + suspicionStart(n)         max, or min when nobody can confirm
//	spread       + (ceil(log(n)/log(GossipNodes+1)) + 1) × GossipInterval
//	                                          the failure broadcast reaching all
//
// More probers make the first probe sooner in practice; the bound assumes
// one. Serf turns memberlist's verdict into EventMemberFailed at once.
func (c MembershipConfig) FailureDetectionBound(n int) time.Duration {
	if n < 2 {
		return 0
	}
	firstProbe := time.Duration(2*(n-1)-1) * c.ProbeInterval
	rounds := 1
	if c.GossipNodes > 0 {
		rounds += int(math.Ceil(math.Log(float64(n)) / math.Log(float64(c.GossipNodes+1))))
	}
	return firstProbe + c.ProbeInterval + c.suspicionStart(n) + time.Duration(rounds)*c.GossipInterval
}

// String prints the timing fields, one per line (golden-tested).
func (c MembershipConfig) String() string {
	min4, max4 := c.SuspicionTimeouts(4)
	min20, max20 := c.SuspicionTimeouts(20)
	return fmt.Sprintf(`probe-interval=%s probe-timeout=%s indirect-checks=%d
suspicion-mult=%d suspicion-max-timeout-mult=%d awareness-max-multiplier=%d
gossip-interval=%s gossip-nodes=%d retransmit-mult=%d gossip-to-the-dead=%s
push-pull-interval=%s tcp-timeout=%s
reconnect-interval=%s reconnect-timeout=%s tombstone-timeout=%s reap-interval=%s
broadcast-timeout=%s leave-propagate-delay=%s join-retry=%s..%s
suspicion n=4: %s..%s  n=20: %s..%s
failure-detection-bound n=4: %s  n=20: %s
health: %s
`,
		c.ProbeInterval, c.ProbeTimeout, c.IndirectChecks,
		c.SuspicionMult, c.SuspicionMaxTimeoutMult, c.AwarenessMaxMultiplier,
		c.GossipInterval, c.GossipNodes, c.RetransmitMult, c.GossipToTheDeadTime,
		c.PushPullInterval, c.TCPTimeout,
		c.ReconnectInterval, c.ReconnectTimeout, c.TombstoneTimeout, c.ReapInterval,
		c.BroadcastTimeout, c.LeavePropagateDelay, c.JoinRetryIntervalMin, c.JoinRetryIntervalMax,
		min4, max4, min20, max20,
		c.FailureDetectionBound(4), c.FailureDetectionBound(20),
		c.Health)
}

var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9.-]{1,128}$`)

// reservedTags are the tags MembershipConfig sets from its own fields.
var reservedTags = map[string]bool{TagRegion: true, TagRack: true, TagRole: true, TagAddr: true, TagAdmin: true}

// Validate reports the first problem with the config.
func (c MembershipConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("cluster: membership config: "+format, args...)
	}
	switch {
	case c.NodeName == "":
		return bad("NodeName is required")
	case !nodeNameRE.MatchString(c.NodeName):
		return bad("NodeName %q: use 1-128 letters, digits, '-' and '.'", c.NodeName)
	case c.Region == "":
		return bad("Region is required")
	case !c.Role.Valid():
		return bad("Role %q: want one of broker, bookie, witness, etcd", c.Role)
	}
	for k := range c.Tags {
		if reservedTags[k] {
			return bad("Tags[%q]: set it through the config field of that name", k)
		}
		if k == "" {
			return bad("Tags: empty key")
		}
	}
	if net.ParseIP(c.BindAddr) == nil {
		return bad("BindAddr %q is not an IP address", c.BindAddr)
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		return bad("BindPort %d out of range 0-65535", c.BindPort)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return bad("AdvertiseAddr %q is not an IP address", c.AdvertiseAddr)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return bad("AdvertisePort %d out of range 0-65535", c.AdvertisePort)
	}
	for _, s := range c.Seeds {
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" {
			return bad("seed %q: want host:port", s)
		}
		if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return bad("seed %q: bad port", s)
		}
	}
	if c.JoinRetryIntervalMin <= 0 || c.JoinRetryIntervalMax < c.JoinRetryIntervalMin {
		return bad("JoinRetryIntervalMin %s, JoinRetryIntervalMax %s: want 0 < min <= max", c.JoinRetryIntervalMin, c.JoinRetryIntervalMax)
	}
	switch {
	case c.ProbeInterval <= 0:
		return bad("ProbeInterval must be > 0")
	case c.ProbeTimeout <= 0 || c.ProbeTimeout >= c.ProbeInterval:
		return bad("ProbeTimeout %s must be > 0 and below ProbeInterval %s (indirect probes need the rest of the interval)", c.ProbeTimeout, c.ProbeInterval)
	case c.IndirectChecks < 0:
		return bad("IndirectChecks must be >= 0")
	case c.SuspicionMult < 2:
		return bad("SuspicionMult %d must be >= 2 (a suspect needs probe intervals to refute)", c.SuspicionMult)
	case c.SuspicionMaxTimeoutMult < 1:
		return bad("SuspicionMaxTimeoutMult %d must be >= 1", c.SuspicionMaxTimeoutMult)
	case c.AwarenessMaxMultiplier < 1:
		return bad("AwarenessMaxMultiplier %d must be >= 1", c.AwarenessMaxMultiplier)
	case c.GossipInterval <= 0 || c.GossipNodes < 1:
		return bad("GossipInterval %s and GossipNodes %d must be > 0", c.GossipInterval, c.GossipNodes)
	case c.RetransmitMult < 1:
		return bad("RetransmitMult %d must be >= 1", c.RetransmitMult)
	case c.GossipToTheDeadTime < 0:
		return bad("GossipToTheDeadTime must be >= 0")
	case c.DeadNodeReclaimTime < 0:
		return bad("DeadNodeReclaimTime must be >= 0")
	case c.PushPullInterval <= 0:
		return bad("PushPullInterval must be > 0 (it repairs missed broadcasts)")
	case c.TCPTimeout <= 0:
		return bad("TCPTimeout must be > 0")
	case c.ReconnectInterval <= 0:
		return bad("ReconnectInterval must be > 0")
	case c.ReconnectTimeout <= 0:
		return bad("ReconnectTimeout must be > 0")
	case c.TombstoneTimeout <= 0:
		return bad("TombstoneTimeout must be > 0")
	case c.ReapInterval <= 0:
		return bad("ReapInterval must be > 0")
	case c.BroadcastTimeout <= 0:
		return bad("BroadcastTimeout must be > 0")
	case c.LeavePropagateDelay < 0:
		return bad("LeavePropagateDelay must be >= 0")
	}
	if err := validKey(c.SecretKey); c.SecretKey != nil && err != nil {
		return bad("SecretKey: %v", err)
	}
	for i, k := range c.SecondaryKeys {
		if err := validKey(k); err != nil {
			return bad("SecondaryKeys[%d]: %v", i, err)
		}
	}
	if len(c.SecondaryKeys) > 0 && len(c.SecretKey) == 0 {
		return bad("SecondaryKeys without a SecretKey to send with")
	}
	if err := c.Health.Validate(); err != nil {
		return bad("Health: %v", err)
	}
	return nil
}

func validKey(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("AES key is %d bytes, want 16, 24 or 32", len(k))
}

// tags returns the gossip tags this config publishes.
func (c MembershipConfig) tags() map[string]string {
	t := make(map[string]string, len(c.Tags)+5)
	for k, v := range c.Tags {
		t[k] = v
	}
	t[TagRegion], t[TagRole] = c.Region, string(c.Role)
	for k, v := range map[string]string{TagRack: c.Rack, TagAddr: c.ServiceAddr, TagAdmin: c.AdminAddr} {
		if v != "" {
			t[k] = v
		}
	}
	return t
}

// Errors of gossip membership; match with errors.Is.
var (
	// ErrGossipNotEncrypted: a keyring operation on a membership started
	// without a SecretKey.
	ErrGossipNotEncrypted = errors.New("cluster: gossip encryption is not enabled")
	// ErrKeyring: a keyring operation did not bring every member to the
	// wanted state within its wait; the message names each such member and
	// why (did not answer, failed, not ready for it, not applied yet).
	// "use" and "remove" are not sent while a member is not ready for them
	// (they would cut it off); "install" may be on some members. Repeat it
	// (the operations are idempotent) once they are back, before the next
	// step of a rotation.
	ErrKeyring = errors.New("cluster: keyring operation incomplete")
	// ErrFixedTag: SetTags tried to change the region or role, which are
	// fixed for the life of the process.
	ErrFixedTag = errors.New("cluster: region and role tags are fixed")
	// ErrMembershipClosed: the membership was shut down.
	ErrMembershipClosed = errors.New("cluster: membership shut down")
)
