package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/bookie/autorecovery"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker"
	"github.com/meridian-mq/meridian/broker/replication"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/failover"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/netaddr"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// brokerFlags are the broker's own settings (section broker).
type brokerFlags struct {
	ID                             string
	verify                         verifierFlags // the background replication verifier
	Rack                           string
	ListenAddr                     string
	AdvertisedAddr                 string
	AdminAddr                      string
	ReplicationAddr                string
	ReplicationAdvAddr             string
	MaxMessageSize                 int
	ExposeTopicLevelMetrics        bool
	OwnershipTTL                   time.Duration
	FailoverLeaseTTL               time.Duration
	ShutdownDrainDelay             time.Duration
	EnsembleSize                   int
	WriteQuorum                    int
	AckQuorum                      int
	BundleSplitTopics              int
	PolicyCheckInterval            time.Duration
	DedupProducerInactivityTimeout time.Duration
	MaxEntriesPerLedger            int
	Listeners                      listenerFlags
}

// metadataFlags locate the region's etcd and the global store.
type metadataFlags struct {
	region, etcd, globalEtcd, root string
}

// register adds --region, --etcd and --metadata-root (and --global-etcd
// when global) and binds them to region and metadata.* — the keys of
// the config files of before.
func (m *metadataFlags) register(f *pflag.FlagSet, regionHelp string, global bool) {
	f.StringVar(&m.region, "region", "default", regionHelp)
	f.StringVar(&m.etcd, "etcd", "http://127.0.0.1:2379", "the region's etcd endpoints, comma-separated")
	f.StringVar(&m.root, "metadata-root", "/meridian", "etcd key root of Meridian's metadata: a region's keys live under ROOT/regions/REGION, the global store's under ROOT/global")
	config.Bind(f, "region", "region")
	config.Bind(f, "etcd", "metadata.endpoints")
	config.Bind(f, "metadata-root", "metadata.root")
	if global {
		f.StringVar(&m.globalEtcd, "global-etcd", "", "the global store's endpoints, comma-separated; REGION=URL names a member's region, so that it is not sent requests while gossip sees its region unreachable (default: the region's etcd, single region)")
		config.Bind(f, "global-etcd", "metadata.global")
	}
}

func (m metadataFlags) endpoints() []string  { return splitList(m.etcd) }
func (m metadataFlags) regionPrefix() string { return regionPrefix(m.root, m.region) }

