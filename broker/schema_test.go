package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

type order struct {
	ID    int    `json:"id"`
	Item  string `json:"item"`
	Price int    `json:"price"`
}

const orderV1 = `{"type":"record","name":"Order","fields":[{"name":"id","type":"int"},{"name":"item","type":"string"}]}`
const orderV2 = `{"type":"record","name":"Order","fields":[{"name":"id","type":"int"},{"name":"item","type":"string"},{"name":"price","type":"int","default":0}]}`
const orderBad = `{"type":"record","name":"Order","fields":[{"name":"id","type":"int"},{"name":"item","type":"string"},{"name":"price","type":"int","default":0},{"name":"qty","type":"int"}]}`

// A Go producer and consumer with a JSON schema work (batched: the Go
// client v0.19.0 puts the schema version only into batched messages'
// metadata); a compatible new
// version (a field with a default) is accepted as version 1; an
// incompatible one (a new field without default) is refused.
func TestJSONSchemaVersions(t *testing.T) {
	s := standalone(t)
	client := newPulsarClient(t, s.URL)
	topic := topicName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	p1, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewJSONSchema(orderV1, nil), BatchingMaxPublishDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Schema: pulsar.NewJSONSchema(orderV2, nil),
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if _, err := p1.Send(ctx, &pulsar.ProducerMessage{Value: &order{ID: 1, Item: "tea"}}); err != nil {
		t.Fatal(err)
	}
	p2, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewJSONSchema(orderV2, nil), BatchingMaxPublishDelay: time.Millisecond})
	if err != nil {
		t.Fatalf("compatible schema refused: %v", err)
	}
	if _, err := p2.Send(ctx, &pulsar.ProducerMessage{Value: &order{ID: 2, Item: "cake", Price: 3}}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []order{{1, "tea", 0}, {2, "cake", 3}} {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got order
		if err := m.GetSchemaValue(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("message %d: %+v, want %+v", i, got, want)
		}
		if v := m.SchemaVersion(); len(v) != 8 || int(v[7]) != i {
			t.Fatalf("message %d schema version %v, want %d", i, v, i)
		}
		cons.Ack(m)
	}
	if p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewJSONSchema(orderBad, nil)}); err == nil {
		p.Close()
		t.Fatal("an incompatible schema (new field without default) was accepted")
	}
	p1.Close()
	p2.Close()

	// The admin schema paths: versions, upload with the same check, delete.
	path := s.AdminURL + "/admin/v2/schemas/" + strings.TrimPrefix(topic, "persistent://")
	code, body := adminCall(t, "GET", path+"/schema/1", nil)
	if code != 200 || !strings.Contains(string(body), "price") {
		t.Fatalf("GET schema/1: %d %s", code, body)
	}
	if code, body := adminCall(t, "POST", path+"/schema", map[string]any{"type": "JSON", "schema": orderBad}); code != 409 {
		t.Fatalf("POST of an incompatible schema: %d %s", code, body)
	}
	if code, body := adminCall(t, "DELETE", path+"/schema", nil); code/100 != 2 {
		t.Fatalf("DELETE schema: %d %s", code, body)
	}
	if code, _ := adminCall(t, "GET", path+"/schema", nil); code != 404 {
		t.Fatalf("GET after delete: %d", code)
	}
	if code, body := adminCall(t, "POST", path+"/schema", map[string]any{"type": "JSON", "schema": orderBad}); code != 200 {
		t.Fatalf("POST after delete: %d %s", code, body)
	}
}
