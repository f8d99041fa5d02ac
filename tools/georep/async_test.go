package georep

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/up"
)

// produce sends n keyed messages ("key/index/region") through p and
// returns each message's receipt id by index.
func produce(t *testing.T, p pulsar.Producer, region string, n, keys int) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range n {
		wg.Add(1)
		key := fmt.Sprintf("k%d", i%keys)
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Key: key, Payload: fmt.Appendf(nil, "%s/%d/%s", key, i, region)},
			func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil {
					ids[i] = idString(id)
				}
				mu.Unlock()
				wg.Done()
			})
	}
	p.Flush()
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("send: %v", firstErr)
	}
	return ids
}

// consumeAll receives until want messages arrived and nothing more comes
// within quiet, acking each; it returns payload → ids seen (a payload
// seen twice has two ids) in arrival order per key.
type received struct {
	ids    map[string][]string // payload → ids
	perKey map[string][]int    // key → indexes in arrival order
	count  int
}

func consumeAll(t *testing.T, c pulsar.Consumer, want int, timeout, quiet time.Duration) received {
	t.Helper()
	r := received{ids: map[string][]string{}, perKey: map[string][]int{}}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		wait := quiet
		if r.count < want {
			wait = time.Until(deadline)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		m, err := c.Receive(ctx)
		cancel()
		if err != nil {
			if r.count >= want {
				return r
			}
			break
		}
		c.Ack(m)
		r.count++
		r.ids[string(m.Payload())] = append(r.ids[string(m.Payload())], idString(m.ID()))
		key, idx, region := parsePayload(m.Payload())
		r.perKey[region+"/"+key] = append(r.perKey[region+"/"+key], idx)
	}
	t.Fatalf("received %d of %d messages", r.count, want)
	return r
}

// Issue 4, test 1: async replication in an active-active namespace. 20,000
// keyed messages produced in east are replicated; once east reports no
// backlog, every east process is kill -9ed and west's own service URL
// serves all of them, exactly once, in per-key order, under the message
// ids east's producer got — from west's ledgers, since east is dead.
func TestAsyncReplicationSurvivesLossOfSourceRegion(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL})
	d.createNamespace("public/geo", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-active"})
	const topic = "persistent://public/geo/orders"
	const n, keys = 20000, 50

	east := d.client("east")
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 100})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ids := produce(t, p, "east", n, keys)
	t.Logf("produced %d messages in east in %v", n, time.Since(start))
	d.waitReplicated("east", topic, []string{"west"}, 2*time.Minute)
	t.Logf("east reports west caught up %v after the first send", time.Since(start))

	// Issue 34: every stage up to west's persistence, and the store-to-store
	// lag, were observed for the entries replicated (no consumer in west
	// yet: no dispatch).
	eastAdmin, westAdmin := d.region("east").AdminURL, d.region("west").AdminURL
	for _, st := range []string{"east_persist", "east_read", "east_send"} {
		if n := histCount(t, eastAdmin, "meridian_replication_stage_seconds", `stage="`+st+`"`); n == 0 {
			t.Errorf("east observed no entry in stage %s", st)
		}
	}
	for _, st := range []string{"wire", "west_apply", "west_persist"} {
		if n := histCount(t, westAdmin, "meridian_replication_stage_seconds", `stage="`+st+`"`); n == 0 {
			t.Errorf("west observed no entry in stage %s", st)
		}
	}
	s2s := histCount(t, westAdmin, "meridian_replication_store_to_store_seconds", `origin="east"`)
	if s2s == 0 || s2s > n {
		t.Errorf("west observed the store-to-store lag of %v entries, want 1 to %d", s2s, n)
	}

	// Issue 29: west meters what arrives from east as Pulsar's inbound
	// replication rates, per topic and remote_cluster: the entries east's
	// sender sent, at the rate it sent them (read a moment apart; the
	// meters' windows start at the first send and at its arrival).
	lbl := []string{`topic="` + topic + `"`}
	in := seriesValue(t, westAdmin, "pulsar_replication_rate_in", append(lbl, `remote_cluster="east"`)...)
	out := seriesValue(t, eastAdmin, "pulsar_replication_rate_out", append(lbl, `remote_cluster="west"`)...)
	bin := seriesValue(t, westAdmin, "pulsar_replication_throughput_in", append(lbl, `remote_cluster="east"`)...)
	bout := seriesValue(t, eastAdmin, "pulsar_replication_throughput_out", append(lbl, `remote_cluster="west"`)...)
	t.Logf("west receives from east %.1f entries/s, %.0f B/s; east sends %.1f entries/s, %.0f B/s", in, bin, out, bout)
	if in <= 0 || math.Abs(in-out) > 0.25*out {
		t.Errorf("west's pulsar_replication_rate_in{remote_cluster=east} %v, east's pulsar_replication_rate_out{remote_cluster=west} %v: want them within 25%%", in, out)
	}
	if bin <= 0 || math.Abs(bin-bout) > 0.25*bout {
		t.Errorf("west's pulsar_replication_throughput_in %v, east's pulsar_replication_throughput_out %v: want them within 25%%", bin, bout)
	}

	// Issue 29: pulsaradmin's Clusters().Get answers each region's URLs.
	checkClusters(t, d, "east")

	name := p.Name()
	d.killRegion("east")

	west := d.client("west")
	c, err := west.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "dr", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	r := consumeAll(t, c, n, 2*time.Minute, 3*time.Second)
	if r.count != n {
		t.Fatalf("west delivered %d messages, want exactly %d", r.count, n)
	}
	for i := range n {
		key := fmt.Sprintf("k%d", i%keys)
		pl := fmt.Sprintf("%s/%d/east", key, i)
		got := r.ids[pl]
		if len(got) != 1 {
			t.Fatalf("message %d delivered %d times in west", i, len(got))
		}
		if got[0] != ids[i] {
			t.Fatalf("message %d has id %s in west, %s in east", i, got[0], ids[i])
		}
	}
	for key, idx := range r.perKey {
		for j := 1; j < len(idx); j++ {
			if idx[j] < idx[j-1] {
				t.Fatalf("key %s: message %d after %d", key, idx[j], idx[j-1])
			}
		}
	}

	// The producer's sequence ids travelled with its entries: re-created in
	// west under its name, it continues after its last one persisted in
	// east (so a resend of anything east persisted is deduplicated).
	wp, err := west.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: name, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wp.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	if got := wp.LastSequenceID(); got != n {
		t.Fatalf("producer %s re-created in west sent sequence id %d, want %d (after east's last, %d)", name, got, n, n-1)
	}
}

// histCount reads a histogram's observation count from a broker's
// metrics (base: its admin URL), the child whose labels contain label.
func histCount(t *testing.T, base, metric, label string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", base, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, metric+"_count{") && strings.Contains(line, label) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return 0
}

// seriesValue reads the value of the first series of a metric on a broker's
// metrics (base: its admin URL) whose labels contain every one of labels;
// it fails when there is none.
func seriesValue(t *testing.T, base, metric string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", base, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		return v
	}
	t.Fatalf("%s/metrics: no %s%v", base, metric, labels)
	return 0
}