func newBrokerCmd() *cobra.Command {
	var md metadataFlags
	var bf brokerFlags
	var gossip gossipFlags
	var rf recoveryFlags
	var limits connLimitFlags
	var delayed delayedFlags
	var sec securityFlags
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a broker: the Pulsar protocol and admin API over the region's bookies (external etcd, bookie processes)",
	}
	f := cmd.Flags()
	md.register(f, "region of this broker", true)
	config.Group(f, "broker", func() {
		f.StringVar(&bf.ID, "id", "", "broker id (default: the advertised address)")
		f.StringVar(&bf.ListenAddr, "listen", broker.DefaultListenAddr, "Pulsar protocol listen address")
		f.StringVar(&bf.AdvertisedAddr, "advertise", "", "address clients are told to connect to (default: the listen address, a wildcard host replaced by the host name); not with --advertised-listeners")
		f.StringVar(&bf.AdminAddr, "admin", broker.DefaultAdminAddr, "admin HTTP API listen address (empty: off)")
		f.StringVar(&bf.ReplicationAddr, "replication-listen", broker.DefaultReplicationAddr, "replication gRPC listen address, for other regions' brokers")
		f.StringVar(&bf.ReplicationAdvAddr, "replication-advertise", "", "replication address other regions dial (default: the replication listen address, a wildcard host replaced by the host name)")
		bf.Listeners.register(f)
		f.StringVar(&bf.Rack, "rack", "", "rack of this broker (read locality)")
		f.DurationVar(&bf.FailoverLeaseTTL, "failover-lease-ttl", 0, "TTL of a region's lease on an active-standby namespace (0: 5s); a dead active region's namespaces move after about this long at least")
		f.DurationVar(&bf.OwnershipTTL, "ownership-ttl", 10*time.Second, "lease behind bundle ownership: how long a dead broker's topics stay unowned")
		f.DurationVar(&bf.ShutdownDrainDelay, "shutdown-drain-delay", broker.DefaultShutdownDrainDelay, "on SIGTERM, how long the broker answers /readyz 503 while it still serves, before it hands its bundles over (a load balancer's or Kubernetes' time to take it out of rotation; 0: at once)")
		f.IntVar(&bf.BundleSplitTopics, "bundle-split-topics", 1000, "split a bundle holding more loaded topics than this (-1: never)")
		f.DurationVar(&bf.PolicyCheckInterval, "policy-check-interval", 5*time.Second, "how often TTL, backlog quotas, bundle splits and balancing run")
		f.DurationVar(&bf.DedupProducerInactivityTimeout, "dedup-producer-inactivity-timeout", 0, "how long a producer name with no producer connected keeps its deduplication state (Pulsar's brokerDeduplicationProducerInactivityTimeoutMinutes; 0: the broker default, 6h; negative: never expires)")
		f.IntVar(&bf.MaxEntriesPerLedger, "max-entries-per-ledger", 0, "roll a topic's ledger over after this many entries (0: the default, 50000)")
		f.IntVar(&bf.MaxMessageSize, "max-message-size", 5<<20, maxMessageSizeHelp)
		f.BoolVar(&bf.ExposeTopicLevelMetrics, "expose-topic-level-metrics", true, exposeTopicLevelMetricsHelp)
		f.IntVar(&bf.EnsembleSize, "ensemble-size", 3, "bookies of a new ledger's ensemble (E), unless the namespace's persistence policy says otherwise; E >= Qw >= Qa >= 1")
		f.IntVar(&bf.WriteQuorum, "write-quorum", 3, "bookies each entry is written to (Qw)")
		f.IntVar(&bf.AckQuorum, "ack-quorum", 2, "bookies that must persist an entry before it is acknowledged (Qa)")
		limits.register(f)
		delayed.register(f)
		bf.verify.register(f)
	})
	// The keys of the config files of before.
	config.Bind(f, "listen", "broker.listen_addr")
	config.Bind(f, "advertise", "broker.advertised_addr")
	config.Bind(f, "admin", "broker.admin_addr")
	config.Bind(f, "replication-listen", "broker.replication_addr")
	config.Bind(f, "replication-advertise", "broker.replication_advertised_addr")
	rf.register(f, "recovery-", true)
	gossip.register(cmd)
	sec.registerBroker(cmd)
	withConfig(cmd, func(eff *config.Effective) error {
		return validateAll(eff, rules(logRules, regionRules, gossipRules, recoveryRules, authRules, brokerRules, verifierRules, map[string]config.Rule{
			"metadata.global": config.URLList(false),
		}), quorumCheck, listenerCheck, authNeedsTLS)
	}, func(cmd *cobra.Command, _ *config.Effective) error {
		return runBroker(md, bf, gossip, rf, limits, delayed, sec)
	})
	return cmd
}

// maxMessageSizeHelp is --max-message-size's help, the broker's and the
// standalone's.
const maxMessageSizeHelp = "largest message accepted, in bytes, announced to clients (at most 100 MiB); a producer with chunking on splits a larger message into chunks of at most this size, which the consumer reassembles"

// exposeTopicLevelMetricsHelp is --expose-topic-level-metrics's help, the
// broker's and the standalone's.
const exposeTopicLevelMetricsHelp = "export Pulsar's pulsar_* metrics per topic and subscription (Pulsar's exposeTopicLevelMetricsInPrometheus); false: per namespace, no subscription series (for brokers with many thousands of topics)"

