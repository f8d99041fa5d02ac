package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/bookie"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/spf13/cobra"
)

func newBookieCmd() *cobra.Command {
	var md metadataFlags
	var powerLoss, requireAuth bool
	bc := bookie.DefaultConfig()
	var gossip gossipFlags
	var sec securityFlags
	cmd := &cobra.Command{
		Use:   "bookie",
		Short: "Run a bookie: a storage node keeping ledger entries durably on Pebble",
	}
	f := cmd.Flags()
	md.register(f, "region of this bookie", true)
	config.Group(f, "bookie", func() {
		f.StringVar(&bc.ID, "id", "", "bookie id (default: the advertised address)")
		f.StringVar(&bc.ListenAddr, "listen", bookie.DefaultListenAddr, "gRPC listen address")
		f.StringVar(&bc.AdvertiseAddr, "advertise", "", "address ledger clients (brokers, other regions' recovery) dial (default: the listen address, a wildcard host replaced by the host name)")
		f.StringVar(&bc.DataDir, "data-dir", "./data/bookie", "data directory (Pebble)")
		f.StringVar(&bc.Rack, "rack", "", "rack label")
		f.StringVar(&bc.MetricsAddr, "metrics", bookie.DefaultMetricsAddr, "HTTP listen address of Prometheus /metrics (BookKeeper's httpServerPort, 8000) (empty: off)")
		f.Float64Var(&bc.DiskUsageThreshold, "disk-usage-threshold", bookie.DefaultDiskUsageThreshold, "disk usage fraction at which the bookie turns read-only")
		f.DurationVar(&bc.DiskCheckInterval, "disk-check-interval", bookie.DefaultDiskCheckInterval, "how often the disk usage is sampled (also after writing an eighth of the headroom)")
		f.DurationVar(&bc.GroupCommitMaxDelay, "group-commit-max-delay", 0, "how long the first queued add may wait to share an fsync (0: commit as soon as the previous fsync ends)")
		f.IntVar(&bc.GroupCommitMaxBytes, "group-commit-max-bytes", bookie.DefaultGroupCommitMaxBytes, "payload bytes of one group commit at most")
		f.IntVar(&bc.MaxEntryBytes, "max-entry-bytes", bookie.DefaultMaxEntryBytes, "largest entry payload accepted, in bytes")
		f.IntVar(&bc.MemTableSizeBytes, "mem-table-size-bytes", bookie.DefaultMemTableSizeBytes, "Pebble memtable size in bytes")
		f.IntVar(&bc.MaxInflightPerStream, "max-inflight-per-stream", bookie.DefaultMaxInflightPerStream, "adds of one stream received and not yet answered, at most")
		f.DurationVar(&bc.GCInterval, "gc-interval", bookie.DefaultGCInterval, "how often the bookie deletes the ledgers cluster metadata no longer has and removes entry log files left with no live entry (BookKeeper's gcWaitTime; negative: never, the disk is never freed)")
		f.Float64Var(&bc.CompactionThreshold, "compaction-threshold", bookie.DefaultCompactionThreshold, "after each garbage collection, entry log files with less than this fraction live are rewritten and removed (BookKeeper's minorCompactionThreshold; negative: off)")
		f.DurationVar(&bc.ShutdownTimeout, "shutdown-timeout", bookie.DefaultShutdownTimeout, "how long a stopping bookie waits for open calls before cutting them")
		f.BoolVar(&requireAuth, "require-client-auth", false, "refuse to start unless the gRPC port authenticates its callers: mutual TLS (--tls-cert-file, --tls-key-file, --tls-trust-certs-file); without TLS a bookie serves any caller's adds, reads and fencing")
		f.BoolVar(&powerLoss, "simulate-power-loss", false, "drills and tests only: keep every write not yet fsynced in memory (bookie.PowerLossFS), so a kill -9 of this bookie loses what a power loss would")
	})
	// The keys of the config files of before; bookie.region and bookie.tls
	// are older places of region and security.tls.
	config.Bind(f, "listen", "bookie.listen_addr")
	config.Bind(f, "advertise", "bookie.advertise_addr")
	config.Bind(f, "metrics", "bookie.metrics_addr")
	config.Bind(f, "region", "region", "bookie.region")
	gossip.register(cmd)
	sec.registerTLS(cmd)
	config.Bind(f, "tls-cert-file", "security.tls.cert_file", "bookie.tls.cert_file")
	config.Bind(f, "tls-key-file", "security.tls.key_file", "bookie.tls.key_file")
	config.Bind(f, "tls-trust-certs-file", "security.tls.ca_file", "bookie.tls.ca_file")
	withConfig(cmd, func(eff *config.Effective) error {
		return validateAll(eff, rules(logRules, regionRules, gossipRules, bookieRules, map[string]config.Rule{
			"metadata.global": config.URLList(false),
		}), func(eff *config.Effective) error {
			return clientAuthCheck(eff, "bookie.require_client_auth", "security.tls")
		})
	}, func(cmd *cobra.Command, _ *config.Effective) error {
		c := bc
		c.Region = md.region
		if powerLoss {
			// Drills and tests only: what is not fsynced lives in this
			// process's memory, so a kill -9 loses it (bookie.PowerLossFS).
			c = c.SimulatePowerLoss()
		}
		secfc := sec.settings()
		c.TLS = secfc.TLS
		log := logger()
		c.Logger = log
		ctx, stop := signalContext()
		defer stop()
		return runBookie(ctx, md, secfc, c, &gossip)
	})
	return cmd
}

