//go:build hosts

// Package compose's test (make test-hosts, not in CI: the build tag keeps
// it out of ./...) drives the deployment of docker-compose.yml from the
// host with the unmodified pulsar-client-go through the brokers'
// `external` listener, TLS with hostname verification and a token on:
//
//  1. produce in east, consume in west (async, active-active): every
//     message once, with east's ids;
//  2. docker kill of every east container under load (sync,
//     active-standby, east active): the producer and the consumer on the
//     multi-region URL carry on in west, nothing acknowledged lost, RTO;
//  3. a network partition: east's containers disconnected from the
//     inter-region network (async, active-standby, east active), the
//     host's clients still reaching both regions: east stops
//     acknowledging once its lease lapses, west takes over, no receipts
//     from both regions in one epoch (split brain), nothing acknowledged
//     lost; then the heal, and the namespace back in east after its
//     switch-back delay (failback);
//  4. docker pause of east (the silent outage) with the README's client
//     settings: RTO, nothing acknowledged lost;
//  5. a rolling restart of west's bookies and brokers, one at a time,
//     under load: nothing acknowledged lost, no send error.
//
// scripts/test-hosts.sh starts the deployment and runs this; it can run
// alone against a running deployment:
//
//	go test -tags hosts -count=1 -v -timeout 30m ./deploy/compose/
//
// or one step alone (the steps' setup is their own): -run 'TestHosts/3-'.
package compose

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/meridian-mq/meridian/drill/check"
)

// The published ports (docker-compose.yml).
var (
	pulsarPorts = map[string][]int{"east": {26651, 26652}, "west": {26653, 26654}}
	adminPorts  = map[string][]int{"east": {28081, 28082}, "west": {28083, 28084}}
)

func containers(region string) []string {
	out := []string{region + "-etcd", "global-" + region}
	for i := 1; i <= 4; i++ {
		out = append(out, fmt.Sprintf("%s-bookie-%d", region, i))
	}
	return append(out, region+"-broker-1", region+"-broker-2")
}

func secret(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("secrets", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: run deploy/compose/init.sh and start the deployment (scripts/test-hosts.sh)", err)
	}
	abs, _ := filepath.Abs(p)
	return abs
}

