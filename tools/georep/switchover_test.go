package georep

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/up"
	"github.com/meridian-mq/meridian/tools/wanproxy"
)

// Planned switchover (issue 33, item 1).

// switchoverLoad is a producer and a consumer, on clients of their own,
// with the multi-region service URL: the producer sends k/i/sw in order,
// at most every 5 ms, and records each receipt and the longest send; the
// consumer acknowledges everything, every third message 300 ms late, and
// counts what it receives.
type switchoverLoad struct {
	mu       sync.Mutex
	acked    map[int]bool
	received map[int]int
	maxSend  time.Duration
	maxAt    time.Time
	sendErrs []string
	stop     chan struct{} // the producer stops
	quit     chan struct{} // the consumer stops
	done     sync.WaitGroup
}

func startSwitchoverLoad(t *testing.T, d *deployment, topic string) *switchoverLoad {
	t.Helper()
	l := &switchoverLoad{acked: map[int]bool{}, received: map[int]int{}, stop: make(chan struct{}), quit: make(chan struct{})}
	pc, cc := d.client(""), d.client("")
	p, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cc.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	l.done.Add(2)
	go func() {
		defer l.done.Done()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			start := time.Now()
			_, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "k/%d/sw", i)})
			took := time.Since(start)
			l.mu.Lock()
			if err != nil {
				l.sendErrs = append(l.sendErrs, fmt.Sprintf("%d: %v", i, err))
			} else {
				l.acked[i] = true
			}
			if took > l.maxSend {
				l.maxSend, l.maxAt = took, start
			}
			l.mu.Unlock()
		}
	}()
	go func() {
		defer l.done.Done()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			m, err := c.Receive(ctx)
			cancel()
			select {
			case <-l.quit:
				return
			case <-l.stop:
				if err != nil && l.complete() {
					return
				}
			default:
			}
			if err != nil {
				continue
			}
			_, i, _ := parsePayload(m.Payload())
			if i%3 == 0 {
				// Out of order: every third message is acknowledged 300 ms
				// late (individual acks, deliveries outstanding at the move).
				time.AfterFunc(300*time.Millisecond, func() { c.Ack(m) })
			} else {
				c.Ack(m)
			}
			if i >= 0 {
				l.mu.Lock()
				l.received[i]++
				l.mu.Unlock()
			}
		}
	}()
	return l
}

// complete reports whether every acknowledged message was received.
func (l *switchoverLoad) complete() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.acked {
		if l.received[i] == 0 {
			return false
		}
	}
	return true
}

// finish stops the producer, waits until the consumer received every
// acknowledged message (or 20 s), stops it and returns lost and
// duplicated counts.
func (l *switchoverLoad) finish(t *testing.T) (acked, lost, dups int) {
	t.Helper()
	// The producer stops; the consumer runs on until it has everything.
	close(l.stop)
	deadline := time.Now().Add(20 * time.Second)
	for {
		l.mu.Lock()
		lost = 0
		for i := range l.acked {
			if l.received[i] == 0 {
				lost++
			}
		}
		l.mu.Unlock()
		if lost == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// One more quiet second for a late duplicate to show.
	time.Sleep(time.Second)
	close(l.quit)
	l.done.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.received {
		if n > 1 {
			dups += n - 1
		}
	}
	return len(l.acked), lost, dups
}

type switchoverOp struct {
	State     string `json:"state"`
	StatusURL string `json:"statusUrl"`
	Error     string `json:"error"`
	Result    struct {
		State   string `json:"state"`
		HoldMs  int64  `json:"holdMs"`
		DrainMs int64  `json:"drainMs"`
		Record  *failoverRecord
	} `json:"result"`
}

// switchover starts a planned switchover of ns to region through a broker
// of from, asynchronously (202 + status URL), and polls it to its end.
func (d *deployment) switchover(from, ns, to string, timeout time.Duration) switchoverOp {
	d.t.Helper()
	var admin string
	for _, p := range d.region(from).Processes {
		if p.Role == "broker" {
			admin = d.httpScheme() + p.Admin
			break
		}
	}
	b, _ := json.Marshal(map[string]any{"to": to, "planned": true, "timeoutMs": timeout.Milliseconds()})
	req, _ := http.NewRequest("POST", admin+"/admin/v2/meridian/failover/"+ns, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Prefer", "respond-async")
	resp, err := d.httpClient().Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		d.t.Fatalf("switchover: %d %s, want 202", resp.StatusCode, body)
	}
	var op switchoverOp
	if err := json.Unmarshal(body, &op); err != nil || op.StatusURL == "" {
		d.t.Fatalf("switchover: %s: %v", body, err)
	}
	deadline := time.Now().Add(timeout + 20*time.Second)
	for op.State == "running" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if err := d.admin(from, "GET", op.StatusURL, nil, &op); err != nil {
			d.t.Fatal(err)
		}
	}
	return op
}