// brokerRules are the checks of the broker section (the broker and the
// standalone share most).
var brokerRules = map[string]config.Rule{
	"broker.rack":                              config.OptionalName,
	"broker.listen_addr":                       config.HostPort(false),
	"broker.advertised_addr":                   config.HostPort(true),
	"broker.admin_addr":                        config.HostPort(true),
	"broker.replication_addr":                  config.HostPort(true),
	"broker.replication_advertised_addr":       config.HostPort(true),
	"broker.failover_lease_ttl":                config.DurationMin(0, "0: 5s"),
	"broker.ownership_ttl":                     config.Positive,
	"broker.shutdown_drain_delay":              config.DurationMin(0, "0: hand over at once"),
	"broker.bundle_split_topics":               config.IntMin(-1, "-1: never split"),
	"broker.policy_check_interval":             config.Positive,
	"broker.dedup_producer_inactivity_timeout": config.AnyDuration,
	"broker.max_entries_per_ledger":            config.IntMin(0, "0: 50000"),
	"broker.max_message_size":                  config.IntRange(1, broker.MaxMessageSizeMax, "bytes, at most 100 MiB"),
	"broker.ensemble_size":                     config.IntMin(1, "bookies"),
	"broker.write_quorum":                      config.IntMin(1, "bookies"),
	"broker.ack_quorum":                        config.IntMin(1, "bookies"),
	"broker.handshake_timeout":                 config.AnyDuration,
	"broker.max_unauthenticated_connections":   config.IntMin(-1, "-1: no limit"),
	"broker.max_unauthenticated_frame_bytes":   config.IntMin(-1, "-1: the message size limit"),
	"broker.max_buffered_frame_bytes":          config.IntMin(-1, "-1: no limit"),
	"broker.max_connections_per_ip":            config.IntMin(-1, "-1: no limit"),
	"broker.max_producers_per_topic":           config.IntMin(-1, "-1: no limit"),
	"broker.admin_read_header_timeout":         config.AnyDuration,
	"broker.admin_read_timeout":                config.AnyDuration,
	"broker.admin_write_timeout":               config.AnyDuration,
	"broker.admin_idle_timeout":                config.AnyDuration,
	"broker.admin_max_connections":             config.IntMin(-1, "-1: no limit"),
}

