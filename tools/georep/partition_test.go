package georep

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/up"
)

type healthMember struct {
	Name, Region, Role, State string
}

func (d *deployment) health(region string) ([]healthMember, error) {
	var h struct{ Members []healthMember }
	err := d.admin(region, "GET", "/admin/v2/meridian/health", nil, &h)
	return h.Members, err
}

func (d *deployment) failoverRecord(region, ns string) (failoverRecordFull, error) {
	var recs []failoverRecordFull
	if err := d.admin(region, "GET", "/admin/v2/meridian/failover/"+ns, nil, &recs); err != nil {
		return failoverRecordFull{}, err
	}
	if len(recs) != 1 {
		return failoverRecordFull{}, fmt.Errorf("%d records", len(recs))
	}
	return recs[0], nil
}

type failoverRecordFull struct {
	Namespace, Active, Previous, Reason string
	Epoch                               uint64
	SinceMs                             int64
	Health                              []struct{ Region, Condition, Detail string }
}

// waitActive waits until region's view of ns names want active.
func (d *deployment) waitActive(region, ns, want string, timeout time.Duration) failoverRecordFull {
	d.t.Helper()
	var last failoverRecordFull
	var err error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if last, err = d.failoverRecord(region, ns); err == nil && last.Active == want {
			return last
		}
	}
	d.t.Fatalf("%s did not become active for %s within %v (as %s sees it: %+v, %v)", want, ns, timeout, region, last, err)
	return last
}

// ledgersOf lists the ledgers of region's copy of a topic.
func (d *deployment) ledgersOf(region, topicPath string) ([]int64, error) {
	var st struct {
		Ledgers []struct{ LedgerID int64 }
	}
	if err := d.admin(region, "GET", "/admin/v2/persistent/"+topicPath+"/internalStats", nil, &st); err != nil {
		return nil, err
	}
	var out []int64
	for _, l := range st.Ledgers {
		out = append(out, l.LedgerID)
	}
	return out, nil
}

// Issue 5, "health is more than membership": every east process keeps
// answering gossip, but east's brokers can no longer reach their bookies
// (packets to the bookies' service ports are dropped; gossip ports are
// not). Only the write probe can see that: east's probe fails, east hands
// the namespace over to west, and the producer carries on in west.
func TestWriteProbeMovesNamespaceFromHalfDeadRegion(t *testing.T) {
	f := newNetFilter(t)
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL})
	d.createNamespace("public/probe", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"})
	const topic = "persistent://public/probe/t"
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: d.e.ServiceURL, ConnectionTimeout: 2 * time.Second, OperationTimeout: 10 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("k/0/before")}); err != nil {
		t.Fatal(err)
	}
	if rec := d.waitActive("west", "public/probe", "east", 10*time.Second); rec.Epoch == 0 {
		t.Fatalf("no epoch: %+v", rec)
	}

	var bookiePorts []int
	for _, ps := range d.d.Plan.Procs {
		if ps.Region == "east" && ps.Role == "bookie" {
			bookiePorts = append(bookiePorts, portOf(t, ps.Addr))
		}
	}
	cut := time.Now()
	f.drop(bookiePorts, 0)
	rec := d.waitActive("west", "public/probe", "west", 60*time.Second)
	moved := time.Since(cut)
	// Gossip still had every east process alive: the probe decided.
	members, err := d.health("west")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.Region == "east" && m.State != "alive" {
			t.Fatalf("gossip sees %s %s: the test wants a region that answers gossip", m.Name, m.State)
		}
	}
	if !strings.Contains(rec.Reason, "write probe") {
		t.Fatalf("the namespace moved for another reason: %q", rec.Reason)
	}
	// failover status shows the regions' health as gossip sees it.
	if len(rec.Health) != 2 || rec.Health[0].Region != "east" || rec.Health[0].Condition != "down" || !strings.Contains(rec.Health[0].Detail, "write probe") ||
		rec.Health[1].Region != "west" || rec.Health[1].Condition != "up" {
		t.Fatalf("failover status health: %+v", rec.Health)
	}
	// The producer carries on in west.
	var sendErr error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		if _, sendErr = p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("k/1/after")}); sendErr == nil {
			break
		}
	}
	if sendErr != nil {
		t.Fatalf("no receipt after the move: %v", sendErr)
	}
	t.Logf("east's bookies unreachable: west active after %v (%s); first receipt in west %v after the cut", moved.Round(time.Millisecond), rec.Reason, time.Since(cut).Round(time.Millisecond))
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	if err != nil || n == 0 {
		t.Fatalf("no port in %q", addr)
	}
	return n
}

