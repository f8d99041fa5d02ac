package meta

const FailoverKey = "/failover/"

// FailoverRecord is the active region of an active-standby namespace.
type FailoverRecord struct {
	Namespace string `json:"namespace"`
	Active    string `json:"active"`
	Epoch     uint64 `json:"epoch"`
	Previous  string `json:"previous,omitempty"`
	CatchUp   bool   `json:"catchUp,omitempty"`
	SinceMs   int64  `json:"sinceMs"`
	Reason    string `json:"reason,omitempty"`
}

// activeStandby reports whether the namespace has one active region at a
// time (several regions, failover active-standby).
func ActiveStandby(pol Policies) bool {
	return len(pol.ReplicationClusters) > 1 && pol.Effective().Failover == FailoverActiveStandby
}

// RegionBrokersKey is the prefix under which the brokers of region register
// their service URLs in the global store (for lookups redirected from
// other regions).
func RegionBrokersKey(region string) string { return "/regions/" + region + "/brokers/" }

// RegionWebKey is the prefix under which the brokers of region register
// their admin API's URL (Pulsar's web service URL) in the global store,
// beside their service URL under RegionBrokersKey, bound to the same
// lease: a region's Pulsar ClusterData (serviceUrl) read by any region.
func RegionWebKey(region string) string { return "/regions/" + region + "/web/" }

// RegionListenersKey is the prefix under which the brokers of region that
// have named listeners (AdvertisedListeners) or an admin URL register them
// in the global store, one RegionBroker each, so a lookup redirected from
// another region names the broker in the client's listener, its web
// service URLs too (an HTTP lookup's httpUrl).
func RegionListenersKey(region string) string { return "/regions/" + region + "/listeners/" }

// RegionBroker is a broker's entry under RegionListenersKey.
// AdminURL and HTTPListeners are optional (a record registered before
// them has neither: an HTTP lookup redirected to it answers no httpUrl).
type RegionBroker struct {
	ServiceURL string    `json:"serviceUrl"` // its internal URL, as under RegionBrokersKey
	Listeners  Listeners `json:"advertisedListeners"`
	// AdminURL is its advertised admin API URL (http:// or https://),
	// the internal listener's web service URL.
	AdminURL string `json:"adminUrl,omitempty"`
	// HTTPListeners are its listeners' web service URLs (nil: none).
	HTTPListeners HTTPListeners `json:"advertisedHttpListeners,omitempty"`
}