var bookieRules = map[string]config.Rule{
	"bookie.rack":           config.OptionalName,
	"bookie.listen_addr":    config.HostPort(false),
	"bookie.advertise_addr": config.HostPort(true),
	"bookie.metrics_addr":   config.HostPort(true),
	"bookie.data_dir":       config.NonEmpty,
	"bookie.disk_usage_threshold": func(v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return err
		}
		if x <= 0 || x > 1 {
			return errors.New("want a fraction in (0, 1]")
		}
		return nil
	},
	"bookie.disk_check_interval":     config.Positive,
	"bookie.group_commit_max_delay":  config.DurationMin(0, "0: no wait"),
	"bookie.group_commit_max_bytes":  config.IntMin(1, "bytes"),
	"bookie.max_entry_bytes":         config.IntMin(1, "bytes"),
	"bookie.mem_table_size_bytes":    config.IntMin(1<<20, "bytes, at least 1 MiB"),
	"bookie.max_inflight_per_stream": config.IntMin(1, "adds"),
	"bookie.shutdown_timeout":        config.Positive,
	"bookie.gc_interval":             config.AnyDuration,
	"bookie.compaction_threshold": func(v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return err
		}
		if x >= 1 {
			return errors.New("want a fraction below 1 (negative: off)")
		}
		return nil
	},
}

// The bookie follows its decommission record (read-only, then removed).
var _ bookie.Decommissioner = (*cluster.BookieRegistry)(nil)

// Its ledger listing is what garbage collection compares with.
var (
	_ bookie.Decommissioner = (*bookieLedgers)(nil)
	_ bookie.LedgerLister   = (*bookieLedgers)(nil)
)

// runBookie runs one bookie until ctx ends (or a decommission removed it).
func runBookie(ctx context.Context, md metadataFlags, sec SecurityFileConfig, c bookie.Config, gossip *gossipFlags) error {
	tlsSrc, err := sec.tlsSource()
	if err != nil {
		return err
	}
	store, err := sec.connectStore(ctx, md.endpoints(), md.regionPrefix(), tlsSrc)
	if err != nil {
		return err
	}
	defer store.Close()
	eps := splitList(md.globalEtcd)
	reg := newBookieLedgers(store, md.region, len(eps) > 0)
	reg.Logger = c.Logger
	if len(eps) > 0 {
		defer reg.close() // after cancel: connect has returned or gives up
		gctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go reg.connect(gctx, func(ctx context.Context) (*cluster.Store, error) {
			return sec.connectStore(ctx, eps, globalPrefix(md.root), tlsSrc)
		}, c.Logger)
	}
	srv, err := bookie.New(c, reg)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		return err
	}
	c.Logger.Info("bookie serving", "id", c.ID, "addr", srv.Addr(), "region", c.Region, "rack", c.Rack, "data_dir", c.DataDir)
	id := c.ID
	if id == "" {
		id = srv.Addr()
	}
	m, err := gossip.start(id, cluster.RoleBookie, c.Region, c.Rack, srv.Addr(), srv.MetricsAddr(), c.Logger)
	if err != nil {
		srv.Close()
		return err
	}
	if m != nil {
		reg.gossip.Store(m)
		defer m.Shutdown()
		defer func() {
			lctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			m.Leave(lctx)
		}()
	}
	select {
	case <-ctx.Done():
		c.Logger.Info("bookie stopping")
	case <-srv.Removed():
		c.Logger.Warn("bookie decommissioned and removed from the region; stopping")
	}
	if err := srv.Close(); err != nil {
		return fmt.Errorf("bookie close: %w", err)
	}
	return nil
}

