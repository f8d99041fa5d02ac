package broker_test

import (
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsaradmin"
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
