package main

import (
	"context"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/bookie"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/spf13/cobra"
)

func newBookieCmd() *cobra.Command {
	var cfgPath, region, etcd string
	var powerLoss bool
	var bc bookie.Config
	var gossip gossipFlags
	var sec securityFlags
	cmd := &cobra.Command{
		Use:   "bookie",
		Short: "Run a bookie: a storage node keeping ledger entries durably on Pebble",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fc, err := loadConfig(cfgPath)
			if err != nil {
				return err
			}
			f := cmd.Flags()
			c := fc.Bookie
			if f.Changed("id") {
				c.ID = bc.ID
			}
			if f.Changed("listen") {
				c.ListenAddr = bc.ListenAddr
			}
			if f.Changed("advertise") {
				c.AdvertiseAddr = bc.AdvertiseAddr
			}
			if f.Changed("data-dir") || c.DataDir == "" {
				c.DataDir = bc.DataDir
			}
			if f.Changed("rack") {
				c.Rack = bc.Rack
			}
			if f.Changed("metrics") {
				c.MetricsAddr = bc.MetricsAddr
			}
			if f.Changed("disk-usage-threshold") {
				c.DiskUsageThreshold = bc.DiskUsageThreshold
			}
			if f.Changed("region") || fc.Region == "" {
				fc.Region = region
			}
			if c.Region == "" {
				c.Region = fc.Region
			}
			if f.Changed("etcd") || len(fc.Metadata.Endpoints) == 0 {
				fc.Metadata.Endpoints = splitList(etcd)
			}
			if powerLoss {
				// Drills and tests only: what is not fsynced lives in this
				// process's memory, so a kill -9 loses it (bookie.PowerLossFS).
				c = c.SimulatePowerLoss()
			}
			fc.Security = sec.merge(cmd, fc.Security)
			if fc.Security.TLS.Enabled() {
				c.TLS = fc.Security.TLS
			} else {
				fc.Security.TLS = c.TLS
			}
			log := logger()
			c.Logger = log
			ctx, stop := signalContext()
			defer stop()
			return runBookie(ctx, fc, c, &gossip)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgPath, "config", "", "config file (YAML; sections region, metadata, bookie)")
	f.StringVar(&region, "region", "default", "region of this bookie")
	f.StringVar(&etcd, "etcd", "http://127.0.0.1:2379", "the region's etcd endpoints, comma-separated")
	f.StringVar(&bc.ID, "id", "", "bookie id (default: the advertised address)")
	f.StringVar(&bc.ListenAddr, "listen", bookie.DefaultListenAddr, "gRPC listen address")
	f.StringVar(&bc.AdvertiseAddr, "advertise", "", "address clients dial (default: the listen address)")
	f.StringVar(&bc.DataDir, "data-dir", "./data/bookie", "data directory (Pebble)")
	f.StringVar(&bc.Rack, "rack", "", "rack label")
	f.StringVar(&bc.MetricsAddr, "metrics", "", "Prometheus /metrics listen address (empty: off)")
	f.Float64Var(&bc.DiskUsageThreshold, "disk-usage-threshold", bookie.DefaultDiskUsageThreshold, "disk usage fraction at which the bookie turns read-only")
	f.BoolVar(&powerLoss, "simulate-power-loss", false, "drills and tests only: keep every write not yet fsynced in memory (bookie.PowerLossFS), so a kill -9 of this bookie loses what a power loss would")
	gossip.register(cmd)
	sec.registerTLS(cmd)
	return cmd
}

// The bookie follows its decommission record (read-only, then removed).
var _ bookie.Decommissioner = (*cluster.BookieRegistry)(nil)

// runBookie runs one bookie until ctx ends (or a decommission removed it).
func runBookie(ctx context.Context, fc FileConfig, c bookie.Config, gossip *gossipFlags) error {
	tlsSrc, err := fc.Security.tlsSource()
	if err != nil {
		return err
	}
	store, err := fc.Security.connectStore(ctx, fc.Metadata.Endpoints, fc.Metadata.regionPrefix(fc.Region), tlsSrc)
	if err != nil {
		return err
	}
	defer store.Close()
	reg := cluster.NewBookieRegistry(store, 0)
	reg.Logger = c.Logger
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
