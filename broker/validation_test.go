package broker_test

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Security issue test 7 (validation gaps): every admin route that takes a
// JSON body or a numeric path parameter, sent what an attacker (or a
// mistaken tool) would send, over a real standalone: each answered with a
// 4xx whose reason names the field (never 500), nothing of it stored (the
// namespace's policies, the tenants, namespaces, partitions, subscriptions
// and schemas read back unchanged), and the namespace's topics still load.
// Then bad values written into etcd directly (as a version that did not
// check them would have stored them) do not stop the topics loading
// either: a retention of max int64 minutes overflowed time.Duration and
// every topic load of the namespace failed.
func TestAdminRefusesBadBodiesAndStoresNothing(t *testing.T) {
	etcdAddr := testutil.FreeAddr(t)
	s := testutil.StartStandalone(t, t.TempDir(), "--etcd-client-url", "http://"+etcdAddr, "--policy-check-interval", "200ms")
	a := s.AdminURL + "/admin/v2"
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, a+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	must := func(method, path, body string) string {
		t.Helper()
		code, out := call(method, path, body)
		if code/100 != 2 {
			t.Fatalf("%s %s: %d %s", method, path, code, out)
		}
		return out
	}
	must("PUT", "/tenants/val", `{"adminRoles":["ops"],"allowedClusters":["standalone"]}`)
	must("PUT", "/namespaces/val/ns", `{}`)
	must("PUT", "/persistent/val/ns/t", ``)
	must("PUT", "/persistent/val/ns/t/subscription/s", ``)
	before := must("GET", "/namespaces/val/ns", "")
	tenantBefore := must("GET", "/tenants/val", "")
	failoverBefore := must("GET", "/meridian/failover", "")

	big := `{"retentionTimeInMinutes":1,"retentionSizeInMB":1,"pad":"` + strings.Repeat("x", 2<<20) + `"}`
	over := strconv.FormatInt(meta.MaxRetentionMinutes+1, 10)
	cases := []struct {
		name, method, path, body string
		status                   int
		reason                   string // in the answer's reason
	}{
		{"retention overflowing a Duration", "POST", "/namespaces/val/ns/retention", `{"retentionTimeInMinutes":9223372036854775807,"retentionSizeInMB":1}`, 400, "time limit"},
		{"retention one minute past a Duration", "POST", "/namespaces/val/ns/retention", `{"retentionTimeInMinutes":` + over + `,"retentionSizeInMB":1}`, 400, "time limit"},
		{"retention size below -1", "POST", "/namespaces/val/ns/retention", `{"retentionTimeInMinutes":1,"retentionSizeInMB":-2}`, 400, "size limit"},
		{"retention as a string", "POST", "/namespaces/val/ns/retention", `"forever"`, 400, "cannot unmarshal"},
		{"ensemble of a million bookies", "POST", "/namespaces/val/ns/persistence", `{"bookkeeperEnsemble":1000000,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":2}`, 400, "bookkeeperEnsemble"},
		{"ensemble below the write quorum", "POST", "/namespaces/val/ns/persistence", `{"bookkeeperEnsemble":2,"bookkeeperWriteQuorum":3,"bookkeeperAckQuorum":2}`, 400, "write quorum"},
		{"ack quorum 0", "POST", "/namespaces/val/ns/persistence", `{"bookkeeperEnsemble":2,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":0}`, 400, "ack quorum"},
		{"negative message TTL", "POST", "/namespaces/val/ns/messageTTL", `-5`, 412, "message TTL"},
		{"message TTL past a Java int", "POST", "/namespaces/val/ns/messageTTL", `2147483648`, 412, "message TTL"},
		{"backlog quota limit below -1", "POST", "/namespaces/val/ns/backlogQuota", `{"limitSize":-7,"policy":"producer_exception"}`, 400, "limitSize"},
		{"backlog quota time below -1", "POST", "/namespaces/val/ns/backlogQuota", `{"limitSize":10,"limitTime":-9,"policy":"producer_exception"}`, 400, "limitTime"},
		{"backlog quota unknown policy", "POST", "/namespaces/val/ns/backlogQuota", `{"limitSize":10,"policy":"drop_everything"}`, 400, "policy"},
		{"backlog quota unknown type", "POST", "/namespaces/val/ns/backlogQuota?backlogQuotaType=everything", `{"limitSize":10,"policy":"producer_exception"}`, 400, "type"},
		{"deduplication not a boolean", "POST", "/namespaces/val/ns/deduplication", `"yes"`, 400, "cannot unmarshal"},
		{"deduplication null", "POST", "/namespaces/val/ns/deduplication", `null`, 400, "deduplication"},
		{"granted role with a newline", "POST", "/namespaces/val/ns/permissions/a%0Ab", `["produce"]`, 400, "control character"},
		{"granted role with an escape", "POST", "/namespaces/val/ns/permissions/a%1B%5B31m", `["produce"]`, 400, "control character"},
		{"granted role too long", "POST", "/namespaces/val/ns/permissions/" + strings.Repeat("r", 1025), `["produce"]`, 400, "at most 1024"},
		{"granted unknown action", "POST", "/namespaces/val/ns/permissions/alice", `["own"]`, 400, "action"},
		{"replication to an unknown region", "POST", "/namespaces/val/ns/replication", `["mars"]`, 400, "not registered"},
		{"replication policy negative minRegions", "POST", "/namespaces/val/ns/meridian-replication", `{"minRegions":-1}`, 400, "minRegions"},
		{"replication policy unknown field", "POST", "/namespaces/val/ns/meridian-replication", `{"mode":"async","evil":1}`, 400, "unknown field"},
		{"oversized policy body", "POST", "/namespaces/val/ns/retention", big, 413, "limit"},
		{"oversized namespace create", "PUT", "/namespaces/val/big", big, 413, "limit"},
		{"namespace with raw auth_policies", "PUT", "/namespaces/val/raw", `{"auth_policies":{"x":[1,2,{"y":null}]}}`, 400, "auth_policies"},
		{"namespace with auth_policies not an object", "PUT", "/namespaces/val/raw", `{"auth_policies":5}`, 400, "auth_policies"},
		{"namespace granting a control-character role", "PUT", "/namespaces/val/raw", `{"auth_policies":{"namespace_auth":{"a\u0007b":["produce"]}}}`, 400, "control character"},
		{"namespace granting an unknown action", "PUT", "/namespaces/val/raw", `{"auth_policies":{"namespace_auth":{"alice":["own"]}}}`, 400, "action"},
		{"namespace with a bad backlog quota", "PUT", "/namespaces/val/raw", `{"backlog_quota_map":{"destination_storage":{"limit":-9,"policy":"producer_exception"}}}`, 400, "limit"},
		{"namespace with a huge ensemble", "PUT", "/namespaces/val/raw", `{"persistence":{"bookkeeperEnsemble":64,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":2}}`, 400, "bookkeeperEnsemble"},
		{"namespace with 5000 bundles", "PUT", "/namespaces/val/raw", `{"numBundles":5000}`, 400, "numBundles"},
		{"namespace with a negative TTL", "PUT", "/namespaces/val/raw", `{"message_ttl_in_seconds":-1}`, 412, "message TTL"},
		{"namespace with an overflowing retention", "PUT", "/namespaces/val/raw", `{"retention_policies":{"retentionTimeInMinutes":9223372036854775807,"retentionSizeInMB":1}}`, 400, "time limit"},
		{"tenant admin role with a newline", "PUT", "/tenants/raw", `{"adminRoles":["a\nb"],"allowedClusters":["standalone"]}`, 400, "control character"},
		{"tenant update admin role with a newline", "POST", "/tenants/val", `{"adminRoles":["a\nb"],"allowedClusters":["standalone"]}`, 400, "control character"},
		{"tenant with a bad cluster name", "PUT", "/tenants/raw", `{"allowedClusters":["a/b"]}`, 400, "allowedClusters"},
		{"partitions negative", "PUT", "/persistent/val/ns/p/partitions", `-3`, 400, "partition count"},
		{"partitions zero", "PUT", "/persistent/val/ns/p/partitions", `0`, 400, "partition count"},
		{"partitions past the bound", "PUT", "/persistent/val/ns/p/partitions", `10001`, 400, "at most 10000"},
		{"partitions past an int", "PUT", "/persistent/val/ns/p/partitions", `1e30`, 400, "cannot unmarshal"},
		{"partitions as metadata, negative", "PUT", "/persistent/val/ns/p/partitions", `{"partitions":-1}`, 400, "partition count"},
		{"subscription with a newline", "PUT", "/persistent/val/ns/t/subscription/a%0Ab", ``, 400, "control character"},
		{"subscription at a bad id", "PUT", "/persistent/val/ns/t/subscription/s2", `{"ledgerId":"x"}`, 400, "cannot unmarshal"},
		{"reset cursor to a bad time", "POST", "/persistent/val/ns/t/subscription/s/resetcursor/yesterday", ``, 400, "invalid syntax"},
		{"reset cursor to a bad id", "POST", "/persistent/val/ns/t/subscription/s/resetcursor", `{"ledgerId":[1]}`, 400, "cannot unmarshal"},
		{"skip a negative count", "POST", "/persistent/val/ns/t/subscription/s/skip/-1", ``, 400, "numMessages"},
		{"expire a negative age", "POST", "/persistent/val/ns/t/subscription/s/expireMessages/-5", ``, 400, "expireTimeInSeconds"},
		{"peek position 0", "GET", "/persistent/val/ns/t/subscription/s/position/0", ``, 400, "messagePosition"},
		{"message id of a bad time", "GET", "/persistent/val/ns/t/messageid/noon", ``, 400, "timestamp"},
		{"message by a bad id", "GET", "/persistent/val/ns/t/ledger/x/entry/1", ``, 400, "message id"},
		{"schema of an unknown type", "POST", "/schemas/val/ns/t/schema", `{"type":"NOPE","schema":""}`, 400, "schema type"},
		{"Avro schema that is not JSON", "POST", "/schemas/val/ns/t/schema", `{"type":"AVRO","schema":"{not json"}`, 400, "must be JSON"},
		{"schema version not a number", "GET", "/schemas/val/ns/t/schema/latest", ``, 400, "invalid syntax"},
		{"bundle name not a range", "PUT", "/namespaces/val/ns/0xzz_0x10/unload", ``, 400, "0xLOWER_0xUPPER"},
		{"failover with a negative timeout", "POST", "/meridian/failover/val/ns", `{"planned":true,"timeoutMs":-1}`, 400, "timeoutMs"},
		{"region-wide failover from an unknown region", "POST", "/meridian/failover", `{"region":"mars","to":"standalone","planned":true}`, 400, "region mars is not registered"},
		{"region-wide failover to an unknown region", "POST", "/meridian/failover", `{"region":"standalone","to":"mars","planned":true}`, 400, "region mars is not registered"},
		{"region-wide failover to the region itself", "POST", "/meridian/failover", `{"region":"standalone","to":"standalone","planned":true}`, 400, "the region to empty itself"},
		{"region-wide failover without a region", "POST", "/meridian/failover", `{"to":"standalone","planned":true}`, 400, "region: the region to empty is required"},
		{"region-wide failover without a target", "POST", "/meridian/failover", `{"region":"standalone","planned":true}`, 400, "to: the region to move"},
		{"region-wide failover not planned", "POST", "/meridian/failover", `{"region":"standalone","to":"west"}`, 400, "planned"},
		{"region-wide failover with an unknown field", "POST", "/meridian/failover", `{"region":"standalone","to":"west","planned":true,"force":true}`, 400, "unknown field"},
		{"region-wide failover with a negative timeout", "POST", "/meridian/failover", `{"region":"standalone","to":"west","planned":true,"timeoutMs":-1}`, 400, "timeoutMs"},
		{"region-wide failover with no body", "POST", "/meridian/failover", ``, 400, "empty body"},
		{"a policy Meridian does not apply", "POST", "/namespaces/val/ns/dispatchRate", `{"dispatchThrottlingRateInMsg":-1}`, 405, "dispatchRate"},
		{"max producers, not applied", "POST", "/namespaces/val/ns/maxProducersPerTopic", `-1`, 405, "maxProducersPerTopic"},
		{"subscription expiration, not applied", "POST", "/namespaces/val/ns/subscriptionExpirationTime", `-1`, 405, "subscriptionExpirationTime"},
		{"delayed delivery, not applied", "POST", "/namespaces/val/ns/delayedDelivery", `{"tickTime":-1}`, 405, "delayedDelivery"},
	}
	for _, c := range cases {
		code, out := call(c.method, c.path, c.body)
		if code != c.status || !strings.Contains(out, `"reason"`) || !strings.Contains(out, c.reason) {
			if len(out) > 300 {
				out = out[:300] + "..."
			}
			t.Errorf("%s: %s %s: %d %s; want %d with a reason naming %q", c.name, c.method, c.path, code, out, c.status, c.reason)
		}
	}

	// Nothing of it was stored.
	if after := must("GET", "/namespaces/val/ns", ""); after != before {
		t.Errorf("the namespace's policies changed:\nbefore %s\nafter  %s", before, after)
	}
	if after := must("GET", "/meridian/failover", ""); after != failoverBefore {
		t.Errorf("the failover records changed: before %s, after %s", failoverBefore, after)
	}
	if after := must("GET", "/tenants/val", ""); after != tenantBefore {
		t.Errorf("the tenant changed: before %s, after %s", tenantBefore, after)
	}
	for _, path := range []string{"/namespaces/val/raw", "/namespaces/val/big", "/tenants/raw", "/schemas/val/ns/t/schema"} {
		if code, out := call("GET", path, ""); code != 404 {
			t.Errorf("GET %s after its refused creation: %d %s, want 404", path, code, out)
		}
	}
	if out := must("GET", "/persistent/val/ns/p/partitions", ""); !strings.Contains(out, `"partitions":0`) {
		t.Errorf("partitions of the refused partitioned topic: %s", out)
	}
	if out := must("GET", "/persistent/val/ns/t/subscriptions", ""); out != `["s"]` {
		t.Errorf("subscriptions after the refused ones: %s", out)
	}
	if out := must("GET", "/namespaces/val/ns/permissions", ""); out != `{}` {
		t.Errorf("permissions after the refused grants: %s", out)
	}
	// The namespace's topics still load.
	must("PUT", "/namespaces/val/ns/unload", "")
	must("GET", "/persistent/val/ns/t/stats", "")

	// Values out of range written into the global store directly, past
	// the admin API: the topics still load and serve (the broker's own
	// settings apply instead).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{"http://" + etcdAddr}, Prefix: "/meridian/regions/standalone"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := meta.NewMetadata(st).UpdatePolicies(ctx, "val/ns", func(p *meta.Policies) {
		p.Retention = &meta.Retention{RetentionTimeInMinutes: math.MaxInt64, RetentionSizeInMB: 1}
		p.Persistence = &meta.Persistence{EnsembleSize: 1_000_000, WriteQuorum: 2, AckQuorum: 2}
		p.MessageTTLInSeconds = math.MaxInt64
	}); err != nil {
		t.Fatal(err)
	}
	if out := must("GET", "/namespaces/val/ns", ""); !strings.Contains(out, "9223372036854775807") {
		t.Fatalf("the bad retention was not stored: %s", out)
	}
	must("PUT", "/namespaces/val/ns/unload", "")
	client := newPulsarClient(t, s.URL)
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://val/ns/t", DisableBatching: true})
	if err != nil {
		t.Fatalf("a topic of a namespace whose stored policies are out of range does not load: %v", err)
	}
	defer prod.Close()
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if _, err := prod.Send(sctx, &pulsar.ProducerMessage{Payload: []byte("still here")}); err != nil {
		t.Fatalf("send: %v", err)
	}
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: "persistent://val/ns/t", SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	m, err := cons.Receive(sctx)
	if err != nil || !bytes.Equal(m.Payload(), []byte("still here")) {
		t.Fatalf("receive: %v", err)
	}
	// The stored TTL (max int64 seconds) is not applied: as a Duration it
	// overflows, and the cutoff could expire everything. Three policy
	// passes later the unacknowledged message is still there.
	time.Sleep(600 * time.Millisecond)
	if n := backlog(t, s.AdminURL, "persistent://val/ns/t", "s"); n != 1 {
		t.Fatalf("backlog of s after a receive without ack: %d, want 1", n)
	}

	// A numBundles past Pulsar's 4096 written into etcd before the
	// namespace's first lookup: the default split (4) applies, with a
	// warning, and its topics load. 1,000,000 bundles made a bundle
	// record past etcd's request limit (no topic of the namespace
	// loaded); max int64 overflowed the table's length and the panic
	// took the broker down.
	for _, c := range []struct {
		ns      string
		bundles int
	}{{"val/bundles", 1_000_000}, {"val/maxbundles", math.MaxInt64}} {
		must("PUT", "/namespaces/"+c.ns, `{}`)
		if err := meta.NewMetadata(st).UpdatePolicies(ctx, c.ns, func(p *meta.Policies) { p.Bundles = c.bundles }); err != nil {
			t.Fatal(err)
		}
		if out := must("GET", "/namespaces/"+c.ns, ""); !strings.Contains(out, `"numBundles":`+strconv.Itoa(c.bundles)) {
			t.Fatalf("the bad numBundles was not stored: %s", out)
		}
		topic := "persistent://" + c.ns + "/t"
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatalf("a topic of a namespace with numBundles %d stored does not load: %v", c.bundles, err)
		}
		if _, err := p.Send(sctx, &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
			t.Fatalf("send to %s: %v", topic, err)
		}
		p.Close()
		if out := must("GET", "/namespaces/"+c.ns+"/bundles", ""); !strings.Contains(out, `"numBundles":4`) {
			t.Errorf("bundles of %s with numBundles %d stored: %s, want the default 4", c.ns, c.bundles, out)
		}
	}
}
