package mledger

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/rack"
)

// Config configures a managed ledger. Zero numeric fields take the defaults
// of DefaultConfig; the config is copied at Open and not changed after.
type Config struct {
	// Store is the region's metadata store; the managed ledger's records
	// live under /managed-ledgers/ in it (see the package doc). Required.
	Store *cluster.Store
	// Ledgers is the ledger client the log is written and read with.
	// Required.
	Ledgers *ledger.Client

	// EnsembleSize, WriteQuorum, AckQuorum of every ledger created. Default
	// 3, 3, 2 (Pulsar's managedLedgerDefault*): every entry on 3 bookies,
	// acknowledged when 2 fsynced it, so one slow or dead bookie does not
	// delay appends.
	EnsembleSize, WriteQuorum, AckQuorum int
	// Placement of every ledger created; zero value → rack.DefaultPolicy().
	Placement rack.Policy
	// Adjust, if set, is called before each ledger creation (each attempt)
	// with the options the fields above give, and returns the options to
	// create the ledger with — quorums and placement may change while the
	// managed ledger is open (a stretched namespace places new ledgers
	// inside the surviving regions after a region is lost:
	// broker/stretched.go). nil: the fields as they are. Must be safe for
	// concurrent use and must not block.
	Adjust func(ledger.CreateOptions) ledger.CreateOptions

	// MaxEntriesPerLedger: the current ledger is rolled over (closed, and a
	// new one started) before the append that would exceed it. Default
	// 50,000 (Pulsar's managedLedgerMaxEntriesPerLedger). Smaller ledgers
	// are trimmed at a finer grain but cost a rollover (a ledger creation
	// and an etcd write, a few ms during which appends queue) more often.
	MaxEntriesPerLedger int
	// MaxSizePerLedgerBytes: roll over once the current ledger holds this
	// many payload bytes. Default 1 GiB.
	MaxSizePerLedgerBytes int64
	// MaxLedgerAge: a non-empty ledger older than this is rolled over on the
	// next append, so idle topics can trim. Default 4h (Pulsar's
	// managedLedgerMaxLedgerRolloverTimeMinutes).
	MaxLedgerAge time.Duration

	// RetentionTime: how long a ledger that every durable cursor has fully
	// consumed is kept, counted from when it was closed. 0 = delete as soon
	// as consumed (unless RetentionSizeBytes keeps it); -1 = forever. With
	// no durable cursor at all every closed ledger counts as consumed, as
	// in Pulsar: a topic without subscriptions keeps only what retention
	// keeps.
	RetentionTime time.Duration
	// RetentionSizeBytes: the newest consumed ledgers are kept while their
	// total size stays within it. 0 = none; -1 = unlimited (keep all). A
	// consumed ledger is deleted only when neither retention keeps it.
	RetentionSizeBytes int64

	// CacheSizeBytes: the tail cache of recently appended entries, so
	// readers that keep up never read bookies. Default 16 MiB; -1 disables
	// it (entries not yet readable from bookies are still kept). Worked
	// number: at 10 MB/s of appends, 16 MiB lets a reader lag ~1.6 s before
	// its reads go to bookies.
	CacheSizeBytes int64

	// CursorPersistInterval: durable cursor positions are written to etcd at
	// most this often (all changes within an interval in one write per
	// cursor). Default 100ms. After a crash at most the acknowledgements of
	// the last interval (plus the write in flight) are lost and their
	// entries redelivered; a shorter interval means fewer redeliveries and
	// more etcd writes (10 writes/s per active cursor at 100ms). Cursor.Flush
	// writes at once.
	CursorPersistInterval time.Duration
	// MaxPersistedAckRanges caps the individually acknowledged ranges
	// persisted per cursor (the lowest ones are kept). Acks in ranges
	// beyond it are lost on restart and redelivered, never skipped. Default
	// 10,000 (a record of ~200 KB, well inside etcd's 1.5 MiB request
	// limit).
	MaxPersistedAckRanges int

	// SwitchTimeout bounds each step of a ledger switch (rollover, or
	// replacing a failed ledger): closing the old ledger, recovering it
	// after a failure, creating the next one and recording it in etcd; each
	// is retried with backoff until then. If the next ledger cannot be
	// created and recorded, the appends queued behind the switch fail (the
	// next append tries again); if a failed ledger cannot be recovered, the
	// managed ledger fails (ErrFailed). Default 30s.
	SwitchTimeout time.Duration

	// Logger receives rollovers, ledger failures, fencing and trims.
	// Default: discard.
	Logger *slog.Logger
	// Clock is a test hook for the wall clock used by ledger age, creation
	// and close times, and retention; nil = time.Now.
	Clock func() time.Time
}

