package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

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
	// keyPartitionedNP: non-persistent topics' partition counts, apart
	// from the persistent ones' (non-persistent://t/ns/x and
	// persistent://t/ns/x are two topics).
	keyPartitionedNP = "/admin/partitioned-topics-np/"
	keyTopics        = "/admin/topics/"
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
	// Replication is Meridian's geo-replication policy; the regions are
	// ReplicationClusters (Pulsar's field). nil means async,
	// active-standby, primary = the first region.
	Replication *ReplicationPolicy `json:"meridian_replication,omitempty"`
}

// Replication modes and failover modes of a namespace.
const (
	ReplicationAsync     = "async"
	ReplicationSync      = "sync"
	ReplicationStretched = "stretched"

	FailoverActiveStandby = "active-standby"
	FailoverActiveActive  = "active-active"
)

// ReplicationPolicy is how a namespace's topics travel between its regions
// (Policies.ReplicationClusters).
type ReplicationPolicy struct {
	// Mode: async (receipt after local persistence), sync (receipt after
	// the regions of the sync set persisted it too) or stretched (each
	// ledger written to bookies of several regions).
	Mode string `json:"mode,omitempty"`
	// Failover: active-standby (one region takes produce at a time; the
	// failover issue) or active-active (every region takes produce).
	Failover string `json:"failover,omitempty"`
	// Primary is the active region of an active-standby namespace
	// (default: the first region).
	Primary string `json:"primary,omitempty"`
	// SyncOnUnreachable: strict (sends wait, then fail with a retriable
	// error after SyncTimeoutMs) or degrade (fall back to async, alert).
	SyncOnUnreachable string `json:"syncOnUnreachable,omitempty"`
	SyncTimeoutMs     int64  `json:"syncTimeoutMs,omitempty"`
	// MinRegions: the fewest regions (the local one included) an entry
	// must be persisted in before its receipt (sync, stretched).
	MinRegions int `json:"minRegions,omitempty"`
	// StartAt: where a new region's replication starts: earliest (all
	// retained data, the default) or latest (only new messages).
	StartAt string `json:"startAt,omitempty"`
	// BacklogQuotaBytes bounds each remote region's replication backlog
	// (0: no quota); past it an alert fires and data is kept only up to
	// the namespace's retention.
	BacklogQuotaBytes int64 `json:"backlogQuotaBytes,omitempty"`
	// MaxLagMs is the namespace's RPO budget (0: none; the lag is only
	// graphed): when a topic's oldest local entry a remote region has not
	// acknowledged is older than this, the topic's producers here are held
	// or refused (MaxLagAction) until the lag is back under it. A region
	// the failover core declares failed (down in this region's health
	// view, or the old active region of an unplanned failover) does not
	// count: a dead standby never stops the active region. E.g. 2000: an
	// unplanned failover loses at most about 2 s of produce (plus the
	// detection time of the check, 100 ms) — at 1,000 msgs/s, about 2,100
	// messages. Distinct from BacklogQuotaBytes (which protects this
	// region's disks and never blocks producers). Async only.
	MaxLagMs int64 `json:"maxReplicationLagMs,omitempty"`
	// MaxLagBytes is the same budget in bytes of local entries not yet
	// acknowledged by a remote region (0: none); either limit past its
	// value enforces the budget.
	MaxLagBytes int64 `json:"maxReplicationLagBytes,omitempty"`
	// MaxLagAction is what happens to producers past the budget: hold
	// (default; as backlog quota's producer_request_hold: their sends wait
	// unanswered, in order, and go on when the lag is back under the
	// budget) or refuse (as producer_exception: the topic's producers are
	// closed and new ones refused with
	// ProducerBlockedQuotaExceededException, so the client fails its
	// pending sends with an error, and reconnects once under the budget).
	MaxLagAction string `json:"maxReplicationLagAction,omitempty"`
	// RateBytesPerSecond bounds the namespace's replication to each remote
	// region (all its topics together; 0: no limit).
	RateBytesPerSecond int64 `json:"rateBytesPerSecond,omitempty"`
	// FailoverDelayMs (active-standby): how long the active region must
	// be seen down before another region takes over. 0: 2000.
	FailoverDelayMs int64 `json:"failoverDelayMs,omitempty"`
	// SwitchBackDelayMs (active-standby): how long a more preferred
	// region that returned must be up, and caught up, before the
	// namespace moves back to it. Absent: 30000; 0 (or -1): never on its
	// own (an operator moves it back with `meridian admin failover`).
	SwitchBackDelayMs *int64 `json:"switchBackDelayMs,omitempty"`
	// Orphans (active-standby): what the new active region does with the
	// async tail of a failover — messages the old active region
	// acknowledged and had not replicated, arriving when it returns:
	// replicate (default: appended to the topic, late) or quarantine (kept
	// aside in a topic TOPIC-orphans for an operator). Listed either way
	// (orphans.go).
	Orphans string `json:"orphans,omitempty"`
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

	// namespaces is a watched copy of the namespaces' policies, for
	// lookups (PoliciesHint); nil until Watch.
	namespaces *cluster.Cache
}

