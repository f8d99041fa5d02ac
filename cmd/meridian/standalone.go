package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/bookie"
	"github.com/meridian-mq/meridian/bookie/autorecovery"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker"
	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/spf13/cobra"
)

func newStandaloneCmd() *cobra.Command {
	var dataDir, etcdClient, etcdPeer, bookieHost string
	var bookies, bookieBasePort, maxMessageSize int
	var listen, adminAddr, advertise, replListen string
	var listeners listenerFlags
	var bookieMetrics []string
	var policyEvery, dedupInactivity time.Duration
	var limits connLimitFlags
	var delayed delayedFlags
	var rf recoveryFlags
	var sec securityFlags
	var genTLS, topicMetrics bool
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run one region in one process: embedded etcd, bookies and a broker on loopback",
		Long: `standalone runs Meridian's embedded default in one process: a real embedded
etcd, three bookies (real gRPC on loopback, Pebble under --data-dir, each on
its own rack) and one broker speaking the Pulsar protocol on
pulsar://127.0.0.1:6650 with the admin API on http://127.0.0.1:8080. Tenant
public and namespace public/default exist; topics are created on first use.
A restart on the same data directory keeps every acknowledged message and
every subscription's position.

--tls makes every listener TLS (pulsar+ssl://127.0.0.1:6651, admin
https://127.0.0.1:8443, etcd and the bookies mutual TLS) with a local CA
and certificate made in DATA-DIR/tls (kept across restarts); clients
trust DATA-DIR/tls/ca.pem. --token-secret-key/--token-public-key turn
token authentication on, --authorization role permissions.

As every role, it takes --config FILE (deploy/standalone.yaml) and
MERIDIAN_<SECTION>_<KEY> variables for every flag (flag > environment >
file > default); --print-config shows the result.`,
	}
	run := func(cmd *cobra.Command, eff *config.Effective) error {
		log := logger()
		ctx, stop := signalContext()
		defer stop()
		var genFiles tlsutil.Files
		if genTLS {
			files, err := tlsutil.LocalPKI(filepath.Join(dataDir, "tls"), map[string]tlsutil.Leaf{"standalone": tlsutil.LocalLeaf("standalone", "standalone", tlsutil.AllRoles...)})
			if err != nil {
				return fmt.Errorf("--tls: %w", err)
			}
			genFiles = files["standalone"]
			if !eff.Given("broker.listen_addr") {
				listen = "127.0.0.1:6651"
			}
			if !eff.Given("broker.admin_addr") {
				adminAddr = "127.0.0.1:8443"
			}
		}
		secfc := sec.settings()
		if genTLS {
			secfc.TLS = genFiles
		}
		tlsSrc, err := secfc.tlsSource()
		if err != nil {
			return err
		}
		if err := ownRoles(tlsSrc, "standalone", tlsutil.RoleBroker); err != nil {
			return err
		}
		security, err := secfc.brokerSecurity(tlsSrc)
		if err != nil {
			return err
		}
		ecfg := cluster.EtcdConfig{
			Name: "standalone", DataDir: filepath.Join(dataDir, "etcd"),
			ClientURL: etcdClient, PeerURL: etcdPeer,
		}
		if tlsSrc != nil {
			ecfg.TLS = secfc.TLS
			// The embedded etcd's only client is this process: no other
			// certificate of the CA (a user's) may read the grants.
			ecfg.AllowedClientCNs = []string{tlsSrc.Certificate().Subject.CommonName}
			ecfg.ClientURL = strings.Replace(etcdClient, "http://", "https://", 1)
			ecfg.PeerURL = strings.Replace(etcdPeer, "http://", "https://", 1)
		}
		e, err := cluster.StartEtcd(ecfg)
		if err != nil {
			return err
		}
		defer e.Close()
		store, err := secfc.connectStore(ctx, []string{e.ClientURL()}, regionPrefix("", "standalone"), tlsSrc)
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
			c := standaloneBookieConfig(maxMessageSize)
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
			if i <= len(bookieMetrics) {
				c.MetricsAddr = bookieMetrics[i-1]
			}
			c.TLS = secfc.TLS
			reg := cluster.NewBookieRegistry(store, 0)
			reg.Logger = c.Logger
			s, err := bookie.New(c, reg)
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
		lc, err := ledger.New(ledger.Config{Store: store, Bookies: ledger.ViewSource{View: view}, Region: "standalone", Logger: log.With("component", "ledger"),
			DialOptions: ledgerDialOptions(tlsSrc)})
		if err != nil {
			return err
		}
		defer lc.Close()
		subDelay, err := subscribeFaultDelay("standalone")
		if err != nil {
			return err
		}
		bc := broker.Config{
			SubscribeFaultDelay: subDelay,
			Cluster:             "standalone", ListenAddr: listen, AdvertisedAddr: advertise, AdminAddr: adminAddr, ReplicationAddr: replListen,
			Store: store, Ledgers: lc, Logger: log, PolicyCheckInterval: policyEvery, MaxMessageSize: maxMessageSize,
			NamespaceLevelMetrics:          !topicMetrics,
			DedupProducerInactivityTimeout: dedupTimeout(dedupInactivity),
			Security:                       security,
		}
		limits.apply(&bc)
		delayed.apply(&bc)
		listeners.apply(&bc)
		// Self-healing storage in the same process (autorecovery.go).
		if rf.enabled {
			metrics := autorecovery.NewMetrics("standalone")
			rcfg, err := rf.config(store, view, nil, metrics, log)
			if err != nil {
				return err
			}
			rctx, rstop := context.WithCancel(ctx)
			wait, err := runAutorecovery(rctx, rcfg, "standalone", rf.workers, lc, nil)
			if err != nil {
				rstop()
				return err
			}
			defer func() { rstop(); wait() }()
			bc.ExtraMetrics = append(bc.ExtraMetrics, metrics.Gatherer())
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
		log.Info("meridian standalone ready", "service_url", brk.ServiceURL(), "admin_url", brk.AdminURL(), "etcd", e.ClientURL(), "bookies", bookies, "data_dir", dataDir,
			"tls_trust_certs_file", secfc.TLS.CAFile, "authentication", security.Tokens != nil, "authorization", security.Authorization)
		select {
		case <-ctx.Done():
		case err := <-e.Err():
			return fmt.Errorf("etcd: %w", err)
		}
		log.Info("stopping")
		return nil
	}
	f := cmd.Flags()
	config.Group(f, "standalone", func() {
		f.StringVar(&dataDir, "data-dir", "./data", "data directory")
		f.StringVar(&etcdClient, "etcd-client-url", "http://127.0.0.1:2379", "embedded etcd client URL")
		f.StringVar(&etcdPeer, "etcd-peer-url", "http://127.0.0.1:2380", "embedded etcd peer URL")
		f.IntVar(&bookies, "bookies", 3, "number of bookies")
		f.StringVar(&bookieHost, "bookie-host", "127.0.0.1", "host the bookies listen on")
		f.IntVar(&bookieBasePort, "bookie-base-port", 3181, "port of the first bookie; the others follow (0: any free ports)")
		f.StringSliceVar(&bookieMetrics, "bookie-metrics", nil, "Prometheus /metrics listen addresses of the bookies, in order, comma-separated (default: none)")
		f.BoolVar(&genTLS, "tls", false, "TLS everywhere with a local CA and certificate made in DATA-DIR/tls (pulsar+ssl on 6651, admin https on 8443 unless --listen/--admin say otherwise)")
	})
	// The broker's settings keep the broker's keys.
	config.Group(f, "broker", func() {
		f.StringVar(&listen, "listen", "127.0.0.1:6650", "Pulsar protocol listen address")
		f.StringVar(&adminAddr, "admin", "127.0.0.1:8080", "admin HTTP API listen address")
		f.StringVar(&advertise, "advertise", "", "address clients are told to connect to (default: the listen address, a wildcard host replaced by the host name); not with --advertised-listeners")
		f.StringVar(&replListen, "replication-listen", broker.DefaultReplicationAddr, "replication gRPC listen address (a standalone is one region: nothing replicates to it, but the service listens)")
		listeners.register(f)
		f.DurationVar(&policyEvery, "policy-check-interval", 5*time.Second, "how often message TTL and backlog quotas are enforced")
		f.IntVar(&maxMessageSize, "max-message-size", codec.DefaultMaxMessageSize, maxMessageSizeHelp)
		f.BoolVar(&topicMetrics, "expose-topic-level-metrics", true, exposeTopicLevelMetricsHelp)
		limits.register(f)
		delayed.register(f)
		f.DurationVar(&dedupInactivity, "dedup-producer-inactivity-timeout", 0, "how long a producer name with no producer connected keeps its deduplication state (Pulsar's brokerDeduplicationProducerInactivityTimeoutMinutes; 0: the broker default, 6h; negative: never expires)")
	})
	config.Bind(f, "listen", "broker.listen_addr")
	config.Bind(f, "advertise", "broker.advertised_addr")
	config.Bind(f, "admin", "broker.admin_addr")
	config.Bind(f, "replication-listen", "broker.replication_addr")
	rf.register(f, "recovery-", true)
	sec.registerBroker(cmd)
	withConfig(cmd, func(eff *config.Effective) error {
		return validateAll(eff, rules(logRules, recoveryRules, authRules, standaloneRules), listenerCheck, authNeedsTLS)
	}, run)
	return cmd
}

