package admin

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/meridian-mq/meridian/broker/meta"
)

// What Meridian does not have is answered as Pulsar answers a disabled
// feature: a 4xx with a JSON {"reason": ...} that says so and what to do
// instead (405, the status Pulsar gives topic policies while they are
// disabled), never the router's bare "404 page not found". A path the API
// does not know at all is a 404, with a reason too. docs/admin.md lists
// every pulsaradmin call and what Meridian answers.

// unsupported is the answer to a call of a feature Meridian lacks.
func unsupported(format string, a ...any) error {
	return meta.StatusError{Status: http.StatusMethodNotAllowed, Err: fmt.Errorf(format, a...)}
}

// noSuchCall is the answer to a path the admin API does not serve.
func noSuchCall(r *http.Request) error {
	return meta.StatusError{Status: http.StatusNotFound, Err: fmt.Errorf("Meridian's admin API has no %s %s (docs/admin.md lists what it serves)", r.Method, r.URL.Path)}
}

// noTopicProperties refuses a topic created with properties: Meridian
// keeps none, and storing nothing while answering success would lose them.
func noTopicProperties() error { return unsupported("%s", topicFeatures["properties"]) }

// topicPolicies are Pulsar's topic-level policies (pulsaradmin's
// TopicPolicies and the Topics() calls over them).
var topicPolicies = []string{
	"autoSubscriptionCreation", "backlogQuota", "backlogQuotaMap", "compactionThreshold", "deduplicationEnabled",
	"deduplicationSnapshotInterval", "delayedDelivery", "dispatchRate", "dispatcherPauseOnAckStatePersistent",
	"entryFilters", "inactiveTopicPolicies", "maxConsumers", "maxConsumersPerSubscription", "maxMessageSize",
	"maxProducers", "maxSubscriptionsPerTopic", "maxUnackedMessagesOnConsumer", "maxUnackedMessagesOnSubscription",
	"messageTTL", "offloadPolicies", "persistence", "publishRate", "replication", "replicatorDispatchRate",
	"retention", "schemaCompatibilityStrategy", "schemaValidationEnforced", "shadowTopics", "subscribeRate",
	"subscriptionDispatchRate", "subscriptionTypesEnabled",
}

// namespacePolicies are Pulsar's namespace policies Meridian does not
// apply (those it applies have their own routes).
var namespacePolicies = []string{
	"antiAffinity", "autoSubscriptionCreation", "autoTopicCreation", "compactionThreshold", "delayedDelivery",
	"deduplicationSnapshotInterval", "dispatchRate", "encryptionRequired", "entryFilters", "inactiveTopicPolicies",
	"isAllowAutoUpdateSchema", "maxConsumersPerSubscription", "maxConsumersPerTopic", "maxProducersPerTopic",
	"maxSubscriptionsPerTopic", "maxTopicsPerNamespace", "maxUnackedMessagesPerConsumer",
	"maxUnackedMessagesPerSubscription", "offloadDeletionLagMs", "offloadPolicies", "offloadThreshold",
	"offloadThresholdInSeconds", "properties", "publishRate", "replicatorDispatchRate",
	"schemaAutoUpdateCompatibilityStrategy", "schemaValidationEnforced", "subscribeRate",
	"subscriptionAuthMode", "subscriptionDispatchRate", "subscriptionExpirationTime", "subscriptionTypesEnabled",
}

// topicFeatures are Pulsar's topic operations Meridian does not have,
// with why.
var topicFeatures = map[string]string{
	"terminate":              "Meridian does not terminate topics (a topic takes messages until it is deleted)",
	"compaction":             "Meridian does not compact topics",
	"offload":                "Meridian has no tiered storage: ledgers stay on the bookies until retention deletes them",
	"properties":             "Meridian keeps no topic properties",
	"permissions":            "Meridian grants permissions on namespaces (Namespaces().GrantNamespacePermission), not on topics",
	"truncate":               "Meridian does not truncate topics: delete the topic, or let retention delete consumed ledgers",
	"backlog":                "Meridian does not estimate offline backlogs: GET .../stats answers the backlog of each subscription",
	"createMissedPartitions": "Meridian creates every partition with its partitioned topic",
}

