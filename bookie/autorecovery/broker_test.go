package autorecovery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/digest"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// Tests through real `meridian broker` processes and the unmodified
// pulsar-client-go: the ledgers are a topic's, written by a broker.

func pulsarClient(t *testing.T, urls ...string) pulsar.Client {
	t.Helper()
	for i := 1; i < len(urls); i++ {
		urls[i] = strings.TrimPrefix(urls[i], "pulsar://")
	}
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: strings.Join(urls, ","), ConnectionTimeout: 3 * time.Second,
		OperationTimeout: 30 * time.Second, Logger: plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func topicName(t *testing.T) string {
	return fmt.Sprintf("persistent://public/default/%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano()%1e6)
}

// subscribeFirst creates the subscription before any message: with the
// default retention a topic keeps only what a subscription has not
// consumed, so every ledger stays.
func subscribeFirst(t *testing.T, c pulsar.Client, topic string) {
	t.Helper()
	sub, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
}

// load sends messages "0", "1", ... on a producer until stopped, and
// records every receipt and every error.
type load struct {
	prod  pulsar.Producer
	mu    sync.Mutex
	acked map[int]pulsar.MessageID
	errs  []error
	sent  int
	wg    sync.WaitGroup
	stop  chan struct{}
	done  chan struct{}
}

func startLoad(t *testing.T, prod pulsar.Producer, interval time.Duration) *load {
	l := &load{prod: prod, acked: map[int]pulsar.MessageID{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-time.After(interval):
			}
			l.wg.Add(1)
			l.mu.Lock()
			l.sent++
			l.mu.Unlock()
			prod.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i))}, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				defer l.wg.Done()
				l.mu.Lock()
				defer l.mu.Unlock()
				if err != nil {
					l.errs = append(l.errs, fmt.Errorf("message %d: %w", i, err))
					return
				}
				l.acked[i] = id
			})
		}
	}()
	return l
}

func (l *load) count() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.acked) }

// end stops sending and waits for every outstanding receipt.
func (l *load) end(t *testing.T) (sent int, acked map[int]pulsar.MessageID, errs []error) {
	t.Helper()
	close(l.stop)
	<-l.done
	ch := make(chan struct{})
	go func() { l.wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(2 * time.Minute):
		t.Fatal("receipts still outstanding 2 minutes after the load stopped")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, l.acked, l.errs
}

// consumeAll reads the subscription until every message of want arrived.
func consumeAll(t *testing.T, c pulsar.Client, topic string, want map[int]pulsar.MessageID) {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := map[int]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for len(got) < len(want) {
		msg, err := cons.Receive(ctx)
		if err != nil {
			missing := 0
			for i := range want {
				if !got[i] {
					missing++
				}
			}
			t.Fatalf("received %d of %d acknowledged messages (%d missing): %v", len(got), len(want), missing, err)
		}
		i, err := strconv.Atoi(string(msg.Payload()))
		if err != nil {
			t.Fatalf("payload %q", msg.Payload())
		}
		if _, ok := want[i]; ok {
			got[i] = true
		}
		cons.Ack(msg)
	}
}

// topicLedgers returns the metadata of the ledgers of a topic's managed
// ledger, by id.
func topicLedgers(t *testing.T, s *cluster.Store, topic string) map[int64]*metapb.LedgerMetadata {
	t.Helper()
	short := topic[strings.LastIndex(topic, "/")+1:]
	ids, err := ledger.ListLedgers(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]*metapb.LedgerMetadata{}
	for _, id := range ids {
		m, err := ledger.ReadMetadata(context.Background(), s, id)
		if err != nil {
			continue
		}
		if strings.HasSuffix(m.Meta.Custom["managed-ledger"], short) {
			out[id] = m.Meta
		}
	}
	return out
}

// checkReplicas: every fragment of the closed ledger is on distinct live
// bookies within the rack rule, and every entry reads back from EACH
// replica of its write set, directly from that bookie, intact (digest) and
// identical on all of them. It returns the number of entries.
func checkReplicas(t *testing.T, s *cluster.Store, v *cluster.BookieView, id int64) int64 {
	t.Helper()
	m := readMeta(t, s, id)
	if m.State != metapb.LedgerState_CLOSED {
		t.Fatalf("ledger %d is %s", id, m.State)
	}
	e, qw := int(m.EnsembleSize), int(m.WriteQuorum)
	for fi, f := range m.Fragments {
		ens := make([]rack.Bookie, len(f.Ensemble))
		seen := map[string]bool{}
		for i, b := range f.Ensemble {
			reg, ok := v.Lookup(b.Id)
			if !ok {
				t.Fatalf("ledger %d fragment %d: member %s is not a live bookie", id, fi, b.Id)
			}
			if seen[b.Id] {
				t.Fatalf("ledger %d fragment %d: %s twice", id, fi, b.Id)
			}
			seen[b.Id] = true
			ens[i] = rack.Bookie{ID: b.Id, Region: reg.Reg.Region, Rack: reg.Reg.Rack}
		}
		if a := rack.Check(ledger.PolicyOf(m), ens, qw, int(m.AckQuorum)); a != rack.AdherenceStrict {
			t.Fatalf("ledger %d fragment %d: placement %s: %v", id, fi, a, ens)
		}
		last, _ := ledger.FragmentLastEntry(m, fi)
		for en := f.FirstEntryId; en <= last; en++ {
			var ref []byte
			for _, p := range ledger.WriteSet(en, e, qw) {
				b := f.Ensemble[p]
				reg, _ := v.Lookup(b.Id)
				resp := readDirect(t, reg.Reg.Addr, id, en)
				if resp.Status != bookiepb.Status_OK {
					t.Fatalf("ledger %d entry %d on %s: %s %s", id, en, b.Id, resp.Status, resp.Message)
				}
				if digest.Entry(id, en, resp.Lac, resp.Payload) != resp.Digest {
					t.Fatalf("ledger %d entry %d on %s: digest mismatch", id, en, b.Id)
				}
				if ref == nil {
					ref = resp.Payload
				} else if !bytes.Equal(ref, resp.Payload) {
					t.Fatalf("ledger %d entry %d: replicas differ", id, en)
				}
			}
		}
	}
	return m.LastEntryId + 1
}

func meridianAdmin(t *testing.T, r *testutil.Region, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(testutil.MeridianBinary(t), append(append([]string{"admin"}, args...), "--etcd", r.EtcdURL, "--region", r.Name)...).CombinedOutput()
	return string(out), err
}

func recoveryStatus(t *testing.T, r *testutil.Region) Status {
	t.Helper()
	out, err := meridianAdmin(t, r, "recovery", "status", "--json")
	if err != nil {
		t.Fatalf("recovery status: %v\n%s", err, out)
	}
	var st Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("recovery status: %v\n%s", err, out)
	}
	return st
}

