package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/bookie/autorecovery"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/spf13/cobra"
)

// newAutorecoveryCmd runs a region's auto-recovery: an auditor candidate
// (one per region audits at a time) and re-replication workers.
func newAutorecoveryCmd() *cobra.Command {
	var region, etcd, root, id string
	var delay, scrub time.Duration
	var mbps float64
	var workers int
	cmd := &cobra.Command{
		Use:   "autorecovery",
		Short: "Run auto-recovery: detect lost bookies and re-replicate their fragments",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == "" {
				h, _ := os.Hostname()
				id = fmt.Sprintf("%s-%d", h, os.Getpid())
			}
			log := logger()
			ctx, stop := signalContext()
			defer stop()
			md := MetadataConfig{Endpoints: splitList(etcd), Root: root}
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			store, err := cluster.Connect(sctx, cluster.StoreConfig{Endpoints: md.Endpoints, Prefix: md.regionPrefix(region)})
			cancel()
			if err != nil {
				return err
			}
			defer store.Close()
			view, err := cluster.WatchBookies(ctx, store)
			if err != nil {
				return err
			}
			defer view.Close()
			client, err := ledger.New(ledger.Config{Store: store, Bookies: ledger.ViewSource{View: view}, Region: region, Logger: log})
			if err != nil {
				return err
			}
			defer client.Close()

			cfg := autorecovery.DefaultConfig()
			cfg.Store, cfg.Bookies, cfg.Logger = store, view, log
			cfg.LostBookieDelay = delay
			if scrub > 0 {
				cfg.ScrubInterval = scrub
			}
			cfg.ThrottleBytesPerSec = int64(mbps * (1 << 20))
			if mbps <= 0 {
				cfg.ThrottleBytesPerSec = -1
			}
			cfg.Throttle = autorecovery.NewThrottle(cfg.ThrottleBytesPerSec) // shared by all workers
			if err := cfg.Validate(); err != nil {
				return err
			}
			aud, err := autorecovery.NewAuditor(cfg, id)
			if err != nil {
				return err
			}
			var wg sync.WaitGroup
			wg.Go(func() { aud.Run(ctx) })
			for i := range max(workers, 1) {
				w, err := autorecovery.NewWorker(cfg, fmt.Sprintf("%s/w%d", id, i), client)
				if err != nil {
					return err
				}
				wg.Go(func() { w.Run(ctx) })
			}
			log.Info("autorecovery running", "id", id, "region", region, "lost_bookie_delay", delay, "throttle_mbps", mbps, "workers", workers)
			wg.Wait()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&region, "region", "default", "region whose bookies and ledgers to look after")
	f.StringVar(&etcd, "etcd", "http://127.0.0.1:2379", "the region's etcd endpoints, comma-separated")
	f.StringVar(&root, "metadata-root", "/meridian", "etcd key root of Meridian's metadata")
	f.StringVar(&id, "id", "", "name of this process in the auditor election (default: host-pid)")
	f.DurationVar(&delay, "lost-bookie-delay", 60*time.Second, "how long one bookie may be unregistered before its fragments are re-replicated (two or more at once: immediately)")
	f.DurationVar(&scrub, "scrub-interval", time.Hour, "how often the auditor scans every ledger without a new loss")
	f.Float64Var(&mbps, "throttle-mbps", 50, "copy throughput cap in MiB/s for this process (0: unlimited)")
	f.IntVar(&workers, "workers", 2, "re-replication workers in this process")
	return cmd
}
