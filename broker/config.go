package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/broker/replication"
	"github.com/meridian-mq/meridian/broker/security"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/failover"
	"github.com/meridian-mq/meridian/internal/httpserve"
	"github.com/prometheus/client_golang/prometheus"
)

// The fixed default ports of a broker's listeners (`meridian broker`'s
// flag defaults): the Pulsar protocol and the admin HTTP API on Pulsar's
// ports, the replication gRPC service on 6660 (Pulsar has none; 6651 and
// 8443 are Pulsar's TLS ports, 6652 the usual second listener's).
const (
	DefaultListenAddr      = "127.0.0.1:6650"
	DefaultAdminAddr       = "127.0.0.1:8080"
	DefaultReplicationAddr = "127.0.0.1:6660"
	// DefaultShutdownDrainDelay is meridian broker's ShutdownDrainDelay.
	DefaultShutdownDrainDelay = 5 * time.Second
)

// MaxMessageSizeMax bounds Config.MaxMessageSize: 100 MiB.
const MaxMessageSizeMax = 100 << 20

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
	// AdvertisedListeners are the broker's named URLs (Pulsar's
	// advertisedListeners), one NAME:SCHEME://HOST:PORT each, SCHEME the
	// one the broker serves (pulsar+ssl with TLS): a client's LOOKUP
	// naming one (pulsar-client-go's ListenerName) is answered with the
	// owner's URL of that name, one naming a listener the owner lacks is
	// refused (ServiceNotReady, "the broker do not have NAME listener").
	// Nil: one unnamed listener, AdvertisedAddr (not set with it).
	AdvertisedListeners []string
	// InternalListenerName is the listener of the broker's registration:
	// other brokers, replication redirects and clients naming no listener
	// use it. Default: the first of AdvertisedListeners.
	InternalListenerName string
	// BindAddresses are further Pulsar-protocol sockets (Pulsar's
	// bindAddresses), NAME:SCHEME://HOST:PORT each, NAME one of
	// AdvertisedListeners: a LOOKUP arriving on one without a listener
	// name is answered in listener NAME (PIP-95).
	BindAddresses []string
	// AdminAddr is the admin HTTP API listener ("" = off). Default
	// "127.0.0.1:8080".
	AdminAddr string
	// MaxMessageSize is the largest message accepted, announced to clients
	// in CONNECTED so they refuse larger ones themselves — or, with
	// chunking on (the Go client's EnableChunking), split them into
	// chunks of at most this size, each stored as an entry of its own and
	// reassembled by the consumer: a 5 MiB message under a 1 MiB limit is
	// 6 entries. Each entry goes to the bookies whole, so their
	// max_entry_bytes must hold it plus headers. Default 5 MiB (Pulsar's
	// maxMessageSize); at most MaxMessageSizeMax.
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
	// MaxUnauthenticatedConnections bounds the connections, over all
	// client addresses, that are open and not yet CONNECTED: a connection
	// is unauthenticated from accept until its CONNECT is answered, with
	// or without authentication configured. One past it is closed as soon
	// as it is accepted (the Go client retries with back-off) and counted
	// as limit="unauthenticated_connections". Each holds a 32 KiB read
	// buffer, at most a frame of MaxUnauthenticatedFrameBytes and three
	// goroutines (about 120 KiB with the defaults; its 64 KiB write buffer
	// is made on its first answer), for at most HandshakeTimeout: the
	// default bounds them all at about 120 MiB, and admits 1,000
	// handshakes at once — each takes one round trip, so a reconnect
	// storm of many thousands of clients passes within seconds. 0 means
	// the default, 1000; -1 no limit.
	MaxUnauthenticatedConnections int
	// MaxUnauthenticatedFrameBytes bounds a frame's totalSize (bytes)
	// before CONNECTED (never above the frame limit after it). A larger
	// one closes the connection as soon as its 4-byte size arrives, none
	// of its body read, and is counted as
	// limit="unauthenticated_frame_size". Only a CONNECT is accepted
	// before CONNECTED, and a CONNECT is small but for its credentials:
	// OAuth and JWT tokens reach 8–16 KiB; a CONNECT of the Go client with
	// a 16 KiB token is about 16.1 KiB. 0 means the default, 64 KiB (four
	// times that); -1 no limit of its own (MaxMessageSize + 10 KiB applies
	// from the first byte). Otherwise it is at least 1 KiB and at most
	// MaxMessageSize + 10 KiB.
	MaxUnauthenticatedFrameBytes int
	// HandshakeTimeout bounds how long a connection may stay un-CONNECTED:
	// one whose CONNECT has not arrived this long after accept (TLS
	// handshake included) is closed and counted as
	// limit="handshake_timeout". A client sends CONNECT as soon as its
	// connection is up, one round trip (two more for TLS) after connecting.
	// 0 means the default, 10s; a negative value no timeout (a TLS
	// handshake still gets 10 s, and the keepalive closes a silent
	// connection after twice KeepAliveInterval).
	HandshakeTimeout time.Duration
	// MaxBufferedFrameBytes bounds the bytes of frames being read, summed
	// over all connections. A frame's totalSize is reserved when its size
	// arrives and released once the frame has been read whole; a
	// connection whose next frame does not fit waits without reading (TCP
	// back-pressure on its client) until earlier frames are read or their
	// connections closed, first come first served, and each wait is
	// counted as limit="buffered_frame_bytes". Frames of at most 64 KiB
	// are not counted: one at a time per connection they are part of a
	// connection's fixed cost, and PINGs, acks and flow permits keep
	// moving while the budget is spent. A frame is partial only while its
	// bytes cross the network (a 5 MiB frame: 40 ms at 1 Gbit/s), so
	// well-behaved clients hold a fraction of the budget; a peer that sends
	// most of a frame and stalls holds its share until the keepalive
	// closes it (twice KeepAliveInterval without a whole frame) — issue 30
	// measured 100 such connections grow a broker by 815 MB before this
	// bound. The default, 128 MiB (or one frame of MaxMessageSize + 10 KiB
	// if that is larger), is 25 frames of the 5 MiB maximum at once, or
	// 1,000 of the Go client's 128 KiB batches. 0 means the
	// default; -1 no limit; otherwise at least MaxMessageSize + 10 KiB
	// (a frame of the largest size must fit).
	MaxBufferedFrameBytes int
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
	// DelayedBucketEntries: a Shared or Key_Shared subscription's
	// delayed-delivery index seals its open bucket into a persisted
	// snapshot (broker/delayed.go) once it holds this many delayed entries,
	// keeping only the segment due next in memory. 0 means the default,
	// 50,000 (the open bucket then costs about 2 MB); -1 never seals: every
	// delayed entry stays in memory (32 bytes each) and nothing is
	// persisted — a restart reads them from the log again.
	DelayedBucketEntries int
	// DelayedSegmentEntries: entries per segment of a sealed bucket, the
	// unit loaded back into memory when due. 0 means the default, 1,000.
	DelayedSegmentEntries int
	// DelayedMaxBuckets: once a subscription's index has more sealed
	// buckets than this, 2 to 4 adjacent ones are merged into one (Pulsar's
	// delayedDeliveryMaxNumBuckets, off by default there): it bounds the
	// segments in memory (about one a bucket) and the buckets looked at
	// for each delayed entry read. 0 means the default, 50 (with 50,000
	// entries a bucket, merging starts past 2,500,000 held); -1 never
	// merges. A merge reads its buckets' segments not yet loaded and
	// writes them again as one bucket (up to 4 × 50,000 entries, ~5 MB
	// in memory meanwhile).
	DelayedMaxBuckets int

	// BrokerID identifies this broker in the region (its registration and
	// the bundles it owns). Default: the advertised address.
	BrokerID string
	// OwnershipTTL is the lease behind the broker's registration and bundle
	// ownership: when the broker dies, its bundles move after at most this
	// long. Shorter moves topics sooner after a crash; too short and a GC
	// pause or a busy machine moves them needlessly. Default 10s.
	OwnershipTTL time.Duration
	// ShutdownDrainDelay: how long a stopping broker (Close: SIGTERM)
	// reports not ready while it still serves, before it hands its bundles
	// over — what a load balancer or a Kubernetes Service needs to take it
	// out of rotation (its probe period × failure threshold, plus the
	// endpoint update: a readiness probe every 1 s failing twice takes
	// about 2–3 s). 0: hand over at once (library default; meridian broker
	// defaults to 5s). It adds to the stop time, within the grace period.
	ShutdownDrainDelay time.Duration

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
	// port (tests; `meridian broker` defaults to DefaultReplicationAddr).
	// ReplicationAdvertisedAddr is the address other regions dial ("" =
	// the listener's, a wildcard host replaced by the host name).
	ReplicationAddr           string
	ReplicationAdvertisedAddr string
	// ReplicationFaults is fault injection for end-to-end tests and
	// drills (cmd/meridian reads it from MERIDIAN_FAULT_* variables). The
	// zero value injects nothing.
	ReplicationFaults replication.Faults
	// SubscribeFaultDelay is fault injection for end-to-end tests: every
	// SUBSCRIBE of a persistent topic waits this long once its
	// subscription is made, before its consumer is taken onto the
	// connection (the window in which the connection may close, or the
	// client close the consumer). cmd/meridian reads it from
	// MERIDIAN_FAULT_SUBSCRIBE_DELAY; zero: none.
	SubscribeFaultDelay time.Duration
	// ReplicationVerifier is the background replication verifier
	// (replication.VerifierConfig: period, rate, settle); zero: off.
	ReplicationVerifier replication.VerifierConfig

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
	// NamespaceLevelMetrics aggregates Pulsar's topic metrics
	// (pulsarmetrics.go) per namespace and drops the subscription ones
	// and meridian_broker_topic_* (the per-(topic, remote region)
	// meridian_replication_* stay): Pulsar's
	// exposeTopicLevelMetricsInPrometheus=false, for brokers with many
	// topics (measured: a scrape of 1,000 topics with a subscription each
	// is 4.3 MB at topic level, docs/operations.md). Default false: one
	// series per topic, as Pulsar.
	NamespaceLevelMetrics bool
	// ExtraMetrics are served on /metrics beside the broker's own (e.g.
	// the auto-recovery running in the broker's process).
	ExtraMetrics []prometheus.Gatherer

	// Security: TLS, token authentication and authorization
	// (security.go). The zero value: plaintext, anyone may do anything.
	Security security.Config

	// AdminHTTP is the admin listener's timeouts and connection cap
	// (internal/httpserve; the zero value: its defaults, which outlast
	// the admin API's 30 s per-call deadline and a large /metrics scrape).
	AdminHTTP httpserve.Options

	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Cluster == "" {
		c.Cluster = "standalone"
	}
	if c.ListenAddr == "" {
		c.ListenAddr = DefaultListenAddr
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = codec.DefaultMaxMessageSize
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
	if c.MaxUnauthenticatedConnections == 0 {
		c.MaxUnauthenticatedConnections = 1000
	}
	maxFrame := c.MaxMessageSize + codec.FramePadding
	if c.MaxUnauthenticatedFrameBytes == 0 {
		c.MaxUnauthenticatedFrameBytes = min(64<<10, maxFrame)
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.MaxBufferedFrameBytes == 0 {
		c.MaxBufferedFrameBytes = max(128<<20, maxFrame) // a frame of the largest size fits
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
	if c.MaxMessageSize < 0 || c.MaxMessageSize > MaxMessageSizeMax {
		return errors.New("broker: MaxMessageSize must be in (0, 100 MiB]")
	}
	maxFrame := c.MaxMessageSize
	if maxFrame == 0 {
		maxFrame = codec.DefaultMaxMessageSize
	}
	maxFrame += codec.FramePadding
	if n := c.MaxUnauthenticatedFrameBytes; n != 0 && n != -1 && (n < 1<<10 || n > maxFrame) {
		return fmt.Errorf("broker: MaxUnauthenticatedFrameBytes %d must be 0 (default), -1 (none) or in [1 KiB, MaxMessageSize + 10 KiB = %d]", n, maxFrame)
	}
	if n := c.MaxBufferedFrameBytes; n != 0 && n != -1 && n < maxFrame {
		return fmt.Errorf("broker: MaxBufferedFrameBytes %d must be 0 (default), -1 (none) or at least MaxMessageSize + 10 KiB = %d (a frame of the largest size must fit)", n, maxFrame)
	}
	if c.DelayedBucketEntries < -1 || c.DelayedSegmentEntries < 0 || c.DelayedMaxBuckets < -1 {
		return fmt.Errorf("broker: DelayedBucketEntries %d and DelayedMaxBuckets %d must be 0 (default), -1 (never) or positive, DelayedSegmentEntries %d 0 (default) or positive",
			c.DelayedBucketEntries, c.DelayedMaxBuckets, c.DelayedSegmentEntries)
	}
	if n := c.MaxUnauthenticatedConnections; n < -1 {
		return fmt.Errorf("broker: MaxUnauthenticatedConnections %d must be 0 (default), -1 (none) or positive", n)
	}
	if c.AdvertisedAddr != "" && len(c.AdvertisedListeners) > 0 {
		return errListenersAndAdvertise
	}
	return c.Security.Validate()
}
