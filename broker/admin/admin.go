package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/healthz"
	"github.com/meridian-mq/meridian/internal/httpserve"
	"github.com/meridian-mq/meridian/internal/ratelog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The admin HTTP API: Pulsar's /admin/v2 paths for what users do first
// (tenants, namespaces and their policies, topics, partitions, stats,
// subscriptions, schemas), and /metrics. Errors are JSON {"reason": ...}
// with Pulsar's status codes (404 not found, 409 exists, 412 not empty or
// precondition, 400 bad name).

const maxAdminBody = 1 << 20

// maxPartitions bounds a partitioned topic's partition count: creating
// one registers every partition in etcd, one write each.
const maxPartitions = 10000

// Broker is what the admin API asks of the broker it serves. Safe for
// concurrent use.
type Broker interface {
	// Topic returns the topic name (create: creating it), loaded on this
	// broker. Errors: meta.ErrTopicNotFound for a name that does not
	// exist, meta.ErrTopicFenced when another broker owns it.
	Topic(ctx context.Context, name string, create bool) (Topic, error)
	// DeleteTopic deletes a topic and its data; without force it refuses
	// (meta.ErrNotEmpty) a topic with connected producers or consumers.
	DeleteTopic(ctx context.Context, tn meta.TopicName, force bool) error
	// LoadedTopics returns the topics of namespace ns loaded on this
	// broker.
	LoadedTopics(ns string) []Topic

	// Self is this broker; Brokers the region's live brokers.
	Self() BrokerInfo
	Brokers(ctx context.Context) ([]BrokerInfo, error)
	// Lookup returns the broker that serves the topic (the owner of its
	// bundle, the one a client's lookup would be sent to, or a broker of
	// the region the namespace is active in), its ServiceURL in listener
	// ("": the internal one; a listener the broker lacks:
	// meta.ErrNoListener).
	Lookup(ctx context.Context, tn meta.TopicName, listener string) (BrokerInfo, error)
	// HealthCheck reports whether this broker serves: registered, its
	// metadata readable.
	HealthCheck(ctx context.Context) error
	// OwnedBundles lists the bundles this broker owns, as Pulsar names
	// them: "tenant/ns/0xLOWER_0xUPPER".
	OwnedBundles() []string

	// Bundles returns a namespace's bundle boundaries in this region,
	// ascending from 0 to 0xffffffff (bundle i is [b[i], b[i+1]), the last
	// one including 0xffffffff, as Pulsar names them).
	Bundles(ctx context.Context, ns string) ([]uint32, error)
	// BundleOf returns the bundle holding the topic.
	BundleOf(ctx context.Context, tn meta.TopicName) (Bundle, error)
	// UnloadBundle closes the bundle's topics on this broker and gives the
	// bundle up (meta.ErrNotFound for a range that is not a bundle;
	// another broker's bundle: a StatusError naming it).
	UnloadBundle(ctx context.Context, ns string, bd Bundle) error
	// SplitBundle splits a bundle in two at the middle of its range, and
	// with unload gives both halves up.
	SplitBundle(ctx context.Context, ns string, bd Bundle, unload bool) error
	// UnloadNamespace unloads every bundle of ns this broker owns.
	UnloadNamespace(ctx context.Context, ns string) error

	// NonPersistentTopics lists the non-persistent topics of ns loaded on
	// this broker (a non-persistent topic exists only while loaded).
	NonPersistentTopics(ns string) []string
	// NonPersistentStats returns the stats of a non-persistent topic:
	// meta.NotOwnerError when another broker owns its bundle,
	// meta.ErrTopicNotFound when it is not loaded (nobody produces or
	// consumes it).
	NonPersistentStats(ctx context.Context, tn meta.TopicName) (NonPersistentTopicStats, error)
}

// BrokerInfo is a broker as the admin API shows it.
type BrokerInfo struct {
	ID         string // its broker id
	ServiceURL string // pulsar://host:port (pulsar+ssl:// with TLS)
	AdminURL   string // http://host:port (https:// with TLS)
	// Listeners are its advertised listeners, name → URL (nil: none).
	Listeners map[string]string
	// HTTPListeners are their web service URLs (nil: none; a listener
	// without any answers AdminURL).
	HTTPListeners meta.HTTPListeners
}

// Bundle is a namespace bundle: the hash range [Lower, Upper), the last
// bundle's Upper 0xffffffff included. Pulsar names it "0xLOWER_0xUPPER".
type Bundle struct{ Lower, Upper uint32 }

func (b Bundle) String() string { return fmt.Sprintf("0x%08x_0x%08x", b.Lower, b.Upper) }

