package georep

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
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
	topic    string
	mu       sync.Mutex
	acked    map[int]bool
	received map[int]int
	// firstAt: when each message was first received; dupLog: each
	// repeated receipt (index, message id, since the first), to set
	// against the brokers' logs.
	firstAt  map[int]time.Time
	dupLog   []string
	maxSend  time.Duration
	maxAt    time.Time
	sendErrs []string
	stop     chan struct{} // the producer stops
	stopOnce sync.Once
	quit     chan struct{} // the consumer stops
	done     sync.WaitGroup
}

func startSwitchoverLoad(t *testing.T, d *deployment, topic string) *switchoverLoad {
	t.Helper()
	return startSwitchoverLoadOn(t, d.client(""), d.client(""), topic, 5*time.Millisecond)
}

// startSwitchoverLoadOn is startSwitchoverLoad with the producer on pc and
// the consumer on cc (clients other loads may share: one connection per
// broker carries several topics), a send at most every gap.
func startSwitchoverLoadOn(t *testing.T, pc, cc pulsar.Client, topic string, gap time.Duration) *switchoverLoad {
	t.Helper()
	l := &switchoverLoad{topic: topic, acked: map[int]bool{}, received: map[int]int{}, firstAt: map[int]time.Time{}, stop: make(chan struct{}), quit: make(chan struct{})}
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
			case <-time.After(gap):
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
				now := time.Now()
				l.mu.Lock()
				l.received[i]++
				if l.received[i] == 1 {
					l.firstAt[i] = now
				} else {
					l.dupLog = append(l.dupLog, fmt.Sprintf("%s #%d id %s at %s, first received %v before (redelivery count %d)",
						l.topic, i, idString(m.ID()), now.UTC().Format("15:04:05.000"), now.Sub(l.firstAt[i]).Round(time.Millisecond), m.RedeliveryCount()))
				}
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

// stopProducing stops the producer.
func (l *switchoverLoad) stopProducing() { l.stopOnce.Do(func() { close(l.stop) }) }

// finish stops the producer, waits until the consumer received every
// acknowledged message (or 20 s), stops it and returns lost and
// duplicated counts.
func (l *switchoverLoad) finish(t *testing.T) (acked, lost, dups int) {
	t.Helper()
	// The producer stops; the consumer runs on until it has everything.
	l.stopProducing()
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
		Topics  []struct {
			Topic  string `json:"topic"`
			Ready  bool   `json:"ready"`
			Reason string `json:"reason"`
		} `json:"topics"`
	} `json:"result"`
}

// switchover starts a planned switchover of ns to region through a broker
// of from, asynchronously (202 + status URL), and polls it to its end.
func (d *deployment) switchover(from, ns, to string, timeout time.Duration) switchoverOp {
	d.t.Helper()
	var op switchoverOp
	d.asyncOp(from, "/admin/v2/meridian/failover/"+ns, map[string]any{"to": to, "planned": true, "timeoutMs": timeout.Milliseconds()}, timeout+20*time.Second, &op)
	return op
}

// regionSwitchoverOp is a region-wide switchover's operation.
type regionSwitchoverOp struct {
	State  string `json:"state"`
	Error  string `json:"error"`
	Result struct {
		State      string `json:"state"`
		TookMs     int64  `json:"tookMs"`
		Moved      int    `json:"moved"`
		NotStarted int    `json:"notStarted"`
		Namespaces []struct {
			Namespace string `json:"namespace"`
			State     string `json:"state"`
			Reason    string `json:"reason"`
			Epoch     uint64 `json:"epoch"`
			HoldMs    int64  `json:"holdMs"`
			DrainMs   int64  `json:"drainMs"`
			TookMs    int64  `json:"tookMs"`
		} `json:"namespaces"`
	} `json:"result"`
}

// regionSwitchover starts the region-wide planned switchover of from to
// to through a broker of from (202 + status URL) and polls it to its end.
func (d *deployment) regionSwitchover(from, to string, timeout time.Duration, dryRun bool) regionSwitchoverOp {
	d.t.Helper()
	var op regionSwitchoverOp
	d.asyncOp(from, "/admin/v2/meridian/failover", map[string]any{"region": from, "to": to, "planned": true, "dryRun": dryRun, "timeoutMs": timeout.Milliseconds()}, 2*time.Minute, &op)
	return op
}

