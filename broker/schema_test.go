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

// Issue 35: a consumer's schema is checked at SUBSCRIBE as Pulsar checks
// it (addSchemaIfIdleOrCheckCompatible, BACKWARD): against a topic's
// schema, one that cannot read what the latest version wrote (a field
// without default, a field of another type, another schema type) gets
// IncompatibleSchema from pulsar-client-go, a compatible one, the same
// one and a schema-less (bytes) consumer subscribe; on an idle topic
// without a schema the consumer's schema becomes the topic's first
// version; on a topic already used without one, a consumer with a schema
// is refused and a bytes one subscribes.
func TestConsumerSchemaCheckedAtSubscribe(t *testing.T) {
	s := standalone(t)
	client := newPulsarClient(t, s.URL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const itemIsInt = `{"type":"record","name":"Order","fields":[{"name":"id","type":"int"},{"name":"item","type":"int"}]}`
	sub := func(topic, name string, schema pulsar.Schema) error {
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: name, Schema: schema})
		if err == nil {
			c.Close()
		}
		return err
	}
	refused := func(topic, what string, schema pulsar.Schema) {
		t.Helper()
		err := sub(topic, "refused", schema)
		if err == nil {
			t.Errorf("%s: a consumer with %s subscribed", topic, what)
		} else if !strings.Contains(err.Error(), "IncompatibleSchema") {
			t.Errorf("%s: a consumer with %s was refused with %v, want IncompatibleSchema", topic, what, err)
		}
	}
	admitted := func(topic, what string, schema pulsar.Schema) {
		t.Helper()
		if err := sub(topic, "admitted", schema); err != nil {
			t.Errorf("%s: a consumer with %s was refused: %v", topic, what, err)
		}
	}

	withSchema := topicName(t) + "-json"
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: withSchema, Schema: pulsar.NewJSONSchema(orderV1, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	refused(withSchema, "a JSON schema adding a field without default", pulsar.NewJSONSchema(orderBad, nil))
	refused(withSchema, "a JSON schema changing a field from string to int", pulsar.NewJSONSchema(itemIsInt, nil))
	refused(withSchema, "a STRING schema", pulsar.NewStringSchema(nil))
	refused(withSchema, "an AVRO schema of the same definition", pulsar.NewAvroSchema(orderV1, nil))
	admitted(withSchema, "the topic's JSON schema", pulsar.NewJSONSchema(orderV1, nil))
	admitted(withSchema, "a JSON schema adding a field with a default", pulsar.NewJSONSchema(orderV2, nil))
	admitted(withSchema, "no schema", nil)
	admitted(withSchema, "the bytes schema", pulsar.NewBytesSchema(nil))

	// Idle and without a schema: the consumer's is registered, and then
	// checks producers as any version does.
	idle := topicName(t) + "-idle"
	admitted(idle, "a JSON schema on an idle topic without one", pulsar.NewJSONSchema(orderV1, nil))
	code, body := adminCall(t, "GET", s.AdminURL+"/admin/v2/schemas/"+strings.TrimPrefix(idle, "persistent://")+"/schema", nil)
	if code != 200 || !strings.Contains(string(body), `"JSON"`) || !strings.Contains(string(body), "item") {
		t.Fatalf("the schema of %s after a JSON consumer subscribed to it idle: %d %s, want its JSON schema", idle, code, body)
	}
	if bad, err := client.CreateProducer(pulsar.ProducerOptions{Topic: idle, Schema: pulsar.NewJSONSchema(orderBad, nil)}); err == nil {
		bad.Close()
		t.Errorf("%s: a producer whose schema is incompatible with the version the consumer registered was accepted", idle)
	} else if !strings.Contains(err.Error(), "IncompatibleSchema") {
		t.Errorf("%s: an incompatible producer was refused with %v, want IncompatibleSchema", idle, err)
	}
	refused(idle, "a STRING schema after a JSON consumer registered its own", pulsar.NewStringSchema(nil))

	// Used without a schema (a message stored, its producer gone).
	used := topicName(t) + "-used"
	bp, err := client.CreateProducer(pulsar.ProducerOptions{Topic: used})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bp.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("no schema")}); err != nil {
		t.Fatal(err)
	}
	bp.Close()
	refused(used, "a JSON schema on a topic used without one", pulsar.NewJSONSchema(orderV1, nil))
	admitted(used, "no schema on a topic used without one", nil)
	if code, body := adminCall(t, "GET", s.AdminURL+"/admin/v2/schemas/"+strings.TrimPrefix(used, "persistent://")+"/schema", nil); code != 404 {
		t.Errorf("the refused consumer registered a schema on %s: %d %s", used, code, body)
	}
}
