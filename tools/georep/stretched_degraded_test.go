package georep

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/tools/up"
)

// gauge reads a broker metric's value for the series whose labels contain
// label (e.g. `namespace="public/deg"`); -1 when absent.
func gauge(t *testing.T, admin, name, label string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, label) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return -1
}

// ensembleRegions returns the regions of every bookie in every fragment.
func ensembleRegions(m *metapb.LedgerMetadata) []string {
	var out []string
	for _, f := range m.Fragments {
		for _, b := range f.Ensemble {
			if !slices.Contains(out, b.Region) {
				out = append(out, b.Region)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Issue 6, item 1: degraded placement of a stretched namespace. east owns
// the topic and writes ledgers over both regions (E=Qw=4 Qa=3). Every west
// process is kill -9ed: the open ledger can no longer reach its ack quorum
// and no replacement keeps the two-region rule; once west is declared gone
// (its bookies' registrations expired from the global store, gossip has it
// down), east places new ledgers inside east (E=3 Qw=3 Qa=2, rack-aware,
// marked "stretched-degraded" in the metadata), produce resumes without
// west, and the namespace reports itself degraded (gauge and alert). When
// west is restarted, the topic rolls over onto a ledger spanning both
// regions again and the gauge drops. Every acknowledged message is
// delivered exactly once.
func TestStretchedDegradedPlacement(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL})
	d.createNamespace("public/deg", []string{"east", "west"}, map[string]any{"mode": "stretched", "failover": "active-standby", "primary": "east"})
	const topic = "persistent://public/deg/accounts"
	ctx := context.Background()
	global, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: d.e.GlobalStore, Prefix: "/meridian/global"})
	if err != nil {
		t.Fatal(err)
	}
	defer global.Close()
	meta := func(id int64) *metapb.LedgerMetadata {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			m, err := ledger.ReadMetadata(ctx, global, id)
			if err == nil {
				return m.Meta
			}
			if time.Now().After(deadline) {
				t.Fatalf("ledger %d metadata: %v", id, err)
			}
		}
	}
	eastBroker := d.proc("east-broker-1").Admin

	east := d.client("east")
	var p pulsar.Producer
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		if p, err = east.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 3 * time.Minute}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	acked := map[string]int64{} // payload → ledger
	send := func(i int) (int64, error) {
		pl := fmt.Sprintf("k/%d/east", i)
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(pl)})
		if err != nil {
			return 0, err
		}
		mu.Lock()
		acked[pl] = id.LedgerID()
		mu.Unlock()
		return id.LedgerID(), nil
	}
	var first int64
	for i := range 100 {
		// The first ledger needs west's bookies, which east learns of
		// through the global store a moment after west starts.
		l, err := send(i)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		first = l
	}
	if m := meta(first); !slices.Equal(ensembleRegions(m), []string{"east", "west"}) || m.AckQuorum != 3 {
		t.Fatalf("before the loss: ledger %d on regions %v with Qa %d, want east and west with Qa 3", first, ensembleRegions(m), m.AckQuorum)
	}

	// Lose west (the standby region; east's broker keeps the topic).
	d.killRegion("west")
	lost := time.Now()
	next := 100
	var degraded int64
	for deadline := time.Now().Add(2 * time.Minute); degraded == 0; next++ {
		l, err := send(next)
		if err != nil {
			// A send that fails (not stored: the managed ledger says so)
			// is retried with the next index, as a producer would.
			t.Logf("send %d after the loss: %v", next, err)
		} else if l != first {
			degraded = l
		}
		if time.Now().After(deadline) {
			t.Fatal("no receipt from a new ledger within 2 minutes of losing west: produce waits for the lost region")
		}
	}
	t.Logf("produce resumed on ledger %d %.1f s after west was killed", degraded, time.Since(lost).Seconds())
	m := meta(degraded)
	if got := ensembleRegions(m); !slices.Equal(got, []string{"east"}) {
		t.Fatalf("degraded ledger %d placed on regions %v, want only east", degraded, got)
	}
	if m.EnsembleSize != 3 || m.WriteQuorum != 3 || m.AckQuorum != 2 {
		t.Fatalf("degraded ledger %d: E=%d Qw=%d Qa=%d, want 3/3/2", degraded, m.EnsembleSize, m.WriteQuorum, m.AckQuorum)
	}
	if m.Custom["stretched-degraded"] != "west" {
		t.Fatalf("degraded ledger %d: custom metadata %v, want stretched-degraded=west", degraded, m.Custom)
	}
	racks := map[string]bool{}
	for _, b := range m.Fragments[0].Ensemble {
		racks[b.Rack] = true
	}
	if len(racks) < 2 {
		t.Fatalf("degraded ledger %d on %d rack(s): the rack rule must hold", degraded, len(racks))
	}
	if v := gauge(t, eastBroker, "meridian_broker_stretched_degraded", `namespace="public/deg"`); v != 1 {
		t.Fatalf("meridian_broker_stretched_degraded{namespace=public/deg} = %v, want 1", v)
	}
	if v := alerts(t, eastBroker, "stretched-degraded"); v < 1 {
		t.Fatalf("alerts_total{kind=stretched-degraded} = %v, want >= 1", v)
	}
	for range 50 {
		if _, err := send(next); err != nil {
			t.Fatalf("send %d while degraded: %v", next, err)
		}
		next++
	}

	// West returns: new ledgers span both regions again.
	for _, pr := range d.region("west").Processes {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := d.d.Restart(rctx, pr.Name)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	var restored int64
	for deadline := time.Now().Add(2 * time.Minute); restored == 0; next++ {
		l, err := send(next)
		if err != nil {
			t.Fatalf("send %d after west returned: %v", next, err)
		}
		if l != degraded && l != first {
			restored = l
		}
		if time.Now().After(deadline) {
			t.Fatal("no rollover off the degraded ledger within 2 minutes of west's return")
		}
		time.Sleep(20 * time.Millisecond)
	}
	m = meta(restored)
	if got := ensembleRegions(m); !slices.Equal(got, []string{"east", "west"}) || m.AckQuorum != 3 || m.Custom["stretched-degraded"] != "" {
		t.Fatalf("after west returned: ledger %d on regions %v, Qa %d, custom %v; want both regions, Qa 3, not degraded",
			restored, got, m.AckQuorum, m.Custom)
	}
	if v := gauge(t, eastBroker, "meridian_broker_stretched_degraded", `namespace="public/deg"`); v != 0 {
		t.Fatalf("meridian_broker_stretched_degraded{namespace=public/deg} = %v after west returned, want 0", v)
	}
	if v := alerts(t, eastBroker, "stretched-restored"); v < 1 {
		t.Fatalf("alerts_total{kind=stretched-restored} = %v, want >= 1", v)
	}
	for range 20 {
		if _, err := send(next); err != nil {
			t.Fatalf("send %d: %v", next, err)
		}
		next++
	}

	c, err := east.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "audit", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	want := len(acked)
	mu.Unlock()
	r := consumeAll(t, c, want, 2*time.Minute, 3*time.Second)
	for pl := range acked {
		if len(r.ids[pl]) != 1 {
			t.Fatalf("%s delivered %d times", pl, len(r.ids[pl]))
		}
	}
	t.Logf("%d acknowledged, all delivered once; ledgers %d (both regions) → %d (east only) → %d (both regions)", want, first, degraded, restored)
}
