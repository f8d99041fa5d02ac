package cluster

import (
	"slices"
	"strings"
	"sync"
)

// Endpoints of a store spread over regions (the global store: a member per
// region and a witness) may name their region: "REGION=URL", e.g.
// "east=http://10.0.0.1:2379". A request the client sends to a member
// whose host is paused or cut off hangs until its deadline (its kernel may
// still accept connections), and etcd's client keeps choosing that member
// round-robin until its keepalive gives up on it (2 s + 2 s). A broker that
// sees, through gossip, that no member of a region is alive tells the
// store (AvoidRegions) to stop sending requests to that region's
// members; they are used again as soon as the region is seen alive.
// Correctness does not depend on it: the members' quorum decides, and an
// avoided member is only one the client does not talk to.

// endpoint is one configured endpoint.
type endpoint struct {
	url, region string // region "" when not named
}

// storeEndpoints are the configured endpoints and the ones in use. Shared by
// a Store and its Sub stores.
type storeEndpoints struct {
	mu    sync.Mutex
	all   []endpoint
	inUse string // the URLs set on the client, comma-joined
}

// parseEndpoints splits "REGION=URL" entries; a plain URL has no region.
func parseEndpoints(eps []string) []endpoint {
	out := make([]endpoint, 0, len(eps))
	for _, e := range eps {
		e = strings.TrimSpace(e)
		if name, url, ok := strings.Cut(e, "="); ok && !strings.Contains(name, "://") && name != "" {
			out = append(out, endpoint{url: url, region: name})
			continue
		}
		out = append(out, endpoint{url: e})
	}
	return out
}

// urls returns the endpoints' URLs.
func urls(eps []endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.url
	}
	return out
}

// usable returns the URLs of the endpoints whose region is not in avoid —
// all of them if none would be left.
func usable(eps []endpoint, avoid []string) []string {
	var out []string
	for _, e := range eps {
		if e.region == "" || !slices.Contains(avoid, e.region) {
			out = append(out, e.url)
		}
	}
	if len(out) == 0 {
		return urls(eps)
	}
	return out
}

// AvoidRegions makes the client send requests only to the members whose
// region is not listed (every member, when that would leave none; members
// without a region are always used). The call is cheap when nothing
// changes; callers may call it on every health-view update.
func (s *Store) AvoidRegions(avoid []string) {
	e := s.eps
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	use := usable(e.all, avoid)
	key := strings.Join(use, ",")
	if key == e.inUse {
		return
	}
	e.inUse = key
	s.cli.SetEndpoints(use...)
}

// EndpointsInUse returns the URLs the client currently sends requests to.
func (s *Store) EndpointsInUse() []string {
	if s.eps == nil {
		return s.cli.Endpoints()
	}
	s.eps.mu.Lock()
	defer s.eps.mu.Unlock()
	return strings.Split(s.eps.inUse, ",")
}