// An open ledger whose writer is gone — its broker was kill -9ed and no
// broker took the topic over, since no client came back — is recovered
// (fenced and closed at its last acknowledged entry) and then
// re-replicated; every acknowledged message is then read back through a
// new broker.
func TestGoneWritersLedgerIsRecoveredThenReReplicated(t *testing.T) {
	r := testutil.StartRegion(t, "gone", fiveOnThree...)
	v := watch(t, r.Store)
	b1 := r.AddBroker("broker-1", "--autorecovery=false")
	c := pulsarClient(t, b1.URL())
	topic := topicName(t)
	subscribeFirst(t, c, topic)
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := startLoad(t, prod, time.Millisecond)
	testutil.Eventually(t, time.Minute, "500 messages acknowledged", func() bool { return l.count() >= 500 })
	b1.Kill()
	_, acked, _ := l.end(t) // receipts of the killed broker's last sends fail: those are not acknowledged
	prod.Close()
	if len(acked) < 500 {
		t.Fatalf("%d acknowledged", len(acked))
	}
	var open *metapb.LedgerMetadata
	for _, m := range topicLedgers(t, r.Store, topic) {
		if m.State == metapb.LedgerState_OPEN {
			open = m
		}
	}
	if open == nil || open.WriterLease == 0 {
		t.Fatalf("no open ledger with a writer lease after the broker died: %v", open)
	}
	victim := open.Fragments[len(open.Fragments)-1].Ensemble[0].Id
	t.Logf("broker killed with ledger %d open (writer %s, lease %x); killing %s of its ensemble", open.LedgerId, open.Writer, open.WriterLease, victim)
	r.Bookie(victim).Kill()

	cfg := testConfig(t, r.Store, v, 2*time.Second)
	a, err := NewAuditor(cfg, "auditor")
	if err != nil {
		t.Fatal(err)
	}
	run(t, a.Run)
	w, err := NewWorker(cfg, "worker", newLedgerClient(t, r.Store, v, r.Name))
	if err != nil {
		t.Fatal(err)
	}
	run(t, w.Run)
	testutil.Eventually(t, 90*time.Second, "every ledger of the topic off "+victim, func() bool {
		for _, m := range topicLedgers(t, r.Store, topic) {
			if holds(m, victim) {
				return false
			}
		}
		return true
	})
	if s := w.Stats(); s.Recovered < 1 {
		t.Fatalf("worker recovered no ledger: %+v", s)
	}
	rec := readMeta(t, r.Store, open.LedgerId)
	if rec.State != metapb.LedgerState_CLOSED {
		t.Fatalf("ledger %d is %s", open.LedgerId, rec.State)
	}
	var inOpen int
	for _, id := range acked {
		if id.LedgerID() == open.LedgerId {
			inOpen++
			if id.EntryID() > rec.LastEntryId {
				t.Fatalf("acknowledged entry %d of ledger %d is past the recovered end %d", id.EntryID(), open.LedgerId, rec.LastEntryId)
			}
		}
	}
	total := int64(0)
	for id := range topicLedgers(t, r.Store, topic) {
		total += checkReplicas(t, r.Store, v, id)
	}
	t.Logf("ledger %d recovered at entry %d (%d acknowledged messages in it); %d entries of the topic verified on every replica; worker: %+v",
		open.LedgerId, rec.LastEntryId, inOpen, total, w.Stats())

	b2 := r.AddBroker("broker-2", "--autorecovery=false")
	consumeAll(t, pulsarClient(t, b2.URL()), topic, acked)
}

