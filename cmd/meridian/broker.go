package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/meridian-mq/meridian/bookie/autorecovery"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker"
	"github.com/meridian-mq/meridian/broker/replication"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/failover"
	"github.com/spf13/cobra"
)

// BrokerFileConfig is the broker section of the config file.
type BrokerFileConfig struct {
	ID                  string        `yaml:"id"`
	Rack                string        `yaml:"rack"`
	ListenAddr          string        `yaml:"listen_addr"`
	AdvertisedAddr      string        `yaml:"advertised_addr"`
	AdminAddr           string        `yaml:"admin_addr"`
	ReplicationAddr     string        `yaml:"replication_addr"`
	ReplicationAdvAddr  string        `yaml:"replication_advertised_addr"`
	MaxMessageSize      int           `yaml:"max_message_size"`
	OwnershipTTL        time.Duration `yaml:"ownership_ttl"`
	FailoverLeaseTTL    time.Duration `yaml:"failover_lease_ttl"`
	EnsembleSize        int           `yaml:"ensemble_size"`
	BundleSplitTopics   int           `yaml:"bundle_split_topics"`
	PolicyCheckInterval time.Duration `yaml:"policy_check_interval"`
	// DedupProducerInactivityTimeout: broker.Config's (0: 6h; negative:
	// never).
	DedupProducerInactivityTimeout time.Duration `yaml:"dedup_producer_inactivity_timeout"`
	WriteQuorum                    int           `yaml:"write_quorum"`
	AckQuorum                      int           `yaml:"ack_quorum"`
}

