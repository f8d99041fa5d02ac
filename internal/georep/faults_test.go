package georep

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/internal/up"
)

// owner returns the name of the broker of region that runs topic's
// replicators (its owner).
func (d *deployment) owner(region, topic string) string {
	for _, p := range d.region(region).Processes {
		if p.Role != "broker" {
			continue
		}
		resp, err := http.Get("http://" + p.Admin + "/admin/v2/meridian/replication?local=true&filter=" + topic)
		if err != nil {
			continue
		}
		var st []replStatus
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if len(st) > 0 {
			return p.Name
		}
	}
	return ""
}

// Issue 4, test 2: the east broker that owns the topic is kill -9ed while
// replication runs, and every sender's first batch is lost on the way
// (the target sees a gap, which it must never skip). West ends with every
// message east acknowledged, exactly once.
func TestReplicationSurvivesOwnerKillAndLostBatch(t *testing.T) {
	t.Setenv("MERIDIAN_FAULT_DROP_REPL_BATCHES", "1")
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 2, BookiesPerRegion: 3, RacksPerRegion: 3})
	d.createNamespace("public/geo", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-active"})
	const topic = "persistent://public/geo/payments"
	const n = 6000

	east := d.client("east")
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 20, SendTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	killed := make(chan string, 1)
	for i := range n {
		if i == n/3 {
			var owner string
			deadline := time.Now().Add(30 * time.Second)
			for owner == "" && time.Now().Before(deadline) {
				owner = d.owner("east", topic)
			}
			if owner == "" {
				t.Fatal("no east broker runs the topic's replicator")
			}
			d.kill(owner)
			killed <- owner
			t.Logf("killed %s after %d sends", owner, i)
		}
		wg.Add(1)
		pl := fmt.Sprintf("k%d/%d/east", i%10, i)
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Key: fmt.Sprintf("k%d", i%10), Payload: []byte(pl)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err == nil {
					mu.Lock()
					acked[pl] = true
					mu.Unlock()
				}
				wg.Done()
			})
		if i%100 == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	p.Flush()
	wg.Wait()
	owner := <-killed
	if len(acked) < n*9/10 {
		t.Fatalf("only %d of %d sends acknowledged across the takeover", len(acked), n)
	}
	t.Logf("%d of %d sends acknowledged", len(acked), n)
	if now := d.owner("east", topic); now == owner || now == "" {
		t.Fatalf("the topic's replicator is not running on another east broker (owner %q)", now)
	}
	d.waitReplicated("east", topic, []string{"west"}, 2*time.Minute)

	west := d.client("west")
	c, err := west.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "dr", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	r := consumeAll(t, c, len(acked), 2*time.Minute, 3*time.Second)
	for pl := range acked {
		if got := len(r.ids[pl]); got != 1 {
			t.Fatalf("%s delivered %d times in west, want once", pl, got)
		}
	}
	for pl, ids := range r.ids {
		if len(ids) != 1 {
			t.Fatalf("%s delivered %d times in west", pl, len(ids))
		}
	}
	for key, idx := range r.perKey {
		for j := 1; j < len(idx); j++ {
			if idx[j] < idx[j-1] {
				t.Fatalf("key %s: message %d after %d", key, idx[j], idx[j-1])
			}
		}
	}

	// A namespace's replication rate limit holds: 200 messages of 1 KiB at
	// 50,000 bytes/s need about 3 s beyond the one-second burst.
	d.createNamespace("public/slow", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-active", "rateBytesPerSecond": 50000})
	const slow = "persistent://public/slow/t"
	sc, err := west.Subscribe(pulsar.ConsumerOptions{Topic: slow, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := east.CreateProducer(pulsar.ProducerOptions{Topic: slow, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 200 {
		sp.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: append(fmt.Appendf(nil, "k/%d/east/", i), make([]byte, 1024)...)}, nil)
	}
	sp.Flush()
	got := consumeAll(t, sc, 200, time.Minute, 2*time.Second)
	took := time.Since(start) - 2*time.Second // consumeAll waited 2 s for more
	if got.count != 200 || took < 2500*time.Millisecond {
		t.Fatalf("rate-limited namespace replicated %d messages in %v; want 200 in at least 2.5 s", got.count, took)
	}
	t.Logf("rate-limited replication of 200 KiB at 50,000 B/s took %v", took)
}

// Issue 4, test 3: three regions, active-active, producers in all three:
// every region ends with every message exactly once — no loop, no loss.
func TestThreeRegionsActiveActive(t *testing.T) {
	regions := []string{"east", "west", "north"}
	d := startDeployment(t, up.Options{Regions: regions, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3})
	d.createNamespace("public/mesh", regions, map[string]any{"mode": "async", "failover": "active-active"})
	const topic = "persistent://public/mesh/events"
	const n = 3000
	var wg sync.WaitGroup
	for _, r := range regions {
		c := d.client(r)
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 50})
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			produce(t, p, r, n, 7)
		}()
	}
	wg.Wait()
	for _, r := range regions {
		var others []string
		for _, o := range regions {
			if o != r {
				others = append(others, o)
			}
		}
		d.waitReplicated(r, topic, others, 2*time.Minute)
	}
	for _, r := range regions {
		c, err := d.client(r).Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "all", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		got := consumeAll(t, c, 3*n, 2*time.Minute, 3*time.Second)
		if got.count != 3*n {
			t.Fatalf("%s delivered %d messages, want %d", r, got.count, 3*n)
		}
		for _, origin := range regions {
			for i := range n {
				pl := fmt.Sprintf("k%d/%d/%s", i%7, i, origin)
				if len(got.ids[pl]) != 1 {
					t.Fatalf("%s: %s delivered %d times", r, pl, len(got.ids[pl]))
				}
			}
		}
		for key, idx := range got.perKey {
			for j := 1; j < len(idx); j++ {
				if idx[j] < idx[j-1] {
					t.Fatalf("%s: key %s: message %d after %d", r, key, idx[j], idx[j-1])
				}
			}
		}
	}
}

// A replicator resumes by itself: east's owner restarts with a backlog
// to west and no client ever comes back to load the topic; once west is
// back, the backlog drains anyway (the topic is loaded because of its
// backlog marker).
func TestReplicationResumesWithoutClients(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3})
	d.createNamespace("public/geo", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-active"})
	const topic = "persistent://public/geo/quiet"
	d.kill("west-broker-1")
	east := d.client("east")
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, "east", 500, 5)
	east.Close()
	d.kill("east-broker-1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range []string{"east-broker-1", "west-broker-1"} {
		if err := d.d.Restart(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	d.waitReplicated("east", topic, []string{"west"}, 90*time.Second)
	d.killRegion("east")
	c, err := d.client("west").Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	if r := consumeAll(t, c, 500, time.Minute, 2*time.Second); r.count != 500 {
		t.Fatalf("west has %d of 500 messages", r.count)
	}
}
