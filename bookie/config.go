package bookie

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/meridian-mq/meridian/internal/netaddr"
	"github.com/meridian-mq/meridian/internal/tlsutil"
)

// Config configures a bookie Server. It is read once by New; changing it
// afterwards has no effect. Fields left at their zero value take the default
// stated in their comment unless the comment gives 0 a meaning of its own.
type Config struct {
	// ID is the bookie's identity in the cluster: the key of its registration
	// and of its cookie. It must stay the same across restarts of the same
	// bookie, and must never be reused by another bookie. Default: the
	// AdvertiseAddr; set it explicitly when that is not unique and stable
	// (a wildcard or port-0 listen address).
	ID string `yaml:"id"`
	// Region and Rack are the placement labels published in the bookie's
	// registration and exported as metric labels. Default: "" (unlabelled),
	// which rack/region-aware placement treats as a single default rack.
	Region string `yaml:"region"`
	Rack   string `yaml:"rack"`

	// ListenAddr is the host:port the gRPC service listens on, e.g.
	// "127.0.0.1:3181". Port 0 picks a free port (see Server.Addr).
	// Default: "127.0.0.1:3181".
	ListenAddr string `yaml:"listen_addr"`
	// AdvertiseAddr is the host:port clients are told to dial (published in
	// the registration). Default: ListenAddr, or the actual listen address
	// when ListenAddr has port 0.
	AdvertiseAddr string `yaml:"advertise_addr"`
	// MetricsAddr is the host:port of an HTTP listener serving Prometheus
	// metrics on /metrics. "" (the default) serves none; the metrics are then
	// still available through Server.Gatherer.
	MetricsAddr string `yaml:"metrics_addr"`

	// DataDir holds the bookie's Pebble store. Required. It must be a
	// directory this bookie formatted, or empty/absent (a new bookie, or a
	// wiped disk: see the package doc on cookies and limbo).
	DataDir string `yaml:"data_dir"`

	// DiskUsageThreshold is the fraction (0,1] of the data directory's
	// filesystem in use at or above which the bookie turns read-only: it
	// refuses adds (READ_ONLY), keeps serving reads and fencing, and
	// re-registers as read-only. It turns writable again when usage drops
	// below. Default: 0.95. Pebble needs headroom above the threshold to
	// flush memtables and compact: keep at least ~3 memtables plus the
	// largest compaction free, e.g. on a 100 GiB disk 0.95 leaves 5 GiB.
	DiskUsageThreshold float64 `yaml:"disk_usage_threshold"`
	// DiskCheckInterval is how often the filesystem usage is sampled (statfs).
	// A check is also triggered once group commits have written an eighth of
	// the headroom left below the threshold (at least 1 MiB, at most 64 MiB),
	// so a burst of writes does not overshoot it by an interval's worth.
	// Default: 1s.
	DiskCheckInterval time.Duration `yaml:"disk_check_interval"`

	// GroupCommitMaxDelay is how long the committer may hold the first queued
	// add to gather more into the same fsync. 0 (the default) commits as soon
	// as the previous commit finished: everything that queued up during one
	// fsync shares the next ("natural" group commit), which adds no latency
	// at low load and still amortises fsyncs at high load. A delay trades
	// latency for fewer fsyncs: with 1ms and 10,000 adds/s a batch holds ~10
	// adds, every add waiting up to 1ms more. BookKeeper's journalMaxGroupWaitMSec
	// is 2ms.
	GroupCommitMaxDelay time.Duration `yaml:"group_commit_max_delay"`
	// GroupCommitMaxBytes caps the payload bytes of one group commit: the
	// committer stops gathering at this size and commits. Larger batches mean
	// fewer fsyncs but a longer wait for the first add in them. Default:
	// 4 MiB (about 4ms of writing at 1 GB/s).
	GroupCommitMaxBytes int `yaml:"group_commit_max_bytes"`
	// MaxEntryBytes is the largest payload accepted in one add; larger adds
	// are refused as INVALID. Default: 5 MiB + 64 KiB (Pulsar's 5 MiB
	// maxMessageSize plus room for headers).
	MaxEntryBytes int `yaml:"max_entry_bytes"`
	// MemTableSizeBytes is Pebble's memtable size. A larger memtable means
	// fewer, larger flushes but more memory and a longer WAL replay after a
	// crash; each flush (and the L0 compaction after it) is a burst of CPU
	// that every add behind it waits out. Default: 64 MiB (the standalone,
	// whose bookies share one process and machine, uses 16 MiB).
	MemTableSizeBytes int `yaml:"mem_table_size_bytes"`

	// GCInterval is how often the bookie collects garbage (gc.go): it
	// deletes from its index the ledgers that cluster metadata no longer
	// has (topic deletion, retention) and removes the entry log files left
	// with no live entry (BookKeeper's gcWaitTime; 15 min as in OMB's
	// config). A negative value turns collection off: nothing on this
	// bookie's disk is ever freed. Without a Registry that lists ledgers
	// (LedgerLister) the bookie collects nothing. Default: 15m.
	GCInterval time.Duration `yaml:"gc_interval"`
	// CompactionThreshold: after each garbage collection pass, an entry
	// log file whose live entries fill less than this fraction of it has
	// them written again at the end of the log and is removed (BookKeeper's
	// minor compaction, minorCompactionThreshold 0.2). Higher frees more
	// space sooner for more rewriting. A negative value turns compaction
	// off (files go only when nothing in them is live). Default: 0.2.
	CompactionThreshold float64 `yaml:"compaction_threshold"`

	// MaxInflightPerStream bounds the adds of one AddEntries stream that
	// are received but not yet answered; the stream stops reading (gRPC flow
	// control pushes back on the client) until responses are sent.
	// Default: 1024.
	MaxInflightPerStream int `yaml:"max_inflight_per_stream"`
	// ShutdownTimeout is how long Close waits for open gRPC calls and streams
	// to finish before cutting them. Default: 5s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`

	// TLS, if its files are set, makes the gRPC service mutual TLS (a
	// client must present a certificate from the CA: only Meridian's own
	// processes add entries) and the metrics listener https. The files are
	// re-read when they change (tlsutil). Default: off (plaintext).
	TLS tlsutil.Files `yaml:"tls,omitempty"`

	// Logger receives the bookie's structured logs. Default: slog.Default().
	Logger *slog.Logger `yaml:"-"`

	// fs is the filesystem Pebble runs on (test hook). nil means vfs.Default.
	fs vfs.FS
	// diskUsage returns the data directory's filesystem usage (test hook).
	// nil means fs.GetDiskUsage(DataDir).
	diskUsage func() (vfs.DiskUsage, error)
}