// Issue test (6): a whole rack lost at once: auditing starts without
// waiting for the delay (1 h here); an idle open ledger of a live broker is
// not fenced: it stays open, its writer replaces the lost bookies itself
// and keeps appending to it, and nothing is lost. Auto-recovery runs inside
// the broker, as it does by default.
func TestRackLossAuditsAtOnceAndSparesIdleOpenLedgers(t *testing.T) {
	r := testutil.StartRegion(t, "rack", fiveOnThree...)
	v := watch(t, r.Store)
	b := r.AddBroker("broker-1", "--lost-bookie-delay", "1h", "--max-entries-per-ledger", "100")
	c := pulsarClient(t, b.URL())

	// Closed ledgers: a busy topic rolled over several times.
	busy := topicName(t) + "-busy"
	subscribeFirst(t, c, busy)
	bp, err := c.CreateProducer(pulsar.ProducerOptions{Topic: busy, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	bl := startLoad(t, bp, time.Millisecond)
	testutil.Eventually(t, time.Minute, "600 messages", func() bool { return bl.count() >= 600 })
	_, busyAcked, errs := bl.end(t)
	if len(errs) > 0 {
		t.Fatalf("busy topic: %d sends failed: %v", len(errs), errs[0])
	}
	// The idle topic: a few messages, then nothing; its ledger stays open.
	idle := topicName(t) + "-idle"
	subscribeFirst(t, c, idle)
	ip, err := c.CreateProducer(pulsar.ProducerOptions{Topic: idle, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	idleAcked := map[int]pulsar.MessageID{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range 5 {
		id, err := ip.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i))})
		if err != nil {
			t.Fatal(err)
		}
		idleAcked[i] = id
	}
	openID := idleAcked[4].LedgerID()
	om := readMeta(t, r.Store, openID)
	if om.State != metapb.LedgerState_OPEN {
		t.Fatalf("idle ledger %d is %s", openID, om.State)
	}
	// The rack to lose: one with two bookies that the idle ledger uses.
	counts := map[string]int{}
	for _, bk := range r.Bookies {
		counts[bk.Rack]++
	}
	var lostRack string
	for _, m := range om.Fragments[0].Ensemble {
		if counts[m.Rack] == 2 {
			lostRack = m.Rack
		}
	}
	var victims []string
	for _, bk := range r.Bookies {
		if bk.Rack == lostRack {
			victims = append(victims, bk.ID)
		}
	}
	slices.Sort(victims)
	before := topicLedgers(t, r.Store, busy)
	hit := 0
	per := map[string]int{} // a victim may hold no ledger: it is lost all the same
	for _, m := range before {
		if holds(m, victims[0]) || holds(m, victims[1]) {
			hit++
		}
		for _, id := range victims {
			if holds(m, id) {
				per[id]++
			}
		}
	}
	t.Logf("killing rack %s (%v): in %d of %d closed ledgers (per bookie %v) and in idle ledger %d %v", lostRack, victims, hit, len(before), per, openID, om.Fragments[0].Ensemble)

	// Watch the idle ledger's state all along: it must never be fenced.
	stopWatch := make(chan struct{})
	var watchErr error
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(50 * time.Millisecond):
			}
			m, err := ledger.ReadMetadata(context.Background(), r.Store, openID)
			if err == nil && m.Meta.State != metapb.LedgerState_OPEN {
				watchErr = fmt.Errorf("idle open ledger %d moved to %s", openID, m.Meta.State)
				return
			}
		}
	}()
	killed := time.Now()
	for _, id := range victims {
		r.Bookie(id).Kill()
	}
	testutil.Eventually(t, 60*time.Second, "auditor declares the rack lost", func() bool {
		st := recoveryStatus(t, r)
		return st.Auditor != nil && slices.Equal(st.Auditor.Lost, victims)
	})
	declared := time.Since(killed)
	testutil.Eventually(t, 2*time.Minute, "no fragment of either topic on the lost rack", func() bool {
		for _, topic := range []string{busy, idle} {
			for _, m := range topicLedgers(t, r.Store, topic) {
				if holds(m, victims[0]) || holds(m, victims[1]) {
					return false
				}
			}
		}
		return true
	})
	repaired := time.Since(killed)
	testutil.Eventually(t, 30*time.Second, "no marker left", func() bool {
		ms, err := ListMarkers(context.Background(), r.Store)
		return err == nil && len(ms) == 0
	})
	t.Logf("rack declared lost %s after the kill (delay 1h), every fragment off it %s after the kill", declared.Round(time.Millisecond), repaired.Round(time.Millisecond))
	if declared > 45*time.Second {
		t.Errorf("the rack was declared lost %s after the kill: the audit waited", declared)
	}
	for id, m := range topicLedgers(t, r.Store, busy) {
		if m.State == metapb.LedgerState_CLOSED { // the open one is its idle writer's
			checkReplicas(t, r.Store, v, id)
		}
	}

	// The idle writer still owns its ledger and appends to it.
	id, err := ip.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("5")})
	if err != nil {
		t.Fatalf("the idle producer cannot send after the rack loss: %v", err)
	}
	idleAcked[5] = id
	close(stopWatch)
	<-watchDone
	if watchErr != nil {
		t.Fatal(watchErr)
	}
	if id.LedgerID() != openID {
		t.Fatalf("message after the rack loss went to ledger %d, not the idle ledger %d: it was closed under its writer", id.LedgerID(), openID)
	}
	om = readMeta(t, r.Store, openID)
	if om.State != metapb.LedgerState_OPEN || holds(om, victims[0]) || holds(om, victims[1]) {
		t.Fatalf("idle ledger %d after the rack loss: %s %v", openID, om.State, om.Fragments)
	}
	consumeAll(t, c, busy, busyAcked)
	consumeAll(t, c, idle, idleAcked)
}