// Topic is a loaded topic as the admin API sees it.
type Topic interface {
	Name() meta.TopicName
	Stats() TopicStats
	InternalStats() InternalStats
	InternalInfo() ManagedLedgerInfo
	// SubscriptionNames lists its subscriptions.
	SubscriptionNames() []string
	// CreateSubscription creates a durable subscription whose first
	// message is at (Earliest, Latest, or that message id)
	// (meta.ErrAlreadyExists if it exists).
	CreateSubscription(ctx context.Context, name string, at MessageID) error
	// DeleteSubscription deletes one; without force it refuses
	// (meta.ErrNotEmpty) one with consumers, with force it closes them.
	DeleteSubscription(ctx context.Context, name string, force bool) error
	// ResetCursor moves a subscription to the first message published at
	// or after ms (the broker's publish time) and closes its consumers
	// (meta.ErrNotFound for no such subscription).
	ResetCursor(ctx context.Context, sub string, ms int64) error
	// ResetCursorTo moves a subscription so that the message id is the
	// next it delivers, and closes its consumers.
	ResetCursorTo(ctx context.Context, sub string, id MessageID) error
	// Skip acknowledges the first n unacknowledged entries of the
	// subscription (n < 0: all of them, clearing its backlog).
	Skip(ctx context.Context, sub string, n int64) error
	// Expire acknowledges, on subscription sub (every subscription when
	// sub is ""), the messages the broker published more than seconds
	// ago.
	Expire(ctx context.Context, sub string, seconds int64) error
	// Peek returns the nth (from 1) unacknowledged entry of the
	// subscription, consuming nothing (meta.ErrNotFound past the end).
	Peek(ctx context.Context, sub string, nth int) (Message, error)
	// Message returns the entry of a message id (meta.ErrNotFound if the
	// topic has none).
	Message(ctx context.Context, id MessageID) (Message, error)
	// LastMessageID is the id of the last message persisted.
	LastMessageID() MessageID
	// MessageIDAt returns the id of the first message the broker
	// published at or after ms (meta.ErrNotFound: none).
	MessageIDAt(ctx context.Context, ms int64) (MessageID, error)
	// Unload closes the topic on this broker; its clients reconnect and
	// it loads again on its next use.
	Unload(ctx context.Context) error
}

// MessageID is Pulsar's message id JSON. LedgerID < 0 means Earliest and
// LedgerID math.MaxInt64 Latest (pulsaradmin's utils.Earliest, Latest).
type MessageID struct {
	LedgerID       int64 `json:"ledgerId"`
	EntryID        int64 `json:"entryId"`
	PartitionIndex int   `json:"partitionIndex"`
}

// Earliest and Latest report what pulsaradmin means by them.
func (id MessageID) Earliest() bool { return id.LedgerID < 0 }
func (id MessageID) Latest() bool   { return id.LedgerID == math.MaxInt64 }

// Message is a stored entry as peek and get-message-by-id answer it: the
// message (for a batch, its whole payload of single messages) and what
// its metadata says.
type Message struct {
	ID MessageID
	// PublishMs is the producer's publish time (the message's metadata),
	// BrokerPublishMs the broker's (what seek and expiry go by).
	PublishMs       int64
	BrokerPublishMs int64
	EventTimeMs     int64
	Key             string
	ProducerName    string
	SequenceID      int64
	Properties      map[string]string
	// BatchSize is the number of messages of a batch (0: not a batch).
	BatchSize int
	Payload   []byte
}

// Failover is the active-region decision as the admin API sees it.
type Failover interface {
	// Failover moves the namespace's active region to region (a manual
	// failover) and returns the new record.
	Failover(ctx context.Context, ns, region, reason string) (meta.FailoverRecord, error)
	// FailoverStatus returns the records of the active-standby namespaces
	// (ns "" = all known) with the health of their regions.
	FailoverStatus(ctx context.Context, ns string) (any, error)
	// Orphans lists a namespace's recorded orphan batches.
	Orphans(ctx context.Context, ns string) (any, error)
	// RepublishOrphans appends the namespace's quarantined orphans (of
	// topic only, if not "") to their topics, once each, with new message
	// ids (broker/replication/republish.go), and returns its report.
	RepublishOrphans(ctx context.Context, ns, topic string) (any, error)
	// Switchover runs a planned switchover of the namespace to region
	// (its drain bounded by timeout; 0: the default), or with dryRun its
	// pre-flight, and returns its report.
	Switchover(ctx context.Context, ns, region string, timeout time.Duration, dryRun bool, reason string) (any, error)
	// RegionSwitchover moves every active-standby namespace active in
	// region to region to by the planned path, one at a time, the first
	// abort ending the run (failoverctl/region.go), or with dryRun lists
	// what would move; it returns its report, with an error too when it
	// aborted.
	RegionSwitchover(ctx context.Context, region, to string, timeout time.Duration, dryRun bool, reason string) (any, error)
	// SwitchoverLocal serves another broker's switchover call on this
	// broker only: what is "hold", "release" (body: JSON) or "readiness"
	// (query: target, dryRun).
	SwitchoverLocal(ctx context.Context, ns, what string, query url.Values, body []byte) (any, error)
}

// Replication is geo-replication as the admin API sees it.
type Replication interface {
	// ReplicationStatus lists the region's replicators, optionally of
	// one namespace or topic (filter); local: this broker's only.
	ReplicationStatus(ctx context.Context, filter string, local bool) (any, error)
	// VerifyReplication compares what every region of the namespace
	// holds of target (a namespace tenant/ns or a topic
	// persistent://tenant/ns/topic) with what each origin region holds,
	// leaving out the entries an origin published within settle.
	VerifyReplication(ctx context.Context, target string, settle time.Duration) (any, error)
	// ReplicationRPO returns the RPO at risk and the RPO budget's state of
	// the region's topics, optionally of one namespace or topic (filter);
	// local: this broker's only.
	ReplicationRPO(ctx context.Context, filter string, local bool) (any, error)
}

