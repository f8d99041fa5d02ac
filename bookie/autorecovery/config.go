package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
)

// DefaultMetricsAddr is `meridian autorecovery`'s HTTP port for
// /metrics: beside a bookie's 8000 (BookKeeper's httpServerPort) on the
// same host.
const DefaultMetricsAddr = "127.0.0.1:8001"

// Config configures an Auditor and Workers. Immutable once they run.
type Config struct {
	// Store is the region's metadata store (ledgers, bookie registry,
	// markers, locks, the auditor election). Required.
	Store *cluster.Store
	// Bookies is a live view of the region's bookie registry. Required.
	Bookies *cluster.BookieView
	// Alive, when set, is gossip's view: it says a bookie is alive (serf
	// has it alive or suspect) although its registration lease expired
	// (e.g. the bookie is cut off from etcd but serving). A bookie is
	// absent only when it is unregistered AND Alive says no, i.e. gossip
	// marked it failed or left, or does not know it. GossipAlive builds
	// it from a cluster.Membership. Must be safe for concurrent use.
	// Default: the registry alone decides.
	Alive func(id string) bool
	// Metrics receives the auditor's and workers' figures. Default: a new
	// registry nobody serves.
	Metrics *Metrics

	// LostBookieDelay: how long a single bookie may stay unregistered before
	// its fragments are re-replicated. Default 60 s. The registration itself
	// outlives a dead bookie by its lease TTL (10 s), so a lone kill -9 is
	// acted on after ~70 s. Longer rides out restarts and upgrades without
	// copying; shorter shortens the time at Qw-1 replicas. 0: at once. Two or
	// more bookies absent together are lost at once, whatever the delay.
	LostBookieDelay time.Duration
	// ThrottleBytesPerSec caps the bytes copied per second by all workers
	// sharing Throttle. Default 50 MiB/s (a 1 GiB bookie's share of a
	// ledger set re-replicates in ~20 s without starving live writes on a
	// 1 Gbit/s link). Negative: unlimited.
	ThrottleBytesPerSec int64
	// Throttle, when set, is shared with other Workers of the process;
	// default: a new one at ThrottleBytesPerSec per Worker.
	Throttle *Throttle
	// CheckInterval: how often the auditor compares the registry with the
	// known bookies. Default 1 s. It bounds the detection lag after the
	// delay ends.
	CheckInterval time.Duration
	// ScrubInterval: how often the auditor scans all ledgers even without a
	// new loss: it queues fragments still naming a lost or draining bookie
	// (missed by a crashed auditor) and fragments breaking their placement
	// rule under the bookies' current rack labels (racks relabelled).
	// Default 1 h (BookKeeper's periodic check is weekly; this scan reads
	// metadata only: ~1 ms per ledger here). 0: default.
	ScrubInterval time.Duration
	// ScrubReader, when set, makes the scrub read data too: from each
	// registered member of each completed fragment, the first and the last
	// entry it stores (BookKeeper's LedgerChecker samples the same way). A
	// member that answers it has no such entry or ledger, cannot tell
	// (a wiped disk: limbo) or holds it corrupt is queued, and a worker
	// copies the fragment's entries back onto it. Costs two reads per
	// member per fragment per ScrubInterval. Default: nil, metadata only.
	ScrubReader *ledger.Client
	// StatusInterval: how often the elected auditor refreshes the region's
	// recovery status in etcd (/underreplicated/status) and its gauges, and
	// a worker its progress record. Default 2 s.
	StatusInterval time.Duration
	// ElectionTTL: the auditor's etcd session TTL: a dead auditor is
	// replaced within it. Default 10 s.
	ElectionTTL time.Duration
	// LockTTL: a worker's claim on a ledger is bound to a lease of this TTL:
	// a dead worker's claim expires within it. Default 10 s.
	LockTTL time.Duration
	// PollInterval: how often an idle worker looks for markers. Default 1 s.
	PollInterval time.Duration
	// CopyWindow: entries being copied at once per worker (each a read from
	// a survivor, then recovery adds to the replacements). Default 64:
	// enough to hide the read round trip and keep a bookie's group commit
	// full (each add waits for an fsync).
	CopyWindow int
	// RetryBackoff: how long a worker leaves a ledger alone after failing
	// on it. Default 5 s (BookKeeper's rwRereplicateBackoffMs).
	RetryBackoff time.Duration
	// Logger receives decisions (bookie lost, marker written, fragment
	// re-replicated). Default: discard.
	Logger *slog.Logger
	// Heartbeat, when set, is called on every turn of the auditor's loop
	// (with "auditor": each detection step while elected, every
	// CheckInterval while it stands by in the election or waits to
	// campaign again) and of each worker's (with the worker's id: each
	// pass, each entry copied, each retry of its lease), so a prober can
	// tell a wedged loop from a waiting one (internal/healthz). Must be
	// safe for concurrent use and return at once.
	Heartbeat func(loop string)

	// testHookCopied runs after each entry is copied (tests: kill a worker
	// mid-copy, detect concurrent copies of one ledger).
	testHookCopied func(w *Worker, ledgerID, entryID int64)
	// testHookScrubRead, when set, replaces the scrub's reads from
	// ScrubReader (tests: a bookie that never answers).
	testHookScrubRead func(ctx context.Context, b *metapb.BookieRef, ledgerID, entryID int64) (*bookiepb.ReadEntryResponse, error)
	// scrubReadTimeout bounds each scrub read, whatever ScrubReader's own
	// ReadTimeout. Default defaultScrubReadTimeout.
	scrubReadTimeout time.Duration
}