func (d *deployment) activeOf(region, ns string) failoverRecord {
	d.t.Helper()
	var recs []failoverRecord
	if err := d.admin(region, "GET", "/admin/v2/meridian/failover/"+ns, nil, &recs); err != nil || len(recs) != 1 {
		d.t.Fatalf("failover record of %s: %+v %v", ns, recs, err)
	}
	return recs[0]
}

// A planned switchover of an async namespace under produce moves it with
// nothing lost and nothing received twice; the producer sees a pause, not
// an error (its longest send is the pause, logged).
func TestPlannedSwitchoverUnderProduce(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3})
	const ns = "public/sw"
	d.createNamespace(ns, []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"})
	const topic = "persistent://public/sw/orders"
	l := startSwitchoverLoad(t, d, topic)
	time.Sleep(3 * time.Second)
	before := d.activeOf("east", ns)

	started := time.Now()
	op := d.switchover("east", ns, "west", 10*time.Second)
	if op.State != "succeeded" || op.Result.State != "committed" {
		t.Fatalf("switchover: %+v", op)
	}
	t.Logf("switchover committed after %v: hold %d ms (drain %d ms)", time.Since(started).Round(time.Millisecond), op.Result.HoldMs, op.Result.DrainMs)
	time.Sleep(3 * time.Second) // produce and consume in west
	acked, lost, dups := l.finish(t)

	after := d.activeOf("east", ns)
	if after.Active != "west" || after.Epoch != before.Epoch+1 || after.Previous != "east" {
		t.Fatalf("record after the switchover %+v (before %+v)", after, before)
	}
	if n := d.publishers("west", "public/sw/orders"); n != 1 {
		t.Fatalf("west serves %d producers after the switchover, want 1", n)
	}
	l.mu.Lock()
	t.Logf("planned switchover under produce: acked %d, lost %d, duplicates %d; produce pause (longest send) %v at %v after the request",
		acked, lost, dups, l.maxSend.Round(time.Millisecond), l.maxAt.Sub(started).Round(time.Millisecond))
	errs := l.sendErrs
	l.mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("the producer saw %d errors, want a pause only: %s", len(errs), strings.Join(errs[:min(5, len(errs))], "; "))
	}
	if lost != 0 || dups != 0 {
		t.Fatalf("lost %d, duplicates %d of %d acknowledged; want 0 and 0", lost, dups, acked)
	}
}

// A planned switchover whose drain cannot finish (the link to the target
// delayed past the timeout) aborts: the old region stays active and
// serving, at the same epoch, and no receipt is lost.
func TestPlannedSwitchoverAbortsWhenDrainBlocked(t *testing.T) {
	var proxies []*wanproxy.Proxy
	d := startDeploymentWith(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, ReplicationProxies: true},
		func(plan *up.Plan) {
			for _, ps := range plan.Procs {
				if ps.ReplProxy == "" || ps.Region != "west" {
					continue
				}
				px, err := wanproxy.Start(ps.ReplProxy, ps.Repl)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { px.Close() })
				proxies = append(proxies, px)
			}
		})
	// East's replicas of the topic go through a proxy only if east's
	// brokers are proxied too; the abort needs only east→west.
	const ns = "public/swb"
	d.createNamespace(ns, []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"})
	const topic = "persistent://public/swb/orders"
	l := startSwitchoverLoad(t, d, topic)
	time.Sleep(3 * time.Second)
	before := d.activeOf("east", ns)

	for _, px := range proxies {
		px.SetRTT(time.Minute) // east → west: nothing arrives within the timeout
	}
	// The pre-flight (--dry-run) sees the backlog building: what an
	// unplanned failover would lose now, and since when.
	time.Sleep(time.Second)
	var dry struct {
		State           string
		AtRiskMessages  int64
		AtRiskBytes     int64
		ExpectedPauseMs int64
		Topics          []struct {
			Topic              string
			BacklogEntries     int64
			OldestUnreplicated string
		}
	}
	if err := d.admin("east", "POST", "/admin/v2/meridian/failover/"+ns, map[string]any{"to": "west", "planned": true, "dryRun": true}, &dry); err != nil {
		t.Fatal(err)
	}
	t.Logf("dry run with the link delayed: %+v", dry)
	if dry.State != "dry-run" || dry.AtRiskMessages == 0 || dry.AtRiskBytes == 0 || len(dry.Topics) != 1 || dry.Topics[0].OldestUnreplicated == "" || dry.ExpectedPauseMs < 500 {
		t.Fatalf("dry run with a blocked link: %+v, want messages and bytes at risk since a time, and a pause of the lag", dry)
	}
	if rec := d.activeOf("east", ns); rec != before {
		t.Fatalf("the dry run moved the namespace: %+v", rec)
	}
	started := time.Now()
	op := d.switchover("east", ns, "west", 3*time.Second)
	took := time.Since(started)
	if op.State != "failed" || !strings.Contains(op.Error, "aborted") {
		t.Fatalf("switchover with a blocked drain: %+v, want failed: aborted", op)
	}
	t.Logf("aborted after %v: %s", took.Round(time.Millisecond), op.Error)
	if took > 10*time.Second {
		t.Fatalf("the abort took %v, the timeout is 3 s", took)
	}
	after := d.activeOf("east", ns)
	if after.Active != "east" || after.Epoch != before.Epoch {
		t.Fatalf("record after the aborted switchover %+v, want %+v", after, before)
	}
	// East serves on: produce resumes there.
	l.mu.Lock()
	n0 := len(l.acked)
	l.mu.Unlock()
	time.Sleep(2 * time.Second)
	l.mu.Lock()
	n1 := len(l.acked)
	l.mu.Unlock()
	if n1 <= n0 {
		t.Fatalf("no receipt in the 2 s after the abort (%d then %d)", n0, n1)
	}
	if n := d.publishers("east", "public/swb/orders"); n != 1 {
		t.Fatalf("east serves %d producers after the abort, want 1", n)
	}
	for _, px := range proxies {
		px.SetRTT(0)
	}
	acked, lost, dups := l.finish(t)
	l.mu.Lock()
	t.Logf("aborted switchover: acked %d, lost %d, duplicates %d; longest send %v", acked, lost, dups, l.maxSend.Round(time.Millisecond))
	errs := l.sendErrs
	l.mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("the producer saw %d errors, want a pause only: %s", len(errs), strings.Join(errs[:min(5, len(errs))], "; "))
	}
	if lost != 0 || dups != 0 {
		t.Fatalf("lost %d, duplicates %d of %d acknowledged; want 0 and 0", lost, dups, acked)
	}
}

