package georep

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/up"
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
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 2, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL})
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

	// A region added to a namespace later gets the whole retained history
	// (start-at earliest, the default), not only what comes after.
	d.createNamespace("public/late", []string{"east"}, map[string]any{"mode": "async", "failover": "active-active"})
	const late = "persistent://public/late/history"
	lp, err := d.client("east").CreateProducer(pulsar.ProducerOptions{Topic: late})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, lp, "east", 300, 3)
	if err := d.admin("east", "POST", "/admin/v2/namespaces/public/late/replication", []string{"east", "north"}, nil); err != nil {
		t.Fatal(err)
	}
	d.waitReplicated("east", late, []string{"north"}, time.Minute)
	lc, err := d.client("north").Subscribe(pulsar.ConsumerOptions{Topic: late, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	if got := consumeAll(t, lc, 300, time.Minute, 2*time.Second); got.count != 300 {
		t.Fatalf("north, added later, has %d of the 300 messages produced before it joined", got.count)
	}
}

// A replicator resumes by itself: east's owner restarts with a backlog
// to west and no client ever comes back to load the topic; once west is
// back, the backlog drains anyway (the topic is loaded because of its
// backlog marker).
func TestReplicationResumesWithoutClients(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL})
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

// A region gone for long does not take the survivor down: past the
// namespace's replication backlog quota an alert fires, the replication
// cursor stops holding data beyond retention (here 0), retention trims
// what the region never received, and when the region returns it is
// resynced as a new stream from the first retained entry (the loss is
// declared and counted) — east's producers were never blocked.
func TestReplicationBacklogQuotaThenResync(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL})
	body := map[string]any{"replication_clusters": []string{"east", "west"},
		"meridian_replication": map[string]any{"mode": "async", "failover": "active-active", "backlogQuotaBytes": 20000}}
	if err := d.admin("east", "PUT", "/admin/v2/namespaces/public/quota", body, nil); err != nil {
		t.Fatal(err)
	}
	const topic = "persistent://public/quota/t"
	d.kill("west-broker-1")
	send := func(tag string, n int) {
		c := d.client("east")
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var failed atomic.Int64
		for i := range n {
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: append(fmt.Appendf(nil, "k/%d/%s/", i, tag), make([]byte, 1000)...)},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err != nil {
						failed.Add(1)
					}
				})
		}
		p.Flush()
		if n := failed.Load(); n > 0 {
			t.Fatalf("east blocked while west is gone: %d sends failed", n)
		}
		c.Close()
	}
	// More entries than a sender reads ahead (its window), so some are
	// only on disk when retention trims them.
	send("old", 2000)
	eastAdmin := d.proc("east-broker-1").Admin
	deadline := time.Now().Add(30 * time.Second)
	for alerts(t, eastAdmin, "over-quota") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no over-quota alert")
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A restart rolls the ledger over, so retention can trim the old one.
	d.kill("east-broker-1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := d.d.Restart(ctx, "east-broker-1"); err != nil {
		t.Fatal(err)
	}
	send("new", 50)
	// Retention (0) trims the old ledger once the replicator, over its
	// quota, no longer holds it.
	deadline = time.Now().Add(60 * time.Second)
	for {
		var st struct{ Entries int64 }
		err := d.admin("east", "GET", "/admin/v2/persistent/public/quota/t/stats", nil, &st)
		if err == nil && st.Entries <= 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old ledger was not trimmed: %+v %v", st, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := d.d.Restart(ctx, "west-broker-1"); err != nil {
		t.Fatal(err)
	}
	wc, err := d.client("west").Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]int{}
	deadline = time.Now().Add(90 * time.Second)
	for len(got) < 50 && time.Now().Before(deadline) {
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		m, err := wc.Receive(rctx)
		rcancel()
		if err != nil {
			continue
		}
		wc.Ack(m)
		var i int
		var tag string
		parts := strings.SplitN(string(m.Payload()), "/", 4)
		fmt.Sscan(parts[1], &i)
		tag = parts[2]
		if tag == "new" {
			got[i]++
		}
	}
	for i := range 50 {
		if got[i] != 1 {
			t.Fatalf("west has message new/%d %d times after the resync, want once (got %d of 50)", i, got[i], len(got))
		}
	}
	if n := alerts(t, d.proc("east-broker-1").Admin, "needs-resync"); n < 1 {
		t.Fatal("no needs-resync alert")
	}
}