// Issue test (4): decommission of a live bookie under write load: no write
// fails, nothing is lost, and the bookie ends with no fragment, removed
// (deregistered, its process gone). Through `meridian admin bookies
// decommission`, with auto-recovery in the two brokers.
func TestDecommissionUnderWriteLoad(t *testing.T) {
	r := testutil.StartRegion(t, "decom", fiveOnThree...)
	v := watch(t, r.Store)
	b1 := r.AddBroker("broker-1", "--max-entries-per-ledger", "300")
	b2 := r.AddBroker("broker-2", "--max-entries-per-ledger", "300")
	c := pulsarClient(t, b1.URL(), b2.URL())
	topic := topicName(t)
	subscribeFirst(t, c, topic)
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l := startLoad(t, prod, time.Millisecond)
	testutil.Eventually(t, time.Minute, "1500 messages", func() bool { return l.count() >= 1500 })
	// The victim: a member of the ledger being written, and of older ones.
	var victim string
	testutil.Eventually(t, 10*time.Second, "the topic's open ledger", func() bool { // none for a moment at a rollover
		for _, m := range topicLedgers(t, r.Store, topic) {
			if m.State == metapb.LedgerState_OPEN {
				victim = m.Fragments[len(m.Fragments)-1].Ensemble[0].Id
			}
		}
		return victim != ""
	})
	frags := 0
	for _, m := range topicLedgers(t, r.Store, topic) {
		for _, f := range m.Fragments {
			for _, b := range f.Ensemble {
				if b.Id == victim {
					frags++
				}
			}
		}
	}
	start := time.Now()
	out, err := meridianAdmin(t, r, "bookies", "decommission", victim, "--timeout", "3m")
	t.Logf("meridian admin bookies decommission %s (%d fragments of the topic; %s):\n%s", victim, frags, time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("decommission: %v", err)
	}
	if !strings.Contains(out, "fragment(s) left") || !strings.Contains(out, "removed") {
		t.Fatalf("decommission showed no progress:\n%s", out)
	}
	// Keep writing a little after the bookie is gone.
	n := l.count()
	testutil.Eventually(t, time.Minute, "writes go on after the removal", func() bool { return l.count() >= n+500 })
	sent, acked, errs := l.end(t)
	if len(errs) > 0 {
		t.Fatalf("%d of %d sends failed during the decommission; first: %v", len(errs), sent, errs[0])
	}
	if !r.Bookie(victim).Wait(30 * time.Second) {
		t.Fatalf("%s still running after it was removed", victim)
	}
	if _, ok := v.Lookup(victim); ok {
		t.Fatalf("%s still registered", victim)
	}
	ids, err := ledger.ListLedgers(context.Background(), r.Store)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if holds(readMeta(t, r.Store, id), victim) {
			t.Fatalf("ledger %d still names %s", id, victim)
		}
	}
	list, err := meridianAdmin(t, r, "bookies", "list")
	if err != nil || !strings.Contains(list, victim) || !strings.Contains(list, "removed") {
		t.Fatalf("bookies list: %v\n%s", err, list)
	}
	for id, m := range topicLedgers(t, r.Store, topic) {
		if m.State == metapb.LedgerState_CLOSED {
			checkReplicas(t, r.Store, v, id)
		}
	}
	t.Logf("%d messages sent, all acknowledged", sent)
	consumeAll(t, c, topic, acked)
}