// A namespace switched over and back within the old region's moved hold
// (10 s, during which that region drops the namespace's sends
// unanswered, for their clients to resend in the new one) is served again
// at once by the region it came back to: every send acknowledged, none
// timed out, lost 0, duplicates 0. Before the moved hold ended on the
// switch back, east dropped its producer's sends until the hold ran out
// and the client's sends timed out (30 s).
func TestPlannedSwitchoverAndBackWithinTheMovedHold(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3})
	const ns = "public/swr"
	d.createNamespace(ns, []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"})
	l := startSwitchoverLoad(t, d, "persistent://public/swr/orders")
	time.Sleep(3 * time.Second)
	before := d.activeOf("east", ns)

	op := d.switchover("east", ns, "west", 10*time.Second)
	if op.State != "succeeded" || op.Result.State != "committed" {
		t.Fatalf("switchover to west: %+v", op)
	}
	moved := time.Now() // east's moved hold runs from about now
	t.Logf("east → west committed: hold %d ms", op.Result.HoldMs)
	time.Sleep(time.Second) // produce in west
	back := d.switchover("west", ns, "east", 10*time.Second)
	if back.State != "succeeded" || back.Result.State != "committed" {
		t.Fatalf("switchover back to east: %+v", back)
	}
	within := time.Since(moved)
	t.Logf("west → east committed %v after the first: hold %d ms", within.Round(time.Millisecond), back.Result.HoldMs)
	if within > 8*time.Second {
		t.Fatalf("the switch back committed %v after the first, past most of east's 10 s moved hold: the test does not test it", within)
	}
	time.Sleep(4 * time.Second) // produce in east again, inside the old moved hold
	acked, lost, dups := l.finish(t)

	after := d.activeOf("east", ns)
	if after.Active != "east" || after.Epoch != before.Epoch+2 {
		t.Fatalf("record after the switch back %+v (before %+v)", after, before)
	}
	l.mu.Lock()
	t.Logf("switchover and back within the moved hold: acked %d, lost %d, duplicates %d; longest send %v at %v after the first commit",
		acked, lost, dups, l.maxSend.Round(time.Millisecond), l.maxAt.Sub(moved).Round(time.Millisecond))
	errs, maxSend := l.sendErrs, l.maxSend
	l.mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("the producer saw %d errors, want a pause only: %s", len(errs), strings.Join(errs[:min(5, len(errs))], "; "))
	}
	if maxSend > 5*time.Second {
		t.Errorf("longest send %v: east did not take the sends after the switch back", maxSend)
	}
	if lost != 0 || dups != 0 {
		t.Fatalf("lost %d, duplicates %d of %d acknowledged; want 0 and 0", lost, dups, acked)
	}
}
