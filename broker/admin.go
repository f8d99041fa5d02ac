package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
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

func (b *Broker) startAdmin() error {
	lis, err := net.Listen("tcp", b.cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("broker: admin listen %s: %w", b.cfg.AdminAddr, err)
	}
	b.adminLis = lis
	serve, scheme := b.guard.ListenAdmin(lis)
	b.adminScheme = scheme
	b.adminSrv = &http.Server{Handler: b.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
	go b.adminSrv.Serve(serve)
	return nil
}

// AdminURL returns http://admin-address (https:// with TLS), or "" when
// the API is off.
func (b *Broker) AdminURL() string {
	if b.adminLis == nil {
		return ""
	}
	return b.adminScheme + b.adminLis.Addr().String()
}

// AdminHandler returns the admin API's handler.
func (b *Broker) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	metricsHandler := promhttp.HandlerFor(append(prometheus.Gatherers{b.metrics.reg}, b.cfg.ExtraMetrics...), promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if err := b.guard.AuthorizeAdmin(r, "GET /metrics"); err != nil {
			writeAdmin(w, nil, err)
			return
		}
		metricsHandler.ServeHTTP(w, r)
	})
	h := func(pattern string, f func(r *http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, maxAdminBody)
			ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
			defer cancel()
			r = r.WithContext(ctx)
			if err := b.guard.AuthorizeAdmin(r, pattern); err != nil {
				writeAdmin(w, nil, err)
				return
			}
			v, err := f(r)
			writeAdmin(w, v, err)
		})
	}
	h("GET /admin/v2/meridian/health", func(r *http.Request) (any, error) {
		if b.cfg.Health == nil {
			return nil, fmt.Errorf("%w: this broker does not gossip", meta.ErrNotFound)
		}
		return b.cfg.Health(), nil
	})
	h("GET /admin/v2/meridian/replication", b.adminReplicationStatus)
	h("GET /admin/v2/meridian/failover", func(r *http.Request) (any, error) { return b.failoverStatus(r.Context(), "") })
	h("GET /admin/v2/meridian/failover/{tenant}/{ns}", func(r *http.Request) (any, error) {
		return b.failoverStatus(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns"))
	})
	h("GET /admin/v2/meridian/failover/{tenant}/{ns}/orphans", func(r *http.Request) (any, error) {
		return b.orphans(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns"))
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
		return b.Failover(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns"), req.To, req.Reason)
	})

	// Tenants.
	h("GET /admin/v2/tenants", func(r *http.Request) (any, error) { return b.meta.ListTenants(r.Context()) })
	h("GET /admin/v2/tenants/{tenant}", func(r *http.Request) (any, error) { return b.meta.GetTenant(r.Context(), r.PathValue("tenant")) })
	h("PUT /admin/v2/tenants/{tenant}", func(r *http.Request) (any, error) {
		var ti meta.TenantInfo
		if err := readJSON(r, &ti, true); err != nil {
			return nil, err
		}
		return nil, b.meta.CreateTenant(r.Context(), r.PathValue("tenant"), ti)
	})
	h("POST /admin/v2/tenants/{tenant}", func(r *http.Request) (any, error) {
		var ti meta.TenantInfo
		if err := readJSON(r, &ti, false); err != nil {
			return nil, err
		}
		return nil, b.meta.UpdateTenant(r.Context(), r.PathValue("tenant"), ti)
	})
	h("DELETE /admin/v2/tenants/{tenant}", func(r *http.Request) (any, error) {
		return nil, b.meta.DeleteTenant(r.Context(), r.PathValue("tenant"))
	})

	// Namespaces.
	ns := func(r *http.Request) string { return r.PathValue("tenant") + "/" + r.PathValue("ns") }
	h("GET /admin/v2/namespaces/{tenant}", func(r *http.Request) (any, error) {
		if _, err := b.meta.GetTenant(r.Context(), r.PathValue("tenant")); err != nil {
			return nil, err
		}
		return b.meta.ListNamespaces(r.Context(), r.PathValue("tenant"))
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
			p.ReplicationClusters = []string{b.cfg.Cluster}
		}
		known, err := b.knownRegions(r.Context())
		if err != nil {
			return nil, err
		}
		if err := meta.ValidateReplication(p, known); err != nil {
			return nil, err
		}
		return nil, b.meta.CreateNamespace(r.Context(), ns(r), p)
	})
	h("GET /admin/v2/namespaces/{tenant}/{ns}", func(r *http.Request) (any, error) { return b.meta.GetPolicies(r.Context(), ns(r)) })
	h("DELETE /admin/v2/namespaces/{tenant}/{ns}", func(r *http.Request) (any, error) { return nil, b.meta.DeleteNamespace(r.Context(), ns(r)) })
	h("GET /admin/v2/namespaces/{tenant}/{ns}/topics", func(r *http.Request) (any, error) {
		if _, err := b.meta.GetPolicies(r.Context(), ns(r)); err != nil {
			return nil, err
		}
		return b.meta.ListTopics(r.Context(), ns(r))
	})
	b.replicationHandlers(h, ns)
	b.securityHandlers(h, ns)
	policy := func(path string, apply func(*meta.Policies, []byte) error, clear func(*meta.Policies)) {
		h("POST /admin/v2/namespaces/{tenant}/{ns}/"+path, func(r *http.Request) (any, error) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return nil, err
			}
			var known []string
			// A refused change (apply's error) writes nothing.
			return nil, b.meta.UpdatePoliciesErr(r.Context(), ns(r), func(p *meta.Policies) error {
				if err := apply(p, body); err != nil {
					return err
				}
				if p.Replication == nil {
					return nil
				}
				// A replication policy may depend on the others
				// (stretched ledgers on the persistence quorums).
				if known == nil {
					if known, err = b.knownRegions(r.Context()); err != nil {
						return err
					}
				}
				return meta.ValidateReplication(*p, known)
			})
		})
		h("DELETE /admin/v2/namespaces/{tenant}/{ns}/"+path, func(r *http.Request) (any, error) {
			return nil, b.meta.UpdatePolicies(r.Context(), ns(r), clear)
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
		p, err := b.meta.GetPolicies(r.Context(), ns(r))
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
		if _, err := b.meta.GetPolicies(r.Context(), ns(r)); err != nil {
			return nil, err
		}
		return b.meta.ListTopics(r.Context(), ns(r))
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/partitioned", func(r *http.Request) (any, error) {
		return b.meta.ListPartitioned(r.Context(), ns(r))
	})
	h("PUT /admin/v2/persistent/{tenant}/{ns}/{topic}", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		if ok, err := b.meta.TopicExists(r.Context(), tn); err != nil {
			return nil, err
		} else if ok {
			return nil, fmt.Errorf("%w: topic %s", meta.ErrAlreadyExists, tn)
		}
		_, err = b.getTopic(r.Context(), tn.String(), true)
		return nil, err
	})
	h("DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		return nil, b.deleteTopic(r.Context(), tn, r.URL.Query().Get("force") == "true")
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
			if _, err := b.meta.GetPolicies(r.Context(), tn.NamespaceName()); err != nil {
				return nil, err
			}
			if create {
				if ok, _ := b.meta.TopicExists(r.Context(), tn); ok {
					return nil, fmt.Errorf("%w: a non-partitioned topic %s exists", meta.ErrAlreadyExists, tn)
				}
			}
			if err := b.meta.SetPartitions(r.Context(), tn, n, create); err != nil {
				return nil, err
			}
			for i := 0; i < n; i++ {
				if err := b.meta.RegisterTopic(r.Context(), tn.PartitionName(i)); err != nil {
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
		n, err := b.meta.Partitions(r.Context(), tn)
		return map[string]int{"partitions": n}, err
	})
	h("DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}/partitions", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		n, err := b.meta.Partitions(r.Context(), tn)
		if err != nil {
			return nil, err
		}
		for i := 0; i < n; i++ {
			if err := b.deleteTopic(r.Context(), tn.PartitionName(i), true); err != nil && !errors.Is(err, meta.ErrNotFound) {
				return nil, err
			}
		}
		return nil, b.meta.DeletePartitioned(r.Context(), tn)
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/stats", func(r *http.Request) (any, error) {
		t, err := b.adminTopic(r, topic)
		if err != nil {
			return nil, err
		}
		return t.stats(), nil
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/internalStats", func(r *http.Request) (any, error) {
		t, err := b.adminTopic(r, topic)
		if err != nil {
			return nil, err
		}
		return t.internalStats(), nil
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/subscriptions", func(r *http.Request) (any, error) {
		t, err := b.adminTopic(r, topic)
		if err != nil {
			return nil, err
		}
		names := []string{}
		for _, s := range t.subscriptions() {
			names = append(names, s.name)
		}
		return names, nil
	})
	h("PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}", func(r *http.Request) (any, error) {
		t, err := b.adminTopic(r, topic)
		if err != nil {
			return nil, err
		}
		return nil, t.createSubscription(r.Context(), r.PathValue("sub"))
	})
	h("DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}", func(r *http.Request) (any, error) {
		t, err := b.adminTopic(r, topic)
		if err != nil {
			return nil, err
		}
		if s := t.subscription(r.PathValue("sub")); s != nil && s.consumerCount() > 0 && r.URL.Query().Get("force") != "true" {
			return nil, fmt.Errorf("%w: subscription %s has consumers", meta.ErrNotEmpty, s.name)
		} else if s != nil {
			s.closeConsumers("")
		}
		return nil, t.deleteSubscription(r.Context(), r.PathValue("sub"))
	})
	h("POST /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}/resetcursor/{ts}", func(r *http.Request) (any, error) {
		t, err := b.adminTopic(r, topic)
		if err != nil {
			return nil, err
		}
		ms, err := strconv.ParseInt(r.PathValue("ts"), 10, 64)
		if err != nil {
			return nil, meta.BadRequest(err)
		}
		s := t.subscription(r.PathValue("sub"))
		if s == nil {
			return nil, fmt.Errorf("%w: subscription %s", meta.ErrNotFound, r.PathValue("sub"))
		}
		if err := s.seekTime(r.Context(), ms); err != nil {
			return nil, err
		}
		s.closeConsumers("")
		return nil, nil
	})
	schemaAnswer := func(all []meta.StoredSchema, v int) map[string]any {
		s := all[v]
		return map[string]any{"version": v, "type": strings.ToUpper(s.Type), "data": string(s.Data), "properties": s.Properties}
	}
	h("GET /admin/v2/schemas/{tenant}/{ns}/{topic}/schema", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		all, err := b.meta.Schemas(r.Context(), tn)
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
		all, err := b.meta.Schemas(r.Context(), tn)
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
		all, err := b.meta.Schemas(r.Context(), tn)
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
		v, err := b.meta.GetOrCreateSchema(r.Context(), tn, ps)
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
		return nil, b.meta.DeleteSchema(r.Context(), tn)
	})
	return mux
}

