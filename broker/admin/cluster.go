package admin

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/meridian-mq/meridian/broker/meta"
)

// Pulsar's clusters are Meridian's regions (they register themselves when
// their first broker starts), and its brokers the region's live brokers.

// clusterData is Pulsar's ClusterData.
type clusterData struct {
	ServiceURL          string   `json:"serviceUrl,omitempty"`
	ServiceURLTLS       string   `json:"serviceUrlTls,omitempty"`
	BrokerServiceURL    string   `json:"brokerServiceUrl,omitempty"`
	BrokerServiceURLTLS string   `json:"brokerServiceUrlTls,omitempty"`
	PeerClusterNames    []string `json:"peerClusterNames"`
}

// hostPort is a broker's id as Pulsar lists it: its web service's
// host:port.
func hostPort(url string) string {
	if _, rest, ok := strings.Cut(url, "://"); ok {
		return rest
	}
	return url
}

// multiHost joins the host:port of those urls whose scheme is scheme as
// one of Pulsar's multi-host URLs, scheme://h1:p1,h2:p2 (sorted, each
// once; "" when there is none).
func multiHost(urls []string, scheme string) string {
	var hosts []string
	for _, u := range urls {
		if hp, ok := strings.CutPrefix(u, scheme+"://"); ok && hp != "" && !slices.Contains(hosts, hp) {
			hosts = append(hosts, hp)
		}
	}
	if len(hosts) == 0 {
		return ""
	}
	sort.Strings(hosts)
	return scheme + "://" + strings.Join(hosts, ",")
}

func (s *Server) clusterHandlers(h func(string, func(*http.Request) (any, error))) {
	region := func(r *http.Request) (string, error) {
		name := r.PathValue("cluster")
		known, err := s.knownRegions(r.Context())
		if err != nil {
			return "", err
		}
		if !slices.Contains(known, name) {
			return "", fmt.Errorf("%w: Cluster %s does not exist (known regions: %s)", meta.ErrNotFound, name, strings.Join(known, ", "))
		}
		return name, nil
	}
	// A region's ClusterData from the region registry of the global store:
	// the admin API (Pulsar's web service) and service URLs its live
	// brokers registered (meta.RegionWebKey, meta.RegionBrokersKey), each
	// as one of Pulsar's multi-host URLs; with TLS (https://,
	// pulsar+ssl://) in the ...Tls fields, as a TLS-only Pulsar cluster's.
	h("GET /admin/v2/clusters/{cluster}", func(r *http.Request) (any, error) {
		name, err := region(r)
		if err != nil {
			return nil, err
		}
		webs, err := s.cfg.Meta.RegionWebURLs(r.Context(), name)
		if err != nil {
			return nil, err
		}
		svcs, err := s.cfg.Meta.RegionBrokerURLs(r.Context(), name)
		if err != nil {
			return nil, err
		}
		if name == s.cfg.Cluster {
			// This broker, also before its registration landed.
			self := s.cfg.Broker.Self()
			webs, svcs = append(webs, self.AdminURL), append(svcs, self.ServiceURL)
		}
		return clusterData{
			ServiceURL: multiHost(webs, "http"), ServiceURLTLS: multiHost(webs, "https"),
			BrokerServiceURL: multiHost(svcs, "pulsar"), BrokerServiceURLTLS: multiHost(svcs, "pulsar+ssl"),
			PeerClusterNames: []string{},
		}, nil
	})
	for _, m := range []string{"PUT", "POST", "DELETE"} {
		h(m+" /admin/v2/clusters/{cluster}", func(r *http.Request) (any, error) {
			return nil, unsupported("clusters are Meridian's regions: a region registers itself when its first broker starts (meridian up, or meridian broker --region), and is never created, changed or deleted through the admin API")
		})
	}

	// Brokers: this region's only; another region's answer on their own
	// admin API.
	thisRegion := func(r *http.Request) error {
		if c := r.PathValue("cluster"); c != "" && c != s.cfg.Cluster {
			if _, err := region(r); err != nil {
				return err
			}
			return meta.StatusError{Status: http.StatusPreconditionFailed, Err: fmt.Errorf("this broker is in region %s: ask a broker of region %s for its brokers", s.cfg.Cluster, c)}
		}
		return nil
	}
	active := func(r *http.Request) (any, error) {
		if err := thisRegion(r); err != nil {
			return nil, err
		}
		bs, err := s.cfg.Broker.Brokers(r.Context())
		if err != nil {
			return nil, err
		}
		out := make([]string, 0, len(bs))
		for _, b := range bs {
			out = append(out, hostPort(b.AdminURL))
		}
		sort.Strings(out)
		return out, nil
	}
	h("GET /admin/v2/brokers", active)
	h("GET /admin/v2/brokers/{cluster}", active)
	h("GET /admin/v2/brokers/health", func(r *http.Request) (any, error) {
		if err := s.cfg.Broker.HealthCheck(r.Context()); err != nil {
			return nil, meta.StatusError{Status: http.StatusServiceUnavailable, Err: err}
		}
		return textAnswer("ok"), nil
	})
	h("GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", func(r *http.Request) (any, error) {
		if err := thisRegion(r); err != nil {
			return nil, err
		}
		if b := r.PathValue("broker"); b != hostPort(s.cfg.Broker.Self().AdminURL) {
			return nil, meta.StatusError{Status: http.StatusPreconditionFailed, Err: fmt.Errorf("this broker is %s: ask %s for its namespaces", hostPort(s.cfg.Broker.Self().AdminURL), b)}
		}
		out := map[string]any{}
		// Pulsar's keys are the owned bundles, not the namespaces.
		for _, bd := range s.cfg.Broker.OwnedBundles() {
			out[bd] = map[string]any{"broker_assignment": "shared", "is_controlled": false, "is_active": true}
		}
		return out, nil
	})
	// Meridian has no dynamic configuration: the list is empty, and a
	// change is refused (a broker's configuration is its file, environment
	// and flags, read at start).
	h("GET /admin/v2/brokers/configuration", func(r *http.Request) (any, error) { return []string{}, nil })
	h("GET /admin/v2/brokers/configuration/values", func(r *http.Request) (any, error) { return map[string]string{}, nil })
	noDynamic := func(r *http.Request) (any, error) {
		return nil, unsupported("Meridian has no dynamic broker configuration: set it in the broker's configuration file, environment or flags, read at start")
	}
	h("POST /admin/v2/brokers/configuration/{name}/{value}", noDynamic)
	h("DELETE /admin/v2/brokers/configuration/{name}", noDynamic)
	h("GET /admin/v2/brokers/configuration/runtime", noDynamic)
	h("GET /admin/v2/brokers/leaderBroker", func(r *http.Request) (any, error) {
		return nil, unsupported("Meridian has no leader broker: each broker splits and balances its own bundles (broker/balance.go)")
	})
	h("GET /admin/v2/brokers/internal-configuration", func(r *http.Request) (any, error) {
		return nil, unsupported("Meridian keeps its metadata in etcd, not ZooKeeper: see the broker's configuration for the etcd endpoints")
	})
}