// DefaultConfig returns the defaults (Store and Ledgers unset).
func DefaultConfig() Config {
	return Config{
		EnsembleSize:          3,
		WriteQuorum:           3,
		AckQuorum:             2,
		Placement:             rack.DefaultPolicy(),
		MaxEntriesPerLedger:   50_000,
		MaxSizePerLedgerBytes: 1 << 30,
		MaxLedgerAge:          4 * time.Hour,
		CacheSizeBytes:        16 << 20,
		CursorPersistInterval: 100 * time.Millisecond,
		MaxPersistedAckRanges: 10_000,
		SwitchTimeout:         30 * time.Second,
	}
}

// withDefaults fills zero fields with the defaults and validates.
func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.EnsembleSize == 0 && c.WriteQuorum == 0 && c.AckQuorum == 0 {
		c.EnsembleSize, c.WriteQuorum, c.AckQuorum = d.EnsembleSize, d.WriteQuorum, d.AckQuorum
	}
	if c.Placement.Kind == "" {
		c.Placement = d.Placement
	}
	if c.MaxEntriesPerLedger == 0 {
		c.MaxEntriesPerLedger = d.MaxEntriesPerLedger
	}
	if c.MaxSizePerLedgerBytes == 0 {
		c.MaxSizePerLedgerBytes = d.MaxSizePerLedgerBytes
	}
	if c.MaxLedgerAge == 0 {
		c.MaxLedgerAge = d.MaxLedgerAge
	}
	if c.CacheSizeBytes == 0 {
		c.CacheSizeBytes = d.CacheSizeBytes
	}
	if c.CursorPersistInterval == 0 {
		c.CursorPersistInterval = d.CursorPersistInterval
	}
	if c.MaxPersistedAckRanges == 0 {
		c.MaxPersistedAckRanges = d.MaxPersistedAckRanges
	}
	if c.SwitchTimeout == 0 {
		c.SwitchTimeout = d.SwitchTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c, c.Validate()
}

// Validate checks the config as Open would use it (after defaults).
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Store == nil {
		bad("Store is required")
	}
	if c.Ledgers == nil {
		bad("Ledgers is required")
	}
	if err := c.Placement.Validate(c.EnsembleSize, c.WriteQuorum, c.AckQuorum); err != nil {
		bad("quorums E=%d Qw=%d Qa=%d: %v", c.EnsembleSize, c.WriteQuorum, c.AckQuorum, err)
	}
	if c.MaxEntriesPerLedger < 1 {
		bad("MaxEntriesPerLedger %d must be >= 1", c.MaxEntriesPerLedger)
	}
	if c.MaxSizePerLedgerBytes < 1 {
		bad("MaxSizePerLedgerBytes %d must be >= 1", c.MaxSizePerLedgerBytes)
	}
	if c.MaxLedgerAge < 0 {
		bad("MaxLedgerAge %s must be > 0", c.MaxLedgerAge)
	}
	if c.RetentionTime < -1 {
		bad("RetentionTime %s must be -1 (forever), 0 or positive", c.RetentionTime)
	}
	if c.RetentionSizeBytes < -1 {
		bad("RetentionSizeBytes %d must be -1 (unlimited), 0 or positive", c.RetentionSizeBytes)
	}
	if c.CacheSizeBytes < -1 {
		bad("CacheSizeBytes %d must be -1 (disabled) or positive", c.CacheSizeBytes)
	}
	if c.CursorPersistInterval < 0 {
		bad("CursorPersistInterval %s must be > 0", c.CursorPersistInterval)
	}
	if c.MaxPersistedAckRanges < 0 {
		bad("MaxPersistedAckRanges %d must be > 0", c.MaxPersistedAckRanges)
	}
	if c.SwitchTimeout < 0 {
		bad("SwitchTimeout %s must be > 0", c.SwitchTimeout)
	}
	if len(errs) > 0 {
		return fmt.Errorf("mledger: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

// String prints the tunables, one per line (golden-tested, so the defaults
// documented above cannot drift from the code).
func (c Config) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "quorums: E=%d Qw=%d Qa=%d\n", c.EnsembleSize, c.WriteQuorum, c.AckQuorum)
	fmt.Fprintf(&sb, "placement: %s\n", c.Placement)
	fmt.Fprintf(&sb, "max-entries-per-ledger: %d\n", c.MaxEntriesPerLedger)
	fmt.Fprintf(&sb, "max-size-per-ledger-bytes: %d\n", c.MaxSizePerLedgerBytes)
	fmt.Fprintf(&sb, "max-ledger-age: %s\n", c.MaxLedgerAge)
	fmt.Fprintf(&sb, "retention-time: %s\n", c.RetentionTime)
	fmt.Fprintf(&sb, "retention-size-bytes: %d\n", c.RetentionSizeBytes)
	fmt.Fprintf(&sb, "cache-size-bytes: %d\n", c.CacheSizeBytes)
	fmt.Fprintf(&sb, "cursor-persist-interval: %s\n", c.CursorPersistInterval)
	fmt.Fprintf(&sb, "max-persisted-ack-ranges: %d\n", c.MaxPersistedAckRanges)
	fmt.Fprintf(&sb, "switch-timeout: %s\n", c.SwitchTimeout)
	return sb.String()
}
