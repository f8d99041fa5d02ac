package georep

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/meridian-mq/meridian/tools/up"
)

// npTopicStats is what the test reads of a non-persistent topic's stats.
type npTopicStats struct {
	Subscriptions map[string]struct {
		Consumers []struct {
			AvailablePermit int `json:"availablePermits"`
		} `json:"consumers"`
	} `json:"subscriptions"`
	Replication map[string]struct {
		Connected      bool  `json:"connected"`
		MsgOutCounter  int64 `json:"msgOutCounter"`
		MsgDropCounter int64 `json:"msgDropCounter"`
	} `json:"replication"`
}

// Issue 35: a non-persistent topic replicates best effort, as Pulsar's
// NonPersistentReplicator: messages produced in east reach a consumer
// connected in west (nothing stored in either region); once west is gone,
// what east cannot send is dropped and counted (the admin stats'
// replication section, the dropped-messages counter), and every message
// is either sent or counted as dropped.
func TestNonPersistentReplicatesBestEffort(t *testing.T) {
	// The brokers' default ownership lease (10 s) written out, not the
	// 3 s of the other tests that kill a process: nothing is stored, so a broker that misses its
	// lease under load (and closes its topics) loses messages this test
	// counts, which is right for non-persistent topics and not what it
	// tests. It kills only west, whose topics nobody takes over.
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: "10s"})
	d.createNamespace("public/np", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-active"})
	const topic = "non-persistent://public/np/ticks"
	statsPath := "/admin/v2/non-persistent/" + strings.TrimPrefix(topic, "non-persistent://") + "/stats"
	consumers := map[string]pulsar.Consumer{}
	for _, region := range []string{"east", "west"} {
		c, err := d.client(region).Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "live"})
		if err != nil {
			t.Fatalf("subscribe in %s: %v", region, err)
		}
		defer c.Close()
		consumers[region] = c
		testutil.Eventually(t, 30*time.Second, region+"'s consumer's first permits", func() bool {
			var st npTopicStats
			if err := d.admin(region, "GET", statsPath, nil, &st); err != nil {
				return false
			}
			cs := st.Subscriptions["live"].Consumers
			return len(cs) == 1 && cs[0].AvailablePermit > 0
		})
	}
	p, err := d.client("east").CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// East opens its stream to west at the first message, and drops what
	// comes while it cannot (best effort, as Pulsar's replicator when not
	// connected): warm the link until west receives a message, and until
	// east has sent or counted every warm-up message, before the
	// messages this test counts.
	warm := 0
	testutil.Eventually(t, time.Minute, "east's link to west to carry a message", func() bool {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("warm-%d", warm))}); err != nil {
			t.Fatal(err)
		}
		warm++
		rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer rcancel()
		_, err := consumers["west"].Receive(rctx)
		return err == nil
	})
	var base struct{ out, drop int64 }
	testutil.Eventually(t, 30*time.Second, "every warm-up message sent to west or counted as dropped", func() bool {
		var st npTopicStats
		if d.admin("east", "GET", statsPath, nil, &st) != nil {
			return false
		}
		w := st.Replication["west"]
		base.out, base.drop = w.MsgOutCounter, w.MsgDropCounter
		return w.Connected && w.MsgOutCounter+w.MsgDropCounter == int64(warm)
	})
	for range warm { // east's consumer has every warm-up message
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		m, err := consumers["east"].Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("east's consumer, warm-up: %v", err)
		}
		consumers["east"].Ack(m)
	}
	const n = 20
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("tick-%d", i))
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(want[i])}); err != nil {
			t.Fatal(err)
		}
	}
	for _, region := range []string{"east", "west"} {
		var got []string
		for len(got) < n {
			rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
			m, err := consumers[region].Receive(rctx)
			rcancel()
			if err != nil {
				t.Fatalf("%s received %v, then: %v", region, got, err)
			}
			consumers[region].Ack(m)
			if strings.HasPrefix(string(m.Payload()), "warm-") {
				continue // west's late warm-up messages
			}
			got = append(got, string(m.Payload()))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s received %v, want %v", region, got, want)
		}
	}
	var st npTopicStats
	if err := d.admin("east", "GET", statsPath, nil, &st); err != nil {
		t.Fatal(err)
	}
	if w := st.Replication["west"]; !w.Connected || w.MsgOutCounter-base.out != n || w.MsgDropCounter != base.drop {
		t.Fatalf("east's replication to west: %+v, want connected, %d sent and none dropped since the warm-up's %d and %d", w, n, base.out, base.drop)
	}

	// West gone: east keeps serving its own consumer and counts what it
	// cannot send.
	d.killRegion("west")
	sent := n
	testutil.Eventually(t, time.Minute, "east to count messages it could not send to west", func() bool {
		for range 5 {
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("tick-%d", sent))}); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		var st npTopicStats
		return d.admin("east", "GET", statsPath, nil, &st) == nil && st.Replication["west"].MsgDropCounter > 0
	})
	testutil.Eventually(t, 30*time.Second, "every message sent to west or counted as dropped", func() bool {
		var st npTopicStats
		if d.admin("east", "GET", statsPath, nil, &st) != nil {
			return false
		}
		w := st.Replication["west"]
		return w.MsgOutCounter+w.MsgDropCounter == int64(warm+sent)
	})
	m := regexp.MustCompile(`meridian_broker_nonpersistent_dropped_messages_total\{[^}]*where="replication"[^}]*\} (\S+)`).FindStringSubmatch(d.metrics("east"))
	if m == nil {
		t.Fatal("east exports no replication drops")
	}
	if v, _ := strconv.ParseFloat(m[1], 64); v <= 0 {
		t.Fatalf("east's replication drop counter is %v", v)
	}
	// East's own consumer missed nothing.
	for i := n; i < sent; i++ {
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		msg, err := consumers["east"].Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("east's consumer, message %d: %v", i, err)
		}
		if got := string(msg.Payload()); got != fmt.Sprintf("tick-%d", i) {
			t.Fatalf("east's consumer got %s, want tick-%d", got, i)
		}
	}
}
