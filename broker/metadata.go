package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/meridian-mq/meridian/cluster"
)

// Errors of the metadata layer; the admin API maps them to HTTP codes and
// the protocol to ServerError codes.
var (
	ErrNotFound      = errors.New("broker: not found")
	ErrAlreadyExists = errors.New("broker: already exists")
	ErrNotEmpty      = errors.New("broker: not empty")
)

// Key layout (relative to the region's store prefix). The geo-replication
// issue moves these to the global store shared by every region.
const (
	keyTenants     = "/admin/tenants/"
	keyNamespaces  = "/admin/namespaces/"
	keyPartitioned = "/admin/partitioned-topics/"
	keyTopics      = "/admin/topics/"
)

// TenantInfo is a tenant's record (Pulsar's TenantInfo JSON).
type TenantInfo struct {
	AdminRoles      []string `json:"adminRoles"`
	AllowedClusters []string `json:"allowedClusters"`
}

// Retention is Pulsar's retention_policies: consumed data is kept for this
// long / up to this size. -1 = unlimited, 0 = not kept.
type Retention struct {
	RetentionTimeInMinutes int   `json:"retentionTimeInMinutes"`
	RetentionSizeInMB      int64 `json:"retentionSizeInMB"`
}

// BacklogQuota is Pulsar's backlog quota: limit in bytes (and/or seconds)
// and the action past it.
type BacklogQuota struct {
	Limit     int64  `json:"limit,omitempty"`
	LimitSize int64  `json:"limitSize,omitempty"`
	LimitTime int64  `json:"limitTime,omitempty"`
	Policy    string `json:"policy"` // producer_request_hold | producer_exception | consumer_backlog_eviction
}

// SizeLimit returns the byte limit, whichever field carried it.
func (q BacklogQuota) SizeLimit() int64 {
	if q.LimitSize > 0 {
		return q.LimitSize
	}
	return q.Limit
}

// Persistence is Pulsar's persistence policy: the ledger quorums.
type Persistence struct {
	EnsembleSize int `json:"bookkeeperEnsemble"`
	WriteQuorum  int `json:"bookkeeperWriteQuorum"`
	AckQuorum    int `json:"bookkeeperAckQuorum"`
}

// Policies is a namespace's policies (a subset of Pulsar's JSON, same
// field names, so Pulsar tooling's bodies parse).
type Policies struct {
	ReplicationClusters []string                `json:"replication_clusters,omitempty"`
	Retention           *Retention              `json:"retention_policies,omitempty"`
	MessageTTLInSeconds int                     `json:"message_ttl_in_seconds,omitempty"`
	BacklogQuotas       map[string]BacklogQuota `json:"backlog_quota_map,omitempty"`
	Persistence         *Persistence            `json:"persistence,omitempty"`
	Deduplication       *bool                   `json:"deduplicationEnabled,omitempty"`
	AuthPolicies        json.RawMessage         `json:"auth_policies,omitempty"`
	// Bundles is the number of hash ranges the namespace's topics are
	// owned by; 0 means DefaultBundles.
	Bundles int `json:"numBundles,omitempty"`
}

// Metadata stores tenants, namespaces, partitioned-topic counts and the
// topic registry, in the global store when there are several regions. It
// keeps the last value it read of every key, so a short outage of the
// global store does not stop lookups and topic loads of what this region
// already serves (a read cache; writes still need the store).
type Metadata struct {
	s *cluster.Store

	mu    sync.Mutex
	cache map[string][]byte // key → last value read; nil value = known absent
}

// NewMetadata returns the metadata layer on s.
func NewMetadata(s *cluster.Store) *Metadata { return &Metadata{s: s, cache: map[string][]byte{}} }

// get reads a key, answering from the cache when the store is unreachable.
func (m *Metadata) get(ctx context.Context, key string) ([]byte, error) {
	kv, err := m.s.Get(ctx, key)
	switch {
	case err == nil:
		m.mu.Lock()
		m.cache[key] = kv.Value
		m.mu.Unlock()
		return kv.Value, nil
	case errors.Is(err, cluster.ErrNotFound):
		m.mu.Lock()
		delete(m.cache, key)
		m.mu.Unlock()
		return nil, err
	default:
		m.mu.Lock()
		v, ok := m.cache[key]
		m.mu.Unlock()
		if ok {
			return v, nil
		}
		return nil, err
	}
}

