package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// Issue 29, part 1 ("Pulsar's own tools work unchanged"): Pulsar's own Go
// admin client, github.com/apache/pulsar-client-go/pulsaradmin v0.19.0,
// unmodified, against a real `meridian standalone`: every call relevant to
// what Meridian has, with its RESULTS checked (a backlog of 100 after 100
// messages, 90 after skipping 10, the peeked payload is the produced one,
// the rates are those produced, ...), not only its status code. A call of
// a feature Meridian does not have must be refused as Pulsar refuses a
// disabled feature: a 4xx with a JSON reason, never a bare "404 page not
// found". The test prints the table docs/admin.md reproduces.
//
// compatKnownBroken lists the calls that do not work yet, each with why:
// the test fails when a listed call works (take it off the list) and when
// an unlisted one does not. Each value is what the call answered when it
// was listed.
var compatKnownBroken = map[string]string{}

// compatResult is one row of the table.
type compatResult struct {
	call, want, got, detail string
}

type compat struct {
	t       *testing.T
	results []compatResult
}

// wrongData is a call that answered but with wrong or incomplete data.
type wrongData struct{ msg string }

func (w wrongData) Error() string { return w.msg }

func wrongf(format string, a ...any) error { return wrongData{fmt.Sprintf(format, a...)} }

// works runs a call that must succeed; f checks what it answered.
func (c *compat) works(call string, f func() error) {
	c.t.Helper()
	err := f()
	r := compatResult{call: call, want: "works", got: "ok"}
	var w wrongData
	switch {
	case err == nil:
	case errors.As(err, &w):
		r.got, r.detail = "wrong", w.msg
	default:
		r.got, r.detail = "fails", err.Error()
	}
	c.results = append(c.results, r)
}

// refused runs a call of a feature Meridian does not have: it must answer
// a 4xx with a reason (a JSON {"reason": ...}), never a bare 404 page or a
// plain-text 405.
func (c *compat) refused(call string, f func() error) {
	c.t.Helper()
	err := f()
	r := compatResult{call: call, want: "refused", got: "ok"}
	var re rest.Error
	switch {
	case err == nil:
		r.got, r.detail = "wrong", "succeeded, but Meridian does not have this"
	case !errors.As(err, &re):
		r.got, r.detail = "fails", err.Error()
	case re.Code/100 != 4 || !jsonReason(re):
		r.got, r.detail = "fails", err.Error()
	default:
		r.detail = fmt.Sprintf("%d: %s", re.Code, re.Reason)
	}
	c.results = append(c.results, r)
}

// invalid runs a call with a value Pulsar refuses (412 or 400 with a
// reason); check then verifies nothing was stored.
func (c *compat) invalid(call string, f func() error, check func() error) {
	c.t.Helper()
	err := f()
	r := compatResult{call: call, want: "refused (invalid)", got: "ok"}
	var re rest.Error
	switch {
	case err == nil:
		r.got, r.detail = "wrong", "accepted"
	case !errors.As(err, &re):
		r.got, r.detail = "fails", err.Error()
	case (re.Code != http.StatusPreconditionFailed && re.Code != http.StatusBadRequest) || !jsonReason(re):
		r.got, r.detail = "fails", err.Error()
	default:
		r.detail = fmt.Sprintf("%d: %s", re.Code, re.Reason)
		if cerr := check(); cerr != nil {
			r.got, r.detail = "wrong", "refused, but: "+cerr.Error()
		}
	}
	c.results = append(c.results, r)
}

// jsonReason reports whether an admin error carries a reason of its own,
// not the text of a router's default page (rest.Error.Reason is the body
// when it is not JSON, else the status line).
func jsonReason(re rest.Error) bool {
	reason := strings.TrimSpace(re.Reason)
	switch {
	case reason == "", reason == "404 page not found", reason == "Method Not Allowed",
		reason == fmt.Sprintf("%d %s", re.Code, http.StatusText(re.Code)):
		return false
	}
	return true
}

func (c *compat) report() {
	c.t.Helper()
	counts := map[string]int{}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\npulsaradmin v0.19.0 against meridian standalone (%d calls)\n", len(c.results))
	fmt.Fprintf(&sb, "%-64s %-18s %-6s %s\n", "call", "want", "got", "detail")
	for _, r := range c.results {
		counts[r.got]++
		d := r.detail
		if len(d) > 160 {
			d = d[:160] + "..."
		}
		fmt.Fprintf(&sb, "%-64s %-18s %-6s %s\n", r.call, r.want, r.got, d)
	}
	fmt.Fprintf(&sb, "ok %d, wrong %d, fails %d\n", counts["ok"], counts["wrong"], counts["fails"])
	c.t.Log(sb.String())
	seen := map[string]bool{}
	for _, r := range c.results {
		seen[r.call] = true
		_, known := compatKnownBroken[r.call]
		switch {
		case r.got == "ok" && known:
			c.t.Errorf("%s works now: take it off compatKnownBroken", r.call)
		case r.got != "ok" && !known:
			c.t.Errorf("%s: %s: %s", r.call, r.got, r.detail)
		}
	}
	for call := range compatKnownBroken {
		if !seen[call] {
			c.t.Errorf("compatKnownBroken lists %q, which the test does not call", call)
		}
	}
}

