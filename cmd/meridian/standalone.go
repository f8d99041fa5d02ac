package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/meridian-mq/meridian/bookie"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/spf13/cobra"
)

func newStandaloneCmd() *cobra.Command {
	var dataDir, etcdClient, etcdPeer, bookieHost string
	var bookies, bookieBasePort int
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run one region in one process: an embedded etcd and bookies on loopback",
		Long: `standalone runs Meridian's embedded default in one process: a real embedded
etcd and three bookies (real gRPC on loopback, Pebble under --data-dir), each
on its own rack. A restart on the same data directory keeps every acknowledged
entry. (The broker issue adds the Pulsar-protocol broker to it.)`,
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
				c.ListenAddr = net.JoinHostPort(bookieHost, strconv.Itoa(bookieBasePort+i-1))
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
			log.Info("meridian standalone ready", "etcd", e.ClientURL(), "bookies", bookies, "data_dir", dataDir)
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
	f.StringVar(&etcdClient, "etcd-client-url", "http://127.0.0.1:2379", "embedded etcd client URL")
	f.StringVar(&etcdPeer, "etcd-peer-url", "http://127.0.0.1:2380", "embedded etcd peer URL")
	f.IntVar(&bookies, "bookies", 3, "number of bookies")
	f.StringVar(&bookieHost, "bookie-host", "127.0.0.1", "host the bookies listen on")
	f.IntVar(&bookieBasePort, "bookie-base-port", 3181, "port of the first bookie; the others follow")
	return cmd
}