func (m *Metadata) putJSON(ctx context.Context, key string, v any, create bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if create {
		if _, err := m.s.Create(ctx, key, b); errors.Is(err, cluster.ErrExists) {
			return fmt.Errorf("%w: %s", ErrAlreadyExists, strings.TrimPrefix(key, "/admin/"))
		} else if err != nil {
			return err
		}
		return nil
	}
	_, err = m.s.Put(ctx, key, b)
	return err
}

func (m *Metadata) getJSON(ctx context.Context, key string, v any) error {
	b, err := m.get(ctx, key)
	if errors.Is(err, cluster.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, strings.TrimPrefix(key, "/admin/"))
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func (m *Metadata) list(ctx context.Context, prefix string) ([]string, error) {
	kvs, _, err := m.s.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, strings.TrimPrefix(kv.Key, prefix))
	}
	return out, nil
}

// CreateTenant creates a tenant.
func (m *Metadata) CreateTenant(ctx context.Context, name string, info TenantInfo) error {
	if err := ValidateTenant(name); err != nil {
		return err
	}
	return m.putJSON(ctx, keyTenants+name, info, true)
}

// UpdateTenant replaces a tenant's record.
func (m *Metadata) UpdateTenant(ctx context.Context, name string, info TenantInfo) error {
	var old TenantInfo
	if err := m.getJSON(ctx, keyTenants+name, &old); err != nil {
		return err
	}
	return m.putJSON(ctx, keyTenants+name, info, false)
}

// GetTenant reads a tenant.
func (m *Metadata) GetTenant(ctx context.Context, name string) (TenantInfo, error) {
	var t TenantInfo
	err := m.getJSON(ctx, keyTenants+name, &t)
	return t, err
}

// ListTenants lists tenant names.
func (m *Metadata) ListTenants(ctx context.Context) ([]string, error) { return m.list(ctx, keyTenants) }

// DeleteTenant deletes a tenant that has no namespace.
func (m *Metadata) DeleteTenant(ctx context.Context, name string) error {
	if _, err := m.GetTenant(ctx, name); err != nil {
		return err
	}
	nss, err := m.ListNamespaces(ctx, name)
	if err != nil {
		return err
	}
	if len(nss) > 0 {
		return fmt.Errorf("%w: tenant %s has namespaces %v", ErrNotEmpty, name, nss)
	}
	return m.s.Delete(ctx, keyTenants+name)
}

// CreateNamespace creates tenant/ns with policies; the tenant must exist.
func (m *Metadata) CreateNamespace(ctx context.Context, ns string, p Policies) error {
	if err := ValidateNamespace(ns); err != nil {
		return err
	}
	tenant := strings.SplitN(ns, "/", 2)[0]
	if _, err := m.GetTenant(ctx, tenant); err != nil {
		return err
	}
	return m.putJSON(ctx, keyNamespaces+ns, p, true)
}

// GetPolicies reads a namespace's policies (ErrNotFound if it does not exist).
func (m *Metadata) GetPolicies(ctx context.Context, ns string) (Policies, error) {
	var p Policies
	err := m.getJSON(ctx, keyNamespaces+ns, &p)
	return p, err
}

// SetPolicies replaces a namespace's policies.
func (m *Metadata) SetPolicies(ctx context.Context, ns string, p Policies) error {
	if _, err := m.GetPolicies(ctx, ns); err != nil {
		return err
	}
	return m.putJSON(ctx, keyNamespaces+ns, p, false)
}

// UpdatePolicies applies f to the namespace's policies.
func (m *Metadata) UpdatePolicies(ctx context.Context, ns string, f func(*Policies)) error {
	p, err := m.GetPolicies(ctx, ns)
	if err != nil {
		return err
	}
	f(&p)
	return m.putJSON(ctx, keyNamespaces+ns, p, false)
}

// ListNamespaces lists "tenant/ns" names of a tenant.
func (m *Metadata) ListNamespaces(ctx context.Context, tenant string) ([]string, error) {
	names, err := m.list(ctx, keyNamespaces+tenant+"/")
	for i := range names {
		names[i] = tenant + "/" + names[i]
	}
	return names, err
}

