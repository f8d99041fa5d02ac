package broker_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// Issue 29, "the client's HTTP side": pulsar-client-go given the admin URL
// as its service URL (http://host:port) looks topics up over HTTP
// (/lookup/v2/topic/...), reads partitioned metadata and a namespace's
// topics (a pattern consumer) there, and with several hosts in the URL
// tries the next when one does not answer — as against Pulsar.
func TestPulsarClientHTTPServiceURL(t *testing.T) {
	s := standalone(t)
	adm, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: s.AdminURL})
	if err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/default/http-parts"
	tn, _ := utils.GetTopicName(topic)
	if err := adm.Topics().Create(*tn, 3); err != nil {
		t.Fatal(err)
	}
	// One of the hosts refuses connections: the client takes them in turn
	// and retries a request that could not connect on the next.
	url := "http://127.0.0.1:1," + strings.TrimPrefix(s.AdminURL, "http://")
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 20 * time.Second, ConnectionTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	parts, err := client.TopicPartitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(parts)
	if len(parts) != 3 || parts[0] != topic+"-partition-0" {
		t.Fatalf("partitions %v, want 3", parts)
	}
	ctx := context.Background()
	cons, err := client.Subscribe(pulsar.ConsumerOptions{TopicsPattern: "persistent://public/default/http-.*", SubscriptionName: "pattern",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 30
	for i := 0; i < n; i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i)), Key: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	partsSeen := map[string]bool{}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(seen) < n {
		m, err := cons.Receive(rctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(seen), n, err)
		}
		seen[string(m.Payload())] = true
		partsSeen[m.Topic()] = true
		cons.Ack(m)
	}
	if len(partsSeen) != 3 {
		t.Errorf("messages from %v, want the 3 partitions", partsSeen)
	}
}
