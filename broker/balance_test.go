package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Bundles split when they hold many topics and spread over the brokers by
// load; producers keep working through the moves.
func TestBundleSplitAndBalance(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	b1 := r.AddBroker("broker-1", "--ownership-ttl", "3s", "--bundle-split-topics", "3", "--policy-check-interval", "300ms")
	b2 := r.AddBroker("broker-2", "--ownership-ttl", "3s", "--bundle-split-topics", "3", "--policy-check-interval", "300ms")
	if code, b := adminCall(t, "PUT", b1.AdminURL()+"/admin/v2/namespaces/public/hot", map[string]any{"numBundles": 1}); code/100 != 2 {
		t.Fatalf("namespace: %d %s", code, b)
	}
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: b1.URL() + "," + strings.TrimPrefix(b2.URL(), "pulsar://"),
		ConnectionTimeout: 3 * time.Second, OperationTimeout: 30 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var producers []pulsar.Producer
	for i := 0; i < 8; i++ {
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: fmt.Sprintf("persistent://public/hot/t%d", i), DisableBatching: true, SendTimeout: 60 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		producers = append(producers, p)
	}
	owners := func() map[string]int {
		kvs, _, err := r.Store.List(context.Background(), "/ownership/public/hot/")
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, kv := range kvs {
			var bi struct{ ID string }
			json.Unmarshal(kv.Value, &bi)
			m[bi.ID]++
		}
		return m
	}
	testutil.Eventually(t, 60*time.Second, "the hot bundle split and spread over both brokers", func() bool {
		o := owners()
		return o["broker-1"] > 0 && o["broker-2"] > 0
	})
	t.Logf("bundles per broker: %v", owners())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, p := range producers {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after the moves")}); err != nil {
			t.Fatalf("producer %d after the split: %v", i, err)
		}
	}
}