func TestPulsarAdminCompat(t *testing.T) {
	s := standalone(t)
	adm, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: s.AdminURL})
	if err != nil {
		t.Fatal(err)
	}
	client := newPulsarClient(t, s.URL)
	c := &compat{t: t}
	defer c.report()
	ctx := context.Background()

	// The region's name, as the first registered cluster.
	cluster := "standalone"
	c.works("Clusters().List", func() error {
		got, err := adm.Clusters().List()
		if err != nil {
			return err
		}
		if len(got) != 1 {
			return wrongf("%v, want the one region", got)
		}
		cluster = got[0]
		return nil
	})
	c.works("Clusters().Get", func() error {
		cd, err := adm.Clusters().Get(cluster)
		if err != nil {
			return err
		}
		if cd.BrokerServiceURL != s.URL || cd.ServiceURL != s.AdminURL {
			return wrongf("%+v, want brokerServiceUrl %s, serviceUrl %s", cd, s.URL, s.AdminURL)
		}
		return nil
	})
	c.refused("Clusters().Create", func() error {
		return adm.Clusters().Create(utils.ClusterData{Name: "elsewhere", ServiceURL: "http://elsewhere:8080"})
	})
	c.refused("Clusters().Update", func() error {
		return adm.Clusters().Update(utils.ClusterData{Name: cluster, ServiceURL: "http://elsewhere:8080"})
	})
	c.refused("Clusters().GetPeerClusters", func() error { _, err := adm.Clusters().GetPeerClusters(cluster); return err })
	c.refused("Clusters().Delete", func() error { return adm.Clusters().Delete(cluster) })

	// Brokers.
	c.works("Brokers().GetActiveBrokers", func() error {
		got, err := adm.Brokers().GetActiveBrokers(cluster)
		if err != nil {
			return err
		}
		if want := strings.TrimPrefix(s.AdminURL, "http://"); len(got) != 1 || got[0] != want {
			return wrongf("%v, want [%s]", got, want)
		}
		return nil
	})
	c.works("Brokers().GetListActiveBrokers", func() error {
		got, err := adm.Brokers().GetListActiveBrokers()
		if err != nil {
			return err
		}
		if want := strings.TrimPrefix(s.AdminURL, "http://"); len(got) != 1 || got[0] != want {
			return wrongf("%v, want [%s]", got, want)
		}
		return nil
	})
	c.refused("Brokers().GetLeaderBroker", func() error { _, err := adm.Brokers().GetLeaderBroker(); return err })
	c.works("Brokers().HealthCheck", func() error { return adm.Brokers().HealthCheck() })
	c.works("Brokers().HealthCheckWithTopicVersion", func() error {
		return adm.Brokers().HealthCheckWithTopicVersion(utils.TopicVersionV2)
	})
	c.works("Brokers().GetAllDynamicConfigurations", func() error {
		got, err := adm.Brokers().GetAllDynamicConfigurations()
		if err != nil {
			return err
		}
		if got == nil || len(got) != 0 {
			return wrongf("%v, want an empty map: Meridian has no dynamic configuration", got)
		}
		return nil
	})
	c.refused("Brokers().DeleteDynamicConfiguration", func() error {
		return adm.Brokers().DeleteDynamicConfiguration("dispatchThrottlingRatePerTopicInMsg")
	})
	c.refused("Brokers().GetRuntimeConfigurations", func() error {
		_, err := adm.Brokers().GetRuntimeConfigurations()
		return err
	})
	c.works("Brokers().GetDynamicConfigurationNames", func() error {
		got, err := adm.Brokers().GetDynamicConfigurationNames()
		if err != nil {
			return err
		}
		if len(got) != 0 {
			return wrongf("%v: Meridian has no dynamic configuration", got)
		}
		return nil
	})
	c.refused("Brokers().UpdateDynamicConfiguration", func() error {
		return adm.Brokers().UpdateDynamicConfiguration("dispatchThrottlingRatePerTopicInMsg", "10")
	})
	c.refused("Brokers().GetInternalConfigurationData", func() error {
		_, err := adm.Brokers().GetInternalConfigurationData()
		return err
	})

	// Tenants.
	c.works("Tenants().Create", func() error {
		return adm.Tenants().Create(utils.TenantData{Name: "compat", AllowedClusters: []string{cluster}})
	})
	c.works("Tenants().List", func() error {
		got, err := adm.Tenants().List()
		if err != nil {
			return err
		}
		if !slices.Contains(got, "compat") || !slices.Contains(got, "public") {
			return wrongf("%v", got)
		}
		return nil
	})
	c.works("Tenants().Update", func() error {
		return adm.Tenants().Update(utils.TenantData{Name: "compat", AdminRoles: []string{"ops"}, AllowedClusters: []string{cluster}})
	})
	c.works("Tenants().Get", func() error {
		td, err := adm.Tenants().Get("compat")
		if err != nil {
			return err
		}
		if !slices.Equal(td.AdminRoles, []string{"ops"}) || !slices.Equal(td.AllowedClusters, []string{cluster}) {
			return wrongf("%+v", td)
		}
		return nil
	})

	// Namespaces.
	ns := "compat/ns"
	nsName, _ := utils.GetNamespaceName(ns)
	pol := "compat/pol" // policies are set here, away from the topics
	c.works("Namespaces().CreateNamespace", func() error {
		if err := adm.Namespaces().CreateNamespace(ns); err != nil {
			return err
		}
		return adm.Namespaces().CreateNamespace(pol)
	})
	c.works("Namespaces().CreateNsWithNumBundles", func() error {
		if err := adm.Namespaces().CreateNsWithNumBundles("compat/b8", 8); err != nil {
			return err
		}
		p, err := adm.Namespaces().GetPolicies("compat/b8")
		if err != nil {
			return err
		}
		if p.Bundles == nil || p.Bundles.NumBundles != 8 || len(p.Bundles.Boundaries) != 9 {
			return wrongf("bundles %+v, want 8", p.Bundles)
		}
		return nil
	})
	c.works("Namespaces().CreateNsWithBundlesData", func() error {
		bd := &utils.BundlesData{NumBundles: 2, Boundaries: []string{"0x00000000", "0x80000000", "0xffffffff"}}
		if err := adm.Namespaces().CreateNsWithBundlesData("compat/b2", bd); err != nil {
			return err
		}
		p, err := adm.Namespaces().GetPolicies("compat/b2")
		if err != nil {
			return err
		}
		if p.Bundles == nil || p.Bundles.NumBundles != 2 || !slices.Equal(p.Bundles.Boundaries, bd.Boundaries) {
			return wrongf("bundles %+v, want %+v", p.Bundles, bd)
		}
		return nil
	})
	c.works("Namespaces().CreateNsWithPolices", func() error {
		p := *utils.NewDefaultPolicies()
		ttl := 30
		p.MessageTTLInSeconds = &ttl
		p.RetentionPolicies = &utils.RetentionPolicies{RetentionTimeInMinutes: 10, RetentionSizeInMB: 20}
		if err := adm.Namespaces().CreateNsWithPolices("compat/withpol", p); err != nil {
			return err
		}
		got, err := adm.Namespaces().GetPolicies("compat/withpol")
		if err != nil {
			return err
		}
		if got.MessageTTLInSeconds == nil || *got.MessageTTLInSeconds != 30 || got.RetentionPolicies == nil || *got.RetentionPolicies != *p.RetentionPolicies {
			return wrongf("ttl %v retention %+v", got.MessageTTLInSeconds, got.RetentionPolicies)
		}
		if !slices.Equal(got.ReplicationClusters, []string{cluster}) {
			return wrongf("replication clusters %v, want [%s]", got.ReplicationClusters, cluster)
		}
		return nil
	})
	c.works("Namespaces().GetNamespaces", func() error {
		got, err := adm.Namespaces().GetNamespaces("compat")
		if err != nil {
			return err
		}
		if !slices.Contains(got, ns) || !slices.Contains(got, "compat/b8") {
			return wrongf("%v", got)
		}
		return nil
	})
	c.works("Namespaces().GetPolicies", func() error {
		p, err := adm.Namespaces().GetPolicies(ns)
		if err != nil {
			return err
		}
		if !slices.Equal(p.ReplicationClusters, []string{cluster}) {
			return wrongf("replication clusters %v", p.ReplicationClusters)
		}
		if p.Bundles == nil || p.Bundles.NumBundles != 4 || len(p.Bundles.Boundaries) != 5 {
			return wrongf("bundles %+v, want the default 4", p.Bundles)
		}
		return nil
	})
	c.works("Namespaces().SetNamespaceMessageTTL", func() error { return adm.Namespaces().SetNamespaceMessageTTL(pol, 60) })
	c.works("Namespaces().GetNamespaceMessageTTL", func() error {
		got, err := adm.Namespaces().GetNamespaceMessageTTL(pol)
		if err != nil {
			return err
		}
		if got != 60 {
			return wrongf("%d, want 60", got)
		}
		return nil
	})
	ttlIs60 := func() error {
		if got, err := adm.Namespaces().GetNamespaceMessageTTL(pol); err != nil || got != 60 {
			return fmt.Errorf("TTL is now %d (%v), want 60", got, err)
		}
		return nil
	}
	c.invalid("Namespaces().SetNamespaceMessageTTL(-5)", func() error { return adm.Namespaces().SetNamespaceMessageTTL(pol, -5) }, ttlIs60)
	c.invalid("Namespaces().SetNamespaceMessageTTL(max int32 + 1)", func() error {
		return adm.Namespaces().SetNamespaceMessageTTL(pol, math.MaxInt32+1)
	}, ttlIs60)
	c.works("Namespaces().RemoveNamespaceMessageTTL", func() error {
		if err := adm.Namespaces().RemoveNamespaceMessageTTL(pol); err != nil {
			return err
		}
		if got, err := adm.Namespaces().GetNamespaceMessageTTL(pol); err != nil || got != -1 {
			return wrongf("after remove: %d (%v), want -1 (not set)", got, err)
		}
		return nil
	})
	ret := utils.RetentionPolicies{RetentionTimeInMinutes: 60, RetentionSizeInMB: 100}
	c.works("Namespaces().SetRetention", func() error { return adm.Namespaces().SetRetention(pol, ret) })
	c.works("Namespaces().GetRetention", func() error {
		got, err := adm.Namespaces().GetRetention(pol)
		if err != nil {
			return err
		}
		if got == nil || *got != ret {
			return wrongf("%+v, want %+v", got, ret)
		}
		return nil
	})
	retUnchanged := func() error {
		if got, err := adm.Namespaces().GetRetention(pol); err != nil || got == nil || *got != ret {
			return fmt.Errorf("retention is now %+v (%v), want %+v", got, err, ret)
		}
		return nil
	}
	c.invalid("Namespaces().SetRetention(-7 minutes)", func() error {
		return adm.Namespaces().SetRetention(pol, utils.RetentionPolicies{RetentionTimeInMinutes: -7, RetentionSizeInMB: 10})
	}, retUnchanged)
	c.invalid("Namespaces().SetRetention(max int64 minutes)", func() error {
		return adm.Namespaces().SetRetention(pol, utils.RetentionPolicies{RetentionTimeInMinutes: math.MaxInt64, RetentionSizeInMB: 10})
	}, retUnchanged)
	c.invalid("Namespaces().SetRetention(0 minutes, 10 MB)", func() error {
		return adm.Namespaces().SetRetention(pol, utils.RetentionPolicies{RetentionTimeInMinutes: 0, RetentionSizeInMB: 10})
	}, retUnchanged)
	c.works("Namespaces().RemoveRetention", func() error {
		if err := adm.Namespaces().RemoveRetention(pol); err != nil {
			return err
		}
		got, err := adm.Namespaces().GetRetention(pol)
		if err != nil {
			return err
		}
		if got != nil && (got.RetentionTimeInMinutes != 0 || got.RetentionSizeInMB != 0) {
			return wrongf("after remove: %+v, want the broker's default (none)", got)
		}
		return nil
	})
	quota := utils.BacklogQuota{LimitSize: 10 << 20, Policy: utils.ProducerRequestHold}
	c.works("Namespaces().SetBacklogQuota", func() error {
		return adm.Namespaces().SetBacklogQuota(pol, quota, utils.DestinationStorage)
	})
	c.works("Namespaces().GetBacklogQuotaMap", func() error {
		got, err := adm.Namespaces().GetBacklogQuotaMap(pol)
		if err != nil {
			return err
		}
		if q := got[utils.DestinationStorage]; q.LimitSize != quota.LimitSize || q.Policy != quota.Policy {
			return wrongf("%+v", got)
		}
		return nil
	})
	c.works("Namespaces().RemoveBacklogQuota", func() error {
		if err := adm.Namespaces().RemoveBacklogQuota(pol); err != nil {
			return err
		}
		got, err := adm.Namespaces().GetBacklogQuotaMap(pol)
		if err != nil {
			return err
		}
		if _, ok := got[utils.DestinationStorage]; ok {
			return wrongf("still there: %+v", got)
		}
		return nil
	})
	c.works("Namespaces().SetDeduplicationStatus", func() error {
		if err := adm.Namespaces().SetDeduplicationStatus(pol, true); err != nil {
			return err
		}
		p, err := adm.Namespaces().GetPolicies(pol)
		if err != nil {
			return err
		}
		if p.DeduplicationEnabled == nil || !*p.DeduplicationEnabled {
			return wrongf("deduplicationEnabled %v", p.DeduplicationEnabled)
		}
		return nil
	})
	persist := utils.PersistencePolicies{BookkeeperEnsemble: 1, BookkeeperWriteQuorum: 1, BookkeeperAckQuorum: 1}
	c.works("Namespaces().SetPersistence", func() error { return adm.Namespaces().SetPersistence(pol, persist) })
	c.works("Namespaces().GetPersistence", func() error {
		got, err := adm.Namespaces().GetPersistence(pol)
		if err != nil {
			return err
		}
		if got == nil || *got != persist {
			return wrongf("%+v, want %+v", got, persist)
		}
		return nil
	})
	c.invalid("Namespaces().SetPersistence(ensemble < write quorum)", func() error {
		return adm.Namespaces().SetPersistence(pol, utils.PersistencePolicies{BookkeeperEnsemble: 1, BookkeeperWriteQuorum: 2, BookkeeperAckQuorum: 1})
	}, func() error {
		if got, err := adm.Namespaces().GetPersistence(pol); err != nil || got == nil || *got != persist {
			return fmt.Errorf("persistence is now %+v (%v)", got, err)
		}
		return nil
	})
	c.works("Namespaces().RemovePersistence", func() error {
		if err := adm.Namespaces().RemovePersistence(pol); err != nil {
			return err
		}
		got, err := adm.Namespaces().GetPersistence(pol)
		if err != nil {
			return err
		}
		if got != nil && *got == persist {
			return wrongf("after remove: still %+v", got)
		}
		return nil
	})
	c.works("Namespaces().GetNamespaceReplicationClusters", func() error {
		got, err := adm.Namespaces().GetNamespaceReplicationClusters(ns)
		if err != nil {
			return err
		}
		if !slices.Equal(got, []string{cluster}) {
			return wrongf("%v", got)
		}
		return nil
	})
	c.works("Namespaces().SetNamespaceReplicationClusters", func() error {
		if err := adm.Namespaces().SetNamespaceReplicationClusters(pol, []string{cluster}); err != nil {
			return err
		}
		got, err := adm.Namespaces().GetNamespaceReplicationClusters(pol)
		if err != nil {
			return err
		}
		if !slices.Equal(got, []string{cluster}) {
			return wrongf("after set: %v, want [%s]", got, cluster)
		}
		return nil
	})
	c.invalid("Namespaces().SetNamespaceReplicationClusters(unknown region)", func() error {
		return adm.Namespaces().SetNamespaceReplicationClusters(pol, []string{cluster, "nowhere"})
	}, func() error {
		if got, err := adm.Namespaces().GetNamespaceReplicationClusters(pol); err != nil || !slices.Equal(got, []string{cluster}) {
			return fmt.Errorf("replication clusters are now %v (%v)", got, err)
		}
		return nil
	})
	c.works("Namespaces().GrantNamespacePermission", func() error {
		return adm.Namespaces().GrantNamespacePermission(*nsName, "app", []utils.AuthAction{"produce", "consume"})
	})
	c.works("Namespaces().GetNamespacePermissions", func() error {
		got, err := adm.Namespaces().GetNamespacePermissions(*nsName)
		if err != nil {
			return err
		}
		acts := got["app"]
		sort.Slice(acts, func(i, j int) bool { return acts[i] < acts[j] })
		if !slices.Equal(acts, []utils.AuthAction{"consume", "produce"}) {
			return wrongf("%v", got)
		}
		return nil
	})
	c.works("Namespaces().RevokeNamespacePermission", func() error {
		if err := adm.Namespaces().RevokeNamespacePermission(*nsName, "app"); err != nil {
			return err
		}
		got, err := adm.Namespaces().GetNamespacePermissions(*nsName)
		if err != nil {
			return err
		}
		if _, ok := got["app"]; ok {
			return wrongf("still there: %v", got)
		}
		return nil
	})
	polName, _ := utils.GetNamespaceName(pol)
	c.refused("Namespaces().SetMaxProducersPerTopic", func() error { return adm.Namespaces().SetMaxProducersPerTopic(*polName, 5) })
	c.refused("Namespaces().SetDispatchRate", func() error {
		return adm.Namespaces().SetDispatchRate(*polName, utils.DispatchRate{DispatchThrottlingRateInMsg: 10, RatePeriodInSecond: 1})
	})

	c.works("Namespaces().GetSchemaCompatibilityStrategy", func() error {
		got, err := adm.Namespaces().GetSchemaCompatibilityStrategy(*polName)
		if err != nil {
			return err
		}
		if got != utils.SchemaCompatibilityStrategyBackward {
			return wrongf("%q, want BACKWARD (the only strategy Meridian has)", got)
		}
		return nil
	})
	c.works("Namespaces().SetSchemaCompatibilityStrategy(BACKWARD)", func() error {
		return adm.Namespaces().SetSchemaCompatibilityStrategy(*polName, utils.SchemaCompatibilityStrategyBackward)
	})
	c.refused("Namespaces().SetSchemaCompatibilityStrategy(FULL)", func() error {
		return adm.Namespaces().SetSchemaCompatibilityStrategy(*polName, utils.SchemaCompatibilityStrategyFull)
	})

	// Topics.
	tn := func(local string) utils.TopicName {
		n, err := utils.GetTopicName("persistent://" + ns + "/" + local)
		if err != nil {
			t.Fatal(err)
		}
		return *n
	}
	np, part := tn("np"), tn("part")
	c.works("Topics().Create(non-partitioned)", func() error {
		if err := adm.Topics().Create(np, 0); err != nil {
			return err
		}
		var re rest.Error
		if err := adm.Topics().Create(np, 0); !errors.As(err, &re) || re.Code != http.StatusConflict {
			return wrongf("second create: %v, want 409", err)
		}
		return nil
	})
	c.works("Topics().Create(partitioned)", func() error {
		if err := adm.Topics().Create(part, 3); err != nil {
			return err
		}
		md, err := adm.Topics().GetMetadata(part)
		if err != nil {
			return err
		}
		if md.Partitions != 3 {
			return wrongf("metadata %+v, want 3 partitions", md)
		}
		return nil
	})
	c.works("Topics().Update(partitions)", func() error {
		if err := adm.Topics().Update(part, 4); err != nil {
			return err
		}
		md, err := adm.Topics().GetMetadata(part)
		if err != nil {
			return err
		}
		if md.Partitions != 4 {
			return wrongf("metadata %+v, want 4 partitions", md)
		}
		return nil
	})
	c.works("Topics().GetMetadata(non-partitioned)", func() error {
		md, err := adm.Topics().GetMetadata(np)
		if err != nil {
			return err
		}
		if md.Partitions != 0 {
			return wrongf("%+v, want 0", md)
		}
		return nil
	})
	c.works("Topics().List", func() error {
		parted, plain, err := adm.Topics().List(*nsName)
		if err != nil {
			return err
		}
		if !slices.Contains(parted, part.String()) || !slices.Contains(plain, np.String()) {
			return wrongf("partitioned %v, non-partitioned %v", parted, plain)
		}
		return nil
	})
	c.works("Namespaces().GetTopics", func() error {
		got, err := adm.Namespaces().GetTopics(ns)
		if err != nil {
			return err
		}
		if !slices.Contains(got, np.String()) || !slices.Contains(got, part.String()+"-partition-0") {
			return wrongf("%v", got)
		}
		return nil
	})

	// Stats: a durable subscription made through the admin API, 100
	// messages at a known rate, a consumer that reads them all.
	st := tn("stats")
	stName := st.String()
	c.works("Subscriptions().Create(Latest)", func() error {
		if err := adm.Topics().Create(st, 0); err != nil {
			return err
		}
		return adm.Subscriptions().Create(st, "durable", utils.Latest)
	})
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: stName, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 100
	payload := func(i int) string { return fmt.Sprintf("msg-%03d-%s", i, strings.Repeat("x", 90)) }
	start := time.Now()
	tick := time.NewTicker(40 * time.Millisecond) // 25 messages a second
	var ids []pulsar.MessageID
	for i := 0; i < n; i++ {
		<-tick.C
		id, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload(i)), Properties: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	tick.Stop()
	rate := float64(n) / time.Since(start).Seconds()
	within := func(got, want float64) bool { return got >= want*0.5 && got <= want*1.5 }
	c.works("Topics().GetStats (producer side)", func() error {
		ts, err := adm.Topics().GetStats(st)
		if err != nil {
			return err
		}
		var bad []string
		if ts.MsgCounterIn != n {
			bad = append(bad, fmt.Sprintf("msgInCounter %d, want %d", ts.MsgCounterIn, n))
		}
		if !within(ts.MsgRateIn, rate) {
			bad = append(bad, fmt.Sprintf("msgRateIn %.1f, want ~%.1f", ts.MsgRateIn, rate))
		}
		if min := rate * float64(len(payload(0))); !within(ts.MsgThroughputIn, min*1.2) {
			bad = append(bad, fmt.Sprintf("msgThroughputIn %.0f, want ~%.0f", ts.MsgThroughputIn, min*1.2))
		}
		if ts.AverageMsgSize < float64(len(payload(0))) {
			bad = append(bad, fmt.Sprintf("averageMsgSize %.0f", ts.AverageMsgSize))
		}
		if ts.StorageSize <= 0 {
			bad = append(bad, fmt.Sprintf("storageSize %d", ts.StorageSize))
		}
		if len(ts.Publishers) != 1 || !within(ts.Publishers[0].MsgRateIn, rate) || ts.Publishers[0].ProducerName != prod.Name() {
			bad = append(bad, fmt.Sprintf("publishers %+v", ts.Publishers))
		}
		// The namespace sets no deduplication: Meridian's default is on.
		if ts.DeDuplicationStatus != "Enabled" {
			bad = append(bad, fmt.Sprintf("deduplicationStatus %q, want Enabled (Meridian's default)", ts.DeDuplicationStatus))
		}
		if ts.Replication == nil || len(ts.Replication) != 0 {
			bad = append(bad, fmt.Sprintf("replication %v, want {} (no other region)", ts.Replication))
		}
		sub := ts.Subscriptions["durable"]
		if sub.MsgBacklog != n || !sub.IsDurable {
			bad = append(bad, fmt.Sprintf("subscription durable: msgBacklog %d isDurable %v, want %d true", sub.MsgBacklog, sub.IsDurable, n))
		}
		if len(bad) > 0 {
			return wrongf("%s", strings.Join(bad, "; "))
		}
		return nil
	})
	c.works("Topics().GetStatsWithOption", func() error {
		ts, err := adm.Topics().GetStatsWithOption(st, utils.GetStatsOptions{GetPreciseBacklog: true, SubscriptionBacklogSize: true})
		if err != nil {
			return err
		}
		if ts.MsgCounterIn != n || ts.Subscriptions["durable"].MsgBacklog != n || ts.Subscriptions["durable"].BacklogSize <= 0 {
			return wrongf("msgInCounter %d, durable %+v, want %d and a backlog of %d", ts.MsgCounterIn, ts.Subscriptions["durable"], n, n)
		}
		return nil
	})
	// Read at a known rate too: a receiver queue of 1 makes the broker
	// send each message when the last one was taken, 25 a second.
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: stName, SubscriptionName: "reader", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		ReceiverQueueSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	readStart := time.Now()
	tick = time.NewTicker(40 * time.Millisecond)
	for i := 0; i < n; i++ {
		<-tick.C
		receiveN(t, cons, 1, true)
	}
	tick.Stop()
	readRate := float64(n) / time.Since(readStart).Seconds()
	c.works("Topics().GetStats (consumer side)", func() error {
		var ts utils.TopicStats
		var sub utils.SubscriptionStats
		// Acknowledgements travel in groups: wait for them.
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			if ts, err = adm.Topics().GetStats(st); err != nil {
				return err
			}
			if sub = ts.Subscriptions["reader"]; sub.MsgBacklog == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		inRate := func(r float64) bool { return within(r, readRate) }
		var bad []string
		if ts.MsgCounterOut != n || !inRate(ts.MsgRateOut) || ts.MsgThroughputOut <= 0 {
			bad = append(bad, fmt.Sprintf("msgOutCounter %d msgRateOut %.1f msgThroughputOut %.0f, want %d and msgRateOut ~%.1f (the read rate)", ts.MsgCounterOut, ts.MsgRateOut, ts.MsgThroughputOut, n, readRate))
		}
		// What was read is what was produced: the bytes per message out are
		// those in.
		if per := ts.MsgThroughputOut / max(ts.MsgRateOut, 1e-9); per < float64(len(payload(0))) || per > 2*float64(len(payload(0))) {
			bad = append(bad, fmt.Sprintf("msgThroughputOut/msgRateOut = %.0f bytes a message, want ~%d", per, len(payload(0))))
		}
		if sub.MsgBacklog != 0 || sub.MsgOutCounter != n || !inRate(sub.MsgRateOut) || !sub.IsDurable || sub.SubType != "Exclusive" {
			bad = append(bad, fmt.Sprintf("subscription reader: %+v", sub))
		}
		if len(sub.Consumers) != 1 || sub.Consumers[0].MsgOutCounter != n || sub.Consumers[0].ConsumerName == "" || !inRate(sub.Consumers[0].MsgRateOut) {
			bad = append(bad, fmt.Sprintf("consumers %+v", sub.Consumers))
		}
		if len(bad) > 0 {
			return wrongf("%s", strings.Join(bad, "; "))
		}
		return nil
	})
	cons.Close()

	// A cursor with holes: acknowledge 3, 6 and 7 of the first 10.
	holes, err := client.Subscribe(pulsar.ConsumerOptions{Topic: stName, SubscriptionName: "holes", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		AckGroupingOptions: &pulsar.AckGroupingOptions{MaxSize: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range receiveN(t, holes, 10, false) {
		if i == 3 || i == 6 || i == 7 {
			holes.Ack(m)
		}
	}
	c.works("Topics().GetInternalStats", func() error {
		pos := func(i int) string { return fmt.Sprintf("%d:%d", ids[i].LedgerID(), ids[i].EntryID()) }
		before := fmt.Sprintf("%d:%d", ids[0].LedgerID(), ids[0].EntryID()-1)
		wantHoles := fmt.Sprintf("[(%s..%s], (%s..%s]]", pos(2), pos(3), pos(5), pos(7))
		var is utils.PersistentTopicInternalStats
		var cur utils.CursorStats
		// The three acks are separate frames: wait for all of them, not
		// for the first (a CI run under load read the cursor between the
		// ack of 3 and those of 6 and 7: "[(59:2..59:3]]").
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			if is, err = adm.Topics().GetInternalStats(st); err != nil {
				return err
			}
			if cur = is.Cursors["holes"]; cur.IndividuallyDeletedMessages == wantHoles || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		var bad []string
		if is.NumberOfEntries != n || len(is.Ledgers) == 0 || is.LastConfirmedEntry != fmt.Sprintf("%d:%d", ids[n-1].LedgerID(), ids[n-1].EntryID()) {
			bad = append(bad, fmt.Sprintf("numberOfEntries %d lastConfirmedEntry %s ledgers %d", is.NumberOfEntries, is.LastConfirmedEntry, len(is.Ledgers)))
		}
		if cur.MarkDeletePosition != before || cur.IndividuallyDeletedMessages != wantHoles {
			bad = append(bad, fmt.Sprintf("cursor holes: markDeletePosition %q individuallyDeletedMessages %q, want %q %q", cur.MarkDeletePosition, cur.IndividuallyDeletedMessages, before, wantHoles))
		}
		if d, ok := is.Cursors["durable"]; !ok || d.MarkDeletePosition != before {
			bad = append(bad, fmt.Sprintf("cursor durable %+v (present %v), want markDeletePosition %s", d, ok, before))
		}
		if r, ok := is.Cursors["reader"]; !ok || r.MarkDeletePosition != pos(n-1) {
			bad = append(bad, fmt.Sprintf("cursor reader %+v (present %v), want markDeletePosition %s", r, ok, pos(n-1)))
		}
		if len(bad) > 0 {
			return wrongf("%s", strings.Join(bad, "; "))
		}
		return nil
	})
	holes.Close()
	c.works("Topics().GetInternalInfo", func() error {
		info, err := adm.Topics().GetInternalInfo(st)
		if err != nil {
			return err
		}
		var entries int64
		for _, l := range info.Ledgers {
			entries += l.Entries
		}
		d, ok := info.Cursors["durable"]
		if len(info.Ledgers) == 0 || !ok || d.MarkDelete.LedgerID != ids[0].LedgerID() || d.MarkDelete.EntryID != ids[0].EntryID()-1 {
			return wrongf("%+v", info)
		}
		return nil
	})
	c.works("Topics().GetLastMessageID", func() error {
		id, err := adm.Topics().GetLastMessageID(st)
		if err != nil {
			return err
		}
		if id.LedgerID != ids[n-1].LedgerID() || id.EntryID != ids[n-1].EntryID() {
			return wrongf("%+v, want %d:%d", id, ids[n-1].LedgerID(), ids[n-1].EntryID())
		}
		return nil
	})
	c.works("Topics().GetMessageID(timestamp)", func() error {
		id, err := adm.Topics().GetMessageID(st, start.Add(-time.Second).UnixMilli())
		if err != nil {
			return err
		}
		if id.LedgerID != ids[0].LedgerID() || id.EntryID != ids[0].EntryID() {
			return wrongf("%+v, want the first message %d:%d", id, ids[0].LedgerID(), ids[0].EntryID())
		}
		return nil
	})
	c.works("Topics().Lookup", func() error {
		ld, err := adm.Topics().Lookup(st)
		if err != nil {
			return err
		}
		if ld.BrokerURL != s.URL || ld.HTTPURL != s.AdminURL {
			return wrongf("%+v, want brokerUrl %s httpUrl %s", ld, s.URL, s.AdminURL)
		}
		return nil
	})
	c.works("Topics().GetBundleRange", func() error {
		br, err := adm.Topics().GetBundleRange(st)
		if err != nil {
			return err
		}
		p, err := adm.Namespaces().GetPolicies(ns)
		if err != nil {
			return err
		}
		ok := false
		for i := 0; p.Bundles != nil && i+1 < len(p.Bundles.Boundaries); i++ {
			ok = ok || br == p.Bundles.Boundaries[i]+"_"+p.Bundles.Boundaries[i+1]
		}
		if !ok {
			return wrongf("%q is none of the bundles of %+v", br, p.Bundles)
		}
		return nil
	})
	c.works("Brokers().GetOwnedNamespaces", func() error {
		br, err := adm.Topics().GetBundleRange(st)
		if err != nil {
			return err
		}
		got, err := adm.Brokers().GetOwnedNamespaces(cluster, strings.TrimPrefix(s.AdminURL, "http://"))
		if err != nil {
			return err
		}
		// Pulsar's keys are the owned bundles, "tenant/ns/0xLOWER_0xUPPER".
		if o, ok := got[ns+"/"+br]; !ok || !o.IsActive {
			return wrongf("%v, want the bundle %s/%s active", got, ns, br)
		}
		return nil
	})
	c.works("Topics().Unload", func() error {
		if err := adm.Topics().Unload(st); err != nil {
			return err
		}
		// The topic loads again on its next use, its data and cursors kept.
		ts, err := adm.Topics().GetStats(st)
		if err != nil {
			return err
		}
		if ts.Subscriptions["durable"].MsgBacklog != n {
			return wrongf("after unload: backlog %d, want %d", ts.Subscriptions["durable"].MsgBacklog, n)
		}
		// Its counters restart with the load, as Pulsar's do.
		if ts.MsgCounterIn != 0 {
			return wrongf("after unload: msgInCounter %d: the topic was not reloaded", ts.MsgCounterIn)
		}
		return nil
	})
	prod.Close()

	// Partitioned stats: 40 messages over the 4 partitions.
	c.works("Topics().GetPartitionedStats", func() error {
		pp, err := client.CreateProducer(pulsar.ProducerOptions{Topic: part.String(), DisableBatching: true})
		if err != nil {
			return err
		}
		defer pp.Close()
		for i := 0; i < 40; i++ {
			if _, err := pp.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("p"), Key: fmt.Sprint(i)}); err != nil {
				return err
			}
		}
		ps, err := adm.Topics().GetPartitionedStats(part, true)
		if err != nil {
			return err
		}
		var in int64
		for _, p := range ps.Partitions {
			in += p.MsgCounterIn
		}
		// One publisher per partition: the Go client's partition producers
		// have names of their own.
		if ps.Metadata.Partitions != 4 || len(ps.Partitions) != 4 || in != 40 || ps.MsgRateIn <= 0 || len(ps.Publishers) != 4 {
			return wrongf("metadata %+v partitions %d msgInCounter %d msgRateIn %.1f publishers %d", ps.Metadata, len(ps.Partitions), in, ps.MsgRateIn, len(ps.Publishers))
		}
		return nil
	})
	c.works("Topics().GetPartitionedStatsWithOption", func() error {
		ps, err := adm.Topics().GetPartitionedStatsWithOption(part, false, utils.GetStatsOptions{GetPreciseBacklog: true})
		if err != nil {
			return err
		}
		if ps.Metadata.Partitions != 4 || len(ps.Partitions) != 0 || ps.MsgRateIn <= 0 || ps.StorageSize <= 0 {
			return wrongf("metadata %+v partitions %d msgRateIn %.1f storageSize %d, want 4, none listed (perPartition false), > 0, > 0", ps.Metadata, len(ps.Partitions), ps.MsgRateIn, ps.StorageSize)
		}
		return nil
	})

	// Subscriptions on a topic holding 100 messages.
	cur := tn("cursor")
	cp, err := client.CreateProducer(pulsar.ProducerOptions{Topic: cur.String(), DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	ids = ids[:0]
	for i := 0; i < n; i++ {
		id, err := cp.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload(i)), Properties: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	cp.Close()
	produced := time.Now()
	backlogOf := func(sub string) (int64, error) {
		ts, err := adm.Topics().GetStats(cur)
		if err != nil {
			return 0, err
		}
		ss, ok := ts.Subscriptions[sub]
		if !ok {
			return 0, fmt.Errorf("no subscription %s in %v", sub, ts.Subscriptions)
		}
		return ss.MsgBacklog, nil
	}
	wantBacklog := func(sub string, want int64) error {
		got, err := backlogOf(sub)
		if err != nil {
			return err
		}
		if got != want {
			return wrongf("backlog of %s is %d, want %d", sub, got, want)
		}
		return nil
	}
	uid := func(i int) utils.MessageID {
		return utils.MessageID{LedgerID: ids[i].LedgerID(), EntryID: ids[i].EntryID(), PartitionIndex: -1}
	}
	c.works("Subscriptions().Create(Latest) on 100 messages", func() error {
		if err := adm.Subscriptions().Create(cur, "latest", utils.Latest); err != nil {
			return err
		}
		return wantBacklog("latest", 0)
	})
	c.works("Subscriptions().Create(Earliest)", func() error {
		if err := adm.Subscriptions().Create(cur, "earliest", utils.Earliest); err != nil {
			return err
		}
		return wantBacklog("earliest", n)
	})
	c.works("Subscriptions().Create(message id)", func() error {
		if err := adm.Subscriptions().Create(cur, "at50", uid(50)); err != nil {
			return err
		}
		return wantBacklog("at50", n-50)
	})
	c.works("Subscriptions().List", func() error {
		got, err := adm.Subscriptions().List(cur)
		if err != nil {
			return err
		}
		sort.Strings(got)
		if !slices.Equal(got, []string{"at50", "earliest", "latest"}) {
			return wrongf("%v", got)
		}
		return nil
	})
	c.works("Subscriptions().SkipMessages", func() error {
		if err := adm.Subscriptions().SkipMessages(cur, "earliest", 10); err != nil {
			return err
		}
		return wantBacklog("earliest", n-10)
	})
	c.works("Subscriptions().PeekMessages", func() error {
		ms, err := adm.Subscriptions().PeekMessages(cur, "earliest", 3)
		if err != nil {
			return err
		}
		if len(ms) != 3 {
			return wrongf("%d messages, want 3", len(ms))
		}
		for i, m := range ms {
			if string(m.Payload) != payload(10+i) || m.Properties["k"] != "v" || m.MessageID.LedgerID != ids[10+i].LedgerID() || m.MessageID.EntryID != ids[10+i].EntryID() {
				return wrongf("message %d: %s %q %v, want %d:%d %q", i, m.MessageID, m.Payload, m.Properties, ids[10+i].LedgerID(), ids[10+i].EntryID(), payload(10+i))
			}
		}
		return wantBacklog("earliest", n-10) // peeking consumes nothing
	})
	c.works("Subscriptions().GetMessageByID", func() error {
		m, err := adm.Subscriptions().GetMessageByID(cur, ids[42].LedgerID(), ids[42].EntryID())
		if err != nil {
			return err
		}
		if m == nil || string(m.Payload) != payload(42) {
			return wrongf("%+v, want %q", m, payload(42))
		}
		return nil
	})
	c.works("Subscriptions().GetMessagesByID", func() error {
		ms, err := adm.Subscriptions().GetMessagesByID(cur, ids[43].LedgerID(), ids[43].EntryID())
		if err != nil {
			return err
		}
		if len(ms) != 1 || string(ms[0].Payload) != payload(43) || ms[0].Properties["k"] != "v" {
			return wrongf("%d messages, want one: %q", len(ms), payload(43))
		}
		return nil
	})
	c.works("Subscriptions().ResetCursorToMessageID", func() error {
		if err := adm.Subscriptions().ResetCursorToMessageID(cur, "earliest", uid(70)); err != nil {
			return err
		}
		return wantBacklog("earliest", n-70)
	})
	c.works("Subscriptions().ResetCursorToTimestamp", func() error {
		if err := adm.Subscriptions().ResetCursorToTimestamp(cur, "earliest", 0); err != nil {
			return err
		}
		return wantBacklog("earliest", n)
	})
	c.works("Subscriptions().ClearBacklog", func() error {
		if err := adm.Subscriptions().ClearBacklog(cur, "earliest"); err != nil {
			return err
		}
		return wantBacklog("earliest", 0)
	})
	time.Sleep(time.Until(produced.Add(1500 * time.Millisecond)))
	c.works("Subscriptions().ExpireMessages", func() error {
		if err := adm.Subscriptions().ExpireMessages(cur, "at50", 1); err != nil {
			return err
		}
		return wantBacklog("at50", 0)
	})
	c.works("Subscriptions().ExpireAllMessages", func() error {
		for _, sub := range []string{"earliest", "at50"} {
			if err := adm.Subscriptions().ResetCursorToTimestamp(cur, sub, 0); err != nil {
				return err
			}
		}
		if err := adm.Subscriptions().ExpireAllMessages(cur, 1); err != nil {
			return err
		}
		if err := wantBacklog("earliest", 0); err != nil {
			return err
		}
		return wantBacklog("at50", 0)
	})
	c.works("Subscriptions().Delete", func() error {
		if err := adm.Subscriptions().Delete(cur, "latest"); err != nil {
			return err
		}
		got, err := adm.Subscriptions().List(cur)
		if err != nil {
			return err
		}
		if slices.Contains(got, "latest") {
			return wrongf("still listed: %v", got)
		}
		return nil
	})
	c.works("Subscriptions().ForceDelete", func() error {
		if err := adm.Subscriptions().ResetCursorToTimestamp(cur, "at50", 0); err != nil {
			return err
		}
		cc, err := client.Subscribe(pulsar.ConsumerOptions{Topic: cur.String(), SubscriptionName: "at50"})
		if err != nil {
			return err
		}
		err = adm.Subscriptions().ForceDelete(cur, "at50")
		cc.Close()
		if err != nil {
			return err
		}
		// The consumer the delete closed may have subscribed again before
		// it was closed here, which creates the subscription anew at the
		// end of the topic (as with Pulsar): then its backlog is 0, not
		// the 100 the deleted one had.
		got, err := adm.Subscriptions().List(cur)
		if err != nil {
			return err
		}
		if slices.Contains(got, "at50") {
			return wantBacklog("at50", 0)
		}
		return nil
	})

	// Namespace-wide cursor operations.
	c.works("Namespaces().ClearNamespaceBacklogForSubscription", func() error {
		if err := adm.Subscriptions().ResetCursorToTimestamp(cur, "earliest", 0); err != nil {
			return err
		}
		if err := adm.Namespaces().ClearNamespaceBacklogForSubscription(*nsName, "earliest"); err != nil {
			return err
		}
		return wantBacklog("earliest", 0)
	})
	c.works("Namespaces().ClearNamespaceBacklog", func() error {
		if err := adm.Subscriptions().ResetCursorToTimestamp(cur, "earliest", 0); err != nil {
			return err
		}
		if err := adm.Namespaces().ClearNamespaceBacklog(*nsName); err != nil {
			return err
		}
		if err := wantBacklog("earliest", 0); err != nil {
			return err
		}
		ts, err := adm.Topics().GetStats(st)
		if err != nil {
			return err
		}
		if b := ts.Subscriptions["durable"].MsgBacklog; b != 0 {
			return wrongf("backlog of %s/durable is %d, want 0", stName, b)
		}
		return nil
	})
	curBundle := func() (string, error) { return adm.Topics().GetBundleRange(cur) }
	c.works("Namespaces().ClearNamespaceBundleBacklogForSubscription", func() error {
		if err := adm.Subscriptions().ResetCursorToTimestamp(cur, "earliest", 0); err != nil {
			return err
		}
		br, err := curBundle()
		if err != nil {
			return err
		}
		if err := adm.Namespaces().ClearNamespaceBundleBacklogForSubscription(*nsName, br, "earliest"); err != nil {
			return err
		}
		return wantBacklog("earliest", 0)
	})
	c.works("Namespaces().ClearNamespaceBundleBacklog", func() error {
		if err := adm.Subscriptions().ResetCursorToTimestamp(cur, "earliest", 0); err != nil {
			return err
		}
		br, err := curBundle()
		if err != nil {
			return err
		}
		if err := adm.Namespaces().ClearNamespaceBundleBacklog(*nsName, br); err != nil {
			return err
		}
		return wantBacklog("earliest", 0)
	})
	c.works("Namespaces().UnsubscribeNamespaceBundle", func() error {
		if err := adm.Subscriptions().Create(cur, "bundlesub", utils.Earliest); err != nil {
			return err
		}
		br, err := curBundle()
		if err != nil {
			return err
		}
		if err := adm.Namespaces().UnsubscribeNamespaceBundle(*nsName, br, "bundlesub"); err != nil {
			return err
		}
		got, err := adm.Subscriptions().List(cur)
		if err != nil {
			return err
		}
		if slices.Contains(got, "bundlesub") || !slices.Contains(got, "earliest") {
			return wrongf("after unsubscribing bundlesub: %v", got)
		}
		return nil
	})
	c.works("Namespaces().UnsubscribeNamespace", func() error {
		if err := adm.Namespaces().UnsubscribeNamespace(*nsName, "earliest"); err != nil {
			return err
		}
		got, err := adm.Subscriptions().List(cur)
		if err != nil {
			return err
		}
		if slices.Contains(got, "earliest") {
			return wrongf("still listed: %v", got)
		}
		return nil
	})

	// Bundles. An unload is seen in the topic's counters, which restart
	// when it loads again: one message is produced before each.
	bp, err := client.CreateProducer(pulsar.ProducerOptions{Topic: stName, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bp.Close()
	produceOne := func() error {
		if _, err := bp.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("one")}); err != nil {
			return err
		}
		ts, err := adm.Topics().GetStats(st)
		if err != nil {
			return err
		}
		if ts.MsgCounterIn != 1 {
			return wrongf("before the unload: msgInCounter %d, want 1", ts.MsgCounterIn)
		}
		return nil
	}
	c.works("Namespaces().UnloadNamespaceBundle", func() error {
		if err := produceOne(); err != nil {
			return err
		}
		br, err := adm.Topics().GetBundleRange(st)
		if err != nil {
			return err
		}
		if err := adm.Namespaces().UnloadNamespaceBundle(ns, br); err != nil {
			return err
		}
		ts, err := adm.Topics().GetStats(st)
		if err != nil {
			return err
		}
		if ts.MsgCounterIn != 0 {
			return wrongf("after the bundle unload the topic was not reloaded: msgInCounter %d", ts.MsgCounterIn)
		}
		return nil
	})
	c.works("Namespaces().SplitNamespaceBundle", func() error {
		p, err := adm.Namespaces().GetPolicies(ns)
		if err != nil {
			return err
		}
		if p.Bundles == nil || len(p.Bundles.Boundaries) < 2 {
			return wrongf("bundles %+v", p.Bundles)
		}
		if err := adm.Namespaces().SplitNamespaceBundle(ns, p.Bundles.Boundaries[0]+"_"+p.Bundles.Boundaries[1], false); err != nil {
			return err
		}
		p, err = adm.Namespaces().GetPolicies(ns)
		if err != nil {
			return err
		}
		if p.Bundles == nil || p.Bundles.NumBundles != 5 {
			return wrongf("after the split: %+v, want 5 bundles", p.Bundles)
		}
		return nil
	})
	c.works("Namespaces().Unload", func() error {
		if err := produceOne(); err != nil {
			return err
		}
		if err := adm.Namespaces().Unload(ns); err != nil {
			return err
		}
		ts, err := adm.Topics().GetStats(st)
		if err != nil {
			return err
		}
		if ts.MsgCounterIn != 0 {
			return wrongf("after the namespace unload the topic was not reloaded: msgInCounter %d", ts.MsgCounterIn)
		}
		return nil
	})

	// What Meridian does not have: topic-level policies, termination,
	// compaction, offload, topic-level permissions.
	c.refused("Topics().GetRetention (topic policy)", func() error { _, err := adm.Topics().GetRetention(st, false); return err })
	c.refused("Topics().SetMessageTTL (topic policy)", func() error { return adm.Topics().SetMessageTTL(st, 10) })
	c.refused("Topics().Terminate", func() error { _, err := adm.Topics().Terminate(st); return err })
	c.refused("Topics().Compact", func() error { return adm.Topics().Compact(st) })
	c.refused("Topics().Offload", func() error { return adm.Topics().Offload(st, utils.Latest) })
	c.refused("Topics().CreateWithProperties", func() error {
		return adm.Topics().CreateWithProperties(tn("props"), 0, map[string]string{"owner": "ops"})
	})
	c.refused("Topics().GetProperties", func() error { _, err := adm.Topics().GetProperties(st); return err })
	c.refused("Topics().GetPermissions", func() error { _, err := adm.Topics().GetPermissions(st); return err })
	c.refused("Topics().GrantPermission", func() error {
		return adm.Topics().GrantPermission(st, "app", []utils.AuthAction{"produce"})
	})

	// Schemas.
	sch := "persistent://" + ns + "/schema"
	def := `{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}`
	info := utils.SchemaInfo{Name: "schema", Type: "JSON", Schema: []byte(def), Properties: map[string]string{"p": "1"}}
	c.works("Schemas().CreateSchemaBySchemaInfo", func() error { return adm.Schemas().CreateSchemaBySchemaInfo(sch, info) })
	c.works("Schemas().GetSchemaInfo", func() error {
		got, err := adm.Schemas().GetSchemaInfo(sch)
		if err != nil {
			return err
		}
		if got.Type != "JSON" || string(got.Schema) != def || got.Properties["p"] != "1" {
			return wrongf("%+v", got)
		}
		return nil
	})
	c.works("Schemas().GetSchemaInfoWithVersion", func() error {
		got, err := adm.Schemas().GetSchemaInfoWithVersion(sch)
		if err != nil {
			return err
		}
		if got.Version != 0 || got.SchemaInfo == nil || string(got.SchemaInfo.Schema) != def {
			return wrongf("%+v", got)
		}
		return nil
	})
	c.works("Schemas().GetSchemaInfoByVersion", func() error {
		got, err := adm.Schemas().GetSchemaInfoByVersion(sch, 0)
		if err != nil {
			return err
		}
		if string(got.Schema) != def {
			return wrongf("%+v", got)
		}
		return nil
	})
	c.works("Schemas().GetAllSchemas", func() error {
		got, err := adm.Schemas().GetAllSchemas(sch)
		if err != nil {
			return err
		}
		if len(got) != 1 || got[0].Version != 0 {
			return wrongf("%+v", got)
		}
		return nil
	})
	c.works("Schemas().GetVersionBySchemaInfo", func() error {
		v, err := adm.Schemas().GetVersionBySchemaInfo(sch, info)
		if err != nil {
			return err
		}
		if v != 0 {
			return wrongf("version %d, want 0", v)
		}
		return nil
	})
	c.works("Schemas().TestCompatibilityWithSchemaInfo", func() error {
		ok := info
		ok.Schema = []byte(`{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"int","default":0}]}`)
		bad := info
		bad.Schema = []byte(`{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"c","type":"int"}]}`)
		yes, err := adm.Schemas().TestCompatibilityWithSchemaInfo(sch, ok)
		if err != nil {
			return err
		}
		no, err := adm.Schemas().TestCompatibilityWithSchemaInfo(sch, bad)
		if err != nil {
			return err
		}
		if !yes.IsCompatibility || no.IsCompatibility {
			return wrongf("a field with a default: %+v; without: %+v", yes, no)
		}
		if all, err := adm.Schemas().GetAllSchemas(sch); err != nil || len(all) != 1 {
			return wrongf("the test stored a schema: %d versions (%v)", len(all), err)
		}
		return nil
	})
	payloadDef := `{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"d","type":"int","default":1}]}`
	post := utils.PostSchemaPayload{SchemaType: "JSON", Schema: payloadDef, Properties: map[string]string{"p": "2"}}
	c.works("Schemas().TestCompatibilityWithPostSchemaPayload", func() error {
		yes, err := adm.Schemas().TestCompatibilityWithPostSchemaPayload(sch, post)
		if err != nil {
			return err
		}
		bad := post
		bad.Schema = `{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}`
		no, err := adm.Schemas().TestCompatibilityWithPostSchemaPayload(sch, bad)
		if err != nil {
			return err
		}
		if !yes.IsCompatibility || no.IsCompatibility {
			return wrongf("a field with a default: %+v; a changed type: %+v", yes, no)
		}
		return nil
	})
	c.works("Schemas().CreateSchemaByPayload", func() error {
		if err := adm.Schemas().CreateSchemaByPayload(sch, post); err != nil {
			return err
		}
		got, err := adm.Schemas().GetSchemaInfoWithVersion(sch)
		if err != nil {
			return err
		}
		if got.Version != 1 || got.SchemaInfo == nil || string(got.SchemaInfo.Schema) != payloadDef || got.SchemaInfo.Properties["p"] != "2" {
			return wrongf("%+v, want version 1 with the posted schema", got)
		}
		return nil
	})
	c.works("Schemas().GetVersionByPayload", func() error {
		v, err := adm.Schemas().GetVersionByPayload(sch, post)
		if err != nil {
			return err
		}
		if v != 1 {
			return wrongf("version %d, want 1", v)
		}
		return nil
	})
	c.works("Schemas().DeleteSchema", func() error {
		if err := adm.Schemas().DeleteSchema(sch); err != nil {
			return err
		}
		var re rest.Error
		if _, err := adm.Schemas().GetSchemaInfo(sch); !errors.As(err, &re) || re.Code != http.StatusNotFound {
			return wrongf("after delete: %v, want 404", err)
		}
		return nil
	})

	c.works("Schemas().ForceDeleteSchema", func() error {
		fs := "persistent://" + ns + "/schema-force"
		if err := adm.Schemas().CreateSchemaBySchemaInfo(fs, info); err != nil {
			return err
		}
		if err := adm.Schemas().ForceDeleteSchema(fs); err != nil {
			return err
		}
		var re rest.Error
		if _, err := adm.Schemas().GetSchemaInfo(fs); !errors.As(err, &re) || re.Code != http.StatusNotFound {
			return wrongf("after force delete: %v, want 404", err)
		}
		return nil
	})

	// Deletes.
	c.works("Topics().Delete(non-partitioned)", func() error {
		if err := adm.Topics().Delete(np, false, true); err != nil {
			return err
		}
		_, plain, err := adm.Topics().List(*nsName)
		if err != nil {
			return err
		}
		if slices.Contains(plain, np.String()) {
			return wrongf("still listed: %v", plain)
		}
		return nil
	})
	c.works("Topics().Delete(partitioned)", func() error {
		if err := adm.Topics().Delete(part, true, false); err != nil {
			return err
		}
		parted, _, err := adm.Topics().List(*nsName)
		if err != nil {
			return err
		}
		if slices.Contains(parted, part.String()) {
			return wrongf("still listed: %v", parted)
		}
		return nil
	})
	c.works("Namespaces().DeleteNamespace", func() error {
		if err := adm.Namespaces().DeleteNamespace("compat/b8"); err != nil {
			return err
		}
		got, err := adm.Namespaces().GetNamespaces("compat")
		if err != nil {
			return err
		}
		if slices.Contains(got, "compat/b8") {
			return wrongf("still listed: %v", got)
		}
		return nil
	})
	c.works("Tenants().Delete", func() error {
		if err := adm.Tenants().Create(utils.TenantData{Name: "compat-del", AllowedClusters: []string{cluster}}); err != nil {
			return err
		}
		if err := adm.Tenants().Delete("compat-del"); err != nil {
			return err
		}
		got, err := adm.Tenants().List()
		if err != nil {
			return err
		}
		if slices.Contains(got, "compat-del") {
			return wrongf("still listed: %v", got)
		}
		return nil
	})
}
