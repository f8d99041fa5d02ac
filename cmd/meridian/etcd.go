package main

import (
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

func newEtcdCmd() *cobra.Command {
	var ec cluster.EtcdConfig
	var requireAuth bool
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run an embedded etcd member (development and tests; production uses an external etcd)",
	}
	f := cmd.Flags()
	config.Group(f, "etcd", func() {
		f.StringVar(&ec.DataDir, "data-dir", "./data/etcd", "data directory")
		f.StringVar(&ec.Name, "name", "default", "member name")
		f.StringVar(&ec.ClientURL, "client-url", "http://127.0.0.1:2379", "client URL to listen on (etcd's listen-client-urls; /metrics and /health too)")
		f.StringVar(&ec.PeerURL, "peer-url", "http://127.0.0.1:2380", "peer URL to listen on (etcd's listen-peer-urls)")
		f.StringVar(&ec.AdvertiseClientURL, "advertise-client-url", "", "client URL told to clients, when it differs from --client-url (NAT, a container on 0.0.0.0; etcd's advertise-client-urls) (default: --client-url, a wildcard host replaced by the host name)")
		f.StringVar(&ec.AdvertisePeerURL, "advertise-peer-url", "", "peer URL told to the other members (etcd's initial-advertise-peer-urls; --initial-cluster names it) (default: --peer-url, a wildcard host replaced by the host name)")
		f.StringVar(&ec.InitialCluster, "initial-cluster", "", "name=peerURL,... of every member (default: this member alone)")
		f.StringVar(&ec.ClusterState, "cluster-state", "new", "new or existing")
		f.StringVar(&ec.TLS.CertFile, "tls-cert-file", "", "PEM certificate of this member: with --tls-key-file and --tls-trust-certs-file, clients and peers use mutual TLS (https:// URLs)")
		f.StringVar(&ec.TLS.KeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
		f.StringVar(&ec.TLS.CAFile, "tls-trust-certs-file", "", "PEM CA certificates clients and peers must chain to")
		f.BoolVar(&requireAuth, "require-client-auth", false, "refuse to start unless clients and peers are authenticated: mutual TLS (--tls-cert-file, --tls-key-file, --tls-trust-certs-file and https:// URLs); without TLS any caller reading the client URL reads and writes every key")
		f.BoolVar(&ec.PreferLeader, "prefer-leader", false, "take the raft leadership whenever another member leads (the global store's witness: a leader change extends every lease, so a dead region's member must not lead)")
		f.Int64Var(&ec.QuotaBackendBytes, "quota-backend-bytes", 0, "etcd's backend size limit in bytes (0: etcd's default, 2 GiB; etcd recommends at most 8 GiB)")
		f.DurationVar(&ec.StartTimeout, "start-timeout", 60*time.Second, "how long to wait for the member to be ready (with several members it needs a quorum)")
		f.DurationVar(&ec.LeaderCheckInterval, "leader-check-interval", 2*time.Second, "how often a --prefer-leader member checks who leads")
	})
	// The keys of the config files of before (cluster.EtcdConfig's).
	config.Bind(f, "tls-cert-file", "etcd.tls.cert_file")
	config.Bind(f, "tls-key-file", "etcd.tls.key_file")
	config.Bind(f, "tls-trust-certs-file", "etcd.tls.ca_file")
	withConfig(cmd, func(eff *config.Effective) error {
		return validateAll(eff, rules(logRules, etcdRules), func(eff *config.Effective) error {
			return clientAuthCheck(eff, "etcd.require_client_auth", "etcd.tls", "etcd.client_url", "etcd.peer_url")
		})
	}, func(cmd *cobra.Command, _ *config.Effective) error {
		c := ec
		log := logger()
		c.Logger = log
		e, err := cluster.StartEtcd(c)
		if err != nil {
			return err
		}
		defer e.Close()
		// etcd's /metrics (on the client URL) serves Prometheus's default
		// registry: the two gauges say there whether callers are
		// authenticated.
		prometheus.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meridian_etcd_client_cert_required",
				Help: "1 when clients and peers must present a certificate of the CA (mutual TLS), 0 when the member serves any caller (plaintext)."},
				func() float64 { return b2f(e.ClientCertRequired()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meridian_etcd_auth_enabled",
				Help: "1 while etcd's authentication (users and roles) is on: a caller's certificate common name or password must be a user whose role grants the key."},
				func() float64 { return b2f(e.AuthEnabled()) }))
		log.Info("etcd serving", "name", c.Name, "client_url", e.ClientURL(), "data_dir", c.DataDir,
			"client_auth", etcdClientAuth(e.ClientCertRequired()), "etcd_auth_enabled", e.AuthEnabled())
		ctx, stop := signalContext()
		defer stop()
		select {
		case <-ctx.Done():
			return nil
		case err := <-e.Err():
			return fmt.Errorf("etcd: %w", err)
		}
	})
	return cmd
}

var etcdRules = map[string]config.Rule{
	"etcd.data_dir":              config.NonEmpty,
	"etcd.name":                  config.Name,
	"etcd.client_url":            config.URL(false),
	"etcd.peer_url":              config.URL(false),
	"etcd.advertise_client_url":  config.URL(true),
	"etcd.advertise_peer_url":    config.URL(true),
	"etcd.cluster_state":         config.OneOf("new", "existing"),
	"etcd.quota_backend_bytes":   config.IntMin(0, "0: etcd's default"),
	"etcd.start_timeout":         config.Positive,
	"etcd.leader_check_interval": config.Positive,
}

// etcdClientAuth says how a member with TLS on or off authenticates its
// callers (its start-up line).
func etcdClientAuth(tlsOn bool) string {
	if tlsOn {
		return "mutual TLS: clients and peers need a certificate of the CA"
	}
	return "none: plaintext, any caller may read and write every key unless etcd's authentication is on"
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
