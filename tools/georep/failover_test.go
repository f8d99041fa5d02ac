package georep

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/backoff"
	"github.com/meridian-mq/meridian/tools/up"
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

	// Producer access modes are decided by the active region only (issue
	// 35): an Exclusive producer through the standby region is steered to
	// east and granted there, not in west; a second one, through either
	// region, is fenced by east (ProducerFenced).
	west := d.client("west")
	ex, err := west.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
	if err != nil {
		t.Fatalf("an exclusive producer through the standby region: %v", err)
	}
	if e, w := d.publishers("east", path), d.publishers("west", path); e != 1 || w != 0 {
		t.Fatalf("the exclusive producer: east serves %d producers, west %d; want 1 and 0", e, w)
	}
	for _, c := range []pulsar.Client{west, d.client("east")} {
		if p2, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive}); err == nil {
			p2.Close()
			t.Fatal("a second exclusive producer was granted")
		} else if !strings.Contains(err.Error(), "ProducerFenced") {
			t.Fatalf("a second exclusive producer: %v, want ProducerFenced", err)
		}
	}
	ex.Close()

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

	var before []failoverRecord
	if err := d.admin("east", "GET", "/admin/v2/meridian/failover/public/as", nil, &before); err != nil || len(before) != 1 || before[0].Active != "east" {
		t.Fatalf("before the failover: %+v %v", before, err)
	}
	var rec failoverRecord
	if err := d.admin("west", "POST", "/admin/v2/meridian/failover/public/as", map[string]string{"to": "west", "reason": "test"}, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Active != "west" || rec.Epoch != before[0].Epoch+1 || rec.Previous != "east" {
		t.Fatalf("failover record %+v after %+v", rec, before[0])
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

// Issue 5, test 1 (first form): async, active-standby east→west. A
// producer and a consumer with the multi-region service URL run
// continuously; every east process is kill -9ed; both carry on in west on
// their own (gossip detection, the failover delay, east's lease running
// out, the client's reconnect). Printed: the RTO of produce and consume,
// and what east acknowledged but west never got, beside east's
// replication backlog sampled just before the kill.
//
// MERIDIAN_TEST_FAILOVER_LEASE_TTL (e.g. 3s) runs it with a shorter region
// lease, to measure tuned settings.
func TestAutomaticFailoverOnRegionLoss(t *testing.T) {
	regionLossFailover(t, false)
}

// Issue 5, test 2: the same with a silent outage. Every east process is
// paused (SIGSTOP): no connection is reset, so the client notices only
// through its timeouts — the settings the README recommends:
// ConnectionTimeout 2 s, KeepAliveInterval 1 s (the Go client drops a
// connection with no traffic for two intervals), OperationTimeout 5 s.
// When east resumes it learns it is standby and serves nothing.
func TestAutomaticFailoverOnSilentOutage(t *testing.T) {
	regionLossFailover(t, true)
}

func regionLossFailover(t *testing.T, pause bool) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL,
		FailoverLeaseTTL: os.Getenv("MERIDIAN_TEST_FAILOVER_LEASE_TTL")})
	policy := map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"}
	// MERIDIAN_TEST_FAILOVER_DELAY (e.g. 500ms): the namespace's
	// failoverDelayMs, for tuned measurements (default 2 s).
	if v, err := time.ParseDuration(os.Getenv("MERIDIAN_TEST_FAILOVER_DELAY")); err == nil && v > 0 {
		policy["failoverDelayMs"] = v.Milliseconds()
	}
	d.createNamespace("public/auto", []string{"east", "west"}, policy)
	const topic = "persistent://public/auto/payments"
	opts := pulsar.ClientOptions{URL: d.e.ServiceURL, ConnectionTimeout: 2 * time.Second, OperationTimeout: 30 * time.Second, Logger: quietLogger()}
	if pause {
		opts.KeepAliveInterval, opts.OperationTimeout = time.Second, 5*time.Second
	}
	client, err := pulsar.NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// Benchmark knobs (make bench-failover): MERIDIAN_TEST_SEND_INTERVAL
	// (default 5ms: 200 msgs/s) and MERIDIAN_TEST_CLIENT_MAX_BACKOFF, a
	// cap on the client's reconnect backoff (default: the client's own,
	// 100 ms doubling to 60 s).
	interval := 5 * time.Millisecond
	if v, err := time.ParseDuration(os.Getenv("MERIDIAN_TEST_SEND_INTERVAL")); err == nil && v > 0 {
		interval = v
	}
	po := pulsar.ProducerOptions{Topic: topic, SendTimeout: 60 * time.Second, BatchingMaxPublishDelay: time.Millisecond}
	co := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "dr", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest}
	if v, err := time.ParseDuration(os.Getenv("MERIDIAN_TEST_CLIENT_MAX_BACKOFF")); err == nil && v > 0 {
		po.BackOffPolicyFunc = func() backoff.Policy { return &cappedBackoff{max: v} }
		co.BackOffPolicyFunc = po.BackOffPolicyFunc
	}
	p, err := client.CreateProducer(po)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Subscribe(co)
	if err != nil {
		t.Fatal(err)
	}
	// Cumulative acks: the Go client drops a message whose id is at or
	// below its last cumulative ack, so ids issued in west after the
	// failover must sort above east's (issue 5, test 7).
	l := startLoad(p, c, interval, fixedPhase("east"), func(m pulsar.Message) { c.AckCumulative(m) })
	tl := l.tl
	mu := &tl.mu
	// index → send time, receipt time, first receive time
	sent, receipts, received := tl.sentAt, tl.receiptAt, tl.firstAt
	time.Sleep(2 * time.Second)
	// Restart east's broker: east's topic moves to a new ledger, whose id
	// is above the one west has been appending replicated entries to since
	// before. After the failover, west must not hand out ids below east's
	// (the cumulative-ack consumer would drop them as duplicates).
	d.kill("east-broker-1")
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	if err := d.d.Restart(rctx, "east-broker-1"); err != nil {
		t.Fatal(err)
	}
	rcancel()
	time.Sleep(3 * time.Second)
	var backlog int64
	if st, err := d.replication("east", topic); err == nil {
		for _, s := range st {
			backlog += s.BacklogEntries
		}
	}
	killed := time.Now()
	if pause {
		d.signalRegion("east", syscall.SIGSTOP)
		defer d.signalRegion("east", syscall.SIGCONT)
		d.waitRegionStopped("east")
	} else {
		d.killRegion("east")
	}
	// RTO: from the kill to the first receipt (and the first delivery) of a
	// message sent after every east process was dead (SIGKILL is delivered
	// within the 100 ms allowed here; SIGSTOP was waited for) — only west
	// can have served those.
	dead := time.Now().Add(100 * time.Millisecond)
	deadline := time.Now().Add(90 * time.Second)
	var produceRTO, consumeRTO time.Duration
	afterKill := func() (receipted, delivered int) {
		for i, at := range sent {
			if !at.After(dead) {
				continue
			}
			if r, ok := receipts[i]; ok {
				receipted++
				if produceRTO == 0 || r.Sub(killed) < produceRTO {
					produceRTO = r.Sub(killed)
				}
			}
			if g, ok := received[i]; ok {
				delivered++
				if consumeRTO == 0 || g.Sub(killed) < consumeRTO {
					consumeRTO = g.Sub(killed)
				}
			}
		}
		return
	}
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		r, g := afterKill()
		mu.Unlock()
		if r >= 300 && g >= 300 {
			break
		}
	}
	// Stop producing; let the consumer drain what was receipted.
	l.stopProducing()
	for drain := time.Now().Add(30 * time.Second); time.Now().Before(drain); time.Sleep(200 * time.Millisecond) {
		mu.Lock()
		r, g := afterKill()
		mu.Unlock()
		if g >= r {
			break
		}
	}
	l.stop()
	mu.Lock()
	defer mu.Unlock()
	dups := tl.dups
	after, delivered := afterKill()
	if after < 300 || delivered < 300 {
		t.Fatalf("within 90 s of the kill, west receipted %d and delivered %d messages sent after it (want 300 each)", after, delivered)
	}
	lost, missingAfter := 0, 0
	for i := range receipts {
		_, got := received[i]
		switch {
		case !sent[i].After(killed) && !got:
			lost++
		case sent[i].After(dead) && !got:
			missingAfter++
		}
	}
	how := "kill -9"
	if pause {
		how = "SIGSTOP"
	}
	t.Logf("%s of every east process: RTO produce %v, consume %v; receipts %d (%d for messages sent after the kill); acknowledged in east, never delivered: %d (east's replication backlog just before the kill: %d entries); duplicates delivered: %d (one send every %v, subscription sync every 200 ms)",
		how, produceRTO.Round(time.Millisecond), consumeRTO.Round(time.Millisecond), len(receipts), after, lost, backlog, dups, interval)
	// The subscription's position travels every 200 ms and the client
	// groups acks for 100 ms: at 200 msgs/s about 60 messages; the
	// restart of east's broker earlier adds its own redeliveries. Bound:
	// two seconds' worth.
	if dups > int(2*time.Second/interval) {
		t.Fatalf("%d duplicates after the failover", dups)
	}
	if missingAfter > after/10 {
		t.Fatalf("%d of the %d messages receipted in west were not delivered", missingAfter, after)
	}
	if pause {
		// east resumes with a stale epoch: it learns west is active and
		// does not take a producer (it redirects it to west).
		d.signalRegion("east", syscall.SIGCONT)
		d.waitActive("east", "public/auto", "west", 60*time.Second)
		ec, err := pulsar.NewClient(pulsar.ClientOptions{URL: d.region("east").ServiceURL, ConnectionTimeout: 2 * time.Second, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer ec.Close()
		// east has just resumed: its store connections and the others'
		// registrations are settling, so a refused creation is retried
		// (as an application would).
		var ep pulsar.Producer
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
			if ep, err = ec.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true}); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		if _, err := ep.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("k/-1/resumed")}); err != nil {
			t.Fatal(err)
		}
		if n := d.publishers("east", "public/auto/payments"); n != 0 {
			t.Fatalf("east serves %d producers after resuming with a stale epoch", n)
		}
		if n := d.publishers("west", "public/auto/payments"); n < 1 {
			t.Fatalf("the producer that asked east is not in west (%d)", n)
		}
	}
}