// bookieLedgers is the bookie's registry, whose ledger listing (for
// garbage collection) covers every store that can hold the metadata of a
// ledger on this bookie: the region's, and with --global-etcd the global
// store, where stretched ledgers live (broker/stretched) with entries on
// this region's bookies too. Its ledger id high water (a wiped disk's limbo
// bound) covers the global store as well: brokers with --global-etcd
// allocate every ledger id there. The global store is connected in the
// background, so a bookie starts while it is unreachable; until it is
// connected every listing fails and garbage collection deletes nothing,
// and a start on a wiped disk waits for it (up to the identity check's
// 30 s, then fails naming it). Without --global-etcd, a bookie whose
// gossip sees members of another region (a multi-region deployment)
// refuses to list: it would take a stretched ledger for a deleted one.
type bookieLedgers struct {
	*cluster.BookieRegistry
	region     string
	wantGlobal bool
	global     atomic.Pointer[cluster.Store]
	gossip     atomic.Pointer[cluster.Membership]
}

// newBookieLedgers returns the registry of a bookie of region on store;
// wantGlobal (--global-etcd given): the global store, connected later
// (connect), counts for the listing and the ledger id high water.
func newBookieLedgers(store *cluster.Store, region string, wantGlobal bool) *bookieLedgers {
	g := &bookieLedgers{region: region, wantGlobal: wantGlobal}
	// Multi-region brokers allocate every ledger id from the global store
	// (and stretched ledgers live there): a wiped bookie's limbo bound is
	// the high water of both stores, and its start waits for the global
	// one rather than take a bound too low (issue 28).
	var allocators []cluster.AllocatorStore
	if wantGlobal {
		allocators = append(allocators, cluster.AllocatorStore{Name: "global store (--global-etcd)", Get: g.globalStore})
	}
	g.BookieRegistry = cluster.NewBookieRegistry(store, 0, allocators...)
	return g
}

func (g *bookieLedgers) ListLedgers(ctx context.Context) ([]int64, error) {
	if !g.wantGlobal {
		if m := g.gossip.Load(); m != nil {
			for _, mem := range m.Members() {
				if mem.Region != "" && mem.Region != g.region {
					return nil, fmt.Errorf("gossip sees region %q (member %s) but the bookie has no --global-etcd: stretched ledgers' metadata is in the global store; garbage collection deletes nothing until it is given", mem.Region, mem.Name)
				}
			}
		}
		return g.BookieRegistry.ListLedgers(ctx)
	}
	gs := g.global.Load()
	if gs == nil {
		return nil, errors.New("the global store (stretched ledgers' metadata) is not connected yet")
	}
	ids, err := g.BookieRegistry.ListLedgers(ctx)
	if err != nil {
		return nil, err
	}
	more, err := cluster.ListLedgerIDs(ctx, gs)
	if err != nil {
		return nil, err
	}
	return append(ids, more...), nil
}

// globalStore returns the global store once connect has connected it,
// waiting until then or until ctx ends.
func (g *bookieLedgers) globalStore(ctx context.Context) (*cluster.Store, error) {
	for {
		if s := g.global.Load(); s != nil {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("not connected: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// connect dials the global store until it answers or ctx ends.
func (g *bookieLedgers) connect(ctx context.Context, dial func(context.Context) (*cluster.Store, error), log *slog.Logger) {
	for wait := time.Second; ctx.Err() == nil; wait = min(2*wait, 30*time.Second) {
		s, err := dial(ctx)
		if err == nil {
			if ctx.Err() != nil || !g.global.CompareAndSwap(nil, s) {
				s.Close()
			}
			return
		}
		log.Warn("bookie: global store not reachable; garbage collection waits for it", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

func (g *bookieLedgers) close() {
	if s := g.global.Swap(nil); s != nil {
		s.Close()
	}
}
