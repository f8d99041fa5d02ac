package georep

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/meridian-mq/meridian/tools/up"
)

// Issue 35: a delayed message replicated to another region keeps its
// absolute deliver_at_time (the replicated entry carries the producer's
// metadata verbatim) and is held there too, until the same time. Produced
// in east, consumed by a Shared subscription in each region.
func TestDelayedMessageIsHeldUntilItsTimeInEveryRegion(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3})
	d.createNamespace("public/delayed", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-active"})
	const topic = "persistent://public/delayed/later"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	type receipt struct {
		payload string
		at      time.Time
	}
	got := map[string]chan receipt{}
	for _, region := range []string{"east", "west"} {
		c, err := d.client(region).Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "held", Type: pulsar.Shared,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ch := make(chan receipt, 100)
		got[region] = ch
		go func() {
			for {
				m, err := c.Receive(ctx)
				if err != nil {
					return
				}
				ch <- receipt{string(m.Payload()), time.Now()}
				c.Ack(m)
			}
		}()
	}
	p, err := d.client("east").CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 5
	due := time.Now().Add(12 * time.Second).Truncate(time.Millisecond)
	for i := range n {
		for _, m := range []*pulsar.ProducerMessage{{Payload: []byte(fmt.Sprintf("delayed-%d", i)), DeliverAt: due}, {Payload: []byte(fmt.Sprintf("now-%d", i))}} {
			if _, err := p.Send(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	// West holds the replicated ones: they are there, and delayed.
	testutil.Eventually(t, time.Until(due), "west holds the replicated delayed messages", func() bool {
		var st struct {
			Subscriptions map[string]struct {
				MsgDelayed int64 `json:"msgDelayed"`
			} `json:"subscriptions"`
		}
		err := d.admin("west", "GET", "/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/stats", nil, &st)
		return err == nil && st.Subscriptions["held"].MsgDelayed == n
	})
	for region, ch := range got {
		delayed, now := 0, 0
		for delayed < n || now < n {
			select {
			case r := <-ch:
				if strings.HasPrefix(r.payload, "delayed-") {
					if r.at.Before(due) {
						t.Fatalf("%s received %s %s before its deliver_at_time", region, r.payload, due.Sub(r.at))
					}
					delayed++
				} else {
					now++
				}
			case <-time.After(time.Until(due) + time.Minute):
				t.Fatalf("%s received %d delayed and %d undelayed messages of %d each", region, delayed, now, n)
			}
		}
		t.Logf("%s: every delayed message at or after its time", region)
	}
}
