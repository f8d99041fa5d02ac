package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/meridian-mq/meridian/bookie"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/spf13/cobra"
)

func newStandaloneCmd() *cobra.Command {
	var dataDir, etcdClient, etcdPeer, bookieHost string
	var bookies, bookieBasePort int
	var listen, adminAddr string
	var policyEvery time.Duration
	var maxConnsPerIP, maxProducersPerTopic int
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run one region in one process: embedded etcd, bookies and a broker on loopback",
		Long: `standalone runs Meridian's embedded default in one process: a real embedded
etcd, three bookies (real gRPC on loopback, Pebble under --data-dir, each on
its own rack) and one broker speaking the Pulsar protocol on
pulsar://127.0.0.1:6650 with the admin API on http://127.0.0.1:8080. Tenant
public and namespace public/default exist; topics are created on first use.
A restart on the same data directory keeps every acknowledged message and
every subscription's position.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			ctx, stop := signalContext()
			defer stop()
			e, err := cluster.StartEtcd(cluster.EtcdConfig{
				Name: "standalone", DataDir: filepath.Join(dataDir, "etcd"),
				ClientURL: etcdClient, PeerURL: etcdPeer,
			})
			if err != nil {
				return err
			}
			defer e.Close()
			md := MetadataConfig{Endpoints: []string{e.ClientURL()}}
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			store, err := cluster.Connect(sctx, cluster.StoreConfig{Endpoints: md.Endpoints, Prefix: md.regionPrefix("standalone")})
			cancel()
			if err != nil {
				return err
			}
			defer store.Close()
			var servers []*bookie.Server
			defer func() {
				for _, s := range servers {
					s.Close()
				}
			}()
			for i := 1; i <= bookies; i++ {
				c := bookie.DefaultConfig()
				c.ID = fmt.Sprintf("bookie-%d", i)
				c.Region = "standalone"
				c.Rack = fmt.Sprintf("rack-%d", i)
				port := 0
				if bookieBasePort > 0 {
					port = bookieBasePort + i - 1
				}
				c.ListenAddr = net.JoinHostPort(bookieHost, strconv.Itoa(port))
				c.DataDir = filepath.Join(dataDir, c.ID)
				c.Logger = log.With("bookie", c.ID)
				s, err := bookie.New(c, cluster.NewBookieRegistry(store, 0))
				if err != nil {
					return err
				}
				if err := s.Start(); err != nil {
					s.Close()
					return err
				}
				servers = append(servers, s)
				log.Info("bookie serving", "id", c.ID, "addr", s.Addr(), "rack", c.Rack)
			}
			view, err := cluster.WatchBookies(ctx, store)
			if err != nil {
				return err
			}
			defer view.Close()
			for len(view.Bookies(true)) < min(bookies, 3) {
				time.Sleep(20 * time.Millisecond)
			}
			lc, err := ledger.New(ledger.Config{Store: store, Bookies: ledger.ViewSource{View: view}, Region: "standalone", Logger: log.With("component", "ledger")})
			if err != nil {
				return err
			}
			defer lc.Close()
			bc := broker.Config{
				Cluster: "standalone", ListenAddr: listen, AdminAddr: adminAddr,
				Store: store, Ledgers: lc, Logger: log, PolicyCheckInterval: policyEvery,
				MaxConnectionsPerIP: maxConnsPerIP, MaxProducersPerTopic: maxProducersPerTopic,
			}
			bc.ManagedLedger.EnsembleSize, bc.ManagedLedger.WriteQuorum, bc.ManagedLedger.AckQuorum = min(bookies, 3), min(bookies, 3), min(bookies, 2)
			brk, err := broker.New(bc)
			if err != nil {
				return err
			}
			if err := brk.Start(); err != nil {
				return err
			}
			defer func() {
				cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				if err := brk.Close(cctx); err != nil {
					log.Warn("broker close", "err", err)
				}
			}()
			log.Info("meridian standalone ready", "service_url", brk.ServiceURL(), "admin_url", brk.AdminURL(), "etcd", e.ClientURL(), "bookies", bookies, "data_dir", dataDir)
			select {
			case <-ctx.Done():
			case err := <-e.Err():
				return fmt.Errorf("etcd: %w", err)
			}
			log.Info("stopping")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "./data", "data directory")
	f.StringVar(&listen, "listen", "127.0.0.1:6650", "Pulsar protocol listen address")
	f.StringVar(&adminAddr, "admin", "127.0.0.1:8080", "admin HTTP API listen address")
	f.DurationVar(&policyEvery, "policy-check-interval", 5*time.Second, "how often message TTL and backlog quotas are enforced")
	f.IntVar(&maxConnsPerIP, "max-connections-per-ip", 0, "Pulsar connections allowed from one client IP (0: the broker default, 1000; -1: no limit)")
	f.IntVar(&maxProducersPerTopic, "max-producers-per-topic", 0, "producers allowed on one topic (0: the broker default, 10000; -1: no limit)")
	f.StringVar(&etcdClient, "etcd-client-url", "http://127.0.0.1:2379", "embedded etcd client URL")
	f.StringVar(&etcdPeer, "etcd-peer-url", "http://127.0.0.1:2380", "embedded etcd peer URL")
	f.IntVar(&bookies, "bookies", 3, "number of bookies")
	f.StringVar(&bookieHost, "bookie-host", "127.0.0.1", "host the bookies listen on")
	f.IntVar(&bookieBasePort, "bookie-base-port", 3181, "port of the first bookie; the others follow (0: any free ports)")
	return cmd
}