// adminTopic loads an existing topic for an admin call.
func (b *Broker) adminTopic(r *http.Request, topic func(*http.Request) (meta.TopicName, error)) (*Topic, error) {
	tn, err := topic(r)
	if err != nil {
		return nil, err
	}
	return b.getTopic(r.Context(), tn.String(), false)
}

// deleteTopic deletes a topic and its data. Without force it refuses a
// topic with connected producers or consumers.
func (b *Broker) deleteTopic(ctx context.Context, tn meta.TopicName, force bool) error {
	t, err := b.getTopic(ctx, tn.String(), false)
	if err != nil {
		return err
	}
	if !force {
		t.mu.Lock()
		busy := len(t.producers) > 0
		for _, s := range t.subs {
			busy = busy || len(s.consumers) > 0
		}
		t.mu.Unlock()
		if busy {
			return fmt.Errorf("%w: topic %s has connected producers or consumers", meta.ErrNotEmpty, tn)
		}
	}
	if err := t.close(ctx); err != nil {
		return err
	}
	ml, err := mledger.Open(ctx, tn.ManagedLedgerName(), b.cfg.ManagedLedger)
	if err != nil {
		return err
	}
	if err := ml.Delete(ctx); err != nil {
		return err
	}
	_ = t.store.Delete(ctx, t.dedupKey())
	return b.meta.UnregisterTopic(ctx, tn)
}

