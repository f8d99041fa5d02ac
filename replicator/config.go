package replicator

import (
	"fmt"
	"strings"
	"time"
)

// QuotaPolicy is what happens when a remote region's replication backlog
// passes its quota: the region has been gone (or slow) long enough that
// keeping everything for it would endanger the survivor.
type QuotaPolicy int

const (
	// QuotaKeepUpToRetention (the default): the replicator cursor stops
	// holding data back; the topic keeps entries up to its retention as
	// for any reader. Replication goes on, and if the region comes back
	// before retention trims what it lacks, it catches up. If retention
	// trims first, the next read fails with ErrTrimmed and the region is
	// marked as needing a resync. The survivor's disk is bounded by
	// retention.
	QuotaKeepUpToRetention QuotaPolicy = iota
	// QuotaHold: the cursor keeps holding every entry the region has not
	// acknowledged, past retention (Pulsar's behaviour: no replication
	// backlog cap). Nothing is lost to the region; the survivor's disk
	// grows at the publish rate while the region is away.
	QuotaHold
	// QuotaResyncNow: give up on the region at once: stop replicating to
	// it, release the cursor, mark it as needing a resync. Frees the
	// survivor immediately; the region needs a resync to come back.
	QuotaResyncNow
)

func (p QuotaPolicy) String() string {
	switch p {
	case QuotaKeepUpToRetention:
		return "keep-up-to-retention"
	case QuotaHold:
		return "hold"
	case QuotaResyncNow:
		return "resync-now"
	}
	return fmt.Sprintf("QuotaPolicy(%d)", int(p))
}

// BacklogQuota bounds a remote region's replication backlog: the local
// entries the region has not acknowledged. Each limit is off when 0; the
// backlog is over quota when any limit is exceeded, and back under when
// every measure is at or below 90% of its limit (so the alert does not
// flap at the edge).
type BacklogQuota struct {
	// MaxEntries: entries not yet acknowledged.
	MaxEntries int64
	// MaxBytes: payload bytes not yet acknowledged.
	MaxBytes int64
	// MaxAge: the age of the oldest unacknowledged entry (from its
	// publish time to the sender's clock); the time-based quota that
	// bounds RPO exposure.
	MaxAge time.Duration
}

// SenderConfig configures one Sender. Immutable once the Sender is made.
type SenderConfig struct {
	// Local is this region: entries whose Origin is Local are replicated,
	// every other entry is passed over (never forwarded: no loops).
	Local string
	// Remote is the target region.
	Remote string

	// BatchMaxEntries and BatchMaxBytes bound one batch (a batch holds at
	// least one entry, whatever its size) and one read. Default 100
	// entries, 1 MiB: at 50 ms WAN round trip and 8 batches in flight,
	// 8 MiB per round trip, about 160 MiB/s per topic.
	BatchMaxEntries int
	BatchMaxBytes   int
	// MaxInflightBatches and MaxInflightBytes bound what is sent and not
	// yet acknowledged; past them the sender stops sending and then stops
	// reading, so a slow target applies back-pressure and the backlog
	// stays in the log, not in memory. Memory per sender is about
	// MaxInflightBytes + BatchMaxBytes. Default 8 batches, 8 MiB.
	MaxInflightBatches int
	MaxInflightBytes   int
	// AckTimeout: a sent entry not acknowledged within it is presumed
	// lost (with its batch or its ack): the sender rewinds to the first
	// unacknowledged entry and resends. Default 30 s; too short resends
	// what a slow target is still persisting (harmless, wasteful).
	AckTimeout time.Duration
	// BackoffInitial and BackoffMax: after a failed send, read or an ack
	// timeout the sender pauses BackoffInitial, doubling per consecutive
	// failure up to BackoffMax; progress resets it. Default 100 ms and
	// 1 min (Pulsar's replicator producer: 100 ms to 1 min), so a dead
	// region costs one attempt a minute.
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// Limiter, if set, rate-limits sends (a namespace's replication rate
	// limit: one TokenBucket shared by the namespace's senders, behind the
	// shell's lock). nil: unlimited.
	Limiter Limiter
	// Quota and QuotaPolicy: the per-region backlog quota and what to do
	// past it. Default: no limit, keep up to retention.
	Quota       BacklogQuota
	QuotaPolicy QuotaPolicy
}

// DefaultSenderConfig returns the defaults for replicating from local to
// remote.
func DefaultSenderConfig(local, remote string) SenderConfig {
	return SenderConfig{
		Local:              local,
		Remote:             remote,
		BatchMaxEntries:    100,
		BatchMaxBytes:      1 << 20,
		MaxInflightBatches: 8,
		MaxInflightBytes:   8 << 20,
		AckTimeout:         30 * time.Second,
		BackoffInitial:     100 * time.Millisecond,
		BackoffMax:         time.Minute,
		QuotaPolicy:        QuotaKeepUpToRetention,
	}
}

// Validate reports the first problem with c, wrapping ErrInvalidConfig.
func (c SenderConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Local == "":
		return bad("Local region is empty")
	case c.Remote == "":
		return bad("Remote region is empty")
	case c.Local == c.Remote:
		return bad("Remote %q is the local region", c.Remote)
	case c.BatchMaxEntries < 1:
		return bad("BatchMaxEntries %d < 1", c.BatchMaxEntries)
	case c.BatchMaxBytes < 1:
		return bad("BatchMaxBytes %d < 1", c.BatchMaxBytes)
	case c.MaxInflightBatches < 1:
		return bad("MaxInflightBatches %d < 1", c.MaxInflightBatches)
	case c.MaxInflightBytes < 1:
		return bad("MaxInflightBytes %d < 1", c.MaxInflightBytes)
	case c.AckTimeout <= 0:
		return bad("AckTimeout %v <= 0", c.AckTimeout)
	case c.BackoffInitial <= 0:
		return bad("BackoffInitial %v <= 0", c.BackoffInitial)
	case c.BackoffMax < c.BackoffInitial:
		return bad("BackoffMax %v < BackoffInitial %v", c.BackoffMax, c.BackoffInitial)
	case c.Quota.MaxEntries < 0 || c.Quota.MaxBytes < 0 || c.Quota.MaxAge < 0:
		return bad("negative Quota %+v", c.Quota)
	case c.QuotaPolicy < QuotaKeepUpToRetention || c.QuotaPolicy > QuotaResyncNow:
		return bad("unknown QuotaPolicy %d", int(c.QuotaPolicy))
	}
	return nil
}

// String prints every field, one per line (golden-tested, so the defaults
// are stated once, in code).
func (c SenderConfig) String() string {
	var b strings.Builder
	f := func(k string, v any) { fmt.Fprintf(&b, "%s: %v\n", k, v) }
	f("Local", c.Local)
	f("Remote", c.Remote)
	f("BatchMaxEntries", c.BatchMaxEntries)
	f("BatchMaxBytes", c.BatchMaxBytes)
	f("MaxInflightBatches", c.MaxInflightBatches)
	f("MaxInflightBytes", c.MaxInflightBytes)
	f("AckTimeout", c.AckTimeout)
	f("BackoffInitial", c.BackoffInitial)
	f("BackoffMax", c.BackoffMax)
	f("Limiter", c.Limiter != nil)
	f("Quota.MaxEntries", c.Quota.MaxEntries)
	f("Quota.MaxBytes", c.Quota.MaxBytes)
	f("Quota.MaxAge", c.Quota.MaxAge)
	f("QuotaPolicy", c.QuotaPolicy)
	return b.String()
}
