package broker_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// cpuSeconds reads a process's user+system CPU time.
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// A subscription with a backlog and nobody able to receive (its consumer
// closed, or its queue full) must leave the broker idle — dispatch waits
// for permits instead of spinning.
func TestBacklogWithoutPermitsIsIdle(t *testing.T) {
	s := standalone(t)
	client := newPulsarClient(t, s.URL)
	topic := topicName(t)
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "slow", ReceiverQueueSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 200, nil) // the consumer takes 10, never receives: no more permits
	time.Sleep(500 * time.Millisecond)
	before := cpuSeconds(t, s.Pid())
	time.Sleep(3 * time.Second)
	used := cpuSeconds(t, s.Pid()) - before
	if used > 0.6 {
		t.Fatalf("an idle broker with a stalled subscription used %.2f CPU seconds in 3 s (dispatch spinning)", used)
	}
	c.Close() // closed consumer: backlog, no consumer at all
	time.Sleep(500 * time.Millisecond)
	before = cpuSeconds(t, s.Pid())
	time.Sleep(3 * time.Second)
	if used := cpuSeconds(t, s.Pid()) - before; used > 0.6 {
		t.Fatalf("a subscription without consumers used %.2f CPU seconds in 3 s", used)
	}
}
