package broker

import (
	"errors"
	"log/slog"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/broker/replication"
	"github.com/meridian-mq/meridian/broker/security"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/failover"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Broker. Read once by New.
type Config struct {
	// Cluster is the region's name, reported as the cluster in admin
	// answers and used as the default replication cluster. Default
	// "standalone".
	Cluster string
	// ListenAddr is the Pulsar protocol listener. Default "127.0.0.1:6650".
	ListenAddr string
	// AdvertisedAddr is the host:port clients are told to connect to (in
	// lookups). Default: the actual listen address.
	AdvertisedAddr string
	// AdminAddr is the admin HTTP API listener ("" = off). Default
	// "127.0.0.1:8080".
	AdminAddr string
	// MaxMessageSize is the largest message accepted, announced to clients
	// in CONNECTED so they refuse larger ones themselves. Default 5 MiB.
	MaxMessageSize int
	// KeepAliveInterval: the broker pings a connection idle for this long
	// and closes it after twice this long without any frame. The Go client
	// closes connections silent for 60 s. Default 30s.
	KeepAliveInterval time.Duration
	// MaxPendingSendsPerProducer bounds SENDs received but not yet persisted
	// per producer; past it the broker stops reading the connection (TCP
	// back-pressure). Default 1000 (the Go client's MaxPendingMessages).
	MaxPendingSendsPerProducer int
	// MaxConnectionsPerIP bounds the open Pulsar connections from one
	// client IP address; a connection past it is closed as soon as it is
	// accepted (the Go client retries with back-off) and counted in
	// meridian_broker_limit_exceeded_total{limit="connections_per_ip"}.
	// Each connection costs a few goroutines and 64 KiB of write buffer,
	// so the default bounds one address at about 100 MiB. 0 means the
	// default, 1000; -1 no limit.
	MaxConnectionsPerIP int
	// MaxPendingRequestsPerConnection bounds the requests a connection
	// has in progress at once: lookups, partition metadata, producer and
	// consumer creations, and the other requests answered off the reader
	// goroutine (unsubscribe, seek, topic lists, schemas). Each holds a
	// goroutine and etcd/bookie work. One past it is answered with ERROR
	// ServiceNotReady (the Go client closes the connection and retries)
	// and counted as limit="pending_requests_per_connection". A Go client
	// opening 100 partitions' producers has 100 in progress. 0 means the
	// default, 1000; -1 no limit.
	MaxPendingRequestsPerConnection int
	// MaxProducersPerTopic bounds the producers connected to one topic
	// (partition). One past it is answered with ERROR ProducerBusy (as
	// Pulsar's maxProducersPerTopic: a new Go producer fails, a
	// reconnecting one retries with back-off) and counted as
	// limit="producers_per_topic". 0 means the default, 10000; -1 no
	// limit.
	MaxProducersPerTopic int
	// MaxConsumersPerTopic bounds the consumers of one topic (partition)
	// over all its subscriptions; MaxConsumersPerSubscription those of one
	// subscription. One past either is answered with ERROR ConsumerBusy
	// (as Pulsar's maxConsumersPerTopic/-Subscription; the Go client
	// treats it as it treats a second consumer on an exclusive
	// subscription) and counted as limit="consumers_per_topic" or
	// "consumers_per_subscription". Every consumer holds dispatch state
	// and up to its permits of entries in flight. 0 means the default,
	// 10000; -1 no limit.
	MaxConsumersPerTopic        int
	MaxConsumersPerSubscription int
	// DedupSnapshotInterval: every this many entries a topic writes its
	// producers' last sequence ids to its dedup snapshot (a ledger snapshot
	// of the topic's managed ledger, mledger.OpenSnapshot: no size cap),
	// bounding the replay on load. Default 1000.
	DedupSnapshotInterval int
	// DedupProducerInactivityTimeout: a producer name with no producer
	// connected for this long loses its deduplication state (Pulsar's
	// brokerDeduplicationProducerInactivityTimeoutMinutes, default 360
	// minutes): a producer of that name coming back later starts afresh
	// (last sequence id -1), so its resends of messages older than the
	// timeout are stored again. Bounds the state a topic keeps for
	// producers that come and go under new names. Checked by the policy
	// loop, every tenth of the timeout at most. 0 means the default, 6h;
	// -1 never expires.
	DedupProducerInactivityTimeout time.Duration

	// BrokerID identifies this broker in the region (its registration and
	// the bundles it owns). Default: the advertised address.
	BrokerID string
	// OwnershipTTL is the lease behind the broker's registration and bundle
	// ownership: when the broker dies, its bundles move after at most this
	// long. Shorter moves topics sooner after a crash; too short and a GC
	// pause or a busy machine moves them needlessly. Default 10s.
	OwnershipTTL time.Duration

	// PolicyCheckInterval: how often message TTL and backlog quotas are
	// enforced on loaded topics. Default 5s (Pulsar checks TTL every 5 min;
	// a shorter period bounds how far past its quota a backlog can grow).
	PolicyCheckInterval time.Duration

	// BundleSplitTopics: a bundle holding more loaded topics than this is
	// split in two (and the halves may then move to other brokers). 0
	// means the default, 1000; -1 never splits.
	BundleSplitTopics int

	// ReplicationAddr is where the broker serves the replication gRPC
	// service for other regions; "" = the Pulsar listener's host on a free
	// port. ReplicationAdvertisedAddr is the address other regions dial
	// ("" = the listener's).
	ReplicationAddr           string
	ReplicationAdvertisedAddr string
	// ReplicationFaults is fault injection for end-to-end tests and
	// drills (cmd/meridian reads it from MERIDIAN_FAULT_* variables). The
	// zero value injects nothing.
	ReplicationFaults replication.Faults

	// Store is the region's metadata store. Required.
	Store *cluster.Store
	// GlobalStore is the store shared by every region (tenants, namespaces
	// and their policies, partition counts, schemas, the topic registry).
	// nil means Store (a single region).
	GlobalStore *cluster.Store
	// Bookies, if set, is the region's bookie source (the one Ledgers
	// uses): with a separate GlobalStore it enables stretched namespaces
	// (ledgers over bookies of several regions).
	Bookies ledger.BookieSource
	// Ledgers is the ledger client. Required.
	Ledgers *ledger.Client
	// ManagedLedger is the template of every topic's managed-ledger
	// config (quorums, rollover, cache); Store and Ledgers are filled in.
	ManagedLedger mledger.Config

	// HealthView, if set with a separate GlobalStore, turns on automatic
	// failover of active-standby namespaces (failoverctl.go): the gossip
	// view of every region.
	HealthView func() cluster.HealthView
	// HealthChanges, if set, delivers each new gossip view
	// (cluster.Membership.Subscribe), so the failover controller steps on a
	// change of a region's health at once rather than at its next poll.
	HealthChanges func() (<-chan cluster.HealthView, func())
	// FailoverLease: the rules of the regions' leases (zero: failover's
	// defaults, a 5 s TTL).
	FailoverLease failover.LeaseRules

	// PublishProbe, if set, runs the write probe (probe.go) every
	// ProbeInterval (default 1 s), each bounded by ProbeTimeout (default
	// 2 s), and is given every result: the broker process publishes it in
	// its gossip tags (cluster.ProbeTags).
	PublishProbe                func(ok bool, at time.Time)
	ProbeInterval, ProbeTimeout time.Duration

	// Health, if set, answers GET /admin/v2/meridian/health (the gossip
	// health view of every region).
	Health func() any
	// ExtraMetrics are served on /metrics beside the broker's own (e.g.
	// the auto-recovery running in the broker's process).
	ExtraMetrics []prometheus.Gatherer

	// Security: TLS, token authentication and authorization
	// (security.go). The zero value: plaintext, anyone may do anything.
	Security security.Config

	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Cluster == "" {
		c.Cluster = "standalone"
	}
	if c.ListenAddr == "" {
		c.ListenAddr = "127.0.0.1:6650"
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = 5 << 20
	}
	if c.KeepAliveInterval == 0 {
		c.KeepAliveInterval = 30 * time.Second
	}
	if c.MaxPendingSendsPerProducer == 0 {
		c.MaxPendingSendsPerProducer = 1000
	}
	if c.MaxConnectionsPerIP == 0 {
		c.MaxConnectionsPerIP = 1000
	}
	if c.MaxPendingRequestsPerConnection == 0 {
		c.MaxPendingRequestsPerConnection = 1000
	}
	if c.MaxProducersPerTopic == 0 {
		c.MaxProducersPerTopic = 10000
	}
	if c.MaxConsumersPerTopic == 0 {
		c.MaxConsumersPerTopic = 10000
	}
	if c.MaxConsumersPerSubscription == 0 {
		c.MaxConsumersPerSubscription = 10000
	}
	if c.DedupSnapshotInterval == 0 {
		c.DedupSnapshotInterval = 1000
	}
	if c.DedupProducerInactivityTimeout == 0 {
		c.DedupProducerInactivityTimeout = 360 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.BundleSplitTopics == 0 {
		c.BundleSplitTopics = 1000
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = time.Second
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = 2 * time.Second
	}
	if c.PolicyCheckInterval == 0 {
		c.PolicyCheckInterval = 5 * time.Second
	}
	if c.OwnershipTTL == 0 {
		c.OwnershipTTL = 10 * time.Second
	}
	if c.GlobalStore == nil {
		c.GlobalStore = c.Store
	}
	c.Security = c.Security.WithDefaults()
	c.ManagedLedger.Store = c.Store
	c.ManagedLedger.Ledgers = c.Ledgers
	if c.ManagedLedger.Logger == nil {
		c.ManagedLedger.Logger = c.Logger
	}
	return c
}

// Validate checks the config.
func (c Config) Validate() error {
	if c.Store == nil || c.Ledgers == nil {
		return errors.New("broker: Config.Store and Config.Ledgers are required")
	}
	if c.MaxMessageSize < 0 || c.MaxMessageSize > 100<<20 {
		return errors.New("broker: MaxMessageSize must be in (0, 100 MiB]")
	}
	return c.Security.Validate()
}
