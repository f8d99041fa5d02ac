package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/meridian-mq/meridian/broker/meta"
)

// knownRegions returns the regions registered in the global store, plus
// this broker's own region (registered at start; listed here even if a
// test or an outage kept it from the store).
func (s *Server) knownRegions(ctx context.Context) ([]string, error) {
	known, err := s.cfg.Meta.ListRegions(ctx)
	if err != nil {
		return nil, err
	}
	if s.cfg.Cluster != "" && !slices.Contains(known, s.cfg.Cluster) {
		known = append(known, s.cfg.Cluster)
		slices.Sort(known)
	}
	return known, nil
}

// ReplicationUpdate is the body of POST .../meridian-replication: the
// regions and any fields of the ReplicationPolicy; an absent field keeps
// its value.
type ReplicationUpdate struct {
	Regions           *[]string `json:"regions"`
	Mode              *string   `json:"mode"`
	Failover          *string   `json:"failover"`
	Primary           *string   `json:"primary"`
	SyncOnUnreachable *string   `json:"syncOnUnreachable"`
	SyncTimeoutMs     *int64    `json:"syncTimeoutMs"`
	MinRegions        *int      `json:"minRegions"`
	StartAt           *string   `json:"startAt"`
	BacklogQuotaBytes *int64    `json:"backlogQuotaBytes"`
	MaxLagMs          *int64    `json:"maxReplicationLagMs"`
	MaxLagBytes       *int64    `json:"maxReplicationLagBytes"`
	MaxLagAction      *string   `json:"maxReplicationLagAction"`
	RateBytesPerSec   *int64    `json:"rateBytesPerSecond"`
	FailoverDelayMs   *int64    `json:"failoverDelayMs"`
	SwitchBackDelayMs *int64    `json:"switchBackDelayMs"`
	Orphans           *string   `json:"orphans"`
}

// Apply sets the fields present in u on p.
func (u ReplicationUpdate) Apply(p *meta.Policies) {
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
	set(&rp.MaxLagAction, u.MaxLagAction)
	if u.MaxLagMs != nil {
		rp.MaxLagMs = *u.MaxLagMs
	}
	if u.MaxLagBytes != nil {
		rp.MaxLagBytes = *u.MaxLagBytes
	}
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

// ParseReplicationUpdate decodes a meridian-replication body, refusing
// unknown fields (a misspelt field would otherwise be silently ignored).
func ParseReplicationUpdate(body []byte) (ReplicationUpdate, error) {
	var u ReplicationUpdate
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

// readBody reads a request's whole body, bounded by the admin handler
// (maxAdminBody): a larger one is HTTP 413, naming the limit.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, meta.StatusError{Status: http.StatusRequestEntityTooLarge, Err: fmt.Errorf("request body larger than the admin API's limit of %d bytes", tooLarge.Limit)}
	}
	return b, meta.BadRequest(err)
}

// replicationAnswer is GET .../meridian-replication: the regions and the
// effective policy (defaults filled in).
type replicationAnswer struct {
	Regions []string `json:"regions"`
	meta.ReplicationPolicy
}

func (s *Server) replicationHandlers(h func(pattern string, f func(r *http.Request) (any, error)), ns func(*http.Request) string) {
	// Pulsar's paths: the namespace's regions as a JSON list.
	h("GET /admin/v2/namespaces/{tenant}/{ns}/replication", func(r *http.Request) (any, error) {
		p, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r))
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
		return nil, s.updateReplication(r.Context(), ns(r), ReplicationUpdate{Regions: &regions})
	})
	// Meridian's: regions and the replication policy in one call.
	h("GET /admin/v2/namespaces/{tenant}/{ns}/meridian-replication", func(r *http.Request) (any, error) {
		p, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r))
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
		u, err := ParseReplicationUpdate(body)
		if err != nil {
			return nil, err
		}
		return nil, s.updateReplication(r.Context(), ns(r), u)
	})
	// The registered regions (Pulsar's clusters).
	h("GET /admin/v2/clusters", func(r *http.Request) (any, error) { return s.knownRegions(r.Context()) })
}

// updateReplication applies u to the namespace's policies, validated,
// with a compare-and-swap.
func (s *Server) updateReplication(ctx context.Context, ns string, u ReplicationUpdate) error {
	known, err := s.knownRegions(ctx)
	if err != nil {
		return err
	}
	return s.cfg.Meta.UpdatePoliciesErr(ctx, ns, func(p *meta.Policies) error {
		u.Apply(p)
		return meta.ValidateReplication(*p, known)
	})
}
