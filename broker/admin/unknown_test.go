package admin

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/prometheus/client_golang/prometheus"
)

// Issue 32: a namespace create failed with "etcdserver: request timed out"
// on a loaded CI host. etcd gives that answer when a proposal misses the
// request's deadline, applied or not. An operator's write whose answer
// was lost after etcd applied it succeeds, and exactly once: the create
// answers 204 and the next one 409, a policy update 204 with the policy
// in place. (On a real etcd; a client interceptor loses the answers.)
func TestAdminWritesSurviveLostAnswers(t *testing.T) {
	url := testutil.StartEtcd(t)
	ctx := context.Background()
	if err := meta.NewMetadata(testutil.Store(t, url, "/global")).EnsureDefaults(ctx, "east"); err != nil {
		t.Fatal(err)
	}
	for _, applied := range []bool{true, false} {
		name := map[bool]string{true: "applied", false: "not applied"}[applied]
		t.Run(name, func(t *testing.T) {
			ns := map[bool]string{true: "public/applied", false: "public/unapplied"}[applied]
			f := &testutil.LostAnswers{Key: "/admin/namespaces/" + ns, Times: 1, Applied: applied}
			global := testutil.StoreWith(t, url, "/global", f.DialOption())
			srv := httptest.NewServer(New(Config{Cluster: "east", Meta: meta.NewMetadata(global), Metrics: prometheus.NewRegistry()}).Handler())
			defer srv.Close()
			api := srv.URL + "/admin/v2/namespaces/" + ns
			body := map[string]any{"replication_clusters": []string{"east"}, "message_ttl_in_seconds": 60}

			if code, answer := replAdmin(t, "PUT", api, body); code != 204 || f.Calls() != 2 {
				t.Fatalf("create: HTTP %d %s after %d writes, want 204 after 2 (the lost one, the retry)", code, answer, f.Calls())
			}
			if code, answer := replAdmin(t, "PUT", api, body); code != 409 {
				t.Fatalf("second create: HTTP %d %s, want 409", code, answer)
			}
			code, answer := replAdmin(t, "GET", api, nil)
			var p meta.Policies
			if code != 200 || json.Unmarshal([]byte(answer), &p) != nil || p.MessageTTLInSeconds != 60 {
				t.Fatalf("policies: HTTP %d %s", code, answer)
			}

			// A policy update (a compare-and-swap) whose answer is lost.
			f2 := &testutil.LostAnswers{Key: "/admin/namespaces/" + ns, Times: 1, Applied: applied}
			upd := httptest.NewServer(New(Config{Cluster: "east", Meta: meta.NewMetadata(testutil.StoreWith(t, url, "/global", f2.DialOption())), Metrics: prometheus.NewRegistry()}).Handler())
			defer upd.Close()
			if code, answer := replAdmin(t, "POST", upd.URL+"/admin/v2/namespaces/"+ns+"/retention",
				map[string]any{"retentionTimeInMinutes": 5, "retentionSizeInMB": 7}); code != 204 || f2.Calls() != 2 {
				t.Fatalf("retention update: HTTP %d %s after %d writes, want 204 after 2", code, answer, f2.Calls())
			}
			code, answer = replAdmin(t, "GET", api, nil)
			p = meta.Policies{}
			if code != 200 || json.Unmarshal([]byte(answer), &p) != nil || p.Retention == nil || p.Retention.RetentionSizeInMB != 7 {
				t.Fatalf("after the update: HTTP %d %s", code, answer)
			}
		})
	}
}
