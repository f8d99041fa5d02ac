package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/healthz"
	"github.com/meridian-mq/meridian/internal/ratelog"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/proto"
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
}

// Topic is a loaded topic as the admin API sees it.
type Topic interface {
	Stats() TopicStats
	InternalStats() InternalStats
	// SubscriptionNames lists its subscriptions.
	SubscriptionNames() []string
	// CreateSubscription creates a durable subscription at the end of the
	// topic (meta.ErrAlreadyExists if it exists).
	CreateSubscription(ctx context.Context, name string) error
	// DeleteSubscription deletes one; without force it refuses
	// (meta.ErrNotEmpty) one with consumers, with force it closes them.
	DeleteSubscription(ctx context.Context, name string, force bool) error
	// ResetCursor moves a subscription to the first message published at
	// or after ms (the broker's publish time) and closes its consumers
	// (meta.ErrNotFound for no such subscription).
	ResetCursor(ctx context.Context, sub string, ms int64) error
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
}

// Replication is geo-replication as the admin API sees it.
type Replication interface {
	// ReplicationStatus lists the region's replicators, optionally of
	// one namespace or topic (filter); local: this broker's only.
	ReplicationStatus(ctx context.Context, filter string, local bool) (any, error)
}

// Authorizer checks an admin request against its route's pattern
// ("METHOD /path" as registered); an error wraps meta.ErrAuthentication or
// meta.ErrAuthorization (security.Guard).
type Authorizer interface {
	AuthorizeAdmin(r *http.Request, pattern string) error
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
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Server is the broker's admin HTTP API.
type Server struct {
	cfg    Config
	lis    net.Listener
	srv    *http.Server
	scheme string // "http://", or "https://" with TLS
}

// New returns the admin API of cfg; Start listens.
func New(cfg Config) *Server { return &Server{cfg: cfg} }

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
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(serve)
	return nil
}

// Close closes the listener and every connection.
func (s *Server) Close() error {
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
	if s.cfg.Auth == nil {
		return nil
	}
	return s.cfg.Auth.AuthorizeAdmin(r, pattern)
}

// topic loads an existing topic for an admin call.
func (s *Server) topic(r *http.Request, topic func(*http.Request) (meta.TopicName, error)) (Topic, error) {
	tn, err := topic(r)
	if err != nil {
		return nil, err
	}
	return s.cfg.Broker.Topic(r.Context(), tn.String(), false)
}