func token(t *testing.T) string {
	b, err := os.ReadFile(secret(t, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// serviceURL lists the external listeners of regions' brokers.
func serviceURL(regions ...string) string {
	var hs []string
	for _, r := range regions {
		for _, p := range pulsarPorts[r] {
			hs = append(hs, "localhost:"+strconv.Itoa(p))
		}
	}
	return "pulsar+ssl://" + strings.Join(hs, ",")
}

// newClient: the README's failover settings, the external listener, TLS
// with hostname verification, the super-user token.
func newClient(t *testing.T, url string) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, ListenerName: "external",
		TLSTrustCertsFilePath: secret(t, "ca.pem"), TLSValidateHostname: true,
		Authentication:    pulsar.NewAuthenticationToken(token(t)),
		ConnectionTimeout: 2 * time.Second, KeepAliveInterval: time.Second, OperationTimeout: 5 * time.Second,
		Logger: plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

type adminClient struct {
	h     *http.Client
	token string
}

func newAdmin(t *testing.T) *adminClient {
	pem, err := os.ReadFile(secret(t, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &adminClient{h: &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, token: token(t)}
}

// call tries region's brokers in turn; a non-2xx answer is an error.
func (a *adminClient) call(region, method, path string, body, out any) error {
	var last error
	for _, p := range adminPorts[region] {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, "https://localhost:"+strconv.Itoa(p)+path, rd)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+a.token)
		resp, err := a.h.Do(req)
		if err != nil {
			last = err
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
		}
		if out != nil && len(b) > 0 {
			return json.Unmarshal(b, out)
		}
		return nil
	}
	return last
}

// createNamespace makes ns replicated to east and west with repl
// (meridian_replication) and, for active-standby, waits for its first
// active region as both regions see it.
func (a *adminClient) createNamespace(t *testing.T, ns string, repl map[string]any, wantActive string) {
	t.Helper()
	body := map[string]any{"replication_clusters": []string{"east", "west"}, "meridian_replication": repl,
		"retention_policies": map[string]int{"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}}
	if err := a.call("east", "PUT", "/admin/v2/namespaces/"+ns, body, nil); err != nil {
		if err2 := a.call("west", "PUT", "/admin/v2/namespaces/"+ns, body, nil); err2 != nil {
			t.Fatalf("namespace %s: %v; %v", ns, err, err2)
		}
	}
	if wantActive == "" {
		return
	}
	eventually(t, 60*time.Second, ns+" active in "+wantActive, func() bool {
		for _, r := range []string{"east", "west"} {
			if a.active(r, ns) != wantActive {
				return false
			}
		}
		return true
	})
}

func (a *adminClient) active(region, ns string) string {
	var recs []struct {
		Namespace, Active string
		Epoch             uint64
	}
	if err := a.call(region, "GET", "/admin/v2/meridian/failover/"+ns, nil, &recs); err != nil {
		return ""
	}
	for _, r := range recs {
		if r.Namespace == ns || len(recs) == 1 {
			return r.Active
		}
	}
	return ""
}

// record is ns's failover record as region's brokers see it (ok false
// when none answers).
func (a *adminClient) record(region, ns string) (rec epochRecord, ok bool) {
	var recs []epochRecord
	if err := a.call(region, "GET", "/admin/v2/meridian/failover/"+ns, nil, &recs); err != nil {
		return rec, false
	}
	for _, r := range recs {
		if r.Namespace == ns || len(recs) == 1 {
			return r, r.Epoch > 0
		}
	}
	return rec, false
}

// epochRecord is the part of a failover record the partition step uses:
// SinceMs is the proposer's wall clock at the proposal, before the epoch
// was committed and before its region could acknowledge anything in it;
// the previous region's lease was gone from the store before that, and
// it had stopped acknowledging before its lease could expire.
type epochRecord struct {
	Namespace string `json:"namespace"`
	Active    string `json:"active"`
	Epoch     uint64 `json:"epoch"`
	SinceMs   int64  `json:"sinceMs"`
}

// ledgers lists region's ledgers of topic (persistent://...).
func (a *adminClient) ledgers(region, topic string) []int64 {
	var st struct {
		Ledgers []struct {
			LedgerID int64 `json:"ledgerId"`
		} `json:"ledgers"`
	}
	if a.call(region, "GET", "/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/internalStats", nil, &st) != nil {
		return nil
	}
	var out []int64
	for _, l := range st.Ledgers {
		out = append(out, l.LedgerID)
	}
	return out
}

func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(d); ; time.Sleep(250 * time.Millisecond) {
		if f() {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("not %s after %v", what, d)
		}
	}
}

func docker(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// healthy waits until docker reports every container healthy (the etcd
// containers, which have no health check: running).
func healthy(t *testing.T, d time.Duration, names ...string) {
	t.Helper()
	eventually(t, d, "healthy: "+strings.Join(names, " "), func() bool {
		for _, n := range names {
			out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}", n).Output()
			s := strings.TrimSpace(string(out))
			if err != nil || (s != "true healthy" && s != "true none") {
				return false
			}
		}
		return true
	})
}

// load is a producer sending every interval and a consumer acknowledging
// in order, recorded as a drill history (drill/check judges it).
type load struct {
	t        *testing.T
	topic    string
	p        pulsar.Producer
	c        pulsar.Consumer
	adm      *adminClient
	mu       sync.Mutex
	attempts []check.Attempt
	dels     []check.Delivery
	faults   []check.Fault
	ledger   map[int64]string // ledger -> region
	start    time.Time
	stopAt   time.Time
	stopP    chan struct{}
	stopC    chan struct{}
	wg       sync.WaitGroup
}

func startLoad(t *testing.T, cl pulsar.Client, adm *adminClient, topic string, interval time.Duration) *load {
	t.Helper()
	c, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "p", SendTimeout: 120 * time.Second, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	l := &load{t: t, topic: topic, p: p, c: c, adm: adm, ledger: map[int64]string{}, start: time.Now(),
		stopP: make(chan struct{}), stopC: make(chan struct{})}
	l.wg.Add(3)
	go l.produce(interval)
	go l.consume()
	go l.sampleLedgers()
	return l
}

func (l *load) produce(interval time.Duration) {
	defer l.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-l.stopP:
			return
		case <-tick.C:
		}
		l.mu.Lock()
		seq := int64(len(l.attempts))
		l.attempts = append(l.attempts, check.Attempt{Producer: "p", Topic: l.topic, Seq: seq, SentAt: time.Now()})
		l.mu.Unlock()
		l.p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "p|%d|", seq)},
			func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				l.mu.Lock()
				a := &l.attempts[seq]
				if err != nil {
					a.Err = err.Error()
				} else {
					a.AckedAt, a.MsgID = time.Now(), idString(id)
				}
				l.mu.Unlock()
			})
	}
}

