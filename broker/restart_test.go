package broker_test

import (
	"context"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Broker issue test 3: restart `meridian standalone` (SIGTERM, and
// separately kill -9) in the middle of a produce/consume run. After the
// restart every acknowledged message is delivered and the consumer resumes
// from its position: re-deliveries are bounded by the cursor persistence
// interval (100 ms) plus the client's ack grouping window (100 ms).
func TestStandaloneRestartKeepsMessagesAndPositions(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			s := testutil.StartStandalone(t, t.TempDir())
			client := newPulsarClient(t, s.URL)
			topic := topicName(t)
			cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "durable", Type: pulsar.Exclusive,
				SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 90 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()

			const n = 3000
			var mu sync.Mutex
			acked := map[int]bool{}
			received := map[int]int{}
			firstSeen := map[int]time.Time{}
			var stoppedAt time.Time
			var sendErr error
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			go func() {
				for {
					m, err := cons.Receive(ctx)
					if err != nil {
						return
					}
					v, _ := strconv.Atoi(string(m.Payload()))
					mu.Lock()
					received[v]++
					if received[v] == 1 {
						firstSeen[v] = time.Now()
					}
					mu.Unlock()
					cons.Ack(m)
				}
			}()
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				if i == n/2 {
					testutil.Eventually(t, time.Minute, "half consumed", func() bool {
						mu.Lock()
						defer mu.Unlock()
						return len(received) >= n/4
					})
					mu.Lock()
					stoppedAt = time.Now()
					mu.Unlock()
					s.Signal(sig)
					if !s.Wait(30 * time.Second) {
						t.Fatal("standalone did not stop")
					}
					s.Restart()
				}
				wg.Add(1)
				prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i))}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					defer wg.Done()
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						sendErr = err
						return
					}
					acked[i] = true
				})
				if i%100 == 0 {
					time.Sleep(5 * time.Millisecond)
				}
			}
			wg.Wait()
			if sendErr != nil {
				t.Logf("a send failed (not acknowledged, so not owed): %v", sendErr)
			}
			testutil.Eventually(t, 2*time.Minute, "every acknowledged message delivered", func() bool {
				mu.Lock()
				defer mu.Unlock()
				for i := range acked {
					if received[i] == 0 {
						return false
					}
				}
				return true
			})
			mu.Lock()
			defer mu.Unlock()
			dups, oldest := 0, time.Duration(0)
			for v, c := range received {
				if c > 1 {
					dups += c - 1
					oldest = max(oldest, stoppedAt.Sub(firstSeen[v]))
				}
			}
			t.Logf("%s: %d acknowledged, %d received, %d re-delivered after the restart, the oldest first received %s before the stop",
				sig, len(acked), len(received), dups, oldest)
			// The bound: only messages consumed in the last cursor persistence
			// interval (100 ms) plus the client's ack grouping window (100 ms)
			// before the stop come back; allow 300 ms more for scheduling on
			// two busy cores. Without a persisted cursor everything consumed
			// since the start would come back.
			if oldest > 500*time.Millisecond {
				t.Fatalf("a message consumed %s before the stop was re-delivered: the cursor position was not kept", oldest)
			}
		})
	}
}