// Handler returns the admin API's handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	metricsHandler := promhttp.HandlerFor(s.cfg.Metrics, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
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
			if err := s.authorize(r, pattern); err != nil {
				writeAdmin(w, nil, err)
				return
			}
			v, err := f(r)
			writeAdmin(w, v, err)
		})
	}
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
	h("GET /admin/v2/meridian/failover", func(r *http.Request) (any, error) { return s.cfg.Failover.FailoverStatus(r.Context(), "") })
	h("GET /admin/v2/meridian/failover/{tenant}/{ns}", func(r *http.Request) (any, error) {
		return s.cfg.Failover.FailoverStatus(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns"))
	})
	h("GET /admin/v2/meridian/failover/{tenant}/{ns}/orphans", func(r *http.Request) (any, error) {
		return s.cfg.Failover.Orphans(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns"))
	})
	h("POST /admin/v2/meridian/failover/{tenant}/{ns}", func(r *http.Request) (any, error) {
		var req struct {
			To     string `json:"to"`
			Reason string `json:"reason"`
		}
		if err := readJSON(r, &req, true); err != nil {
			return nil, err
		}
		if req.Reason == "" {
			req.Reason = "manual"
		}
		return s.cfg.Failover.Failover(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns"), req.To, req.Reason)
	})

	// Tenants.
	h("GET /admin/v2/tenants", func(r *http.Request) (any, error) { return s.cfg.Meta.ListTenants(r.Context()) })
	h("GET /admin/v2/tenants/{tenant}", func(r *http.Request) (any, error) { return s.cfg.Meta.GetTenant(r.Context(), r.PathValue("tenant")) })
	h("PUT /admin/v2/tenants/{tenant}", func(r *http.Request) (any, error) {
		var ti meta.TenantInfo
		if err := readJSON(r, &ti, true); err != nil {
			return nil, err
		}
		return nil, s.cfg.Meta.CreateTenant(r.Context(), r.PathValue("tenant"), ti)
	})
	h("POST /admin/v2/tenants/{tenant}", func(r *http.Request) (any, error) {
		var ti meta.TenantInfo
		if err := readJSON(r, &ti, false); err != nil {
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
		var p meta.Policies
		if err := readJSON(r, &p, true); err != nil {
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
	h("GET /admin/v2/namespaces/{tenant}/{ns}", func(r *http.Request) (any, error) { return s.cfg.Meta.GetPolicies(r.Context(), ns(r)) })
	h("DELETE /admin/v2/namespaces/{tenant}/{ns}", func(r *http.Request) (any, error) { return nil, s.cfg.Meta.DeleteNamespace(r.Context(), ns(r)) })
	h("GET /admin/v2/namespaces/{tenant}/{ns}/topics", func(r *http.Request) (any, error) {
		if _, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r)); err != nil {
			return nil, err
		}
		return s.cfg.Meta.ListTopics(r.Context(), ns(r))
	})
	s.replicationHandlers(h, ns)
	s.securityHandlers(h, ns)
	policy := func(path string, apply func(*meta.Policies, []byte) error, clear func(*meta.Policies)) {
		h("POST /admin/v2/namespaces/{tenant}/{ns}/"+path, func(r *http.Request) (any, error) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return nil, err
			}
			var known []string
			// A refused change (apply's error) writes nothing.
			return nil, s.cfg.Meta.UpdatePoliciesErr(r.Context(), ns(r), func(p *meta.Policies) error {
				if err := apply(p, body); err != nil {
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
			return nil, s.cfg.Meta.UpdatePolicies(r.Context(), ns(r), clear)
		})
	}
	policy("retention", func(p *meta.Policies, body []byte) error {
		var rt meta.Retention
		p.Retention = &rt
		return meta.BadRequest(json.Unmarshal(body, &rt))
	}, func(p *meta.Policies) { p.Retention = nil })
	policy("messageTTL", func(p *meta.Policies, body []byte) error {
		return meta.BadRequest(json.Unmarshal(body, &p.MessageTTLInSeconds))
	}, func(p *meta.Policies) { p.MessageTTLInSeconds = 0 })
	policy("backlogQuota", func(p *meta.Policies, body []byte) error {
		var q meta.BacklogQuota
		if err := json.Unmarshal(body, &q); err != nil {
			return meta.BadRequest(err)
		}
		switch q.Policy {
		case "producer_request_hold", "producer_exception", "consumer_backlog_eviction":
		default:
			return meta.BadRequest(fmt.Errorf("backlog quota policy %q: want producer_request_hold, producer_exception or consumer_backlog_eviction", q.Policy))
		}
		if p.BacklogQuotas == nil {
			p.BacklogQuotas = map[string]meta.BacklogQuota{}
		}
		p.BacklogQuotas["destination_storage"] = q
		return nil
	}, func(p *meta.Policies) { delete(p.BacklogQuotas, "destination_storage") })
	h("GET /admin/v2/namespaces/{tenant}/{ns}/backlogQuotaMap", func(r *http.Request) (any, error) {
		p, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r))
		return p.BacklogQuotas, err
	})
	policy("deduplication", func(p *meta.Policies, body []byte) error {
		var v bool
		p.Deduplication = &v
		return meta.BadRequest(json.Unmarshal(body, &v))
	}, func(p *meta.Policies) { p.Deduplication = nil })
	policy("persistence", func(p *meta.Policies, body []byte) error {
		var v meta.Persistence
		if err := json.Unmarshal(body, &v); err != nil {
			return meta.BadRequest(err)
		}
		if !(v.EnsembleSize >= v.WriteQuorum && v.WriteQuorum >= v.AckQuorum && v.AckQuorum >= 1) {
			return meta.BadRequest(fmt.Errorf("persistence: need ensemble >= write quorum >= ack quorum >= 1, got %d/%d/%d", v.EnsembleSize, v.WriteQuorum, v.AckQuorum))
		}
		p.Persistence = &v
		return nil
	}, func(p *meta.Policies) { p.Persistence = nil })

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
			var n int
			if err := readJSON(r, &n, true); err != nil {
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
	h("PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}", func(r *http.Request) (any, error) {
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return nil, t.CreateSubscription(r.Context(), r.PathValue("sub"))
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
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		var body struct {
			Type       string            `json:"type"`
			Schema     string            `json:"schema"`
			Properties map[string]string `json:"properties"`
		}
		if err := readJSON(r, &body, false); err != nil {
			return nil, err
		}
		typ, ok := pb.Schema_Type_value[schemaTypeFromAdmin(body.Type)]
		if !ok {
			return nil, meta.BadRequest(fmt.Errorf("schema type %q", body.Type))
		}
		ps := &pb.Schema{Name: proto.String(tn.Local), Type: pb.Schema_Type(typ).Enum(), SchemaData: []byte(body.Schema)}
		for k, v := range body.Properties {
			ps.Properties = append(ps.Properties, &pb.KeyValue{Key: proto.String(k), Value: proto.String(v)})
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
	return mux
}

// TopicStats is the admin stats answer (Pulsar's field names).
type TopicStats struct {
	MsgInCounter  int64                        `json:"msgInCounter"` // messages persisted since the topic was loaded on this broker
	StorageSize   int64                        `json:"storageSize"`
	Entries       int64                        `json:"entries"`
	Publishers    []PublisherStats             `json:"publishers"`
	Subscriptions map[string]SubscriptionStats `json:"subscriptions"`
}

type PublisherStats struct {
	ProducerName  string `json:"producerName"`
	ProducerID    uint64 `json:"producerId"`
	Address       string `json:"address"`
	ClientVersion string `json:"clientVersion"`
}

type SubscriptionStats struct {
	Type            string          `json:"type"`
	MsgBacklog      int64           `json:"msgBacklog"`
	UnackedMessages int             `json:"unackedMessages"`
	MarkDelete      string          `json:"markDeletePosition"`
	ReadPosition    string          `json:"readPosition"`
	Consumers       []ConsumerStats `json:"consumers"`
}

type ConsumerStats struct {
	ConsumerName    string `json:"consumerName"`
	AvailablePermit int    `json:"availablePermits"`
	Address         string `json:"address"`
}

// InternalStats is a topic's storage as Pulsar's internalStats shows it
// (a subset): the ledgers of this region's copy, oldest first.
type InternalStats struct {
	NumberOfEntries    int64             `json:"numberOfEntries"`
	TotalSize          int64             `json:"totalSize"`
	LastConfirmedEntry string            `json:"lastConfirmedEntry"`
	Ledgers            []LedgerStatsItem `json:"ledgers"`
}

// LedgerStatsItem is one ledger of InternalStats.
type LedgerStatsItem struct {
	LedgerID int64 `json:"ledgerId"`
	Entries  int64 `json:"entries"`
	Size     int64 `json:"size"`
}

func readJSON(r *http.Request, v any, optional bool) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return meta.BadRequest(err)
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
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