// Authorizer checks an admin request against its route's pattern
// ("METHOD /path" as registered); an error wraps meta.ErrAuthentication or
// meta.ErrAuthorization (security.Guard).
type Authorizer interface {
	// AuthorizeAdmin also says who the caller is ("" when unknown).
	AuthorizeAdmin(r *http.Request, pattern string) (role string, err error)
	// AuditAdmin records a request that changes something (not GET or
	// HEAD) once answered: who, the route, the status and the error.
	AuditAdmin(r *http.Request, role, pattern string, status int, err error)
	// AuthorizeSecret checks a request for a secret (the gossip keyring):
	// never granted to an unauthenticated caller.
	AuthorizeSecret(r *http.Request) error
}

// Config configures a Server. Read once by New.
type Config struct {
	// Addr is the listener's address ("" = no listener: Handler only).
	Addr string
	// Listen wraps the listener (TLS: https); nil serves plain http.
	Listen func(net.Listener) (lis net.Listener, scheme string)
	// Cluster is this broker's region.
	Cluster string
	// Meta is the global store's tenants and namespaces. Required.
	Meta *meta.Metadata
	// Broker, Failover and Replication answer what is not metadata.
	Broker      Broker
	Failover    Failover
	Replication Replication
	// Auth checks every request; nil lets every request through.
	Auth Authorizer
	// Health, if set, answers GET /admin/v2/meridian/health.
	Health func() any
	// Probes, if set, answers GET /healthz, /readyz and /status.html,
	// with no credentials (internal/healthz).
	Probes *healthz.Checker
	// Metrics is served on /metrics.
	Metrics prometheus.Gatherer
	// GossipKeys, if set, serves /admin/v2/meridian/gossip/keys.
	GossipKeys GossipKeyring
	// HTTP is the listener's timeouts and connection cap (zero fields:
	// httpserve's defaults, whose WriteTimeout, 60 s, outlasts the 30 s
	// every call is given and a large /metrics scrape).
	HTTP httpserve.Options
	// DefaultRetention is the broker's retention for a namespace that sets
	// none (GET .../retention answers it then, as Pulsar does).
	DefaultRetention meta.Retention
	// PeerHTTP is the client for another broker of the region's admin API
	// (partitioned stats of partitions it owns); nil: not asked.
	PeerHTTP func(timeout time.Duration) *http.Client
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Server is the broker's admin HTTP API.
type Server struct {
	cfg    Config
	lis    net.Listener
	srv    *httpserve.Server
	scheme string // "http://", or "https://" with TLS
	ops    *operations
}

// New returns the admin API of cfg; Start listens.
func New(cfg Config) *Server { return &Server{cfg: cfg, ops: newOperations()} }

// Start listens on Config.Addr and serves.
func (s *Server) Start() error {
	lis, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("broker: admin listen %s: %w", s.cfg.Addr, err)
	}
	s.lis = lis
	serve, scheme := net.Listener(lis), "http://"
	if s.cfg.Listen != nil {
		serve, scheme = s.cfg.Listen(lis)
	}
	s.scheme = scheme
	opts := s.cfg.HTTP
	if opts.Logger == nil {
		opts.Logger = s.log()
	}
	s.srv = httpserve.New(s.Handler(), opts)
	go s.srv.Serve(serve)
	return nil
}

// Close closes the listener and every connection.
func (s *Server) Close() error {
	s.ops.close()
	if s.srv == nil {
		return nil
	}
	return s.srv.Close()
}

// URL returns http://admin-address (https:// with TLS), or "" when the
// API is not listening.
func (s *Server) URL() string {
	if s.lis == nil {
		return ""
	}
	return s.scheme + s.lis.Addr().String()
}

func (s *Server) log() *slog.Logger {
	if s.cfg.Logger == nil {
		return slog.Default()
	}
	return s.cfg.Logger
}

func (s *Server) authorize(r *http.Request, pattern string) error {
	_, err := s.authorizeAs(r, pattern)
	return err
}

func (s *Server) authorizeAs(r *http.Request, pattern string) (string, error) {
	if s.cfg.Auth == nil {
		return "", nil
	}
	return s.cfg.Auth.AuthorizeAdmin(r, pattern)
}

// audited passes a request's answer on and, once it is answered, hands
// it to the audit trail (Authorizer.AuditAdmin; reads are skipped there).
type audited struct {
	http.ResponseWriter
	status int
	err    error
}

func (a *audited) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *audited) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.ResponseWriter.Write(b)
}

// topic loads an existing topic for an admin call.
func (s *Server) topic(r *http.Request, topic func(*http.Request) (meta.TopicName, error)) (Topic, error) {
	tn, err := topic(r)
	if err != nil {
		return nil, err
	}
	return s.cfg.Broker.Topic(r.Context(), tn.String(), false)
}

