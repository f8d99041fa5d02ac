package broker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/meridian-mq/meridian/broker/meta"
)

// A namespace's geo-replication policy: its regions
// (Policies.ReplicationClusters) and how its topics travel between them
// (Policies.Replication). validateReplication refuses, at policy time,
// what cannot work; every refusal is an HTTP 400 whose message says why.
//
// What is refused:
//   - no region, a duplicate region, a malformed region name;
//   - a region that is not registered in the global store (a region
//     registers itself when its first broker starts; GET
//     /admin/v2/clusters lists them);
//   - an unknown mode (async, sync, stretched), failover (active-standby,
//     active-active), syncOnUnreachable (strict, degrade) or startAt
//     (earliest, latest);
//   - a primary that is not one of the namespace's regions;
//   - sync or stretched with fewer than 2 regions (there is nothing to be
//     synchronous with);
//   - minRegions below 0 or above the number of regions; minRegions above
//     1 with async (async acknowledges after local persistence); exactly
//     1 with sync or stretched (the receipt would wait for no other
//     region: that is async);
//   - a negative syncTimeoutMs or backlogQuotaBytes;
//   - stretched with a persistence policy whose write quorum is below the
//     number of regions each entry must reach (one copy per region at
//     least), or whose ack quorum exceeds its write quorum;
//   - stretched with syncOnUnreachable strict and a persistence policy
//     whose ack quorum the loss of one region makes unreachable: with the
//     write quorum W spread evenly over k = min(regions, W) regions, the
//     largest region holds ceil(W/k) copies, and if fewer than the ack
//     quorum remain without it every write would stop. Such a namespace
//     must use degrade or a lower ack quorum. Without a persistence policy
//     the broker's default quorums apply, which are not known here: the
//     check is left to the placement at ledger creation.

// knownRegions returns the regions registered in the global store, plus
// this broker's own region (registered at start; listed here even if a
// test or an outage kept it from the store).
func (b *Broker) knownRegions(ctx context.Context) ([]string, error) {
	known, err := b.meta.ListRegions(ctx)
	if err != nil {
		return nil, err
	}
	if b.cfg.Cluster != "" && !slices.Contains(known, b.cfg.Cluster) {
		known = append(known, b.cfg.Cluster)
		slices.Sort(known)
	}
	return known, nil
}

// replicationUpdate is the body of POST .../meridian-replication: the
// regions and any fields of the ReplicationPolicy; an absent field keeps
// its value.
type replicationUpdate struct {
	Regions           *[]string `json:"regions"`
	Mode              *string   `json:"mode"`
	Failover          *string   `json:"failover"`
	Primary           *string   `json:"primary"`
	SyncOnUnreachable *string   `json:"syncOnUnreachable"`
	SyncTimeoutMs     *int64    `json:"syncTimeoutMs"`
	MinRegions        *int      `json:"minRegions"`
	StartAt           *string   `json:"startAt"`
	BacklogQuotaBytes *int64    `json:"backlogQuotaBytes"`
	RateBytesPerSec   *int64    `json:"rateBytesPerSecond"`
	FailoverDelayMs   *int64    `json:"failoverDelayMs"`
	SwitchBackDelayMs *int64    `json:"switchBackDelayMs"`
	Orphans           *string   `json:"orphans"`
}