// ack is one receipt as the producer saw it.
type ack struct {
	at     time.Time
	ledger int64
	idx    int
}

// Issue 5, test 5: split views. east keeps running but is cut off from
// west and from the witness (every packet between their processes is
// dropped; the test's clients still reach both regions). Two producers
// with the multi-region service URL produce throughout. east must stop
// acknowledging before west starts: the intervals during which each
// region acknowledged never overlap (checked from the receipt timestamps,
// the acknowledging region told by the ledger the id names). After the
// partition heals both regions converge and every acknowledged message is
// in west.
func TestSplitViewsNeverOverlap(t *testing.T) {
	f := newNetFilter(t)
	// The benchmark's tuned settings (make bench-failover) run here too,
	// to check they do not flap: MERIDIAN_TEST_FAILOVER_LEASE_TTL and
	// MERIDIAN_TEST_FAILOVER_DELAY, as in the region-loss tests.
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL, RegionGIDs: regionGIDs,
		FailoverLeaseTTL: os.Getenv("MERIDIAN_TEST_FAILOVER_LEASE_TTL")})
	policy := map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"}
	if v, err := time.ParseDuration(os.Getenv("MERIDIAN_TEST_FAILOVER_DELAY")); err == nil && v > 0 {
		policy["failoverDelayMs"] = v.Milliseconds()
	}
	d.createNamespace("public/split", []string{"east", "west"}, policy)
	const topic = "persistent://public/split/t"
	const path = "public/split/t"

	var mu sync.Mutex
	var acks []ack
	stop := make(chan struct{})
	var wg sync.WaitGroup
	produce := func(w int, url string) {
		client, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, ConnectionTimeout: 2 * time.Second, OperationTimeout: 10 * time.Second,
			KeepAliveInterval: time.Second, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.Close)
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				idx := w*10_000_000 + i
				p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "k/%d/split", idx)},
					func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
						if err == nil {
							mu.Lock()
							acks = append(acks, ack{at: time.Now(), ledger: id.LedgerID(), idx: idx})
							mu.Unlock()
						}
					})
			}
		}()
	}
	// Two producers that were served by east before the cut and stay
	// connected to it (the test's clients reach both regions).
	produce(0, d.e.ServiceURL)
	produce(1, d.e.ServiceURL)
	time.Sleep(3 * time.Second)
	cut := time.Now()
	f.isolate(d, "east")
	moved := d.waitActive("west", "public/split", "west", 90*time.Second)
	t.Logf("west active %v after the cut (epoch %d)", time.Since(cut).Round(time.Millisecond), moved.Epoch)
	// A third producer that asks west, which serves it while east's
	// producers are still connected to east: were east not fenced, the
	// two regions would acknowledge at the same time.
	produce(2, d.region("west").ServiceURL)
	// Produce in west for a while, then heal.
	time.Sleep(5 * time.Second)
	healed := time.Now()
	f.heal()
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()
	time.Sleep(3 * time.Second) // receipts in flight

	// Which region acknowledged each receipt: by the ledger its id names.
	region := map[int64]string{}
	for _, r := range []string{"east", "west"} {
		var ls []int64
		var err error
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
			if ls, err = d.ledgersOf(r, path); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("ledgers of %s: %v", r, err)
		}
		for _, l := range ls {
			region[l] = r
		}
	}
	mu.Lock()
	all := slices.Clone(acks)
	mu.Unlock()
	slices.SortFunc(all, func(a, b ack) int { return a.at.Compare(b.at) })
	var lastEast, firstWest time.Time
	eastAcks, westAcks := 0, 0
	for _, a := range all {
		switch region[a.ledger] {
		case "east":
			eastAcks++
			lastEast = a.at
		case "west":
			westAcks++
			if firstWest.IsZero() {
				firstWest = a.at
			}
		default:
			t.Fatalf("receipt for message %d names ledger %d, which neither region has", a.idx, a.ledger)
		}
	}
	for _, a := range all {
		if region[a.ledger] == "east" && !firstWest.IsZero() && a.at.After(firstWest) {
			t.Fatalf("east acknowledged message %d at %v, after west's first receipt at %v: two regions acknowledged at once",
				a.idx, a.at.Format("15:04:05.000"), firstWest.Format("15:04:05.000"))
		}
	}
	if eastAcks == 0 || westAcks == 0 {
		t.Fatalf("receipts: east %d, west %d; the test wants both regions to have served", eastAcks, westAcks)
	}
	t.Logf("receipts: east %d (last %v after the cut), west %d (first %v after the cut): a gap of %v with neither; healed %v after the cut",
		eastAcks, lastEast.Sub(cut).Round(time.Millisecond), westAcks, firstWest.Sub(cut).Round(time.Millisecond),
		firstWest.Sub(lastEast).Round(time.Millisecond), healed.Sub(cut).Round(time.Millisecond))

	// Convergence: east learns it is standby, and every acknowledged
	// message is in west.
	final := d.waitActive("east", "public/split", "west", 60*time.Second)
	if final.Epoch != moved.Epoch {
		t.Fatalf("the namespace moved again after the failover (epoch %d, then %d: %s): the settings flap", moved.Epoch, final.Epoch, final.Reason)
	}
	want := map[int]bool{}
	for _, a := range all {
		want[a.idx] = true
	}
	client := d.client("west")
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := map[int]bool{}
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline) && len(got) < len(want); {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m, err := c.Receive(ctx)
		cancel()
		if err != nil {
			continue
		}
		c.Ack(m)
		if _, i, _ := parsePayload(m.Payload()); want[i] {
			got[i] = true
		}
	}
	if len(got) != len(want) {
		missing := 0
		for i := range want {
			if !got[i] {
				missing++
			}
		}
		t.Fatalf("%d of %d acknowledged messages are not in west after the partition healed", missing, len(want))
	}
}