// Defaults; each is explained on its Config field.
const (
	DefaultListenAddr = "127.0.0.1:3181" // BookKeeper's bookiePort
	// DefaultMetricsAddr is `meridian bookie`'s HTTP port (BookKeeper's
	// httpServerPort); a Config's zero MetricsAddr serves none.
	DefaultMetricsAddr          = "127.0.0.1:8000"
	DefaultDiskUsageThreshold   = 0.95
	DefaultDiskCheckInterval    = time.Second
	DefaultGroupCommitMaxBytes  = 4 << 20
	DefaultMaxEntryBytes        = 5<<20 + 64<<10
	DefaultMemTableSizeBytes    = 64 << 20
	DefaultZeroAheadBytes       = 8 << 20
	DefaultMaxInflightPerStream = 1024
	DefaultShutdownTimeout      = 5 * time.Second
	DefaultGCInterval           = 15 * time.Minute
	DefaultCompactionThreshold  = 0.2
)

// DefaultConfig returns a Config with every default filled in except the
// fields that have none (DataDir) or that derive from others (ID,
// AdvertiseAddr).
func DefaultConfig() Config {
	return Config{
		ListenAddr:           DefaultListenAddr,
		DiskUsageThreshold:   DefaultDiskUsageThreshold,
		DiskCheckInterval:    DefaultDiskCheckInterval,
		GroupCommitMaxBytes:  DefaultGroupCommitMaxBytes,
		MaxEntryBytes:        DefaultMaxEntryBytes,
		MemTableSizeBytes:    DefaultMemTableSizeBytes,
		MaxInflightPerStream: DefaultMaxInflightPerStream,
		ShutdownTimeout:      DefaultShutdownTimeout,
		GCInterval:           DefaultGCInterval,
		CompactionThreshold:  DefaultCompactionThreshold,
	}
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.ListenAddr == "" {
		c.ListenAddr = d.ListenAddr
	}
	if c.AdvertiseAddr == "" {
		// A wildcard listen host advertises the host name (netaddr).
		c.AdvertiseAddr = netaddr.Advertised(c.ListenAddr, nil)
	}
	if c.ID == "" {
		c.ID = c.AdvertiseAddr
	}
	if c.DiskUsageThreshold == 0 {
		c.DiskUsageThreshold = d.DiskUsageThreshold
	}
	if c.DiskCheckInterval == 0 {
		c.DiskCheckInterval = d.DiskCheckInterval
	}
	if c.GroupCommitMaxBytes == 0 {
		c.GroupCommitMaxBytes = d.GroupCommitMaxBytes
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = d.MaxEntryBytes
	}
	if c.MemTableSizeBytes == 0 {
		c.MemTableSizeBytes = d.MemTableSizeBytes
	}
	if c.MaxInflightPerStream == 0 {
		c.MaxInflightPerStream = d.MaxInflightPerStream
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = d.ShutdownTimeout
	}
	if c.GCInterval == 0 {
		c.GCInterval = d.GCInterval
	}
	if c.CompactionThreshold == 0 {
		c.CompactionThreshold = d.CompactionThreshold
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.fs == nil {
		c.fs = vfs.Default
	}
	return c
}

// Validate reports every problem with c (after defaults are applied), or nil.
func (c Config) Validate() error {
	idGiven := c.ID != ""
	c = c.withDefaults()
	var errs []error
	if _, port, _ := net.SplitHostPort(c.ID); !idGiven && port == "0" {
		errs = append(errs, fmt.Errorf("bookie: config: id is required when it would default to the address %q, whose port 0 changes at every start", c.ID))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("bookie: config: data_dir is required"))
	}
	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		errs = append(errs, fmt.Errorf("bookie: config: listen_addr %q is not host:port: %v", c.ListenAddr, err))
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("bookie: config: metrics_addr %q is not host:port: %v", c.MetricsAddr, err))
		}
	}
	if !(c.DiskUsageThreshold > 0 && c.DiskUsageThreshold <= 1) {
		errs = append(errs, fmt.Errorf("bookie: config: disk_usage_threshold %v must be in (0, 1]", c.DiskUsageThreshold))
	}
	if c.DiskCheckInterval < 0 {
		errs = append(errs, fmt.Errorf("bookie: config: disk_check_interval %v must be positive", c.DiskCheckInterval))
	}
	if c.GroupCommitMaxDelay < 0 {
		errs = append(errs, fmt.Errorf("bookie: config: group_commit_max_delay %v must be >= 0", c.GroupCommitMaxDelay))
	}
	if c.GroupCommitMaxBytes < 0 {
		errs = append(errs, fmt.Errorf("bookie: config: group_commit_max_bytes %d must be positive", c.GroupCommitMaxBytes))
	}
	if c.MaxEntryBytes < 0 {
		errs = append(errs, fmt.Errorf("bookie: config: max_entry_bytes %d must be positive", c.MaxEntryBytes))
	} else if c.MaxEntryBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("bookie: config: max_entry_bytes %d exceeds 1 GiB", c.MaxEntryBytes))
	}
	if c.MemTableSizeBytes < 0 {
		errs = append(errs, fmt.Errorf("bookie: config: mem_table_size_bytes %d must be positive", c.MemTableSizeBytes))
	} else if c.MemTableSizeBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("bookie: config: mem_table_size_bytes %d is below 1 MiB", c.MemTableSizeBytes))
	}
	if c.MaxInflightPerStream < 0 {
		errs = append(errs, fmt.Errorf("bookie: config: max_inflight_per_stream %d must be positive", c.MaxInflightPerStream))
	}
	if c.CompactionThreshold >= 1 {
		errs = append(errs, fmt.Errorf("bookie: config: compaction_threshold %v must be below 1 (negative: off)", c.CompactionThreshold))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("bookie: config: shutdown_timeout %v must be positive", c.ShutdownTimeout))
	}
	return errors.Join(errs...)
}