// ownerRedirect is where to send a topic's call that reached a broker not
// owning the topic (meta.NotOwnerError): the same path and query on the
// owner's admin API, with authoritative=true, as Pulsar redirects — in
// listener, the caller's (httpLookupListener), when the owner names a web
// service URL for it (https first for a caller over TLS). A call that was
// already redirected is not sent on again (the owner moved, or the
// brokers disagree for now): it fails with the error (503).
func ownerRedirect(r *http.Request, err error, listener func() string) (string, bool) {
	var no meta.NotOwnerError
	if !errors.As(err, &no) || no.OwnerAdminURL == "" || r.URL.Query().Get("authoritative") == "true" {
		return "", false
	}
	to := no.OwnerAdminURL
	if u, ok := no.OwnerHTTPListeners.URLFor(listener(), r.TLS != nil); ok {
		to = u
	}
	owner, perr := url.Parse(to)
	if perr != nil || owner.Host == "" {
		return "", false
	}
	loc := *r.URL
	loc.Scheme, loc.Host = owner.Scheme, owner.Host
	q := loc.Query()
	q.Set("authoritative", "true")
	loc.RawQuery = q.Encode()
	return loc.String(), true
}

// callerListener is the listener r's caller uses (httpLookupListener),
// "" without a broker.
func (s *Server) callerListener(r *http.Request) string {
	if s.cfg.Broker == nil {
		return ""
	}
	return httpLookupListener(r, s.cfg.Broker.Self())
}

