package broker_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// quotaAdmin is a standalone with namespace t/ns and the unmodified
// pulsaradmin client to it.
func quotaAdmin(t *testing.T) (*testutil.Standalone, pulsaradmin.Client) {
	t.Helper()
	s := standalone(t)
	adm, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: s.AdminURL})
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.Tenants().Create(utils.TenantData{Name: "t", AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatal(err)
	}
	if err := adm.Namespaces().CreateNamespace("t/ns"); err != nil {
		t.Fatal(err)
	}
	return s, adm
}

func quotaMap(t *testing.T, adm pulsaradmin.Client) map[utils.BacklogQuotaType]utils.BacklogQuota {
	t.Helper()
	m, err := adm.Namespaces().GetBacklogQuotaMap("t/ns")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// DELETE /admin/v2/namespaces/T/NS/backlogQuota?backlogQuotaType=TYPE
// removes that type's quota and leaves the other, as Pulsar's
// internalRemoveBacklogQuota (no type: destination_storage); an unknown
// type is a 400 naming it that removes nothing. It ignored the type and
// always removed destination_storage.
func TestRemoveBacklogQuotaTakesItsType(t *testing.T) {
	s, adm := quotaAdmin(t)
	storage := utils.NewBacklogQuota(10<<20, -1, utils.ProducerRequestHold)
	age := utils.NewBacklogQuota(-1, 3600, utils.ProducerException)
	set := func() {
		t.Helper()
		if err := adm.Namespaces().SetBacklogQuota("t/ns", storage, utils.DestinationStorage); err != nil {
			t.Fatal(err)
		}
		if err := adm.Namespaces().SetBacklogQuota("t/ns", age, utils.MessageAge); err != nil {
			t.Fatal(err)
		}
	}
	want := func(what string, storageLeft, ageLeft bool) {
		t.Helper()
		m := quotaMap(t, adm)
		if q, ok := m[utils.DestinationStorage]; ok != storageLeft || (ok && q.LimitSize != storage.LimitSize) {
			t.Errorf("%s: destination_storage %+v (present %v), want present %v", what, q, ok, storageLeft)
		}
		if q, ok := m[utils.MessageAge]; ok != ageLeft || (ok && q.LimitTime != age.LimitTime) {
			t.Errorf("%s: message_age %+v (present %v), want present %v", what, q, ok, ageLeft)
		}
	}
	url := s.AdminURL + "/admin/v2/namespaces/t/ns/backlogQuota"

	set()
	want("both set", true, true)
	if code, b := adminCall(t, "DELETE", url+"?backlogQuotaType=message_age", nil); code != 204 {
		t.Fatalf("DELETE ?backlogQuotaType=message_age: %d %s", code, b)
	}
	want("after DELETE ?backlogQuotaType=message_age", true, false)

	set()
	if code, b := adminCall(t, "DELETE", url+"?backlogQuotaType=destination_storage", nil); code != 204 {
		t.Fatalf("DELETE ?backlogQuotaType=destination_storage: %d %s", code, b)
	}
	want("after DELETE ?backlogQuotaType=destination_storage", false, true)

	set()
	if code, b := adminCall(t, "DELETE", url, nil); code != 204 {
		t.Fatalf("DELETE without a type: %d %s", code, b)
	}
	want("after DELETE without a type (Pulsar's default, destination_storage)", false, true)

	set()
	if code, b := adminCall(t, "DELETE", url+"?backlogQuotaType=everything", nil); code != 400 || !strings.Contains(string(b), `"reason"`) || !strings.Contains(string(b), "everything") {
		t.Errorf("DELETE ?backlogQuotaType=everything: %d %s, want 400 naming the type", code, b)
	}
	want("after DELETE of an unknown type", true, true)

	// pulsaradmin's RemoveBacklogQuota sends destination_storage.
	if err := adm.Namespaces().RemoveBacklogQuota("t/ns"); err != nil {
		t.Fatal(err)
	}
	want("after pulsaradmin RemoveBacklogQuota", false, true)
}

// Pulsar answers 412 to a retention its namespace's destination_storage
// backlog quota reaches (size: limitSize >= retentionSizeInMB MiB; time:
// limitTime >= retentionTimeInMinutes × 60 s, each compared when the
// retention's limit is positive), and to such a quota set under a
// retention (AdminResource.checkBacklogQuota, NamespacesBase's checkQuotas
// and setBacklogQuotaAsync); a message_age quota is not compared. Nothing
// is stored on a refusal. Meridian stored both.
func TestRetentionAndBacklogQuotaConflictAnswer412(t *testing.T) {
	_, adm := quotaAdmin(t)
	ns := adm.Namespaces()
	is412 := func(what string, err error, reason string) {
		t.Helper()
		var re rest.Error
		if !errors.As(err, &re) || re.Code != 412 || !strings.Contains(re.Reason, reason) {
			t.Errorf("%s: %v, want 412 %q", what, err, reason)
		}
	}
	retention := func() *utils.RetentionPolicies {
		t.Helper()
		r, err := ns.GetRetention("t/ns")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	quota := utils.NewBacklogQuota(10<<20, 600, utils.ProducerRequestHold)
	if err := ns.SetBacklogQuota("t/ns", quota, utils.DestinationStorage); err != nil {
		t.Fatal(err)
	}
	before := retention()
	for _, c := range []struct {
		what string
		r    utils.RetentionPolicies
	}{
		{"retention 5 MB under a 10 MiB quota", utils.NewRetentionPolicies(60, 5)},
		{"retention 10 MB, equal to the quota", utils.NewRetentionPolicies(60, 10)},
		{"retention 10 minutes, equal to the quota's 600 s", utils.NewRetentionPolicies(10, -1)},
		{"retention 5 minutes under the quota's 600 s", utils.NewRetentionPolicies(5, 100)},
	} {
		is412(c.what, ns.SetRetention("t/ns", c.r), "Retention Quota must exceed configured backlog quota")
	}
	if after := retention(); (after == nil) != (before == nil) || (after != nil && *after != *before) {
		t.Errorf("refused retentions stored: %+v, was %+v", after, before)
	}
	// Above the quota, unlimited size or retention off: taken.
	for _, r := range []utils.RetentionPolicies{utils.NewRetentionPolicies(0, 0), utils.NewRetentionPolicies(-1, -1), utils.NewRetentionPolicies(20, 20)} {
		if err := ns.SetRetention("t/ns", r); err != nil {
			t.Fatalf("retention %+v over a 10 MiB / 600 s quota: %v", r, err)
		}
	}
	// Now a retention of 20 MB / 20 minutes: a quota reaching it is refused.
	for _, c := range []struct {
		what string
		q    utils.BacklogQuota
	}{
		{"quota 20 MiB, equal to the retention", utils.NewBacklogQuota(20<<20, 60, utils.ProducerRequestHold)},
		{"quota 30 MiB over the retention", utils.NewBacklogQuota(30<<20, 60, utils.ProducerException)},
		{"quota 1200 s, equal to the retention's 20 minutes", utils.NewBacklogQuota(1<<20, 1200, utils.ProducerRequestHold)},
	} {
		is412(c.what, ns.SetBacklogQuota("t/ns", c.q, utils.DestinationStorage), "Backlog Quota exceeds configured retention quota")
	}
	if q := quotaMap(t, adm)[utils.DestinationStorage]; q != quota {
		t.Errorf("refused quotas stored: %+v, want %+v", q, quota)
	}
	// Within the retention, and a message_age quota (not compared): taken.
	if err := ns.SetBacklogQuota("t/ns", utils.NewBacklogQuota(19<<20, 1199, utils.ProducerRequestHold), utils.DestinationStorage); err != nil {
		t.Errorf("quota under the retention: %v", err)
	}
	if err := ns.SetBacklogQuota("t/ns", utils.NewBacklogQuota(-1, 86400, utils.ProducerRequestHold), utils.MessageAge); err != nil {
		t.Errorf("message_age quota over the retention: %v", err)
	}
}
