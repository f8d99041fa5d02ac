package broker_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// A backlog of batched entries, consumed after a restart (so nothing is in
// the broker's tail cache), is read from the bookies once: the dispatcher
// reads about as many entries as the consumer's permits cover (permits ÷
// messages per entry), not that many entries, so no entry of a read waits
// for permits and is then read again, alone.
func TestBacklogIsReadFromBookiesOnce(t *testing.T) {
	bookieMetrics := []string{testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)}
	s := testutil.StartStandalone(t, t.TempDir(), "--bookie-metrics", strings.Join(bookieMetrics, ","))
	client := newPulsarClient(t, s.URL)
	topic := topicName(t)
	const perEntry, entries = 50, 120
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: perEntry,
		BatchingMaxPublishDelay: time.Second, BatchingMaxSize: 1 << 20, MaxPendingMessages: perEntry * entries})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	payload := make([]byte, 1024)
	errs := make(chan error, perEntry*entries)
	for i := range perEntry * entries {
		copy(payload, fmt.Sprintf("%08d", i))
		prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: append([]byte(nil), payload...)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
	}
	if err := prod.Flush(); err != nil {
		t.Fatal(err)
	}
	for range perEntry * entries {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	prod.Close()
	client.Close()

	// A clean restart: the tail cache is empty and the bookies' counters
	// start from zero.
	s.Signal(syscall.SIGTERM)
	if !s.Wait(60 * time.Second) {
		t.Fatal("standalone did not stop on SIGTERM")
	}
	s.Restart()
	s.WaitReady()
	for _, a := range bookieMetrics {
		testutil.WaitListening(t, a, 30*time.Second)
	}
	client = newPulsarClient(t, s.URL)
	// 200 permits: 4 entries' worth per flow.
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "backlog", Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	msgs := receiveN(t, cons, perEntry*entries, true)
	for i, m := range msgs {
		if got := string(m.Payload()[:8]); got != fmt.Sprintf("%08d", i) {
			t.Fatalf("message %d: payload %q (out of order or lost)", i, got)
		}
	}
	var reads float64
	for _, a := range bookieMetrics {
		reads += metricValue(t, "http://"+a, "meridian_bookie_reads_total", `status="OK"`)
	}
	// Every entry once, and a few reads of the open ledger's state.
	if reads < entries || reads > entries+10 {
		t.Fatalf("the bookies answered %.0f reads for a backlog of %d entries; want each entry read once (%d..%d)", reads, entries, entries, entries+10)
	}
	t.Logf("%.0f bookie reads for %d entries", reads, entries)
}