// Handler returns the admin API's handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	metricsHandler := promhttp.HandlerFor(s.cfg.Metrics, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		// The Authorizer's own rule (security.MetricsPattern): Pulsar's
		// authenticateMetricsEndpoint, open by default.
		if err := s.authorize(r, "GET /metrics"); err != nil {
			writeAdmin(w, nil, err)
			return
		}
		metricsHandler.ServeHTTP(w, r)
	})
	if s.cfg.Probes != nil {
		rl := ratelog.New(s.log(), time.Minute)
		s.cfg.Probes.Register(mux, func(endpoint string, err error) {
			rl.Log(slog.LevelWarn, endpoint, "health probe answered red", "endpoint", endpoint, "err", err)
		})
	}
	h := func(pattern string, f func(r *http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, maxAdminBody)
			ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
			defer cancel()
			r = r.WithContext(ctx)
			role, err := s.authorizeAs(r, pattern)
			if s.cfg.Auth != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
				aw := &audited{ResponseWriter: w, err: err}
				w = aw
				defer func() { s.cfg.Auth.AuditAdmin(r, role, pattern, aw.status, aw.err) }()
			}
			if err != nil {
				writeAdmin(w, nil, err)
				return
			}
			if asyncRoutes[pattern] && wantsAsync(r) { // operations.go
				op, err := s.ops.start(r, pattern, f)
				if err != nil {
					writeAdmin(w, nil, err)
					return
				}
				writeAccepted(w, op)
				return
			}
			v, err := f(r)
			if aw, ok := w.(*audited); ok {
				aw.err = err
			}
			if loc, ok := ownerRedirect(r, err, func() string { return s.callerListener(r) }); ok {
				http.Redirect(w, r, loc, http.StatusTemporaryRedirect)
				return
			}
			writeAdmin(w, v, err)
		})
	}
	h("GET "+operationsPath+"{id}", func(r *http.Request) (any, error) { return s.ops.get(r.PathValue("id")) })
	h("GET /admin/v2/meridian/health", func(r *http.Request) (any, error) {
		if s.cfg.Health == nil {
			return nil, fmt.Errorf("%w: this broker does not gossip", meta.ErrNotFound)
		}
		return s.cfg.Health(), nil
	})
	// GET /admin/v2/meridian/replication[?filter=NAMESPACE|TOPIC][&local=true]:
	// every replicator of the region (this broker asks the others), or with
	// local=true this broker's only.
	h("GET /admin/v2/meridian/replication", func(r *http.Request) (any, error) {
		return s.cfg.Replication.ReplicationStatus(r.Context(), r.URL.Query().Get("filter"), r.URL.Query().Get("local") == "true")
	})
	// GET /admin/v2/meridian/replication/rpo[?filter=NAMESPACE|TOPIC][&local=true]
	// and .../rpo/{tenant}/{ns}: `meridian admin replication rpo`, the RPO
	// at risk per topic and remote region and the RPO budget's state
	// (broker/replication/rpo.go).
	h("GET /admin/v2/meridian/replication/rpo", func(r *http.Request) (any, error) {
		return s.cfg.Replication.ReplicationRPO(r.Context(), r.URL.Query().Get("filter"), r.URL.Query().Get("local") == "true")
	})
	h("GET /admin/v2/meridian/replication/rpo/{tenant}/{ns}", func(r *http.Request) (any, error) {
		return s.cfg.Replication.ReplicationRPO(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns"), false)
	})
	// GET /admin/v2/meridian/replication/verify/{tenant}/{ns}[/{topic}][?settle=DURATION]:
	// `meridian admin replication verify` (broker/replication/verify.go).
	verify := func(r *http.Request, target string) (any, error) {
		var settle time.Duration
		if v := r.URL.Query().Get("settle"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return nil, meta.BadRequest(fmt.Errorf("settle %q: want a duration >= 0", v))
			}
			settle = d
		}
		return s.cfg.Replication.VerifyReplication(r.Context(), target, settle)
	}
	h("GET /admin/v2/meridian/replication/verify/{tenant}/{ns}", func(r *http.Request) (any, error) {
		return verify(r, r.PathValue("tenant")+"/"+r.PathValue("ns"))
	})
	h("GET /admin/v2/meridian/replication/verify/{tenant}/{ns}/{topic}", func(r *http.Request) (any, error) {
		return verify(r, "persistent://"+r.PathValue("tenant")+"/"+r.PathValue("ns")+"/"+r.PathValue("topic"))
	})
	h("GET /admin/v2/meridian/failover", func(r *http.Request) (any, error) { return s.cfg.Failover.FailoverStatus(r.Context(), "") })
	h("GET /admin/v2/meridian/failover/{tenant}/{ns}", func(r *http.Request) (any, error) {
		return s.cfg.Failover.FailoverStatus(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns"))
	})
	h("GET /admin/v2/meridian/failover/{tenant}/{ns}/orphans", func(r *http.Request) (any, error) {
		return s.cfg.Failover.Orphans(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns"))
	})
	// POST …/orphans/republish[?topic=TOPIC]: the quarantined orphans back
	// in their topics, once (a broker of the active region; 409 elsewhere,
	// a 307 to the topic's owner for one topic).
	h("POST /admin/v2/meridian/failover/{tenant}/{ns}/orphans/republish", func(r *http.Request) (any, error) {
		return s.cfg.Failover.RepublishOrphans(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns"), r.URL.Query().Get("topic"))
	})
	// POST …/failover/{tenant}/{ns} {to, reason[, planned, dryRun, timeoutMs]}:
	// a manual failover (a compare-and-swap of the record), or with planned
	// a planned switchover (broker/failoverctl/switchover.go), answered 202
	// with a status URL under "Prefer: respond-async".
	h("POST /admin/v2/meridian/failover/{tenant}/{ns}", func(r *http.Request) (any, error) {
		var req struct {
			To        string `json:"to"`
			Reason    string `json:"reason"`
			Planned   bool   `json:"planned"`
			DryRun    bool   `json:"dryRun"`
			TimeoutMs int64  `json:"timeoutMs"`
		}
		if err := readJSON(r, &req, true); err != nil {
			return nil, err
		}
		ns := r.PathValue("tenant") + "/" + r.PathValue("ns")
		if req.TimeoutMs < 0 {
			return nil, meta.BadRequest(fmt.Errorf("timeoutMs %d: want >= 0 (0: the default, 30 s)", req.TimeoutMs))
		}
		if req.DryRun && !req.Planned {
			return nil, meta.BadRequest(errors.New("dryRun is the pre-flight of a planned switchover: give planned too"))
		}
		if req.Planned {
			return s.cfg.Failover.Switchover(r.Context(), ns, req.To, time.Duration(req.TimeoutMs)*time.Millisecond, req.DryRun, req.Reason)
		}
		if req.Reason == "" {
			req.Reason = "manual"
		}
		return s.cfg.Failover.Failover(r.Context(), ns, req.To, req.Reason)
	})
	// POST …/failover {region, to, planned: true[, dryRun, timeoutMs,
	// reason]}: the region-wide planned switchover (every active-standby
	// namespace active in region, one at a time; failoverctl/region.go),
	// answered 202 with a status URL under "Prefer: respond-async".
	h("POST /admin/v2/meridian/failover", func(r *http.Request) (any, error) {
		body, err := readBody(r)
		if err != nil {
			return nil, err
		}
		var req struct {
			Region    string `json:"region"`
			To        string `json:"to"`
			Reason    string `json:"reason"`
			Planned   bool   `json:"planned"`
			DryRun    bool   `json:"dryRun"`
			TimeoutMs int64  `json:"timeoutMs"`
		}
		if len(strings.TrimSpace(string(body))) == 0 {
			return nil, meta.BadRequest(errors.New("empty body: want {region, to, planned: true}"))
		}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, meta.BadRequest(err)
		}
		switch {
		case req.Region == "":
			return nil, meta.BadRequest(errors.New("region: the region to empty is required"))
		case req.To == "":
			return nil, meta.BadRequest(errors.New("to: the region to move the namespaces to is required"))
		case !req.Planned:
			return nil, meta.BadRequest(errors.New("planned: a region-wide failover is a planned switchover only (planned: true); an unplanned one is per namespace"))
		case req.TimeoutMs < 0:
			return nil, meta.BadRequest(fmt.Errorf("timeoutMs %d: want >= 0 (0: the default, 30 s per namespace)", req.TimeoutMs))
		}
		return s.cfg.Failover.RegionSwitchover(r.Context(), req.Region, req.To, time.Duration(req.TimeoutMs)*time.Millisecond, req.DryRun, req.Reason)
	})
	// A planned switchover's calls between the brokers of the active
	// region (local=true only: each answers for itself).
	local := func(what string) func(r *http.Request) (any, error) {
		return func(r *http.Request) (any, error) {
			if r.URL.Query().Get("local") != "true" {
				return nil, meta.BadRequest(errors.New("a switchover's broker-to-broker call: local=true only"))
			}
			body, err := readBody(r)
			if err != nil {
				return nil, err
			}
			return s.cfg.Failover.SwitchoverLocal(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns"), what, r.URL.Query(), body)
		}
	}
	h("POST /admin/v2/meridian/failover/{tenant}/{ns}/switchover/hold", local("hold"))
	h("POST /admin/v2/meridian/failover/{tenant}/{ns}/switchover/release", local("release"))
	h("GET /admin/v2/meridian/failover/{tenant}/{ns}/switchover/readiness", local("readiness"))

	// Tenants.
	h("GET /admin/v2/tenants", func(r *http.Request) (any, error) { return s.cfg.Meta.ListTenants(r.Context()) })
	h("GET /admin/v2/tenants/{tenant}", func(r *http.Request) (any, error) { return s.cfg.Meta.GetTenant(r.Context(), r.PathValue("tenant")) })
	h("PUT /admin/v2/tenants/{tenant}", func(r *http.Request) (any, error) {
		var ti meta.TenantInfo
		if err := readJSON(r, &ti, true); err != nil {
			return nil, err
		}
		if err := meta.ValidateTenantInfo(ti); err != nil {
			return nil, err
		}
		return nil, s.cfg.Meta.CreateTenant(r.Context(), r.PathValue("tenant"), ti)
	})
	h("POST /admin/v2/tenants/{tenant}", func(r *http.Request) (any, error) {
		var ti meta.TenantInfo
		if err := readJSON(r, &ti, false); err != nil {
			return nil, err
		}
		if err := meta.ValidateTenantInfo(ti); err != nil {
			return nil, err
		}
		return nil, s.cfg.Meta.UpdateTenant(r.Context(), r.PathValue("tenant"), ti)
	})
	h("DELETE /admin/v2/tenants/{tenant}", func(r *http.Request) (any, error) {
		return nil, s.cfg.Meta.DeleteTenant(r.Context(), r.PathValue("tenant"))
	})

	// Namespaces.
	ns := func(r *http.Request) string { return r.PathValue("tenant") + "/" + r.PathValue("ns") }
	h("GET /admin/v2/namespaces/{tenant}", func(r *http.Request) (any, error) {
		if _, err := s.cfg.Meta.GetTenant(r.Context(), r.PathValue("tenant")); err != nil {
			return nil, err
		}
		return s.cfg.Meta.ListNamespaces(r.Context(), r.PathValue("tenant"))
	})
	h("PUT /admin/v2/namespaces/{tenant}/{ns}", func(r *http.Request) (any, error) {
		p, err := readNamespacePolicies(r)
		if err != nil {
			return nil, err
		}
		if err := meta.ValidatePolicies(p); err != nil {
			return nil, err
		}
		if len(p.ReplicationClusters) == 0 {
			p.ReplicationClusters = []string{s.cfg.Cluster}
		}
		known, err := s.knownRegions(r.Context())
		if err != nil {
			return nil, err
		}
		if err := meta.ValidateReplication(p, known); err != nil {
			return nil, err
		}
		return nil, s.cfg.Meta.CreateNamespace(r.Context(), ns(r), p)
	})
	h("GET /admin/v2/namespaces/{tenant}/{ns}", func(r *http.Request) (any, error) { return s.policiesAnswer(r.Context(), ns(r)) })
	h("DELETE /admin/v2/namespaces/{tenant}/{ns}", func(r *http.Request) (any, error) { return nil, s.cfg.Meta.DeleteNamespace(r.Context(), ns(r)) })
	h("GET /admin/v2/namespaces/{tenant}/{ns}/topics", func(r *http.Request) (any, error) {
		if _, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r)); err != nil {
			return nil, err
		}
		return s.cfg.Meta.ListTopics(r.Context(), ns(r))
	})
	s.replicationHandlers(h, ns)
	s.securityHandlers(h, ns)
	policy := func(path string, apply func(*meta.Policies, []byte, url.Values) error, clear func(*meta.Policies, url.Values) error, get func(meta.Policies) any) {
		if get != nil {
			h("GET /admin/v2/namespaces/{tenant}/{ns}/"+path, func(r *http.Request) (any, error) {
				p, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r))
				if err != nil {
					return nil, err
				}
				return get(p), nil
			})
		}
		h("POST /admin/v2/namespaces/{tenant}/{ns}/"+path, func(r *http.Request) (any, error) {
			body, err := readBody(r)
			if err != nil {
				return nil, err
			}
			var known []string
			// A refused change (apply's error) writes nothing.
			return nil, s.cfg.Meta.UpdatePoliciesErr(r.Context(), ns(r), func(p *meta.Policies) error {
				if err := apply(p, body, r.URL.Query()); err != nil {
					return err
				}
				if p.Replication == nil {
					return nil
				}
				// A replication policy may depend on the others
				// (stretched ledgers on the persistence quorums).
				if known == nil {
					if known, err = s.knownRegions(r.Context()); err != nil {
						return err
					}
				}
				return meta.ValidateReplication(*p, known)
			})
		})
		h("DELETE /admin/v2/namespaces/{tenant}/{ns}/"+path, func(r *http.Request) (any, error) {
			return nil, s.cfg.Meta.UpdatePoliciesErr(r.Context(), ns(r), func(p *meta.Policies) error { return clear(p, r.URL.Query()) })
		})
	}
	clearing := func(f func(*meta.Policies)) func(*meta.Policies, url.Values) error {
		return func(p *meta.Policies, _ url.Values) error { f(p); return nil }
	}
	policy("retention", applyRetention, clearing(func(p *meta.Policies) { p.Retention = nil }), func(p meta.Policies) any {
		// Unset: the broker's default, as Pulsar answers.
		if p.Retention == nil {
			return s.cfg.DefaultRetention
		}
		return *p.Retention
	})
	policy("messageTTL", applyMessageTTL, clearing(func(p *meta.Policies) { p.MessageTTLInSeconds = 0 }), func(p meta.Policies) any {
		if p.MessageTTLInSeconds == 0 {
			return nil // not set (0 is stored as unset)
		}
		return p.MessageTTLInSeconds
	})
	policy("backlogQuota", applyBacklogQuota, removeBacklogQuota, nil)
	h("GET /admin/v2/namespaces/{tenant}/{ns}/backlogQuotaMap", func(r *http.Request) (any, error) {
		p, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r))
		return p.BacklogQuotas, err
	})
	policy("deduplication", applyDeduplication, clearing(func(p *meta.Policies) { p.Deduplication = nil }), func(p meta.Policies) any {
		if p.Deduplication == nil {
			return nil
		}
		return *p.Deduplication
	})
	policy("persistence", applyPersistence, clearing(func(p *meta.Policies) { p.Persistence = nil }), func(p meta.Policies) any {
		if p.Persistence == nil {
			return nil
		}
		return *p.Persistence
	})

	// Topics.
	topic := func(r *http.Request) (meta.TopicName, error) {
		return meta.ParseTopic("persistent://" + r.PathValue("tenant") + "/" + r.PathValue("ns") + "/" + r.PathValue("topic"))
	}
	h("GET /admin/v2/persistent/{tenant}/{ns}", func(r *http.Request) (any, error) {
		if _, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r)); err != nil {
			return nil, err
		}
		return s.cfg.Meta.ListTopics(r.Context(), ns(r))
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/partitioned", func(r *http.Request) (any, error) {
		return s.cfg.Meta.ListPartitioned(r.Context(), ns(r))
	})
	h("PUT /admin/v2/persistent/{tenant}/{ns}/{topic}", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		// pulsaradmin's CreateWithProperties sends the properties.
		var props map[string]string
		if err := readJSON(r, &props, true); err != nil {
			return nil, err
		}
		if len(props) > 0 {
			return nil, noTopicProperties()
		}
		if ok, err := s.cfg.Meta.TopicExists(r.Context(), tn); err != nil {
			return nil, err
		} else if ok {
			return nil, fmt.Errorf("%w: topic %s", meta.ErrAlreadyExists, tn)
		}
		_, err = s.cfg.Broker.Topic(r.Context(), tn.String(), true)
		return nil, err
	})
	h("DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		return nil, s.cfg.Broker.DeleteTopic(r.Context(), tn, r.URL.Query().Get("force") == "true")
	})
	partitions := func(create bool) func(r *http.Request) (any, error) {
		return func(r *http.Request) (any, error) {
			tn, err := topic(r)
			if err != nil {
				return nil, err
			}
			n, err := readPartitions(r)
			if err != nil {
				return nil, err
			}
			if n > maxPartitions {
				return nil, meta.BadRequest(fmt.Errorf("partition count %d: at most %d", n, maxPartitions))
			}
			if _, err := s.cfg.Meta.GetPolicies(r.Context(), tn.NamespaceName()); err != nil {
				return nil, err
			}
			if create {
				if ok, _ := s.cfg.Meta.TopicExists(r.Context(), tn); ok {
					return nil, fmt.Errorf("%w: a non-partitioned topic %s exists", meta.ErrAlreadyExists, tn)
				}
			}
			if err := s.cfg.Meta.SetPartitions(r.Context(), tn, n, create); err != nil {
				return nil, err
			}
			for i := 0; i < n; i++ {
				if err := s.cfg.Meta.RegisterTopic(r.Context(), tn.PartitionName(i)); err != nil {
					return nil, err
				}
			}
			return nil, nil
		}
	}
	h("PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/partitions", partitions(true))
	h("POST /admin/v2/persistent/{tenant}/{ns}/{topic}/partitions", partitions(false))
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/partitions", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		n, err := s.cfg.Meta.Partitions(r.Context(), tn)
		return map[string]int{"partitions": n}, err
	})
	h("DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}/partitions", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		n, err := s.cfg.Meta.Partitions(r.Context(), tn)
		if err != nil {
			return nil, err
		}
		for i := 0; i < n; i++ {
			if err := s.cfg.Broker.DeleteTopic(r.Context(), tn.PartitionName(i), true); err != nil && !errors.Is(err, meta.ErrNotFound) {
				return nil, err
			}
		}
		return nil, s.cfg.Meta.DeletePartitioned(r.Context(), tn)
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/stats", func(r *http.Request) (any, error) {
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return t.Stats(), nil
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/internalStats", func(r *http.Request) (any, error) {
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return t.InternalStats(), nil
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/subscriptions", func(r *http.Request) (any, error) {
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return t.SubscriptionNames(), nil
	})
	// The body is the message id the subscription starts at (Pulsar's
	// MessageIdImpl JSON); none: the end of the topic.
	h("PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}", func(r *http.Request) (any, error) {
		at := MessageID{LedgerID: math.MaxInt64, EntryID: math.MaxInt64, PartitionIndex: -1}
		if err := readJSON(r, &at, true); err != nil {
			return nil, err
		}
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return nil, t.CreateSubscription(r.Context(), r.PathValue("sub"), at)
	})
	h("DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}", func(r *http.Request) (any, error) {
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return nil, t.DeleteSubscription(r.Context(), r.PathValue("sub"), r.URL.Query().Get("force") == "true")
	})
	h("POST /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}/resetcursor/{ts}", func(r *http.Request) (any, error) {
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		ms, err := strconv.ParseInt(r.PathValue("ts"), 10, 64)
		if err != nil {
			return nil, meta.BadRequest(err)
		}
		return nil, t.ResetCursor(r.Context(), r.PathValue("sub"), ms)
	})
	schemaAnswer := func(all []meta.StoredSchema, v int) map[string]any {
		sc := all[v]
		return map[string]any{"version": v, "type": strings.ToUpper(sc.Type), "data": string(sc.Data), "properties": sc.Properties}
	}
	h("GET /admin/v2/schemas/{tenant}/{ns}/{topic}/schema", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		all, err := s.cfg.Meta.Schemas(r.Context(), tn)
		if err != nil {
			return nil, err
		}
		if len(all) == 0 || all[len(all)-1].Deleted {
			return nil, fmt.Errorf("%w: schema of %s", meta.ErrNotFound, tn)
		}
		return schemaAnswer(all, len(all)-1), nil
	})
	h("GET /admin/v2/schemas/{tenant}/{ns}/{topic}/schema/{version}", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		v, err := parseVersion(r.PathValue("version"))
		if err != nil {
			return nil, meta.BadRequest(err)
		}
		all, err := s.cfg.Meta.Schemas(r.Context(), tn)
		if err != nil {
			return nil, err
		}
		if v < 0 || int(v) >= len(all) || all[v].Deleted {
			return nil, fmt.Errorf("%w: schema version %d of %s", meta.ErrNotFound, v, tn)
		}
		return schemaAnswer(all, int(v)), nil
	})
	h("GET /admin/v2/schemas/{tenant}/{ns}/{topic}/schemas", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		all, err := s.cfg.Meta.Schemas(r.Context(), tn)
		if err != nil {
			return nil, err
		}
		out := []map[string]any{}
		for v := range all {
			if !all[v].Deleted {
				out = append(out, schemaAnswer(all, v))
			}
		}
		return map[string]any{"getSchemaResponses": out}, nil
	})
	// Upload: Pulsar's PostSchemaPayload {type, schema, properties}; the
	// compatibility check applies as for a producer's schema.
	h("POST /admin/v2/schemas/{tenant}/{ns}/{topic}/schema", func(r *http.Request) (any, error) {
		tn, ps, err := readSchemaPayload(r, topic)
		if err != nil {
			return nil, err
		}
		v, err := s.cfg.Meta.GetOrCreateSchema(r.Context(), tn, ps)
		if errors.Is(err, meta.ErrIncompatibleSchema) {
			return nil, meta.StatusError{Status: http.StatusConflict, Err: err}
		}
		if err != nil {
			return nil, err
		}
		return map[string]any{"version": v}, nil
	})
	h("DELETE /admin/v2/schemas/{tenant}/{ns}/{topic}/schema", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		return nil, s.cfg.Meta.DeleteSchema(r.Context(), tn)
	})
	s.schemaCheckHandlers(h, topic)
	s.topicHandlers(h, ns, topic)
	s.cursorHandlers(h, ns, topic)
	s.namespaceHandlers(h, ns)
	s.clusterHandlers(h)
	s.unsupportedHandlers(h)
	return mux
}