func runBroker(md metadataFlags, c brokerFlags, gossip gossipFlags, rf recoveryFlags, limits connLimitFlags, delayed delayedFlags, sec securityFlags) error {
	log := logger()
	ctx, stop := signalContext()
	defer stop()
	secfc := sec.settings()
	tlsSrc, err := secfc.tlsSource()
	if err != nil {
		return err
	}
	if err := ownRoles(tlsSrc, "broker", tlsutil.RoleBroker); err != nil {
		return err
	}
	security, err := secfc.brokerSecurity(tlsSrc)
	if err != nil {
		return err
	}
	store, err := secfc.connectStore(ctx, md.endpoints(), md.regionPrefix(), tlsSrc)
	if err != nil {
		return err
	}
	defer store.Close()
	global := store
	if eps := splitList(md.globalEtcd); len(eps) > 0 {
		global, err = secfc.connectStore(ctx, eps, globalPrefix(md.root), tlsSrc)
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
	// Gossip publishes the address others dial (regionBrokers' fallback).
	service := c.AdvertisedAddr
	if service == "" {
		service = netaddr.Advertised(c.ListenAddr, nil)
	}
	m, err := gossip.start(name, cluster.RoleBroker, md.region, c.Rack, service, c.AdminAddr, log)
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
	lc, err := ledger.New(ledger.Config{Store: store, IDs: cluster.NewIDAllocator(global), Bookies: bookies, Region: md.region, Rack: c.Rack, Logger: log.With("component", "ledger"),
		DialOptions: ledgerDialOptions(tlsSrc)})
	if err != nil {
		return err
	}
	defer lc.Close()
	faults, err := replicationFaults()
	if err != nil {
		return err
	}
	subDelay, err := subscribeFaultDelay(md.region)
	if err != nil {
		return err
	}
	bc := broker.Config{
		ReplicationFaults: faults, SubscribeFaultDelay: subDelay,
		Cluster: md.region, BrokerID: c.ID, ListenAddr: c.ListenAddr, AdvertisedAddr: c.AdvertisedAddr, AdminAddr: c.AdminAddr,
		ShutdownDrainDelay: c.ShutdownDrainDelay,
		MaxMessageSize:     c.MaxMessageSize, NamespaceLevelMetrics: !c.ExposeTopicLevelMetrics, OwnershipTTL: c.OwnershipTTL, Store: store, GlobalStore: global, Ledgers: lc, Bookies: bookies, Logger: log,
		BundleSplitTopics: c.BundleSplitTopics, PolicyCheckInterval: c.PolicyCheckInterval, Health: health,
		DedupProducerInactivityTimeout: dedupTimeout(c.DedupProducerInactivityTimeout),
		ReplicationAddr:                c.ReplicationAddr, ReplicationAdvertisedAddr: c.ReplicationAdvAddr,
		Security: security,
	}
	limits.apply(&bc)
	delayed.apply(&bc)
	c.Listeners.apply(&bc)
	bc.ManagedLedger.EnsembleSize, bc.ManagedLedger.WriteQuorum, bc.ManagedLedger.AckQuorum = c.EnsembleSize, c.WriteQuorum, c.AckQuorum
	bc.ManagedLedger.MaxEntriesPerLedger = c.MaxEntriesPerLedger
	c.verify.apply(&bc)
	// Auto-recovery in the broker's process (see autorecovery.go).
	var waitRecovery func()
	if rf.enabled {
		var alive func(string) bool
		if m != nil {
			alive = autorecovery.GossipAlive(m)
		}
		metrics := autorecovery.NewMetrics(md.region)
		rcfg, err := rf.config(store, view, alive, metrics, log)
		if err != nil {
			return err
		}
		rctx, rstop := context.WithCancel(ctx)
		defer rstop()
		if waitRecovery, err = runAutorecovery(rctx, rcfg, "broker-"+name, rf.workers, lc, nil); err != nil {
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
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+c.ShutdownDrainDelay)
	defer cancel()
	err = b.Close(cctx)
	if waitRecovery != nil {
		waitRecovery() // ctx is done: the auditor resigns, the workers give their claims back
	}
	if m != nil {
		m.Leave(cctx)
	}
	return err
}

// replicationFaults reads the replication fault-injection knobs of
// end-to-end tests and drills from the broker's environment, once, at
// start: MERIDIAN_FAULT_DROP_REPL_BATCHES=N makes each sender drop its
// first N batches (a lost batch: the target sees a gap);
// MERIDIAN_FAULT_REPL_DELAY=300ms delays every send of batches (a slow
// WAN link); MERIDIAN_FAULT_ALTER_REPL_PAYLOAD=TOPIC:SEQ flips the last
// byte of the replicated entry of TOPIC with origin sequence number SEQ
// when this region stores it (a copy that differs, for verification).
// Unset, nothing is injected.
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
	if v := os.Getenv("MERIDIAN_FAULT_ALTER_REPL_PAYLOAD"); v != "" {
		i := strings.LastIndex(v, ":")
		seq, err := strconv.ParseUint(v[i+1:], 10, 64)
		if i < 0 || err != nil || seq == 0 || !strings.HasPrefix(v, "persistent://") {
			return f, fmt.Errorf("MERIDIAN_FAULT_ALTER_REPL_PAYLOAD=%q: want persistent://tenant/ns/topic:SEQ, SEQ >= 1", v)
		}
		f.AlterTopic, f.AlterSeq = v[:i], seq
	}
	return f, nil
}

// subscribeFaultDelay reads MERIDIAN_FAULT_SUBSCRIBE_DELAY=[REGION:]D
// (end-to-end tests and drills): how long every SUBSCRIBE waits once its
// subscription is made, before its consumer is taken onto the connection
// (broker.Config.SubscribeFaultDelay) — in the brokers of REGION only
// when one is named (a drill holds the survivor's subscriptions, not
// those the workload makes before the fault). Unset: none.
func subscribeFaultDelay(region string) (time.Duration, error) {
	v := os.Getenv("MERIDIAN_FAULT_SUBSCRIBE_DELAY")
	if v == "" {
		return 0, nil
	}
	only, ds, named := strings.Cut(v, ":")
	if !named {
		only, ds = "", v
	}
	d, err := time.ParseDuration(ds)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("MERIDIAN_FAULT_SUBSCRIBE_DELAY=%q: want [REGION:]DURATION, a duration >= 0", v)
	}
	if only != "" && only != region {
		return 0, nil
	}
	return d, nil
}