// cappedBackoff doubles from 100 ms up to max (the client's default
// doubles to 60 s), with the client's 20 % jitter.
type cappedBackoff struct{ cur, max time.Duration }

func (b *cappedBackoff) Next() time.Duration {
	b.cur = min(max(2*b.cur, 100*time.Millisecond), b.max)
	return b.cur + time.Duration(rand.Float64()*0.2*float64(b.cur))
}
func (b *cappedBackoff) IsMaxBackoffReached() bool { return b.cur >= b.max }
func (b *cappedBackoff) Reset()                    { b.cur = 0 }

// Issue 5, test 6: replicated subscriptions with out-of-order acks. A
// Shared consumer acknowledges every 3rd message in east; after a
// failover to west it gets back exactly the messages it had not
// acknowledged (the positions travelled every 200 ms; waiting 1.5 s
// leaves nothing in the sync or ack-grouping window).
func TestReplicatedSubscriptionAfterFailover(t *testing.T) {
	// A slow link: acks reach the active region before the entries they
	// name reach west, so west must get the positions again later.
	t.Setenv("MERIDIAN_FAULT_REPL_DELAY", "300ms")
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3})
	d.createNamespace("public/subs", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"})
	const topic = "persistent://public/subs/work"
	const n = 300
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: d.e.ServiceURL, ConnectionTimeout: 2 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "workers", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, "east", n, 1)
	for got := 0; got < n; got++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := c.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("received %d of %d in east: %v", got, n, err)
		}
		if _, i, _ := parsePayload(m.Payload()); i%3 == 0 {
			c.Ack(m)
		}
	}
	d.waitReplicated("east", topic, []string{"west"}, time.Minute)
	time.Sleep(1500 * time.Millisecond)
	if err := d.admin("west", "POST", "/admin/v2/meridian/failover/public/subs", map[string]string{"to": "west"}, nil); err != nil {
		t.Fatal(err)
	}
	again := map[int]int{}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		m, err := c.Receive(ctx)
		cancel()
		if err != nil {
			if len(again) >= n*2/3 {
				break
			}
			continue
		}
		c.Ack(m)
		_, i, _ := parsePayload(m.Payload())
		again[i]++
	}
	if n := d.publishers("west", "public/subs/work"); n != 1 {
		t.Fatalf("the producer is not in west after the failover (%d producers there)", n)
	}
	missing, extra := 0, 0
	for i := range n {
		switch {
		case i%3 != 0 && again[i] == 0:
			missing++
		case i%3 == 0 && again[i] > 0:
			extra++
		}
	}
	t.Logf("after the failover west redelivered %d messages: %d unacknowledged missing, %d acknowledged again", len(again), missing, extra)
	if missing > 0 || extra > 0 {
		t.Fatalf("west redelivered %d messages: %d of the %d unacknowledged are missing, %d acknowledged ones came back", len(again), missing, n*2/3, extra)
	}
}