func newBrokerCmd() *cobra.Command {
	var cfgPath, region, etcd, globalEtcd string
	var bf BrokerFileConfig
	var gossip gossipFlags
	var rf recoveryFlags
	var maxEntries int
	var limits connLimitFlags
	var delayed delayedFlags
	var sec securityFlags
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a broker: the Pulsar protocol and admin API over the region's bookies (external etcd, bookie processes)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fc, err := loadConfig(cfgPath)
			if err != nil {
				return err
			}
			f := cmd.Flags()
			c := fc.Broker
			set := func(name string, dst *string, v string) {
				if f.Changed(name) || *dst == "" {
					*dst = v
				}
			}
			set("id", &c.ID, bf.ID)
			set("listen", &c.ListenAddr, bf.ListenAddr)
			set("advertise", &c.AdvertisedAddr, bf.AdvertisedAddr)
			set("admin", &c.AdminAddr, bf.AdminAddr)
			set("replication-listen", &c.ReplicationAddr, bf.ReplicationAddr)
			set("replication-advertise", &c.ReplicationAdvAddr, bf.ReplicationAdvAddr)
			set("rack", &c.Rack, bf.Rack)
			if f.Changed("ownership-ttl") || c.OwnershipTTL == 0 {
				c.OwnershipTTL = bf.OwnershipTTL
			}
			if f.Changed("failover-lease-ttl") || c.FailoverLeaseTTL == 0 {
				c.FailoverLeaseTTL = bf.FailoverLeaseTTL
			}
			if f.Changed("bundle-split-topics") || c.BundleSplitTopics == 0 {
				c.BundleSplitTopics = bf.BundleSplitTopics
			}
			if f.Changed("policy-check-interval") || c.PolicyCheckInterval == 0 {
				c.PolicyCheckInterval = bf.PolicyCheckInterval
			}
			if f.Changed("dedup-producer-inactivity-timeout") || c.DedupProducerInactivityTimeout == 0 {
				c.DedupProducerInactivityTimeout = bf.DedupProducerInactivityTimeout
			}
			if f.Changed("region") || fc.Region == "" {
				fc.Region = region
			}
			if f.Changed("etcd") || len(fc.Metadata.Endpoints) == 0 {
				fc.Metadata.Endpoints = splitList(etcd)
			}
			log := logger()
			ctx, stop := signalContext()
			defer stop()
			secfc := sec.merge(cmd, fc.Security)
			tlsSrc, err := secfc.tlsSource()
			if err != nil {
				return err
			}
			security, err := secfc.brokerSecurity(tlsSrc)
			if err != nil {
				return err
			}
			store, err := secfc.connectStore(ctx, fc.Metadata.Endpoints, fc.Metadata.regionPrefix(fc.Region), tlsSrc)
			if err != nil {
				return err
			}
			defer store.Close()
			global := store
			if f.Changed("global-etcd") || len(fc.Metadata.Global) > 0 {
				eps := fc.Metadata.Global
				if f.Changed("global-etcd") {
					eps = splitList(globalEtcd)
				}
				global, err = secfc.connectStore(ctx, eps, fc.Metadata.globalPrefix(), tlsSrc)
				if err != nil {
					return err
				}
				defer global.Close()
			}
			view, err := cluster.WatchBookies(ctx, store)
			if err != nil {
				return err
			}
			defer view.Close()
			name := c.ID
			if name == "" {
				name = c.ListenAddr
			}
			m, err := gossip.start(name, cluster.RoleBroker, fc.Region, c.Rack, c.ListenAddr, c.AdminAddr, log)
			if err != nil {
				return err
			}
			var bookies ledger.BookieSource = ledger.ViewSource{View: view}
			var health func() any
			if m != nil {
				defer m.Shutdown()
				bookies = gossipFilteredBookies{inner: ledger.ViewSource{View: view}, m: m}
				health = func() any { return healthJSON(m.Snapshot()) }
			}
			// Ledger ids come from the global store, so they never collide
			// between regions (message ids are built from them).
			lc, err := ledger.New(ledger.Config{Store: store, IDs: cluster.NewIDAllocator(global), Bookies: bookies, Region: fc.Region, Rack: c.Rack, Logger: log.With("component", "ledger"),
				DialOptions: ledgerDialOptions(tlsSrc)})
			if err != nil {
				return err
			}
			defer lc.Close()
			faults, err := replicationFaults()
			if err != nil {
				return err
			}
			bc := broker.Config{
				ReplicationFaults: faults,
				Cluster:           fc.Region, BrokerID: c.ID, ListenAddr: c.ListenAddr, AdvertisedAddr: c.AdvertisedAddr, AdminAddr: c.AdminAddr,
				MaxMessageSize: c.MaxMessageSize, OwnershipTTL: c.OwnershipTTL, Store: store, GlobalStore: global, Ledgers: lc, Bookies: bookies, Logger: log,
				BundleSplitTopics: c.BundleSplitTopics, PolicyCheckInterval: c.PolicyCheckInterval, Health: health,
				DedupProducerInactivityTimeout: dedupTimeout(c.DedupProducerInactivityTimeout),
				ReplicationAddr:                c.ReplicationAddr, ReplicationAdvertisedAddr: c.ReplicationAdvAddr,
				Security: security,
			}
			limits.apply(&bc)
			delayed.apply(&bc)
			bc.ManagedLedger.EnsembleSize, bc.ManagedLedger.WriteQuorum, bc.ManagedLedger.AckQuorum = c.EnsembleSize, c.WriteQuorum, c.AckQuorum
			bc.ManagedLedger.MaxEntriesPerLedger = maxEntries
			// Auto-recovery in the broker's process (see autorecovery.go).
			var waitRecovery func()
			if rf.enabled {
				var alive func(string) bool
				if m != nil {
					alive = autorecovery.GossipAlive(m)
				}
				metrics := autorecovery.NewMetrics(fc.Region)
				rcfg, err := rf.config(store, view, alive, metrics, log)
				if err != nil {
					return err
				}
				rctx, rstop := context.WithCancel(ctx)
				defer rstop()
				if waitRecovery, err = runAutorecovery(rctx, rcfg, "broker-"+name, rf.workers, lc); err != nil {
					return err
				}
				bc.ExtraMetrics = append(bc.ExtraMetrics, metrics.Gatherer())
			}
			if m != nil {
				bc.Security.GossipKeys = m
				bc.HealthView = m.Snapshot // automatic failover of active-standby namespaces
				bc.HealthChanges = m.Subscribe
				bc.PublishProbe = func(ok bool, at time.Time) {
					if err := m.SetTags(cluster.ProbeTags(ok, at)); err != nil {
						log.Warn("publish write probe", "err", err)
					}
				}
			}
			if c.FailoverLeaseTTL > 0 {
				r := failover.DefaultLeaseRules()
				r.TTL, r.RenewEvery = c.FailoverLeaseTTL, c.FailoverLeaseTTL/3
				if err := r.Validate(); err != nil {
					return fmt.Errorf("--failover-lease-ttl: %w", err)
				}
				bc.FailoverLease = r
			}
			b, err := broker.New(bc)
			if err != nil {
				return err
			}
			if err := b.Start(); err != nil {
				return err
			}
			<-ctx.Done()
			log.Info("broker stopping: handing bundles to other brokers")
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = b.Close(cctx)
			if waitRecovery != nil {
				waitRecovery() // ctx is done: the auditor resigns, the workers give their claims back
			}
			if m != nil {
				m.Leave(cctx)
			}
			return err
		},
	}
	f := cmd.Flags()
	limits.register(f)
	delayed.register(f)
	f.StringVar(&cfgPath, "config", "", "config file (YAML; sections region, metadata, broker)")
	f.StringVar(&region, "region", "default", "region of this broker")
	f.StringVar(&etcd, "etcd", "http://127.0.0.1:2379", "the region's etcd endpoints, comma-separated")
	f.StringVar(&globalEtcd, "global-etcd", "", "the global store's endpoints, comma-separated; REGION=URL names a member's region, so that it is not sent requests while gossip sees its region unreachable (default: the region's etcd, single region)")
	f.StringVar(&bf.ID, "id", "", "broker id (default: the advertised address)")
	f.StringVar(&bf.ListenAddr, "listen", "127.0.0.1:6650", "Pulsar protocol listen address")
	f.StringVar(&bf.AdvertisedAddr, "advertise", "", "address clients are told to connect to (default: the listen address)")
	f.StringVar(&bf.AdminAddr, "admin", "127.0.0.1:8080", "admin HTTP API listen address (empty: off)")
	f.StringVar(&bf.ReplicationAddr, "replication-listen", "", "replication gRPC listen address, for other regions (default: the listen host, a free port)")
	f.StringVar(&bf.ReplicationAdvAddr, "replication-advertise", "", "replication address other regions dial (default: the replication listen address)")
	f.StringVar(&bf.Rack, "rack", "", "rack of this broker (read locality)")
	f.DurationVar(&bf.FailoverLeaseTTL, "failover-lease-ttl", 0, "TTL of a region's lease on an active-standby namespace (0: 5s); a dead active region's namespaces move after about this long at least")
	f.DurationVar(&bf.OwnershipTTL, "ownership-ttl", 10*time.Second, "lease behind bundle ownership: how long a dead broker's topics stay unowned")
	f.IntVar(&bf.BundleSplitTopics, "bundle-split-topics", 1000, "split a bundle holding more loaded topics than this (-1: never)")
	f.DurationVar(&bf.PolicyCheckInterval, "policy-check-interval", 5*time.Second, "how often TTL, backlog quotas, bundle splits and balancing run")
	f.DurationVar(&bf.DedupProducerInactivityTimeout, "dedup-producer-inactivity-timeout", 0, "how long a producer name with no producer connected keeps its deduplication state (Pulsar's brokerDeduplicationProducerInactivityTimeoutMinutes; 0: the broker default, 6h; negative: never expires)")
	f.IntVar(&maxEntries, "max-entries-per-ledger", 0, "roll a topic's ledger over after this many entries (0: the default, 50000)")
	rf.register(f, "recovery-", true)
	gossip.register(cmd)
	sec.registerBroker(cmd)
	return cmd
}

// replicationFaults reads the replication fault-injection knobs of
// end-to-end tests and drills from the broker's environment, once, at
// start: MERIDIAN_FAULT_DROP_REPL_BATCHES=N makes each sender drop its
// first N batches (a lost batch: the target sees a gap);
// MERIDIAN_FAULT_REPL_DELAY=300ms delays every send of batches (a slow
// WAN link). Unset, nothing is injected.
func replicationFaults() (replication.Faults, error) {
	var f replication.Faults
	if v := os.Getenv("MERIDIAN_FAULT_DROP_REPL_BATCHES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return f, fmt.Errorf("MERIDIAN_FAULT_DROP_REPL_BATCHES=%q: want a count >= 0", v)
		}
		f.DropBatches = n
	}
	if v := os.Getenv("MERIDIAN_FAULT_REPL_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return f, fmt.Errorf("MERIDIAN_FAULT_REPL_DELAY=%q: want a duration >= 0", v)
		}
		f.Delay = d
	}
	return f, nil
}