var standaloneRules = map[string]config.Rule{
	"standalone.data_dir":                      config.NonEmpty,
	"standalone.etcd_client_url":               config.URL(false),
	"standalone.etcd_peer_url":                 config.URL(false),
	"standalone.bookies":                       config.IntMin(1, "bookies"),
	"standalone.bookie_host":                   config.NonEmpty,
	"standalone.bookie_base_port":              config.Port,
	"standalone.bookie_metrics":                config.HostPortList,
	"broker.listen_addr":                       brokerRules["broker.listen_addr"],
	"broker.advertised_addr":                   brokerRules["broker.advertised_addr"],
	"broker.admin_addr":                        brokerRules["broker.admin_addr"],
	"broker.replication_addr":                  brokerRules["broker.replication_addr"],
	"broker.policy_check_interval":             brokerRules["broker.policy_check_interval"],
	"broker.max_message_size":                  brokerRules["broker.max_message_size"],
	"broker.dedup_producer_inactivity_timeout": brokerRules["broker.dedup_producer_inactivity_timeout"],
	"broker.handshake_timeout":                 brokerRules["broker.handshake_timeout"],
	"broker.max_unauthenticated_connections":   brokerRules["broker.max_unauthenticated_connections"],
	"broker.max_unauthenticated_frame_bytes":   brokerRules["broker.max_unauthenticated_frame_bytes"],
	"broker.max_buffered_frame_bytes":          brokerRules["broker.max_buffered_frame_bytes"],
	"broker.max_connections_per_ip":            brokerRules["broker.max_connections_per_ip"],
	"broker.max_producers_per_topic":           brokerRules["broker.max_producers_per_topic"],
	"broker.admin_read_header_timeout":         brokerRules["broker.admin_read_header_timeout"],
	"broker.admin_read_timeout":                brokerRules["broker.admin_read_timeout"],
	"broker.admin_write_timeout":               brokerRules["broker.admin_write_timeout"],
	"broker.admin_idle_timeout":                brokerRules["broker.admin_idle_timeout"],
	"broker.admin_max_connections":             brokerRules["broker.admin_max_connections"],
}

// standaloneMemTableBytes is the standalone bookies' memtable size. They
// receive the same entries, so they fill and flush their memtables in
// step, on one machine's CPU: with the bookie default (64 MiB) three
// flushes and their L0 compactions at once stalled every add for
// 100-170 ms (steady publish p99 at 24,000 msgs/s ~100 ms; ~35 ms with
// 16 MiB; bench ab: batched produce 1.59x, CPU per message 0.60x). In a
// 2-region deployment of separate processes 16 MiB measured no better
// (docs/performance.md), so the bookie default stays.
const standaloneMemTableBytes = 16 << 20

// standaloneBookieConfig is the base config of each standalone bookie
// under a broker whose max message size is maxMessageSize: a message is
// one entry (a chunked one, one entry per chunk), so above the bookie's
// default its max entry size grows with it, by the same room for headers.
func standaloneBookieConfig(maxMessageSize int) bookie.Config {
	c := bookie.DefaultConfig()
	c.MemTableSizeBytes = standaloneMemTableBytes
	c.MaxEntryBytes = max(c.MaxEntryBytes, maxMessageSize+bookie.DefaultMaxEntryBytes-codec.DefaultMaxMessageSize)
	return c
}