func (l *load) consume() {
	defer l.wg.Done()
	for {
		select {
		case <-l.stopC:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		m, err := l.c.Receive(ctx)
		cancel()
		if err != nil {
			continue
		}
		parts := strings.Split(string(m.Payload()), "|")
		seq, _ := strconv.ParseInt(parts[1], 10, 64)
		l.mu.Lock()
		l.dels = append(l.dels, check.Delivery{Consumer: "c", Subscription: "s", Topic: l.topic, Producer: parts[0], Seq: seq, At: time.Now(), MsgID: idString(m.ID())})
		l.mu.Unlock()
		l.c.Ack(m)
	}
}

// sampleLedgers maps ledgers to the region whose copy of the topic has
// them (a receipt's region: its ledger's; "" when both have the id).
func (l *load) sampleLedgers() {
	defer l.wg.Done()
	for {
		for _, r := range []string{"east", "west"} {
			for _, id := range l.adm.ledgers(r, l.topic) {
				l.mu.Lock()
				switch had, ok := l.ledger[id]; {
				case !ok:
					l.ledger[id] = r
				case had != r:
					// Each region numbers its ledgers itself: an id both
					// regions have tells no region.
					l.ledger[id] = ""
				}
				l.mu.Unlock()
			}
		}
		select {
		case <-l.stopC:
			return
		case <-time.After(time.Second):
		}
	}
}

func (l *load) fault(name string, f func()) *check.Fault {
	at := time.Now()
	f()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = append(l.faults, check.Fault{Name: name, At: at})
	return &l.faults[len(l.faults)-1]
}

func (l *load) healed(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.faults {
		if l.faults[i].Name == name && l.faults[i].EndAt.IsZero() {
			l.faults[i].EndAt = time.Now()
		}
	}
}

// ackedSince counts the messages sent after t and acknowledged, and of
// those the ones received.
func (l *load) ackedSince(t time.Time) (acked, received int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := map[int64]bool{}
	for _, d := range l.dels {
		got[d.Seq] = true
	}
	for _, a := range l.attempts {
		if a.SentAt.After(t) && !a.AckedAt.IsZero() {
			acked++
			if got[a.Seq] {
				received++
			}
		}
	}
	return
}

// stop stops producing, waits for the receipts, drains the consumer until
// every acknowledged message arrived (or drain passed) and judges.
func (l *load) stop(drain time.Duration) check.Result {
	l.stopAt = time.Now()
	close(l.stopP)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	if err := l.p.FlushWithCtx(ctx); err != nil {
		l.t.Logf("flush: %v", err)
	}
	cancel()
	eventually(l.t, 130*time.Second, "every send answered", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, a := range l.attempts {
			if a.AckedAt.IsZero() && a.Err == "" {
				return false
			}
		}
		return true
	})
	end := time.Now().Add(drain)
	for time.Now().Before(end) {
		if a, r := l.ackedSince(time.Time{}); r >= a {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	close(l.stopC)
	l.wg.Wait()
	l.p.Close()
	l.c.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	h := check.History{Start: l.start, End: time.Now(), StopAt: l.stopAt, Faults: l.faults, Subscriptions: []check.Sub{{Topic: l.topic, Name: "s"}}}
	region := l.regionOf
	for _, a := range l.attempts {
		a.Region = region(a.MsgID)
		h.Attempts = append(h.Attempts, a)
	}
	for _, d := range l.dels {
		d.Region = region(d.MsgID)
		h.Deliveries = append(h.Deliveries, d)
	}
	return check.Check(h)
}

// regionOf is the region of a message id: its ledger's ("" when unknown
// or both regions have that ledger id). The caller holds l.mu.
func (l *load) regionOf(id string) string {
	led, _, _ := strings.Cut(id, ":")
	n, _ := strconv.ParseInt(led, 10, 64)
	return l.ledger[n]
}

// receipt is an acknowledged send: when the client got the receipt, and
// from which region.
type receipt struct {
	at     time.Time
	region string
}

// receipts lists the acknowledged sends, after stop.
func (l *load) receipts() []receipt {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []receipt
	for _, a := range l.attempts {
		if !a.AckedAt.IsZero() {
			out = append(out, receipt{a.AckedAt, l.regionOf(a.MsgID)})
		}
	}
	return out
}

// epochSampler records every epoch of ns's failover record that either
// region's brokers show, polled every 250 ms (an epoch lasts seconds
// here: none is missed).
type epochSampler struct {
	mu   sync.Mutex
	seen map[uint64]epochRecord
	stop chan struct{}
	done chan struct{}
}

func sampleEpochs(adm *adminClient, ns string) *epochSampler {
	e := &epochSampler{seen: map[uint64]epochRecord{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(e.done)
		for {
			for _, r := range []string{"east", "west"} {
				if rec, ok := adm.record(r, ns); ok {
					e.mu.Lock()
					e.seen[rec.Epoch] = rec
					e.mu.Unlock()
				}
			}
			select {
			case <-e.stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return e
}

// epochs stops sampling and returns the epochs seen, in order.
func (e *epochSampler) epochs() []epochRecord {
	close(e.stop)
	<-e.done
	var out []epochRecord
	for _, r := range e.seen {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b epochRecord) int { return int(a.Epoch) - int(b.Epoch) })
	return out
}

// since returns when epoch n began (zero when not seen).
func since(eps []epochRecord, n uint64) time.Time {
	for _, e := range eps {
		if e.Epoch == n {
			return time.UnixMilli(e.SinceMs)
		}
	}
	return time.Time{}
}

// splitBrain checks receipts against the epochs: a receipt received at
// time T is of the last epoch that began at or before T, and must come
// from that epoch's active region. It returns, per epoch, the receipts
// from each region, and the violations.
func splitBrain(eps []epochRecord, rs []receipt) (per map[uint64]map[string]int, bad []string) {
	per = map[uint64]map[string]int{}
	for _, r := range rs {
		var e epochRecord
		for _, x := range eps {
			if !time.UnixMilli(x.SinceMs).After(r.at) {
				e = x
			}
		}
		if per[e.Epoch] == nil {
			per[e.Epoch] = map[string]int{}
		}
		per[e.Epoch][r.region]++
		if r.region != "" && r.region != e.Active {
			bad = append(bad, fmt.Sprintf("receipt at %s from %s in epoch %d (active %q)", r.at.Format("15:04:05.000"), r.region, e.Epoch, e.Active))
		}
	}
	return per, bad
}

func report(t *testing.T, step string, r check.Result) {
	t.Helper()
	var rtos []string
	for _, f := range r.Faults {
		rtos = append(rtos, fmt.Sprintf("%s: produce RTO %.1fs (recovered %v), consume RTO %.1fs (recovered %v)", f.Fault, f.ProduceRTO, f.ProduceRecovered, f.ConsumeRTO, f.ConsumeRecovered))
	}
	line := fmt.Sprintf("RESULT %s: attempted %d, acknowledged %d, failed %d, lost %d, duplicates %d, unconfirmed %d, ack region switches %d; %s",
		step, r.Attempted, r.Acknowledged, r.Failed, r.Lost, r.Duplicates, r.Unconfirmed, r.AckRegionSwitches, strings.Join(rtos, "; "))
	t.Log(line)
	if p := os.Getenv("HOSTS_RESULTS"); p != "" {
		if f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
}

func idString(id pulsar.MessageID) string {
	return fmt.Sprintf("%d:%d:%d", id.LedgerID(), id.EntryID(), id.BatchIdx())
}

func TestHosts(t *testing.T) {
	all := append(containers("east"), append(containers("west"), "witness")...)
	healthy(t, 3*time.Minute, all...)
	adm := newAdmin(t)
	run := strconv.FormatInt(time.Now().Unix(), 36) // fresh namespaces on a reused deployment

	t.Run("1-produce-east-consume-west", func(t *testing.T) {
		ns := "public/aa-" + run
		adm.createNamespace(t, ns, map[string]any{"mode": "async", "failover": "active-active"}, "")
		topic := "persistent://" + ns + "/orders"
		west, east := newClient(t, serviceURL("west")), newClient(t, serviceURL("east"))
		c, err := west.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "w", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		const n = 500
		ids := make([]string, n)
		for i := range n {
			id, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%d", i)})
			if err != nil {
				t.Fatalf("send %d in east: %v", i, err)
			}
			ids[i] = idString(id)
		}
		got := map[int][]string{}
		deadline := time.Now().Add(2 * time.Minute)
		quiet := time.Time{}
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			m, err := c.Receive(ctx)
			cancel()
			if err != nil {
				if len(got) == n {
					if quiet.IsZero() {
						quiet = time.Now()
					} else if time.Since(quiet) > 5*time.Second {
						break // every message, and 5 s more for duplicates
					}
				}
				continue
			}
			i, _ := strconv.Atoi(string(m.Payload()))
			got[i] = append(got[i], idString(m.ID()))
			c.Ack(m)
		}
		dups := 0
		for i := range n {
			switch g := got[i]; {
			case len(g) == 0:
				t.Errorf("message %d (east id %s) never reached west", i, ids[i])
			case g[0] != ids[i]:
				t.Errorf("message %d has id %s in west, %s in east", i, g[0], ids[i])
			}
			if len(got[i]) > 1 {
				dups += len(got[i]) - 1
			}
		}
		if dups > 0 {
			t.Errorf("west received %d duplicates", dups)
		}
		line := fmt.Sprintf("RESULT 1 produce east, consume west (async, active-active): %d sent, %d received once with east's ids, %d duplicates", n, len(got), dups)
		t.Log(line)
		if p := os.Getenv("HOSTS_RESULTS"); p != "" {
			if f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				fmt.Fprintln(f, line)
				f.Close()
			}
		}
	})
	if t.Failed() {
		return
	}

	// Steps 2 and 4: east fails (killed, then paused) under load on an
	// active-standby namespace it leads.
	outage := func(t *testing.T, step, action string, heal string) {
		ns := fmt.Sprintf("public/as%s-%s", step[:1], run)
		adm.createNamespace(t, ns, map[string]any{"mode": "sync", "failover": "active-standby", "primary": "east"}, "east")
		cl := newClient(t, serviceURL("east", "west"))
		l := startLoad(t, cl, adm, "persistent://"+ns+"/payments", 10*time.Millisecond)
		time.Sleep(5 * time.Second)
		if a, _ := l.ackedSince(time.Time{}); a == 0 {
			t.Fatal("nothing acknowledged in east before the outage")
		}
		f := l.fault(action+" region:east", func() { docker(t, append([]string{action}, containers("east")...)...) })
		eventually(t, 3*time.Minute, "200 messages sent after the outage acknowledged and received", func() bool {
			a, r := l.ackedSince(f.At)
			return a >= 200 && r >= 200
		})
		time.Sleep(2 * time.Second)
		r := l.stop(60 * time.Second)
		report(t, step, r)
		if act := adm.active("west", ns); act != "west" {
			t.Errorf("west sees %q active, want west", act)
		}
		if r.Lost > 0 {
			t.Errorf("%d acknowledged messages lost", r.Lost)
		}
		if len(r.Faults) != 1 || !r.Faults[0].ProduceRecovered || !r.Faults[0].ConsumeRecovered {
			t.Errorf("not recovered: %+v", r.Faults)
		}
		// East back for the next step.
		docker(t, append([]string{heal}, containers("east")...)...)
		healthy(t, 3*time.Minute, containers("east")...)
	}
	t.Run("2-kill-east", func(t *testing.T) { outage(t, "2 docker kill east (sync, active-standby)", "kill", "start") })
	if t.Failed() {
		return
	}
	t.Run("3-partition-east", func(t *testing.T) { partition(t, adm, run) })
	if t.Failed() {
		return
	}
	t.Run("4-pause-east", func(t *testing.T) { outage(t, "4 docker pause east (sync, active-standby)", "pause", "unpause") })
	if t.Failed() {
		return
	}

	t.Run("5-rolling-restart-west", func(t *testing.T) {
		ns := "public/roll-" + run
		adm.createNamespace(t, ns, map[string]any{"mode": "sync", "failover": "active-standby", "primary": "west"}, "west")
		cl := newClient(t, serviceURL("east", "west"))
		l := startLoad(t, cl, adm, "persistent://"+ns+"/ledger", 10*time.Millisecond)
		time.Sleep(5 * time.Second)
		var order []string
		for _, n := range containers("west") {
			if strings.Contains(n, "bookie") || strings.Contains(n, "broker") {
				order = append(order, n)
			}
		}
		for _, n := range order {
			// How long docker restart takes (the stop: SIGTERM, up to 30 s
			// before SIGKILL) and then the container's way to healthy, as
			// evidence for the stalls some restarts show.
			var stopped time.Duration
			f := l.fault("restart "+n, func() {
				t0 := time.Now()
				docker(t, "restart", "-t", "30", n)
				stopped = time.Since(t0)
			})
			healthy(t, 3*time.Minute, n)
			t.Logf("%s: docker restart returned after %.1fs, healthy %.1fs after the restart began", n, stopped.Seconds(), time.Since(f.At).Seconds())
			l.healed("restart " + n)
			time.Sleep(5 * time.Second) // load on the restarted process before the next
		}
		r := l.stop(60 * time.Second)
		report(t, "5 rolling restart of west's bookies and brokers (sync, active-standby, west active)", r)
		if r.Lost > 0 {
			t.Errorf("%d acknowledged messages lost", r.Lost)
		}
		if r.Failed > 0 {
			t.Errorf("%d sends failed (beyond the client's retries)", r.Failed)
		}
		if !slices.ContainsFunc(r.Faults, func(f check.FaultRTO) bool { return f.ProduceRecovered }) {
			t.Errorf("no recovery: %+v", r.Faults)
		}
	})
}

// The inter-region network (docker-compose.yml) and east's containers on
// it with their fixed addresses there.
const wan = "meridian-wan"

var eastWAN = map[string]string{
	"global-east": "10.28.0.11", "east-bookie-1": "10.28.0.21", "east-bookie-2": "10.28.0.22",
	"east-bookie-3": "10.28.0.23", "east-bookie-4": "10.28.0.24", "east-broker-1": "10.28.0.31", "east-broker-2": "10.28.0.32",
}

// partition is step 3. A DR partition: east keeps running, whole inside
// (its containers still share its region network), but is cut from west
// and from the witness (disconnected from the inter-region network): its
// member of the global store loses its quorum, so east cannot renew its
// lease, and gossip across regions stops both ways. The host's clients
// still reach east's brokers (published ports, on east's network), as
// clients in east's data centre would. East must fence itself, west take
// over, and after the heal the namespace move back to east after its
// switch-back delay.
func partition(t *testing.T, adm *adminClient, run string) {
	const switchBack = 5 * time.Second
	ns := "public/part-" + run
	adm.createNamespace(t, ns, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east",
		"switchBackDelayMs": switchBack.Milliseconds()}, "east")
	eps := sampleEpochs(adm, ns)
	cl := newClient(t, serviceURL("east", "west"))
	l := startLoad(t, cl, adm, "persistent://"+ns+"/transfers", 10*time.Millisecond)
	time.Sleep(5 * time.Second)
	if a, _ := l.ackedSince(time.Time{}); a == 0 {
		t.Fatal("nothing acknowledged in east before the partition")
	}
	cut := func() {
		for c := range eastWAN {
			docker(t, "network", "disconnect", wan, c)
		}
	}
	healed := false
	heal := func() {
		if healed {
			return
		}
		healed = true
		for c, ip := range eastWAN { // not Fatal: also deferred
			if out, err := exec.Command("docker", "network", "connect", "--ip", ip, wan, c).CombinedOutput(); err != nil {
				t.Errorf("docker network connect %s: %v\n%s", c, err, out)
			}
		}
	}
	defer heal() // the next steps need east whole
	f := l.fault("partition region:east", cut)
	cutAt := f.At
	eventually(t, 3*time.Minute, "west active and 200 messages sent after the partition acknowledged and received", func() bool {
		a, r := l.ackedSince(cutAt)
		return a >= 200 && r >= 200 && adm.active("west", ns) == "west"
	})
	time.Sleep(5 * time.Second) // west serving, east cut off and fenced
	heal()
	l.healed("partition region:east")
	healAt := time.Now()
	eventually(t, 3*time.Minute, "the namespace back in east (failback) as both regions see it", func() bool {
		return adm.active("east", ns) == "east" && adm.active("west", ns) == "east"
	})
	backAt := time.Now()
	eventually(t, 3*time.Minute, "200 messages sent after the failback acknowledged and received", func() bool {
		a, r := l.ackedSince(backAt)
		return a >= 200 && r >= 200
	})
	r := l.stop(90 * time.Second)
	es := eps.epochs()
	per, bad := splitBrain(es, l.receipts())

	var takeover, failback time.Duration
	var hist []string
	for _, e := range es {
		hist = append(hist, fmt.Sprintf("epoch %d %s %v", e.Epoch, e.Active, per[e.Epoch]))
		at := time.UnixMilli(e.SinceMs)
		switch {
		case e.Active == "west" && at.After(cutAt) && takeover == 0:
			takeover = at.Sub(cutAt)
		case e.Active == "east" && at.After(healAt) && failback == 0:
			failback = at.Sub(healAt)
		}
	}
	report(t, "3 partition of east from west and the witness, heal, failback (async, active-standby)", r)
	line := fmt.Sprintf("RESULT 3 epochs: %s; west's epoch began %.1fs after the cut; failback epoch began %.1fs after the heal (switch-back delay %s); split-brain receipts %d",
		strings.Join(hist, "; "), takeover.Seconds(), failback.Seconds(), switchBack, len(bad))
	writeResult(t, line)
	for i, b := range bad {
		if i == 10 {
			t.Errorf("... %d more", len(bad)-10)
			break
		}
		t.Errorf("split brain: %s", b)
	}
	if takeover == 0 {
		t.Errorf("west never became active after the cut: %v", hist)
	}
	if failback == 0 {
		t.Errorf("east never became active again after the heal: %v", hist)
	}
	if r.Lost > 0 {
		t.Errorf("%d acknowledged messages lost", r.Lost)
	}
	if r.AckRegionSwitches > 2 {
		t.Errorf("receipts changed region %d times, want at most 2 (east, west, east)", r.AckRegionSwitches)
	}
	if len(r.Faults) != 1 || !r.Faults[0].ProduceRecovered || !r.Faults[0].ConsumeRecovered {
		t.Errorf("not recovered: %+v", r.Faults)
	}
	healthy(t, 3*time.Minute, containers("east")...)
}

func writeResult(t *testing.T, line string) {
	t.Helper()
	t.Log(line)
	if p := os.Getenv("HOSTS_RESULTS"); p != "" {
		if f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
}