// apply sets the fields present in u on p.
func (u replicationUpdate) apply(p *meta.Policies) {
	if u.Regions != nil {
		p.ReplicationClusters = slices.Clone(*u.Regions)
	}
	var rp meta.ReplicationPolicy
	if p.Replication != nil {
		rp = *p.Replication
	}
	set := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	set(&rp.Mode, u.Mode)
	set(&rp.Failover, u.Failover)
	set(&rp.Primary, u.Primary)
	set(&rp.SyncOnUnreachable, u.SyncOnUnreachable)
	set(&rp.StartAt, u.StartAt)
	set(&rp.Orphans, u.Orphans)
	if u.SyncTimeoutMs != nil {
		rp.SyncTimeoutMs = *u.SyncTimeoutMs
	}
	if u.MinRegions != nil {
		rp.MinRegions = *u.MinRegions
	}
	if u.RateBytesPerSec != nil {
		rp.RateBytesPerSecond = *u.RateBytesPerSec
	}
	if u.FailoverDelayMs != nil {
		rp.FailoverDelayMs = *u.FailoverDelayMs
	}
	if u.SwitchBackDelayMs != nil {
		v := *u.SwitchBackDelayMs
		rp.SwitchBackDelayMs = &v
	}
	if u.BacklogQuotaBytes != nil {
		rp.BacklogQuotaBytes = *u.BacklogQuotaBytes
	}
	if rp == (meta.ReplicationPolicy{}) {
		p.Replication = nil
	} else {
		p.Replication = &rp
	}
}

// parseReplicationUpdate decodes a meridian-replication body, refusing
// unknown fields (a misspelt field would otherwise be silently ignored).
func parseReplicationUpdate(body []byte) (replicationUpdate, error) {
	var u replicationUpdate
	if len(strings.TrimSpace(string(body))) == 0 {
		return u, meta.BadRequest(errors.New("empty body"))
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		return u, meta.BadRequest(err)
	}
	return u, nil
}

// readBody reads a request's whole body (bounded by the admin handler).
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	return b, meta.BadRequest(err)
}

// replicationAnswer is GET .../meridian-replication: the regions and the
// effective policy (defaults filled in).
type replicationAnswer struct {
	Regions []string `json:"regions"`
	meta.ReplicationPolicy
}

func (b *Broker) replicationHandlers(h func(pattern string, f func(r *http.Request) (any, error)), ns func(*http.Request) string) {
	// Pulsar's paths: the namespace's regions as a JSON list.
	h("GET /admin/v2/namespaces/{tenant}/{ns}/replication", func(r *http.Request) (any, error) {
		p, err := b.meta.GetPolicies(r.Context(), ns(r))
		if err != nil {
			return nil, err
		}
		if p.ReplicationClusters == nil {
			return []string{}, nil
		}
		return p.ReplicationClusters, nil
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/replication", func(r *http.Request) (any, error) {
		var regions []string
		if err := readJSON(r, &regions, false); err != nil {
			return nil, err
		}
		return nil, b.updateReplication(r.Context(), ns(r), replicationUpdate{Regions: &regions})
	})
	// Meridian's: regions and the replication policy in one call.
	h("GET /admin/v2/namespaces/{tenant}/{ns}/meridian-replication", func(r *http.Request) (any, error) {
		p, err := b.meta.GetPolicies(r.Context(), ns(r))
		if err != nil {
			return nil, err
		}
		regions := p.ReplicationClusters
		if regions == nil {
			regions = []string{}
		}
		return replicationAnswer{Regions: regions, ReplicationPolicy: p.Effective()}, nil
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/meridian-replication", func(r *http.Request) (any, error) {
		body, err := readBody(r)
		if err != nil {
			return nil, err
		}
		u, err := parseReplicationUpdate(body)
		if err != nil {
			return nil, err
		}
		return nil, b.updateReplication(r.Context(), ns(r), u)
	})
	// The registered regions (Pulsar's clusters).
	h("GET /admin/v2/clusters", func(r *http.Request) (any, error) { return b.knownRegions(r.Context()) })
}

// updateReplication applies u to the namespace's policies, validated,
// with a compare-and-swap.
func (b *Broker) updateReplication(ctx context.Context, ns string, u replicationUpdate) error {
	known, err := b.knownRegions(ctx)
	if err != nil {
		return err
	}
	return b.meta.UpdatePoliciesErr(ctx, ns, func(p *meta.Policies) error {
		u.apply(p)
		return meta.ValidateReplication(*p, known)
	})
}