func readJSON(r *http.Request, v any, optional bool) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if optional {
			return nil
		}
		return meta.BadRequest(errors.New("empty body"))
	}
	return meta.BadRequest(json.Unmarshal(body, v))
}

func writeAdmin(w http.ResponseWriter, v any, err error) {
	if err != nil {
		code := http.StatusInternalServerError
		var he meta.StatusError
		switch {
		case errors.As(err, &he):
			code = he.Status
		case errors.Is(err, meta.ErrAuthentication):
			code = http.StatusUnauthorized
		case errors.Is(err, meta.ErrAuthorization):
			code = http.StatusForbidden
		case errors.Is(err, meta.ErrInvalidName):
			code = http.StatusBadRequest
		case errors.Is(err, meta.ErrNotFound), errors.Is(err, meta.ErrTopicNotFound):
			code = http.StatusNotFound
		case errors.Is(err, meta.ErrAlreadyExists):
			code = http.StatusConflict
		case errors.Is(err, meta.ErrNotEmpty), errors.Is(err, meta.ErrConsumerBusy), errors.Is(err, meta.ErrProducerBusy):
			code = http.StatusPreconditionFailed
		case errors.Is(err, meta.ErrNotAllowed):
			code = http.StatusMethodNotAllowed
		case errors.Is(err, meta.ErrServiceNotReady), errors.Is(err, meta.ErrTopicFenced):
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]string{"reason": err.Error()})
		return
	}
	if v == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if raw, ok := v.(rawAnswer); ok {
		raw.writeHTTP(w)
		return
	}
	// As Jackson writes it, without json.Encoder's trailing newline:
	// pulsaradmin reads some answers as text ("BACKWARD" with its quotes
	// removed) and a newline would be part of the value.
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}