func (t *Topic) subscription(name string) *Subscription {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.subs[name]
}

// createSubscription creates a durable subscription at the end of the topic.
func (t *Topic) createSubscription(ctx context.Context, name string) error {
	if err := meta.ValidSubscription(name); err != nil {
		return meta.BadRequest(err)
	}
	if t.subscription(name) != nil {
		return fmt.Errorf("%w: subscription %s", meta.ErrAlreadyExists, name)
	}
	cur, err := t.ml.OpenCursor(ctx, name, mledger.Latest)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.subs[name] == nil {
		t.subs[name] = newSubscription(t, name, 0, cur, true)
		t.b.metrics.subscriptions.Inc()
	}
	return nil
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

func (t *Topic) stats() TopicStats {
	st := TopicStats{StorageSize: t.ml.TotalSizeBytes(), Entries: t.ml.NumberOfEntries(), Publishers: []PublisherStats{}, Subscriptions: map[string]SubscriptionStats{}}
	t.mu.Lock()
	for p := range t.producers {
		st.Publishers = append(st.Publishers, PublisherStats{ProducerName: p.name, ProducerID: p.id, Address: p.conn.nc.RemoteAddr().String(), ClientVersion: p.conn.clientVersion})
	}
	subs := make([]*Subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	t.mu.Lock()
	st.MsgInCounter = t.msgsIn
	t.mu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		ss := SubscriptionStats{Type: s.typ.String(), UnackedMessages: len(s.pending), Consumers: []ConsumerStats{}}
		for _, c := range s.consumers {
			ss.Consumers = append(ss.Consumers, ConsumerStats{ConsumerName: c.name, AvailablePermit: c.permits, Address: c.conn.nc.RemoteAddr().String()})
		}
		s.mu.Unlock()
		ss.MsgBacklog = s.cursor.Backlog()
		ss.MarkDelete = s.cursor.MarkDeleted().String()
		ss.ReadPosition = s.cursor.ReadPosition().String()
		st.Subscriptions[s.name] = ss
	}
	return st
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

func (t *Topic) internalStats() InternalStats {
	st := InternalStats{NumberOfEntries: t.ml.NumberOfEntries(), TotalSize: t.ml.TotalSizeBytes(), LastConfirmedEntry: t.ml.LastConfirmed().String(), Ledgers: []LedgerStatsItem{}}
	for _, l := range t.ml.Ledgers() {
		st.Ledgers = append(st.Ledgers, LedgerStatsItem{LedgerID: l.ID, Entries: l.Entries, Size: l.SizeBytes})
	}
	return st
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