// Watch starts the watched copy of the namespaces' policies that
// PoliciesHint answers from; Close stops it.
func (m *Metadata) Watch() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.namespaces == nil {
		m.namespaces = cluster.WatchPrefix(m.s, keyNamespaces)
	}
}

// Close stops the watch Watch started.
func (m *Metadata) Close() {
	m.mu.Lock()
	c := m.namespaces
	m.namespaces = nil
	m.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// PoliciesHint returns a namespace's policies from the watched copy, with
// no etcd read; ok is false when the copy does not have them (not watching,
// not current, or a namespace created a moment ago): ask GetPolicies. The
// answer may lag a change by the watch's delivery; it serves lookups, whose
// answers the broker they name checks again.
func (m *Metadata) PoliciesHint(ns string) (Policies, bool) {
	m.mu.Lock()
	c := m.namespaces
	m.mu.Unlock()
	if c == nil {
		return Policies{}, false
	}
	kv, found, live := c.Get(keyNamespaces + ns)
	if !found || !live {
		return Policies{}, false
	}
	var p Policies
	if err := json.Unmarshal(kv.Value, &p); err != nil {
		return Policies{}, false
	}
	return p, true
}

// LookupPolicies returns a namespace's policies for a lookup: the watched
// copy's (PoliciesHint), else the store's.
func (m *Metadata) LookupPolicies(ctx context.Context, ns string) (Policies, error) {
	if p, ok := m.PoliciesHint(ns); ok {
		return p, nil
	}
	return m.GetPolicies(ctx, ns)
}

// NewMetadata returns the metadata layer on s.
func NewMetadata(s *cluster.Store) *Metadata { return &Metadata{s: s, cache: map[string][]byte{}} }

// get reads a key, answering from the cache when the store is unreachable.
func (m *Metadata) get(ctx context.Context, key string) ([]byte, error) {
	var kv cluster.KV
	read := func(ctx context.Context) (err error) { kv, err = m.s.Get(ctx, key); return err }
	m.mu.Lock()
	_, cached := m.cache[key]
	m.mu.Unlock()
	var err error
	if cached {
		// With an answer to fall back on, one short attempt: a region cut
		// off from the global store answered each lookup 3 s late, past
		// the Go client's operation timeout in the region-partition drill.
		actx, cancel := context.WithTimeout(ctx, time.Second)
		err = read(actx)
		cancel()
	} else {
		err = ReadAttempts(ctx, time.Second, read)
	}
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

// readAttempts runs an idempotent store read in attempts of at most
// attempt each (three at most) within ctx. The etcd client spreads
// requests over the members round-robin; one that stopped answering
// without closing its connections (paused, cut off) swallows every request
// sent to it until the client's keepalive drops the connection — and, as
// a paused process's kernel still accepts connections, again after each
// reconnect. The next attempt goes to another member instead of waiting
// out the caller's whole deadline (seen: a paused region's global-store
// member stalled the survivors' failover control for 13 s).
func ReadAttempts(ctx context.Context, attempt time.Duration, read func(context.Context) error) error {
	var err error
	for i := 0; i < 3; i++ {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err = read(actx)
		cancel()
		if err == nil || errors.Is(err, cluster.ErrNotFound) || ctx.Err() != nil {
			return err
		}
	}
	return err
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

// UpdatePolicies applies f to the namespace's policies: a read-modify-write
// that compare-and-swaps on the key's revision and retries (calling f again
// on the fresh value) when another writer got in between, so concurrent
// updates — several regions' brokers starting at once, two admin calls —
// never lose each other's changes. f may also be called again on a value
// its own earlier call produced (a write whose outcome was unknown, see
// casUpdateJSON): it must set what it changes, never add to it.
func (m *Metadata) UpdatePolicies(ctx context.Context, ns string, f func(*Policies)) error {
	return m.UpdatePoliciesErr(ctx, ns, func(p *Policies) error { f(p); return nil })
}

// UpdatePoliciesErr is UpdatePolicies with an f that may refuse the change:
// when f returns an error nothing is written and the error is returned.
func (m *Metadata) UpdatePoliciesErr(ctx context.Context, ns string, f func(*Policies) error) error {
	return casUpdateJSON(ctx, m, keyNamespaces+ns, f)
}

// updateTenant is UpdatePoliciesErr for a tenant's record.
func (m *Metadata) updateTenant(ctx context.Context, name string, f func(*TenantInfo) error) error {
	return casUpdateJSON(ctx, m, keyTenants+name, f)
}

// casMaxAttempts bounds the retries of a read-modify-write that keeps
// losing its compare-and-swap (each loss means another writer succeeded).
const casMaxAttempts = 100

// casUnknownAttempts bounds the compare-and-swaps of one read-modify-write
// whose outcome came back unknown (cluster.OutcomeUnknown).
const casUnknownAttempts = 3

// casUpdateJSON reads key's JSON into a T, applies f, and writes it back
// only if the key did not change meanwhile; otherwise it retries from the
// read. ErrNotFound if the key does not exist (or is deleted meanwhile).
// A compare-and-swap whose outcome is unknown (etcd answered "request
// timed out" on a loaded host: it may have been applied) is retried from
// the read too, up to casUnknownAttempts in all: if it was applied, f
// finds its change in place and the write that follows stores the same
// value again (or f says errNoChange); if not, it is made now. Either way
// the answer is true; without the retry an applied change was reported
// as failed.
func casUpdateJSON[T any](ctx context.Context, m *Metadata, key string, f func(*T) error) error {
	name := strings.TrimPrefix(key, "/admin/")
	var lastErr error
	unknown := 0
	for attempt := 0; attempt < casMaxAttempts; attempt++ {
		kv, err := m.s.Get(ctx, key)
		if errors.Is(err, cluster.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		if err != nil {
			return err
		}
		var v T
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return fmt.Errorf("broker: %s: %w", name, err)
		}
		if err := f(&v); err != nil {
			return err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = m.s.CAS(ctx, key, b, kv.ModRevision)
		switch {
		case err == nil:
			m.mu.Lock()
			m.cache[key] = b
			m.mu.Unlock()
			return nil
		case errors.Is(err, cluster.ErrNotFound):
			return fmt.Errorf("%w: %s", ErrNotFound, name)
		case cluster.OutcomeUnknown(err) && unknown+1 < casUnknownAttempts && ctx.Err() == nil:
			unknown++
			lastErr = err
		case errors.Is(err, cluster.ErrVersionMismatch):
			lastErr = err
			// Another writer won; back off a little (jittered by the
			// attempt count) so a crowd of starters does not spin.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(1+attempt%10) * time.Millisecond):
			}
		default:
			return err
		}
	}
	return fmt.Errorf("broker: update %s: gave up after %d conflicting writes: %w", name, casMaxAttempts, lastErr)
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
	for _, k := range []string{keyPartitioned, keyPartitionedNP} {
		parts, err := m.list(ctx, k+ns+"/")
		if err != nil {
			return err
		}
		if len(parts) > 0 {
			return fmt.Errorf("%w: namespace %s has partitioned topics", ErrNotEmpty, ns)
		}
	}
	return m.s.Delete(ctx, keyNamespaces+ns)
}

// SetPartitions records a partitioned topic's partition count (create or
// update; the count may only grow).
func (m *Metadata) SetPartitions(ctx context.Context, t TopicName, n int, create bool) error {
	if n <= 0 {
		return fmt.Errorf("%w: partition count %d", ErrInvalidName, n)
	}
	key := partitionedKey(t)
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
	err := m.getJSON(ctx, partitionedKey(t), &n)
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
	return m.s.Delete(ctx, partitionedKey(t))
}

// partitionedKey is the key of a partitioned topic's partition count.
func partitionedKey(t TopicName) string {
	if !t.Persistent() {
		return keyPartitionedNP + t.NamespaceName() + "/" + t.Local
	}
	return keyPartitioned + t.NamespaceName() + "/" + t.Local
}

// ListNonPersistentPartitioned lists a namespace's partitioned
// non-persistent topics (full names).
func (m *Metadata) ListNonPersistentPartitioned(ctx context.Context, ns string) ([]string, error) {
	names, err := m.list(ctx, keyPartitionedNP+ns+"/")
	for i := range names {
		names[i] = "non-persistent://" + ns + "/" + names[i]
	}
	return names, err
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

// EnsureDefaults registers this broker's region in the global store and
// creates tenant "public" and namespace "public/default" if missing. The
// region is added to public's allowed clusters. A new namespace
// public/default replicates to this region, async and active-standby with
// it as the primary; when the region was registered just now (its first
// broker ever starting) and public/default already exists (another region
// created it), the region is appended to public/default's regions, so the
// regions `meridian up` starts together all replicate public/default.
// A region that an operator later removes from public/default is not put
// back by its brokers' restarts (it is registered already then). Every
// change is a compare-and-swap, safe with brokers of several regions
// starting at once; whichever region creates public/default first is its
// primary.
func (m *Metadata) EnsureDefaults(ctx context.Context, cluster string) error {
	created, err := m.RegisterRegion(ctx, cluster)
	if err != nil {
		return err
	}
	err = m.CreateTenant(ctx, "public", TenantInfo{AdminRoles: []string{}, AllowedClusters: []string{cluster}})
	if errors.Is(err, ErrAlreadyExists) {
		err = m.updateTenant(ctx, "public", func(t *TenantInfo) error {
			if slices.Contains(t.AllowedClusters, cluster) {
				return errNoChange
			}
			t.AllowedClusters = append(t.AllowedClusters, cluster)
			return nil
		})
	}
	if err != nil && !errors.Is(err, errNoChange) {
		return err
	}
	err = m.CreateNamespace(ctx, "public/default", Policies{
		ReplicationClusters: []string{cluster},
		Replication:         &ReplicationPolicy{Mode: ReplicationAsync, Failover: FailoverActiveStandby, Primary: cluster},
	})
	if errors.Is(err, ErrAlreadyExists) {
		if !created {
			return nil
		}
		err = m.UpdatePoliciesErr(ctx, "public/default", func(p *Policies) error {
			if slices.Contains(p.ReplicationClusters, cluster) {
				return errNoChange
			}
			p.ReplicationClusters = append(p.ReplicationClusters, cluster)
			return nil
		})
	}
	if err != nil && !errors.Is(err, errNoChange) {
		return err
	}
	return nil
}

// errNoChange: a read-modify-write found nothing to change (nothing written).
var errNoChange = errors.New("broker: no change")

// keyRegions holds one key per region known to the global store.
const keyRegions = "/regions/"

// RegionInfo is a registered region's record.
type RegionInfo struct {
	Name string `json:"name"`
}

// RegisterRegion records a region in the global store if it is not there
// yet; created reports whether this call added it.
func (m *Metadata) RegisterRegion(ctx context.Context, name string) (created bool, err error) {
	if err := ValidateRegionName(name); err != nil {
		return false, err
	}
	b, err := json.Marshal(RegionInfo{Name: name})
	if err != nil {
		return false, err
	}
	if _, err := m.s.Create(ctx, keyRegions+name, b); errors.Is(err, cluster.ErrExists) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, nil
}

// ListRegions returns the registered regions' names, sorted. The keys
// under a region's record (its brokers, RegionBrokersKey) are not regions.
func (m *Metadata) ListRegions(ctx context.Context) ([]string, error) {
	keys, err := m.list(ctx, keyRegions)
	if err != nil {
		return nil, err
	}
	names := keys[:0]
	for _, k := range keys {
		if !strings.Contains(k, "/") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names, nil
}

// RegionBrokerURLs returns the service URLs the live brokers of region
// registered in the global store (RegionBrokersKey), in key order.
func (m *Metadata) RegionBrokerURLs(ctx context.Context, region string) ([]string, error) {
	return m.s.ListValues(ctx, RegionBrokersKey(region))
}

// RegionWebURLs returns the admin API URLs the live brokers of region
// registered in the global store (RegionWebKey), in key order.
func (m *Metadata) RegionWebURLs(ctx context.Context, region string) ([]string, error) {
	return m.s.ListValues(ctx, RegionWebKey(region))
}

// maxBundles bounds a namespace's numBundles (each is an etcd ownership
// key and a slot in every lookup's boundary list): Pulsar's largest.
const maxBundles = 4096

// BundleCount is the number of bundles a namespace's first split makes:
// its numBundles when ValidatePolicies takes it (0: DefaultBundles), else
// DefaultBundles and an error (HTTP 400) saying why. A value stored past
// the admin API (into etcd by hand, or by a version that did not check
// it) is not applied: 2^40 bundles would be a 4 TiB boundary table made
// at the namespace's first lookup, and 1,000,000 a bundle record past
// etcd's request limit, so no topic of the namespace loaded.
func (p Policies) BundleCount() (int, error) {
	if p.Bundles < 0 || p.Bundles > maxBundles {
		return DefaultBundles, BadRequest(fmt.Errorf("numBundles %d: want 0 (default) to %d", p.Bundles, maxBundles))
	}
	if p.Bundles == 0 {
		return DefaultBundles, nil
	}
	return p.Bundles, nil
}

// ValidatePolicies checks a new namespace's policies for what would
// otherwise fail later, or allocate without bound, on the first lookup:
// bundles, persistence, retention, backlog quotas, auth_policies and the
// message TTL (the replication policy: ValidateReplication).
func ValidatePolicies(p Policies) error {
	if _, err := p.BundleCount(); err != nil {
		return err
	}
	if v := p.Persistence; v != nil {
		if err := ValidatePersistence(*v); err != nil {
			return err
		}
	}
	if r := p.Retention; r != nil {
		if err := ValidateRetention(*r); err != nil {
			return err
		}
	}
	for kind, q := range p.BacklogQuotas {
		if err := ValidateBacklogQuota(kind, q); err != nil {
			return err
		}
	}
	if err := ValidateAuthPolicies(p.AuthPolicies); err != nil {
		return err
	}
	return ValidateMessageTTL(p.MessageTTLInSeconds)
}

// DefaultBundles is the number of bundles of a namespace unless its policy
// says otherwise: 4, Pulsar's default.
const DefaultBundles = 4

// EvenBoundaries splits the hash space into n equal bundles; n outside
// 1..4096 (Policies.BundleCount's range) splits it into DefaultBundles.
func EvenBoundaries(n int) []uint32 {
	if n <= 0 || n > maxBundles {
		n = DefaultBundles
	}
	out := make([]uint32, n+1)
	size := uint64(1<<32) / uint64(n)
	for i := 1; i < n; i++ {
		out[i] = uint32(uint64(i) * size)
	}
	out[n] = 0xffffffff
	return out
}
