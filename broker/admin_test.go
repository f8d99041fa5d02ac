package broker_test

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// The admin API and `meridian admin` over it, with a partitioned topic
// used by the unmodified client.
func TestAdminAndPartitionedTopics(t *testing.T) {
	s := standalone(t)
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(testutil.MeridianBinary(t), append([]string{"admin", "--url", s.AdminURL}, args...)...).CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		out, err := cli(args...)
		if err != nil {
			t.Fatalf("meridian admin %v: %v\n%s", args, err, out)
		}
		return out
	}
	must("tenants", "create", "acme")
	if out, err := cli("tenants", "create", "acme"); err == nil || !strings.Contains(out, "exists") {
		t.Fatalf("second create of a tenant: %v %s", err, out)
	}
	must("namespaces", "create", "acme/orders")
	if out := must("namespaces", "list", "acme"); !strings.Contains(out, "acme/orders") {
		t.Fatalf("namespaces list: %s", out)
	}
	if out, err := cli("namespaces", "create", "nosuch/ns"); err == nil {
		t.Fatalf("namespace of a missing tenant created: %s", out)
	}
	if out, err := cli("topics", "create", "persistent://acme/../x"); err == nil {
		t.Fatalf("a path trick in a topic name was accepted: %s", out)
	}
	must("topics", "create-partitioned-topic", "persistent://acme/orders/o", "3")

	client := newPulsarClient(t, s.URL)
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://acme/orders/o", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(prod.(interface{ Name() string }).Name()); got == 0 {
		t.Fatal("producer has no name")
	}
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: "persistent://acme/orders/o", SubscriptionName: "sub", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	ids := produce(t, prod, 300, func(i int) string { return "key-" + strconv.Itoa(i) })
	parts := map[int32]int{}
	for _, id := range ids {
		parts[id.PartitionIdx()]++
	}
	if len(parts) != 3 {
		t.Fatalf("messages landed on partitions %v, want all 3", parts)
	}
	got := receiveN(t, cons, 300, true)
	if len(got) != 300 {
		t.Fatalf("received %d", len(got))
	}
	cons.Close()

	var st struct {
		Publishers    []struct{ ClientVersion string } `json:"publishers"`
		Subscriptions map[string]struct {
			MsgBacklog int64 `json:"msgBacklog"`
		} `json:"subscriptions"`
	}
	out := must("topics", "stats", "persistent://acme/orders/o-partition-0")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stats JSON: %v\n%s", err, out)
	}
	if len(st.Publishers) != 1 || !strings.HasPrefix(st.Publishers[0].ClientVersion, "Pulsar-Go") {
		t.Fatalf("publishers: %+v", st.Publishers)
	}
	if _, ok := st.Subscriptions["sub"]; !ok {
		t.Fatalf("subscriptions: %+v", st.Subscriptions)
	}
	prod.Close()

	// Subscriptions: create at the end, reset to the start, delete.
	must("subscriptions", "create", "persistent://acme/orders/o-partition-1", "late")
	out = must("topics", "stats", "persistent://acme/orders/o-partition-1")
	json.Unmarshal([]byte(out), &st)
	if st.Subscriptions["late"].MsgBacklog != 0 {
		t.Fatalf("a subscription created at the end has backlog %d", st.Subscriptions["late"].MsgBacklog)
	}
	must("subscriptions", "reset-cursor", "persistent://acme/orders/o-partition-1", "late", "0")
	out = must("topics", "stats", "persistent://acme/orders/o-partition-1")
	json.Unmarshal([]byte(out), &st)
	if st.Subscriptions["late"].MsgBacklog != int64(parts[1]) {
		t.Fatalf("after reset-cursor to time 0 the backlog is %d, want %d", st.Subscriptions["late"].MsgBacklog, parts[1])
	}
	must("subscriptions", "delete", "persistent://acme/orders/o-partition-1", "late")

	// A namespace with topics cannot be deleted; after deleting them it can.
	if out, err := cli("namespaces", "delete", "acme/orders"); err == nil {
		t.Fatalf("deleted a namespace with topics: %s", out)
	}
	code, body := adminCall(t, "DELETE", s.AdminURL+"/admin/v2/persistent/acme/orders/o/partitions", nil)
	if code/100 != 2 {
		t.Fatalf("delete partitioned topic: %d %s", code, body)
	}
	must("namespaces", "delete", "acme/orders")
	must("tenants", "delete", "acme")
	if out := must("tenants", "list"); strings.Contains(out, "acme") {
		t.Fatalf("tenant still listed: %s", out)
	}
}