// Issue test (5): a bookie added under load receives new fragments at once
// (ledgers roll over during the test); the fragments that existed stay
// where they were.
func TestAddedBookieTakesNewFragmentsUnderLoad(t *testing.T) {
	r := testutil.StartRegion(t, "scale", "r1", "r2", "r3")
	b := r.AddBroker("broker-1", "--max-entries-per-ledger", "100")
	c := pulsarClient(t, b.URL())
	topic := topicName(t)
	subscribeFirst(t, c, topic)
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	l := startLoad(t, prod, time.Millisecond)
	testutil.Eventually(t, time.Minute, "500 messages", func() bool { return l.count() >= 500 })
	before := map[int64]*metapb.LedgerMetadata{}
	for id, m := range topicLedgers(t, r.Store, topic) {
		before[id] = m
	}
	added := r.AddBookie("scale-bookie-new", "r1")
	r.WaitRegistered(added.ID)
	registered := time.Now()
	var first int64
	testutil.Eventually(t, 90*time.Second, "a ledger on the new bookie", func() bool {
		for id, m := range topicLedgers(t, r.Store, topic) {
			if _, old := before[id]; !old && holds(m, added.ID) {
				first = id
				return true
			}
		}
		return false
	})
	took := time.Since(registered)
	n := l.count()
	testutil.Eventually(t, time.Minute, "300 more messages", func() bool { return l.count() >= n+300 })
	_, acked, errs := l.end(t)
	if len(errs) > 0 {
		t.Fatalf("%d sends failed: %v", len(errs), errs[0])
	}
	now := topicLedgers(t, r.Store, topic)
	newLedgers, onNew := 0, 0
	for id, m := range now {
		old, existed := before[id]
		if !existed {
			newLedgers++
			if holds(m, added.ID) {
				onNew++
			}
			continue
		}
		// Old fragments stay: each one that existed is unchanged (the open
		// ledger of then may only have been closed and grown).
		for fi, f := range old.Fragments {
			if fi >= len(m.Fragments) || !proto.Equal(f, m.Fragments[fi]) {
				t.Fatalf("ledger %d fragment %d moved: %v -> %v", id, fi, f, m.Fragments)
			}
		}
		if holds(m, added.ID) {
			t.Fatalf("existing ledger %d got the new bookie: %v", id, m.Fragments)
		}
	}
	t.Logf("new bookie in ledger %d %s after it registered; %d of %d ledgers created since hold it; %d old ledgers unchanged",
		first, took.Round(time.Millisecond), onNew, newLedgers, len(before))
	consumeAll(t, c, topic, acked)
}