func (c Config) beat(loop string) {
	if c.Heartbeat != nil {
		c.Heartbeat(loop)
	}
}

// defaultScrubReadTimeout bounds one scrub read from one bookie (the
// ledger client's default read timeout).
const defaultScrubReadTimeout = 5 * time.Second

// DefaultConfig returns the defaults; set Store and Bookies.
func DefaultConfig() Config {
	return Config{
		LostBookieDelay:     60 * time.Second,
		ThrottleBytesPerSec: 50 << 20,
		CheckInterval:       time.Second,
		ScrubInterval:       time.Hour,
		StatusInterval:      2 * time.Second,
		ElectionTTL:         10 * time.Second,
		LockTTL:             10 * time.Second,
		PollInterval:        time.Second,
		CopyWindow:          64,
		RetryBackoff:        5 * time.Second,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.ThrottleBytesPerSec == 0 {
		c.ThrottleBytesPerSec = d.ThrottleBytesPerSec
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = d.CheckInterval
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = d.StatusInterval
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics("default")
	}
	if c.ScrubInterval == 0 {
		c.ScrubInterval = d.ScrubInterval
	}
	if c.ElectionTTL == 0 {
		c.ElectionTTL = d.ElectionTTL
	}
	if c.LockTTL == 0 {
		c.LockTTL = d.LockTTL
	}
	if c.PollInterval == 0 {
		c.PollInterval = d.PollInterval
	}
	if c.CopyWindow == 0 {
		c.CopyWindow = d.CopyWindow
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = d.RetryBackoff
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.scrubReadTimeout == 0 {
		c.scrubReadTimeout = defaultScrubReadTimeout
	}
	if c.Throttle == nil {
		c.Throttle = NewThrottle(c.ThrottleBytesPerSec)
	}
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("autorecovery: Config.Store is required")
	case c.Bookies == nil:
		return errors.New("autorecovery: Config.Bookies is required")
	case c.LostBookieDelay < 0:
		return fmt.Errorf("autorecovery: LostBookieDelay %s is negative", c.LostBookieDelay)
	case c.CheckInterval < 0, c.ScrubInterval < 0, c.PollInterval < 0, c.RetryBackoff < 0, c.StatusInterval < 0:
		return errors.New("autorecovery: intervals must not be negative")
	case c.ElectionTTL < 0 || c.ElectionTTL > 0 && c.ElectionTTL < time.Second:
		return fmt.Errorf("autorecovery: ElectionTTL %s: etcd sessions need at least 1s", c.ElectionTTL)
	case c.LockTTL < 0 || c.LockTTL > 0 && c.LockTTL < time.Second:
		return fmt.Errorf("autorecovery: LockTTL %s: etcd leases need at least 1s", c.LockTTL)
	case c.CopyWindow < 0:
		return fmt.Errorf("autorecovery: CopyWindow %d is negative", c.CopyWindow)
	}
	return nil
}

// GossipAlive returns a Config.Alive from gossip: a bookie is alive while
// serf has it alive or suspect (suspicion is often refuted). Failed, left
// or unknown: not alive, and the registry decides.
func GossipAlive(m *cluster.Membership) func(id string) bool {
	return func(id string) bool {
		mb, ok := m.Snapshot().Member(id)
		return ok && mb.Role == cluster.RoleBookie && (mb.State == cluster.MemberAlive || mb.State == cluster.MemberSuspect)
	}
}