// asyncOp POSTs body to path on a broker of region from with "Prefer:
// respond-async", wants 202 and a status URL, and polls it into op (a
// struct with a State) until it is no longer running or within passed.
func (d *deployment) asyncOp(from, path string, body any, within time.Duration, op any) {
	d.t.Helper()
	var admin string
	for _, p := range d.region(from).Processes {
		if p.Role == "broker" {
			admin = d.httpScheme() + p.Admin
			break
		}
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", admin+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Prefer", "respond-async")
	resp, err := d.httpClient().Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		d.t.Fatalf("POST %s: %d %s, want 202", path, resp.StatusCode, out)
	}
	var st struct {
		State     string `json:"state"`
		StatusURL string `json:"statusUrl"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.StatusURL == "" {
		d.t.Fatalf("POST %s: %s: %v", path, out, err)
	}
	deadline := time.Now().Add(within)
	for st.State == "running" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if err := d.admin(from, "GET", st.StatusURL, nil, &st); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := d.admin(from, "GET", st.StatusURL, nil, op); err != nil {
		d.t.Fatal(err)
	}
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

// startBehindWestProxies starts east and west, one broker each, with the
// replication into west's brokers through proxies the test can delay
// (east → west only).
func startBehindWestProxies(t *testing.T) (*deployment, []*wanproxy.Proxy) {
	t.Helper()
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
	return d, proxies
}

// A planned switchover whose drain cannot finish (the link to the target
// delayed past the timeout) aborts: the old region stays active and
// serving, at the same epoch, and no receipt is lost.
func TestPlannedSwitchoverAbortsWhenDrainBlocked(t *testing.T) {
	d, proxies := startBehindWestProxies(t)
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
	t.Logf("aborted after %v: %s; report %+v", took.Round(time.Millisecond), op.Error, op.Result)
	// The aborted operation answers its report beside the error, as a
	// committed one does (issue 33): the hold east's brokers kept and the
	// drain it waited for, the timeout's 3 s, and each topic's readiness.
	if op.Result.State != "aborted" || op.Result.HoldMs < 3000 || op.Result.DrainMs < 3000 || len(op.Result.Topics) != 1 || op.Result.Topics[0].Ready {
		t.Fatalf("aborted switchover's report %+v: want state aborted, hold and drain of the 3 s timeout, the topic not ready", op.Result)
	}
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

// Planned switchovers with two brokers per region, the topics of several
// namespaces on both, producers and consumers running on shared clients
// (one connection per broker carries topics of every namespace): a
// per-namespace switchover east → west, then the region-wide one east →
// west (the other namespaces) and back west → east (all of them). Every
// acknowledged message is received once: lost 0, duplicates 0; the
// producers see pauses, not errors. The hold times and the region-wide
// durations are logged.
func TestPlannedSwitchoverAcrossBrokersAndRegionWide(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 2, BookiesPerRegion: 3, RacksPerRegion: 3})
	nss := []string{"public/swa", "public/swb", "public/swc", "public/swm"}
	for _, ns := range nss {
		d.createNamespace(ns, []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"})
	}
	pc, cc := d.client(""), d.client("")
	var loads []*switchoverLoad
	var topics []string
	for _, ns := range nss {
		for i := range 3 {
			topic := fmt.Sprintf("persistent://%s/t%d", ns, i)
			topics = append(topics, topic)
			loads = append(loads, startSwitchoverLoadOn(t, pc, cc, topic, 40*time.Millisecond))
		}
	}
	// The topics spread over both brokers of each region (bundles are
	// balanced every 5 s); the switchovers start once the owners in both
	// regions stayed put for three reads 4 s apart (two balancing rounds),
	// so no bundle move runs among them: a move closes its topics'
	// consumers, and what they had not acknowledged is delivered again
	// (at-least-once, not the switchover's doing).
	owners := func() map[string]string {
		out := map[string]string{}
		for _, region := range []string{"east", "west"} {
			for _, tp := range topics {
				out[region+" "+tp] = d.owner(region, tp)
			}
		}
		return out
	}
	settled := time.Now().Add(120 * time.Second)
	var own map[string]string
	for stable := 0; stable < 3; {
		if time.Now().After(settled) {
			t.Fatalf("the topics' owners did not settle within 120 s: %v", own)
		}
		time.Sleep(4 * time.Second)
		now := owners()
		if maps.Equal(now, own) && !slices.Contains(slices.Collect(maps.Values(now)), "") {
			stable++
		} else {
			stable = 0
		}
		own = now
	}
	t.Logf("owners: %v", own)
	for _, region := range []string{"east", "west"} {
		nsOn := map[string]map[string]bool{} // broker → namespaces it owns topics of
		for k, b := range own {
			r, tp, _ := strings.Cut(k, " ")
			if r != region {
				continue
			}
			if nsOn[b] == nil {
				nsOn[b] = map[string]bool{}
			}
			nsOn[b][strings.Join(strings.Split(strings.TrimPrefix(tp, "persistent://"), "/")[:2], "/")] = true
		}
		if len(nsOn) != 2 {
			t.Fatalf("%s's topics are on %d brokers, want both: %v", region, len(nsOn), own)
		}
		for b, set := range nsOn {
			if len(set) < 2 {
				t.Fatalf("broker %s owns topics of %d namespace(s), want several: %v", b, len(set), own)
			}
		}
	}

	before := map[string]failoverRecord{} // (each namespace's first epoch committed as its clients came)
	for _, ns := range nss {
		before[ns] = d.activeOf("east", ns)
	}

	// One namespace alone, east → west.
	at := time.Now()
	op := d.switchover("east", "public/swm", "west", 20*time.Second)
	if op.State != "succeeded" || op.Result.State != "committed" {
		t.Fatalf("switchover of public/swm: %+v", op)
	}
	t.Logf("%s public/swm east → west committed: hold %d ms (drain %d ms)", at.UTC().Format("15:04:05.000"), op.Result.HoldMs, op.Result.DrainMs)
	time.Sleep(3 * time.Second)

	// The dry run of the region-wide one lists the other three (and
	// public/default when its first region up was east).
	dry := d.regionSwitchover("east", "west", 20*time.Second, true)
	var would []string
	for _, n := range dry.Result.Namespaces {
		if n.State == "would move" && slices.Contains(nss, n.Namespace) {
			would = append(would, n.Namespace)
		}
	}
	if dry.State != "succeeded" || dry.Result.State != "dry-run" || fmt.Sprint(would) != "[public/swa public/swb public/swc]" {
		t.Fatalf("region-wide dry run: %+v, want public/swa, swb and swc to move", dry)
	}

	region := func(from, to string) {
		t.Helper()
		// Every active-standby namespace active in from moves (public/default
		// too when it is: its first region up was from).
		var recs []failoverRecord
		if err := d.admin(from, "GET", "/admin/v2/meridian/failover", nil, &recs); err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, r := range recs {
			if r.Active == from {
				want++
			}
		}
		at := time.Now()
		op := d.regionSwitchover(from, to, 20*time.Second, false)
		if op.State != "succeeded" || op.Result.State != "committed" || op.Result.Moved != want {
			t.Fatalf("region-wide switchover %s → %s: %+v, want %d namespaces moved", from, to, op, want)
		}
		for _, n := range op.Result.Namespaces {
			t.Logf("  %s → %s %s: %s epoch %d, hold %d ms (drain %d ms), %d ms in all", from, to, n.Namespace, n.State, n.Epoch, n.HoldMs, n.DrainMs, n.TookMs)
		}
		t.Logf("%s region-wide %s → %s: %d namespaces in %d ms", at.UTC().Format("15:04:05.000"), from, to, op.Result.Moved, op.Result.TookMs)
	}
	region("east", "west")
	time.Sleep(3 * time.Second)
	region("west", "east")
	time.Sleep(4 * time.Second)

	for _, ns := range nss {
		if r := d.activeOf("east", ns); r.Active != "east" || r.Epoch != before[ns].Epoch+2 {
			t.Errorf("record of %s at the end %+v, want east at epoch %d", ns, r, before[ns].Epoch+2)
		}
	}
	var acked, lost, dups int
	var errs, dupLog []string
	var maxSend time.Duration
	for _, l := range loads {
		l.stopProducing() // every producer stops at once; finish waits for each consumer
	}
	for _, l := range loads {
		a, lo, du := l.finish(t)
		acked, lost, dups = acked+a, lost+lo, dups+du
		l.mu.Lock()
		errs = append(errs, l.sendErrs...)
		dupLog = append(dupLog, l.dupLog...)
		maxSend = max(maxSend, l.maxSend)
		l.mu.Unlock()
	}
	t.Logf("across brokers and region-wide: %d topics, acked %d, lost %d, duplicates %d; longest send %v", len(loads), acked, lost, dups, maxSend.Round(time.Millisecond))
	for _, s := range dupLog {
		t.Logf("duplicate: %s", s)
	}
	if len(errs) > 0 {
		t.Errorf("the producers saw %d errors, want pauses only: %s", len(errs), strings.Join(errs[:min(5, len(errs))], "; "))
	}
	if lost != 0 || dups != 0 {
		t.Fatalf("lost %d, duplicates %d of %d acknowledged; want 0 and 0", lost, dups, acked)
	}
}

// A region-wide switchover whose second namespace cannot drain (the link
// to the target delayed past the timeout) ends there, asked through the
// CLI: the namespace before it moved and stays moved, it and the one
// after stay active in east (aborted, not started), the CLI prints every
// namespace's state and exits non-zero, and east serves on.
func TestRegionSwitchoverStopsAtTheFirstAbort(t *testing.T) {
	d, proxies := startBehindWestProxies(t)
	// In name order: rwa has no topic loaded (nothing to drain: it
	// moves), rwb's drain is blocked (it aborts), rwc is never started.
	for _, ns := range []string{"public/rwa", "public/rwb", "public/rwc"} {
		d.createNamespace(ns, []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"})
	}
	lb := startSwitchoverLoad(t, d, "persistent://public/rwb/orders")
	lc := startSwitchoverLoad(t, d, "persistent://public/rwc/orders")
	time.Sleep(3 * time.Second)
	rwa := d.activeOf("east", "public/rwa")
	before := map[string]failoverRecord{"public/rwb": d.activeOf("east", "public/rwb"), "public/rwc": d.activeOf("east", "public/rwc")}
	for _, px := range proxies {
		px.SetRTT(time.Minute) // east → west: nothing arrives within the timeout
	}
	time.Sleep(time.Second)

	var admin string
	for _, p := range d.region("east").Processes {
		if p.Role == "broker" {
			admin = p.Admin
			break
		}
	}
	started := time.Now()
	cmd := exec.Command(testutil.MeridianBinary(t), "admin", "--url", d.httpScheme()+admin, "failover", "--region", "east", "--to", "west", "--planned", "--timeout", "3s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("meridian admin failover --region east --to west --planned --timeout 3s (%v): %v\nstdout: %s\nstderr: %s", time.Since(started).Round(time.Millisecond), err, stdout.String(), stderr.String())
	if err == nil || !strings.Contains(stderr.String(), "aborted") {
		t.Fatalf("the CLI: %v, stderr %q; want a non-zero exit naming the abort", err, stderr.String())
	}
	var rep struct {
		State      string
		Namespaces []struct{ Namespace, State, Reason string }
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("the CLI's report: %v: %s", err, stdout.String())
	}
	states := map[string]string{}
	for _, n := range rep.Namespaces {
		states[n.Namespace] = n.State
	}
	if want := map[string]string{"public/rwa": "committed", "public/rwb": "aborted", "public/rwc": "not started"}; rep.State != "aborted" ||
		states["public/rwa"] != want["public/rwa"] || states["public/rwb"] != want["public/rwb"] || states["public/rwc"] != want["public/rwc"] {
		t.Fatalf("report %+v, want %v", rep, want)
	}
	if r := d.activeOf("east", "public/rwa"); r.Active != "west" || r.Epoch != rwa.Epoch+1 {
		t.Fatalf("public/rwa after the run: %+v, want moved to west", r)
	}
	for ns, b := range before {
		if r := d.activeOf("east", ns); r != b {
			t.Fatalf("%s after the run: %+v, want it unchanged in east (%+v)", ns, r, b)
		}
	}
	for _, px := range proxies {
		px.SetRTT(0)
	}
	time.Sleep(2 * time.Second) // east serves on
	for _, l := range []*switchoverLoad{lb, lc} {
		acked, lost, dups := l.finish(t)
		l.mu.Lock()
		errs := l.sendErrs
		l.mu.Unlock()
		t.Logf("%s: acked %d, lost %d, duplicates %d", l.topic, acked, lost, dups)
		if len(errs) > 0 || lost != 0 || dups != 0 {
			t.Errorf("%s: %d send errors (%v), lost %d, duplicates %d; want none", l.topic, len(errs), errs[:min(3, len(errs))], lost, dups)
		}
	}
}
