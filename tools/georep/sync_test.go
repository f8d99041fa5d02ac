package georep

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/meridian-mq/meridian/tools/up"
)

// alerts reads a broker's replication alert counter for kind.
func alerts(t *testing.T, admin, kind string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "meridian_broker_replication_alerts_total{") && strings.Contains(line, `kind="`+kind+`"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return 0
}

func (d *deployment) proc(name string) up.ProcEndpoint {
	for _, r := range d.e.Regions {
		for _, p := range r.Processes {
			if p.Name == name {
				return p
			}
		}
	}
	d.t.Fatalf("no process %s", name)
	return up.ProcEndpoint{}
}

// Issue 4, test 4: sync mode. With west paused, strict sends fail with a
// retriable (timeout) error and the stall alert fires; degrade sends
// succeed and the degraded alert fires. With west running, every message
// whose receipt the producer got is readable in west even after every
// east process is kill -9ed right after the receipt and west's brokers
// and bookies are kill -9ed and restarted.
func TestSyncReplication(t *testing.T) {
	// A slow link: without sync receipts, the last receipted messages
	// would still be on their way when east dies.
	t.Setenv("MERIDIAN_FAULT_REPL_DELAY", "300ms")
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL})
	regions := []string{"east", "west"}
	d.createNamespace("public/strict", regions, map[string]any{"mode": "sync", "failover": "active-active", "syncOnUnreachable": "strict", "syncTimeoutMs": 2000})
	d.createNamespace("public/degrade", regions, map[string]any{"mode": "sync", "failover": "active-active", "syncOnUnreachable": "degrade", "syncTimeoutMs": 2000})
	d.createNamespace("public/sync", regions, map[string]any{"mode": "sync", "failover": "active-active"})
	east := d.client("east")
	eastAdmin := d.proc("east-broker-1").Admin

	// A receipt in sync mode needs west: it works while west is up.
	ps, err := east.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/strict/t", SendTimeout: 5 * time.Second, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	pd, err := east.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/degrade/t", SendTimeout: 20 * time.Second, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []pulsar.Producer{ps, pd} {
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("warm")}); err != nil {
			t.Fatalf("sync send with west up: %v", err)
		}
	}

	// West unreachable: its broker paused.
	wb := d.d.Pid("west-broker-1")
	syscall.Kill(wb, syscall.SIGSTOP)
	testutil.WaitPidStopped(t, wb)
	start := time.Now()
	_, err = ps.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("strict")})
	if err == nil {
		t.Fatal("strict: a send got a receipt while west was unreachable")
	}
	if !errors.Is(err, pulsar.ErrSendTimeout) {
		t.Fatalf("strict: send failed with %v, want the client's retriable send timeout", err)
	}
	t.Logf("strict: send failed after %v: %v", time.Since(start), err)
	if n := alerts(t, eastAdmin, "sync-stalled"); n < 1 {
		t.Fatalf("strict: no sync-stalled alert")
	}
	start = time.Now()
	if _, err := pd.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("degrade")}); err != nil {
		t.Fatalf("degrade: send failed with west unreachable: %v", err)
	}
	t.Logf("degrade: receipt after %v with west unreachable", time.Since(start))
	if n := alerts(t, eastAdmin, "sync-degraded"); n < 1 {
		t.Fatalf("degrade: no sync-degraded alert")
	}
	syscall.Kill(wb, syscall.SIGCONT)
	ps.Close()
	pd.Close()

	// Receipts only for what west persisted: kill east right after the
	// last receipt, kill and restart west's storage and brokers, read.
	const topic = "persistent://public/sync/ledger"
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 20, SendTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	ids := produce(t, p, "east", n, 10)
	d.killRegion("east")
	if len(ids) != n {
		t.Fatalf("%d receipts", len(ids))
	}
	var west []string
	for _, pr := range d.region("west").Processes {
		if pr.Role == "broker" || pr.Role == "bookie" {
			d.kill(pr.Name)
			west = append(west, pr.Name)
		}
	}
	time.Sleep(500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range west {
		if err := d.d.Restart(ctx, name); err != nil {
			t.Fatalf("restart %s: %v", name, err)
		}
	}
	c, err := d.client("west").Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "after", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	r := consumeAll(t, c, n, 2*time.Minute, 3*time.Second)
	for i := range n {
		pl := fmt.Sprintf("k%d/%d/east", i%10, i)
		if len(r.ids[pl]) != 1 {
			t.Fatalf("receipted message %d delivered %d times in west", i, len(r.ids[pl]))
		}
	}
	checkHandshakeRefusals(t, d.proc("west-broker-1").Replication, "west", topic)
}