func (s *Server) unsupportedHandlers(h func(string, func(*http.Request) (any, error))) {
	methods := []string{"GET", "POST", "PUT", "DELETE"}
	for _, p := range topicPolicies {
		for _, m := range methods {
			h(m+" /admin/v2/persistent/{tenant}/{ns}/{topic}/"+p, func(r *http.Request) (any, error) {
				return nil, unsupported("Topic level policies is disabled, to enable the topic level policy and retry. (Meridian has no topic-level policies: set %s on the namespace)", p)
			})
		}
	}
	for p, why := range topicFeatures {
		for _, m := range methods {
			h(m+" /admin/v2/persistent/{tenant}/{ns}/{topic}/"+p, func(r *http.Request) (any, error) { return nil, unsupported("%s", why) })
		}
	}
	for _, m := range []string{"POST", "DELETE"} {
		h(m+" /admin/v2/persistent/{tenant}/{ns}/{topic}/permissions/{role}", func(r *http.Request) (any, error) {
			return nil, unsupported("%s", topicFeatures["permissions"])
		})
	}
	for _, p := range namespacePolicies {
		for _, m := range methods {
			h(m+" /admin/v2/namespaces/{tenant}/{ns}/"+p, func(r *http.Request) (any, error) {
				return nil, unsupported("Meridian does not apply the namespace policy %s (docs/admin.md lists the policies it applies)", p)
			})
		}
	}
	noSubPermissions := func(r *http.Request) (any, error) {
		return nil, unsupported("Meridian does not enforce subscription permissions: grant consume on the namespace (Namespaces().GrantNamespacePermission)")
	}
	h("GET /admin/v2/namespaces/{tenant}/{ns}/permissions/subscription", noSubPermissions)
	h("POST /admin/v2/namespaces/{tenant}/{ns}/permissions/subscription/{sub}", noSubPermissions)
	h("DELETE /admin/v2/namespaces/{tenant}/{ns}/permissions/{sub}/{role}", noSubPermissions)
	for _, m := range []string{"GET", "POST", "DELETE"} {
		h(m+" /admin/v2/namespaces/{tenant}/{ns}/persistence/bookieAffinity", func(r *http.Request) (any, error) {
			return nil, unsupported("Meridian has no bookie affinity groups: placement is rack- and region-aware from the bookies' labels")
		})
	}
	h("DELETE /admin/v2/namespaces/{tenant}/{ns}/{bundle}", func(r *http.Request) (any, error) {
		return nil, unsupported("Meridian does not delete a namespace's bundle: delete its topics, or the namespace")
	})
	// Meridian's schema check is always Pulsar's BACKWARD.
	h("GET /admin/v2/namespaces/{tenant}/{ns}/schemaCompatibilityStrategy", func(r *http.Request) (any, error) {
		if _, err := s.cfg.Meta.GetPolicies(r.Context(), r.PathValue("tenant")+"/"+r.PathValue("ns")); err != nil {
			return nil, err
		}
		return "BACKWARD", nil
	})
	h("PUT /admin/v2/namespaces/{tenant}/{ns}/schemaCompatibilityStrategy", func(r *http.Request) (any, error) {
		var v string
		if err := readJSON(r, &v, false); err != nil {
			return nil, err
		}
		if strings.ToUpper(v) != "BACKWARD" {
			return nil, unsupported("schema compatibility strategy %s: Meridian checks BACKWARD only", v)
		}
		return nil, nil
	})
	prefixes := map[string]string{
		"/admin/v2/non-persistent/":  "Meridian's non-persistent topics answer their list and stats only (nothing of them is stored to manage)",
		"/admin/v3/":                 "Meridian has no Pulsar Functions, IO connectors or packages",
		"/admin/v2/functions/":       "Meridian has no Pulsar Functions",
		"/admin/v2/worker/":          "Meridian has no Pulsar Functions worker",
		"/admin/v2/worker-stats/":    "Meridian has no Pulsar Functions worker",
		"/admin/v2/broker-stats/":    "Meridian's broker statistics are Prometheus metrics: GET /metrics",
		"/admin/v2/resource-quotas/": "Meridian has no resource quotas",
		"/admin/v2/resource-quotas":  "Meridian has no resource quotas",
		"/admin/v2/bookies/":         "Meridian's bookies register themselves: see meridian admin storage",
		"/admin/v2/clusters/{cluster}/": "Meridian has no peer clusters, namespace isolation policies or failure domains: " +
			"a namespace replicates to its replication_clusters, and placement is rack- and region-aware from the bookies' labels",
	}
	for p, why := range prefixes {
		h(p, func(r *http.Request) (any, error) { return nil, unsupported("%s", why) })
	}
	h("/", func(r *http.Request) (any, error) { return nil, noSuchCall(r) })
}