// Issue 5, test 3: sync mode. Every message east receipted is in west
// when east dies (zero loss), and once east is declared failed it leaves
// west's sync set, so the producer carries on in west.
func TestSyncFailoverLosesNothing(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL})
	d.createNamespace("public/syncas", []string{"east", "west"}, map[string]any{"mode": "sync", "failover": "active-standby", "primary": "east"})
	const topic = "persistent://public/syncas/ledger"
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: d.e.ServiceURL, ConnectionTimeout: 2 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 90 * time.Second, BatchingMaxPublishDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sent, receipts := map[int]time.Time{}, map[int]time.Time{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			mu.Lock()
			sent[i] = time.Now()
			mu.Unlock()
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "k/%d/east", i)},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err == nil {
						mu.Lock()
						receipts[i] = time.Now()
						mu.Unlock()
					}
				})
		}
	}()
	time.Sleep(3 * time.Second)
	killed := time.Now()
	d.killRegion("east")
	dead := killed.Add(100 * time.Millisecond)
	afterKill := func() (n int, first time.Duration) {
		for i, at := range sent {
			if r, ok := receipts[i]; ok && at.After(dead) {
				n++
				if first == 0 || r.Sub(killed) < first {
					first = r.Sub(killed)
				}
			}
		}
		return
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		n, _ := afterKill()
		mu.Unlock()
		if n >= 200 {
			break
		}
	}
	close(stop)
	<-done
	p.Flush()
	mu.Lock()
	n, rto := afterKill()
	total := len(receipts)
	want := map[string]bool{}
	for i := range receipts {
		want[fmt.Sprintf("k/%d/east", i)] = true
	}
	mu.Unlock()
	if n < 200 {
		t.Fatalf("west receipted %d messages sent after east died (want 200): east was not taken out of the sync set", n)
	}
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "audit", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	got := consumeAll(t, c, len(want), time.Minute, 3*time.Second)
	missing := 0
	for pl := range want {
		if len(got.ids[pl]) == 0 {
			missing++
		}
	}
	t.Logf("sync failover: produce RTO %v; %d receipts (%d after the kill); receipted but missing in west: %d", rto.Round(time.Millisecond), total, n, missing)
	if missing > 0 {
		t.Fatalf("%d receipted messages are missing in west", missing)
	}
}