// DeleteNamespace deletes a namespace without topics.
func (m *Metadata) DeleteNamespace(ctx context.Context, ns string) error {
	if _, err := m.GetPolicies(ctx, ns); err != nil {
		return err
	}
	topics, err := m.ListTopics(ctx, ns)
	if err != nil {
		return err
	}
	if len(topics) > 0 {
		return fmt.Errorf("%w: namespace %s has topics", ErrNotEmpty, ns)
	}
	parts, err := m.list(ctx, keyPartitioned+ns+"/")
	if err != nil {
		return err
	}
	if len(parts) > 0 {
		return fmt.Errorf("%w: namespace %s has partitioned topics", ErrNotEmpty, ns)
	}
	return m.s.Delete(ctx, keyNamespaces+ns)
}

// SetPartitions records a partitioned topic's partition count (create or
// update; the count may only grow).
func (m *Metadata) SetPartitions(ctx context.Context, t TopicName, n int, create bool) error {
	if n <= 0 {
		return fmt.Errorf("%w: partition count %d", ErrInvalidName, n)
	}
	key := keyPartitioned + t.NamespaceName() + "/" + t.Local
	if !create {
		old, err := m.Partitions(ctx, t)
		if err != nil {
			return err
		}
		if old == 0 {
			return fmt.Errorf("%w: partitioned topic %s", ErrNotFound, t)
		}
		if n < old {
			return fmt.Errorf("%w: cannot shrink %s from %d to %d partitions", ErrInvalidName, t, old, n)
		}
	}
	return m.putJSON(ctx, key, n, create)
}

// Partitions returns a topic's partition count; 0 means not partitioned.
func (m *Metadata) Partitions(ctx context.Context, t TopicName) (int, error) {
	var n int
	err := m.getJSON(ctx, keyPartitioned+t.NamespaceName()+"/"+t.Local, &n)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	return n, err
}

// DeletePartitioned removes a partitioned topic's record.
func (m *Metadata) DeletePartitioned(ctx context.Context, t TopicName) error {
	if n, err := m.Partitions(ctx, t); err != nil {
		return err
	} else if n == 0 {
		return fmt.Errorf("%w: partitioned topic %s", ErrNotFound, t)
	}
	return m.s.Delete(ctx, keyPartitioned+t.NamespaceName()+"/"+t.Local)
}

// ListPartitioned lists a namespace's partitioned topics (full names).
func (m *Metadata) ListPartitioned(ctx context.Context, ns string) ([]string, error) {
	names, err := m.list(ctx, keyPartitioned+ns+"/")
	for i := range names {
		names[i] = "persistent://" + ns + "/" + names[i]
	}
	return names, err
}

// RegisterTopic records that a (non-partitioned, or partition) topic exists.
func (m *Metadata) RegisterTopic(ctx context.Context, t TopicName) error {
	_, err := m.s.Put(ctx, keyTopics+t.NamespaceName()+"/"+t.Local, nil)
	return err
}

// TopicExists reports whether a topic was registered.
func (m *Metadata) TopicExists(ctx context.Context, t TopicName) (bool, error) {
	_, err := m.get(ctx, keyTopics+t.NamespaceName()+"/"+t.Local)
	if errors.Is(err, cluster.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// UnregisterTopic forgets a topic.
func (m *Metadata) UnregisterTopic(ctx context.Context, t TopicName) error {
	return m.s.Delete(ctx, keyTopics+t.NamespaceName()+"/"+t.Local)
}

// ListTopics lists a namespace's topics (full names, partitions included).
func (m *Metadata) ListTopics(ctx context.Context, ns string) ([]string, error) {
	names, err := m.list(ctx, keyTopics+ns+"/")
	for i := range names {
		names[i] = "persistent://" + ns + "/" + names[i]
	}
	return names, err
}

// EnsureDefaults creates tenant "public" and namespace "public/default"
// if missing.
func (m *Metadata) EnsureDefaults(ctx context.Context, cluster string) error {
	if err := m.CreateTenant(ctx, "public", TenantInfo{AllowedClusters: []string{cluster}}); err != nil && !errors.Is(err, ErrAlreadyExists) {
		return err
	}
	if err := m.CreateNamespace(ctx, "public/default", Policies{ReplicationClusters: []string{cluster}}); err != nil && !errors.Is(err, ErrAlreadyExists) {
		return err
	}
	return nil
}
