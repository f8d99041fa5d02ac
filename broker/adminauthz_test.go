package broker_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/tools/testutil"
)

// Issue 29: on a secured standalone, a role granted consume (or produce)
// on a namespace may use pulsaradmin's Lookup and Topics().List there (the
// HTTP lookup and the non-persistent lists were super-user only), as with
// Pulsar, where a lookup needs produce, consume or lookup permission; a
// role with no grant is still refused.
func TestAdminLookupAndListForGrantedRole(t *testing.T) {
	s := testutil.StartSecureStandalone(t, t.TempDir())
	setUpTenant(t, s, "acme", "app", "acme-admin", map[string]string{"reader": "consume"})
	su := s.Token(testutil.SuperUser, time.Hour)
	s.MustAdmin(su, "PUT", "/admin/v2/persistent/acme/app/orders", "")
	reader, stranger := s.Token("reader", time.Hour), s.Token("stranger", time.Hour)
	for _, path := range []string{
		"/lookup/v2/topic/persistent/acme/app/orders",
		"/lookup/v2/topic/persistent/acme/app/orders/bundle",
		"/admin/v2/persistent/acme/app",
		"/admin/v2/persistent/acme/app/partitioned",
		"/admin/v2/non-persistent/acme/app",
		"/admin/v2/non-persistent/acme/app/partitioned",
	} {
		if code, body := s.Admin(reader, "GET", path, ""); code != 200 {
			t.Errorf("reader GET %s: %d %s, want 200", path, code, body)
		}
		if code, body := s.Admin(stranger, "GET", path, ""); code != 401 && code != 403 {
			t.Errorf("stranger GET %s: %d %s, want 401 or 403", path, code, body)
		}
	}
	code, body := s.Admin(reader, "GET", "/lookup/v2/topic/persistent/acme/app/orders", "")
	var ld struct {
		BrokerURLTLS string `json:"brokerUrlTls"`
		BrokerURL    string `json:"brokerUrl"`
	}
	if err := json.Unmarshal([]byte(body), &ld); code != 200 || err != nil || (ld.BrokerURL == "" && ld.BrokerURLTLS == "") {
		t.Errorf("reader's lookup: %d %s (%v), want the broker's URL", code, body, err)
	}
}
