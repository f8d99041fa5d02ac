package georep

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/internal/up"
)

type failoverRecord struct {
	Namespace, Active, Previous string
	Epoch                       uint64
}

type topicStats struct {
	Publishers []struct{ ProducerName string }
}

func (d *deployment) publishers(region, topicPath string) int {
	var st topicStats
	if err := d.admin(region, "GET", "/admin/v2/persistent/"+topicPath+"/stats", nil, &st); err != nil {
		return -1
	}
	return len(st.Publishers)
}

// An active-standby namespace is served by its active region only: a
// client given the multi-region service URL (or a standby region's URL)
// is steered to the active region; a manual failover moves the producer
// and the consumer to the new active region on their own, and every
// message sent after the move is received.
func TestManualFailoverSteersClients(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3})
	d.createNamespace("public/as", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"})
	const topic = "persistent://public/as/orders"
	const path = "public/as/orders"

	// A client that only knows west is steered to east too.
	var warm []pulsar.Producer
	for _, region := range []string{"", "west"} {
		c := d.client(region)
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 30 * time.Second})
		if err != nil {
			t.Fatalf("producer through %q: %v", region, err)
		}
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("warm/0/" + region)}); err != nil {
			t.Fatal(err)
		}
		warm = append(warm, p)
	}
	if n := d.publishers("east", path); n != 2 {
		t.Fatalf("east serves %d producers, want both", n)
	}
	for _, p := range warm {
		p.Close()
	}

	client := d.client("")
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "k/%d/before", i)}); err != nil {
			t.Fatal(err)
		}
	}

	var rec failoverRecord
	if err := d.admin("west", "POST", "/admin/v2/meridian/failover/public/as", map[string]string{"to": "west", "reason": "test"}, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Active != "west" || rec.Epoch != 1 || rec.Previous != "east" {
		t.Fatalf("failover record %+v", rec)
	}
	if err := d.admin("west", "POST", "/admin/v2/meridian/failover/public/as", map[string]string{"to": "west"}, nil); err == nil {
		t.Fatal("a second failover to the active region was accepted")
	}

	start := time.Now()
	for i := range 50 {
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "k/%d/after", i)}); err != nil {
			t.Fatalf("send after the failover: %v", err)
		}
		if i == 0 {
			t.Logf("first receipt %v after the failover", time.Since(start))
		}
	}
	if n := d.publishers("west", path); n != 1 {
		t.Fatalf("west serves %d producers after the failover, want 1", n)
	}
	if n := d.publishers("east", path); n != 0 {
		t.Fatalf("east still serves %d producers after the failover", n)
	}
	got := map[string]int{}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m, err := c.Receive(rctx)
		cancel()
		if err != nil {
			if len(got) >= 50 {
				break
			}
			continue
		}
		c.Ack(m)
		if _, i, tag := parsePayload(m.Payload()); tag == "after" {
			got[fmt.Sprint(i)]++
		}
	}
	if len(got) != 50 {
		t.Fatalf("the consumer received %d of the 50 messages sent after the failover", len(got))
	}
	var recs []failoverRecord
	if err := d.admin("east", "GET", "/admin/v2/meridian/failover/public/as", nil, &recs); err != nil || len(recs) != 1 || recs[0].Active != "west" {
		t.Fatalf("east's view of the failover: %+v %v", recs, err)
	}
}
