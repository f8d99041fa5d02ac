package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Issue 29: a topic's admin call that reaches a broker not owning the
// topic is redirected (307) to the owner's admin API, as Pulsar does, so
// pulsaradmin pointed at any broker of the region works: stats, creating
// a subscription, skipping, peeking and the last message id, through the
// broker that does not own the topic; partitioned stats through either
// broker, whichever owns which partition.
func TestAdminRedirectsToOwner(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r1", "r2", "r2")
	b1 := r.AddBroker("broker-1")
	b2 := r.AddBroker("broker-2")
	brokers := map[string]*testutil.BrokerProc{b1.ID: b1, b2.ID: b2}
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: b1.URL() + "," + strings.TrimPrefix(b2.URL(), "pulsar://"), OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	topic := topicName(t)
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	owner := brokers[ownerOf(t, r)]
	var other *testutil.BrokerProc
	for _, b := range brokers {
		if b != owner {
			other = b
		}
	}
	adm, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: other.AdminURL()})
	if err != nil {
		t.Fatal(err)
	}
	tn, _ := utils.GetTopicName(topic)
	if err := adm.Subscriptions().Create(*tn, "s", utils.Earliest); err != nil {
		t.Fatalf("create subscription through %s (owner %s): %v", other.ID, owner.ID, err)
	}
	const n = 20
	var last pulsar.MessageID
	for i := 0; i < n; i++ {
		if last, err = prod.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("m", i))}); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := adm.Topics().GetStats(*tn)
	if err != nil {
		t.Fatalf("stats through %s: %v", other.ID, err)
	}
	if ts.MsgCounterIn != n || ts.Subscriptions["s"].MsgBacklog != n || len(ts.Publishers) != 1 {
		t.Fatalf("stats through %s: msgInCounter %d, backlog %d, publishers %d; want %d, %d, 1", other.ID, ts.MsgCounterIn, ts.Subscriptions["s"].MsgBacklog, len(ts.Publishers), n, n)
	}
	if err := adm.Subscriptions().SkipMessages(*tn, "s", 5); err != nil {
		t.Fatalf("skip through %s: %v", other.ID, err)
	}
	ms, err := adm.Subscriptions().PeekMessages(*tn, "s", 1)
	if err != nil || len(ms) != 1 || string(ms[0].Payload) != "m5" {
		t.Fatalf("peek through %s after skipping 5: %v %v, want m5", other.ID, ms, err)
	}
	id, err := adm.Topics().GetLastMessageID(*tn)
	if err != nil || id.LedgerID != last.LedgerID() || id.EntryID != last.EntryID() {
		t.Fatalf("last message id through %s: %+v %v, want %d:%d", other.ID, id, err, last.LedgerID(), last.EntryID())
	}
	// The owner answers the same, and still owns the topic: the redirect
	// moved nothing.
	own, _ := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: owner.AdminURL()})
	if ts, err := own.Topics().GetStats(*tn); err != nil || ts.Subscriptions["s"].MsgBacklog != n-5 {
		t.Fatalf("owner's stats: %+v %v, want a backlog of %d", ts.Subscriptions["s"], err, n-5)
	}
	if got := brokers[ownerOf(t, r)]; got != owner {
		t.Fatalf("owner is now %s, was %s", got.ID, owner.ID)
	}

	// Partitioned stats: the asked broker reads the partitions it owns
	// and asks the owners of the others; through either broker the sum is
	// the same.
	parted := topicName(t) + "-parted"
	ptn, _ := utils.GetTopicName(parted)
	if err := adm.Topics().Create(*ptn, 4); err != nil {
		t.Fatal(err)
	}
	pp, err := client.CreateProducer(pulsar.ProducerOptions{Topic: parted, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pp.Close()
	for i := 0; i < 40; i++ {
		if _, err := pp.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("p"), Key: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	kvs, _, err := r.Store.List(context.Background(), "/ownership/public/default/")
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]int{}
	for _, kv := range kvs {
		var bi struct{ ID string }
		json.Unmarshal(kv.Value, &bi)
		owners[bi.ID]++
	}
	t.Logf("bundles of public/default by owner: %v", owners)
	for _, b := range []*testutil.BrokerProc{b1, b2} {
		a, _ := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: b.AdminURL()})
		ps, err := a.Topics().GetPartitionedStats(*ptn, true)
		if err != nil {
			t.Fatalf("partitioned stats through %s: %v", b.ID, err)
		}
		var in int64
		for _, p := range ps.Partitions {
			in += p.MsgCounterIn
		}
		if len(ps.Partitions) != 4 || in != 40 {
			t.Errorf("partitioned stats through %s: %d partitions, msgInCounter %d; want 4, 40", b.ID, len(ps.Partitions), in)
		}
	}
}