// restartRegion starts every process of a region again on its data, in
// dependency order.
func (d *deployment) restartRegion(region string) {
	d.t.Helper()
	d.faulting("restartRegion")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, roles := range [][]string{{"etcd", "global-etcd"}, {"bookie"}, {"broker"}} {
		for _, ps := range d.d.Plan.Procs {
			if ps.Region == region && slices.Contains(roles, ps.Role) {
				if err := d.d.Restart(ctx, ps.Name); err != nil {
					d.t.Fatal(err)
				}
			}
		}
	}
}

// Issue 5, test 4: failback. east dies (kill -9), west takes over, and
// the producer and the consumer carry on there. east restarts: it first
// receives what west acknowledged meanwhile (reverse replication), then,
// once up and caught up for switchBackDelay, the namespace moves back and
// the clients follow on their own. The consumer sees every receipted
// message: no gap across either move.
func TestFailbackAfterRegionReturns(t *testing.T) { failback(t, false) }

// The same with the orphans policy quarantine: west keeps the async tail
// out of the topic, in a quarantine topic that holds exactly it.
func TestFailbackQuarantinesOrphans(t *testing.T) { failback(t, true) }

// maxSwitchBackDups bounds the messages a consumer receives again after a
// switch-back: 1 s of the failback tests' 100 msgs/s.
const maxSwitchBackDups = 100

