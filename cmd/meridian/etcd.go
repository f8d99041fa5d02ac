package main

import (
	"fmt"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/spf13/cobra"
)

func newEtcdCmd() *cobra.Command {
	var cfgPath string
	var ec cluster.EtcdConfig
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run an embedded etcd member (development and tests; production uses an external etcd)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fc, err := loadConfig(cfgPath)
			if err != nil {
				return err
			}
			c := fc.Etcd
			f := cmd.Flags()
			if f.Changed("data-dir") || c.DataDir == "" {
				c.DataDir = ec.DataDir
			}
			if f.Changed("name") || c.Name == "" {
				c.Name = ec.Name
			}
			if f.Changed("client-url") || c.ClientURL == "" {
				c.ClientURL = ec.ClientURL
			}
			if f.Changed("peer-url") || c.PeerURL == "" {
				c.PeerURL = ec.PeerURL
			}
			if f.Changed("initial-cluster") {
				c.InitialCluster = ec.InitialCluster
			}
			if f.Changed("cluster-state") {
				c.ClusterState = ec.ClusterState
			}
			if f.Changed("prefer-leader") {
				c.PreferLeader = ec.PreferLeader
			}
			if f.Changed("tls-cert-file") || f.Changed("tls-key-file") || f.Changed("tls-trust-certs-file") {
				c.TLS = ec.TLS
			}
			log := logger()
			c.Logger = log
			e, err := cluster.StartEtcd(c)
			if err != nil {
				return err
			}
			defer e.Close()
			log.Info("etcd serving", "name", c.Name, "client_url", e.ClientURL(), "data_dir", c.DataDir)
			ctx, stop := signalContext()
			defer stop()
			select {
			case <-ctx.Done():
				return nil
			case err := <-e.Err():
				return fmt.Errorf("etcd: %w", err)
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgPath, "config", "", "config file (YAML; section etcd)")
	f.StringVar(&ec.DataDir, "data-dir", "./data/etcd", "data directory")
	f.StringVar(&ec.Name, "name", "default", "member name")
	f.StringVar(&ec.ClientURL, "client-url", "http://127.0.0.1:2379", "URL clients connect to")
	f.StringVar(&ec.PeerURL, "peer-url", "http://127.0.0.1:2380", "URL peers connect to")
	f.StringVar(&ec.InitialCluster, "initial-cluster", "", "name=peerURL,... of every member (default: this member alone)")
	f.StringVar(&ec.ClusterState, "cluster-state", "new", "new or existing")
	f.StringVar(&ec.TLS.CertFile, "tls-cert-file", "", "PEM certificate of this member: with --tls-key-file and --tls-trust-certs-file, clients and peers use mutual TLS (https:// URLs)")
	f.StringVar(&ec.TLS.KeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	f.StringVar(&ec.TLS.CAFile, "tls-trust-certs-file", "", "PEM CA certificates clients and peers must chain to")
	f.BoolVar(&ec.PreferLeader, "prefer-leader", false, "take the raft leadership whenever another member leads (the global store's witness: a leader change extends every lease, so a dead region's member must not lead)")
	return cmd
}