func failback(t *testing.T, quarantine bool) {
	// A slow link, so east dies with a replication backlog: the async
	// tail, which west must list as orphans when east returns.
	t.Setenv("MERIDIAN_FAULT_REPL_DELAY", "300ms")
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL})
	policy := map[string]any{"mode": "async", "failover": "active-standby", "primary": "east", "switchBackDelayMs": 5000}
	if quarantine {
		policy["orphans"] = "quarantine"
	}
	d.createNamespace("public/fb", []string{"east", "west"}, policy)
	const topic = "persistent://public/fb/t"
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: d.e.ServiceURL, ConnectionTimeout: 2 * time.Second, OperationTimeout: 10 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// A small receiver queue: held (below), the consumer stops asking east
	// for more, so east's last messages stay undelivered when it dies.
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "fb", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		ReceiverQueueSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex // guards phase
	phase := "east"
	// held: the application stops taking messages (it blocks in the ack
	// callback). Held over the kill, with its queue full the consumer asks
	// east for no more, so the last of east's messages are never delivered
	// before east dies: the async tail the consumer never saw, which must
	// reach it late (orphans: replicate) or land in the quarantine topic
	// (quarantine). On a loaded machine a consumer lagging east by a few
	// hundred ms made the same case by chance (CI, message 187).
	var held atomic.Bool
	l := startLoad(p, c, 10*time.Millisecond, func() string {
		mu.Lock()
		defer mu.Unlock()
		return phase
	}, func(m pulsar.Message) {
		for held.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		c.Ack(m)
	})
	tl := l.tl
	countPhase := tl.count
	time.Sleep(1500 * time.Millisecond)
	held.Store(true)
	time.Sleep(500 * time.Millisecond)
	var backlog int64
	if st, err := d.replication("east", topic); err == nil {
		for _, s := range st {
			backlog += s.BacklogEntries
		}
	}
	killed := time.Now()
	d.killRegion("east")
	held.Store(false)
	mu.Lock()
	phase = "outage"
	mu.Unlock()
	d.waitActive("west", "public/fb", "west", 60*time.Second)
	for deadline := time.Now().Add(60 * time.Second); countPhase("outage") < 300 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	if n := countPhase("outage"); n < 300 {
		t.Fatalf("west receipted %d messages during the outage", n)
	}
	t.Logf("west serving; %d messages receipted there %v after the kill", countPhase("outage"), time.Since(killed).Round(time.Millisecond))

	// What west has now, read by a second subscription: what east
	// receipted beyond it is the async tail.
	audit, err := d.client("west").Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "audit", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	tl.mu.Lock()
	upto := tl.lastSent
	tl.mu.Unlock()
	inWest := map[int]bool{}
	for seen := 0; seen < upto; {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := audit.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("reading west's copy: %v", err)
		}
		audit.Ack(m)
		_, i, _ := parsePayload(m.Payload())
		inWest[i] = true
		seen = max(seen, i)
	}
	audit.Close()
	tl.mu.Lock()
	tail := 0
	tailSet := map[int]bool{}
	for i, ph := range tl.receipted {
		if ph == "east" && !inWest[i] {
			tail++
			tailSet[i] = true
		}
	}
	tl.mu.Unlock()
	if tail == 0 {
		t.Fatalf("east died with nothing unreplicated (backlog sampled before the kill: %d): the test wants an async tail", backlog)
	}

	restarted := time.Now()
	d.restartRegion("east")
	mu.Lock()
	phase = "returned"
	mu.Unlock()
	rec := d.waitActive("west", "public/fb", "east", 120*time.Second)
	back := time.Since(restarted)
	if rec.Previous != "west" || !strings.Contains(rec.Reason, "up for") {
		t.Fatalf("the namespace went back to east by %+v, not by a switch-back", rec)
	}
	// Reverse replication: everything west receipted during the outage is
	// in east.
	d.waitReplicated("west", topic, []string{"east"}, 60*time.Second)
	for deadline := time.Now().Add(60 * time.Second); countPhase("switched") < 300 && time.Now().Before(deadline); {
		mu.Lock()
		phase = "switched"
		mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}
	if n := countPhase("switched"); n < 300 {
		t.Fatalf("only %d messages receipted after the switch-back", n)
	}
	if n := d.publishers("east", "public/fb/t"); n != 1 {
		t.Fatalf("east serves %d producers after the switch-back", n)
	}
	l.stop()
	// With the quarantine policy, a message of the tail the consumer had
	// not received when east died is the operator's, in the quarantine
	// topic (checked below), not the topic's: the topic's log advances past
	// the tail (docs/georep.md, "The async tail"). The consumer can still
	// have received it before the kill. Expecting it on the topic was the
	// test's error: a receipt east's consumer lagged behind by under 300 ms
	// when a loaded machine slowed it (CI, message 187 of a 2 s east phase).
	{
		// When the consumer first received each message of the tail.
		whenTail := map[string]int{}
		tl.mu.Lock()
		for i := range tailSet {
			at, ok := tl.firstAt[i]
			switch {
			case !ok:
				whenTail["never"]++
			case at.Before(killed):
				whenTail["before the kill"]++
			case at.Before(restarted):
				whenTail["during the outage"]++
			case at.Before(restarted.Add(back)):
				whenTail["after east restarted"]++
			default:
				whenTail["after the switch-back"]++
			}
		}
		tl.mu.Unlock()
		t.Logf("the tail's %d messages, by when the consumer first received them: %v", tail, whenTail)
		// Quarantined, the tail is not the topic's: once east is back, none
		// of it reaches the consumer on the topic (it did when east served
		// the consumer from its own log before taking west's positions).
		if late := whenTail["after east restarted"] + whenTail["after the switch-back"]; quarantine && late > 0 {
			t.Fatalf("%d messages of the quarantined tail were delivered on the topic after east returned (%v)", late, whenTail)
		}
	}
	quarantined := 0
	if quarantine {
		// Usually most of the tail (the consumer was held over the kill);
		// none only if it had kept up with all of it.
		quarantined = tl.expectElsewhere(tailSet)
	}
	// Drain: the consumer (now in east) must have every other receipted
	// message, the last sends' included (their receipts may still be on the
	// way: a send times out after 10 s).
	inflight := tl.inFlight()
	missing, unanswered := tl.drain(func(ctx context.Context) (int, bool) {
		m, err := c.Receive(ctx)
		if err != nil {
			return 0, false
		}
		c.Ack(m)
		_, i, _ := parsePayload(m.Payload())
		return i, true
	}, 30*time.Second, 60*time.Second)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	receipted, receiptAt := tl.receipted, tl.receiptAt
	if unanswered > 0 {
		t.Fatalf("%d sends neither receipted nor failed 30 s after production stopped", unanswered)
	}
	if len(missing) > 0 {
		var desc []string
		for _, i := range missing[:min(10, len(missing))] {
			desc = append(desc, fmt.Sprintf("%d (%s, receipted %v after the kill)", i, receipted[i], receiptAt[i].Sub(killed).Round(time.Millisecond)))
		}
		t.Fatalf("%d receipted messages never delivered: %s; east restarted %v after the kill, switched back %v after that",
			len(missing), strings.Join(desc, ", "), restarted.Sub(killed).Round(time.Millisecond), back.Round(time.Millisecond))
	}
	// Nor during the drain.
	for i := range tl.elsewhere {
		if tl.received[i] {
			t.Fatalf("message %d of the quarantined tail was delivered on the topic during the drain", i)
		}
	}
	// A switch-back is a planned move: the subscription's position in
	// west reaches east before east serves, so the consumer is not given
	// again what it acknowledged in west. Left: what it acknowledged in
	// west's last subscription sync (200 ms) and its ack grouping (100 ms);
	// before east took west's last positions and waited until it caught up,
	// everything acknowledged since the last position that had translated
	// came again (138 to 1,800 messages here).
	switched := time.UnixMilli(rec.SinceMs)
	dupsAfter := tl.dupsSinceLocked(switched) // tl.mu held since the drain
	if d := dupsAfter; d > maxSwitchBackDups {
		t.Fatalf("the consumer received %d messages again after the switch-back (at most %d: what it acknowledged in west's last %v)", d, maxSwitchBackDups, time.Duration(maxSwitchBackDups)*10*time.Millisecond)
	}
	// The tail is listed as orphans, exactly.
	var batches []struct {
		Origin     string
		Epoch      uint64
		Quarantine string
		Orphans    []struct{ OriginID string }
	}
	if err := d.admin("west", "GET", "/admin/v2/meridian/failover/public/fb/orphans", nil, &batches); err != nil {
		t.Fatal(err)
	}
	orphans := map[string]bool{}
	qtopic := ""
	for _, b := range batches {
		if b.Origin != "east" {
			t.Fatalf("orphans from %s: %+v", b.Origin, b)
		}
		if quarantine != (b.Quarantine != "") {
			t.Fatalf("orphans policy quarantine=%t, batch kept aside in %q", quarantine, b.Quarantine)
		}
		qtopic = b.Quarantine
		for _, o := range b.Orphans {
			orphans[o.OriginID] = true
		}
	}
	// Every message of the tail is an orphan. So is a message east
	// persisted whose receipt the kill swallowed: the client sent it again
	// to west, and east's copy arrives late as well (a duplicate). Those
	// were receipted (by west) after the kill.
	resent := 0
	for i, ph := range receipted {
		if ph == "east" && receiptAt[i].After(killed) {
			resent++
		}
	}
	if len(orphans) < tail || len(orphans) > tail+resent {
		t.Fatalf("%d orphans listed; east had receipted %d messages west did not have when it died (and %d were sent again to west)", len(orphans), tail, resent)
	}
	if quarantine {
		// The quarantine topic holds exactly the tail (read where the
		// namespace is active now: east, which has it by replication).
		qc, err := d.client("").Subscribe(pulsar.ConsumerOptions{Topic: qtopic, SubscriptionName: "operator", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		inQ := map[int]bool{}
		for found := 0; found < tail; {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			m, err := qc.Receive(ctx)
			cancel()
			if err != nil {
				t.Fatalf("quarantine topic %s: %d of the %d messages of the tail read: %v", qtopic, found, tail, err)
			}
			qc.Ack(m)
			_, i, _ := parsePayload(m.Payload())
			switch {
			case inQ[i]:
				t.Fatalf("quarantine topic %s holds message %d twice", qtopic, i)
			case tailSet[i]:
				found++
			case receipted[i] == "east" && receiptAt[i].After(killed): // sent again to west: a duplicate
			default:
				t.Fatalf("quarantine topic %s holds message %d, which is not of the tail", qtopic, i)
			}
			inQ[i] = true
		}
		qc.Close()
	}
	t.Logf("orphans policy quarantine=%t (%s): switch-back %v after east restarted (switchBackDelay 5 s); receipts: east %d, outage (west) %d, after the switch-back %d (%d sends in flight when production stopped); all delivered (%d of the tail only to the quarantine topic: not received before the kill), %d received twice after the failover and %d after the switch-back; async tail %d messages (east's backlog sampled before the kill: %d), %d listed as orphans",
		quarantine, qtopic, back.Round(time.Millisecond), countPhaseLocked(receipted, "east"), countPhaseLocked(receipted, "outage"), countPhaseLocked(receipted, "switched"), inflight, quarantined, tl.dups-dupsAfter, dupsAfter, tail, backlog, len(orphans))
}

func countPhaseLocked(m map[int]string, ph string) int {
	n := 0
	for _, v := range m {
		if v == ph {
			n++
		}
	}
	return n
}
