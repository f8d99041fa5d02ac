package broker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/bookie/ledger"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// ownerOf returns the id of the broker that owns a bundle of public/default.
func ownerOf(t *testing.T, r *testutil.Region) string {
	t.Helper()
	var id string
	testutil.Eventually(t, 30*time.Second, "a bundle owner", func() bool {
		kvs, _, err := r.Store.List(context.Background(), "/ownership/public/default/")
		if err != nil || len(kvs) == 0 {
			return false
		}
		var bi struct{ ID string }
		json.Unmarshal(kvs[0].Value, &bi)
		id = bi.ID
		return id != ""
	})
	return id
}

// metric reads a counter from a broker's /metrics.
func metric(t *testing.T, adminURL, name string) float64 {
	t.Helper()
	resp, err := http.Get(adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			v, _ := strconv.ParseFloat(l[strings.LastIndex(l, " ")+1:], 64)
			return v
		}
	}
	t.Fatalf("metric %s not exported by %s", name, adminURL)
	return 0
}

// Broker issue test 4: a region of two brokers and four bookies as
// separate processes. The broker owning the topic dies (kill -9) while
// sends are in flight — or is stopped with SIGTERM: the other broker takes
// the bundle, the clients recover by themselves, no acknowledged message is
// lost, the producer's resends are deduplicated (zero duplicates in the
// topic, and the dedup counter shows resends were dropped).
func TestOwnerBrokerLoss(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			r := testutil.StartRegion(t, "east", "r1", "r1", "r2", "r2")
			b1 := r.AddBroker("broker-1", "--ownership-ttl", "3s", "--log-level", "info")
			b2 := r.AddBroker("broker-2", "--ownership-ttl", "3s", "--log-level", "info")
			brokers := map[string]*testutil.BrokerProc{b1.ID: b1, b2.ID: b2}
			client, err := pulsar.NewClient(pulsar.ClientOptions{URL: b1.URL() + "," + strings.TrimPrefix(b2.URL(), "pulsar://"),
				ConnectionTimeout: 3 * time.Second, OperationTimeout: 30 * time.Second, Logger: keptLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			topic := topicName(t)
			// The subscription exists before the first message: with the
			// default retention (0), a topic keeps only what some
			// subscription has not consumed, as in Pulsar.
			sub, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
			if err != nil {
				t.Fatal(err)
			}
			sub.Close()
			prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 90 * time.Second, MaxPendingMessages: 2000})
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			owner := brokers[ownerOf(t, r)]
			var survivor *testutil.BrokerProc
			for _, b := range brokers {
				if b != owner {
					survivor = b
				}
			}

			const n = 6000
			var mu sync.Mutex
			acked := map[int]pulsar.MessageID{}
			receiptAt := make([]time.Time, 0, n)
			var sendErr error
			var stoppedAt time.Time
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			issued := 0
			go func() {
				// Stop the owner while sends are in flight: at least 1,000
				// receipts in and at least 100 sends unanswered.
				testutil.Eventually(t, time.Minute, "sends in flight", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(acked) >= n/6 && issued-len(acked) >= 100
				})
				mu.Lock()
				stoppedAt = time.Now()
				inflight := issued - len(acked)
				mu.Unlock()
				if sig == syscall.SIGKILL {
					// Freeze it first so appends it already sent to the
					// bookies complete there while their receipts never
					// leave: the client must resend them and dedup must
					// drop them.
					owner.Signal(syscall.SIGSTOP)
					time.Sleep(200 * time.Millisecond)
				}
				owner.Signal(sig)
				t.Logf("%s sent to the owner with %d sends unanswered", sig, inflight)
			}()
			for i := 0; i < n; i++ {
				wg.Add(1)
				mu.Lock()
				issued++
				mu.Unlock()
				prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i))}, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					defer wg.Done()
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						sendErr = err
						return
					}
					acked[i] = id
					receiptAt = append(receiptAt, time.Now())
				})
				if i%200 == 0 {
					time.Sleep(10 * time.Millisecond) // keep the stream going for a while
				}
			}
			wg.Wait()
			if sendErr != nil {
				t.Fatalf("a send failed; the client should have recovered by itself: %v", sendErr)
			}
			// How long sends stalled around the stop: the longest silence
			// between receipts after it.
			var stall time.Duration
			prev := stoppedAt
			for _, at := range receiptAt {
				if at.After(stoppedAt) {
					stall = max(stall, at.Sub(prev))
					prev = at
				}
			}
			t.Logf("%s: longest pause in receipts after the stop: %s", sig, stall)

			if got := ownerOf(t, r); got != survivor.ID {
				t.Fatalf("bundle owned by %s after the stop, want %s", got, survivor.ID)
			}
			cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			seen := map[int]int{}
			for len(seen) < n {
				rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
				m, err := cons.Receive(rctx)
				rcancel()
				if err != nil {
					_, st := adminCall(t, "GET", survivor.AdminURL()+"/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/stats", nil)
					ids, _ := ledger.ListLedgers(context.Background(), r.Store)
					var ls []string
					for _, id := range ids {
						if m, err := ledger.ReadMetadata(context.Background(), r.Store, id); err == nil {
							ls = append(ls, fmt.Sprintf("%d:%s last=%d frags=%d", id, m.Meta.State, m.Meta.LastEntryId, len(m.Meta.Fragments)))
						}
					}
					t.Fatalf("received %d distinct of %d: %v\nstats on the new owner: %s\nledgers: %v", len(seen), n, err, st, ls)
				}
				v, _ := strconv.Atoi(string(m.Payload()))
				seen[v]++
				cons.Ack(m)
			}
			// Anything stored twice would arrive within a moment.
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			if m, err := cons.Receive(rctx); err == nil {
				seen[mustAtoi(string(m.Payload()))]++
			}
			rcancel()
			for v, c := range seen {
				if c != 1 {
					t.Fatalf("message %d stored %d times", v, c)
				}
			}
			for i := range acked {
				if seen[i] == 0 {
					t.Fatalf("acknowledged message %d lost", i)
				}
			}
			if b := metric(t, survivor.AdminURL(), "meridian_broker_subscription_backlog_messages"); b != 0 {
				t.Fatalf("backlog metric of the drained subscription: %v", b)
			}
			if c := metric(t, survivor.AdminURL(), "meridian_broker_storage_write_latency_seconds_count"); c <= 0 {
				t.Fatal("storage latency histogram empty on the broker that took the writes")
			}
			if sig == syscall.SIGKILL {
				// How many of the client's own resends the new owner dropped
				// depends on where the kill caught the appends; log it.
				natural := metric(t, survivor.AdminURL(), "meridian_broker_dedup_dropped_total")
				t.Logf("client resends dropped by dedup on the new owner: %v", natural)
				// Deterministically: the producer's dedup state moved with the
				// topic. The same producer name resending an old sequence id to
				// the new owner is answered without storing anything.
				name := prod.Name()
				prod.Close()
				raw := dialRaw(t, survivor.URL())
				raw.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
					Topic: proto.String(topic), ProducerId: proto.Uint64(7), RequestId: proto.Uint64(70), ProducerName: proto.String(name)}})
				ps := raw.next().Cmd
				if ps.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
					t.Fatalf("raw producer as %s: %v %v", name, ps.GetType(), ps.GetError())
				}
				if last := ps.GetProducerSuccess().GetLastSequenceId(); last < n-1 {
					t.Fatalf("new owner's last sequence id for %s is %d, want >= %d", name, last, n-1)
				}
				raw.write(sendFrame(t, 7, 42, []byte("a resend of message 42")))
				for {
					if f := raw.next(); f.Cmd.GetType() == pb.BaseCommand_SEND_RECEIPT {
						break
					}
				}
				if d := metric(t, survivor.AdminURL(), "meridian_broker_dedup_dropped_total"); d != natural+1 {
					t.Fatalf("dedup counter %v after an explicit resend, want %v", d, natural+1)
				}
				rctx, rcancel := context.WithTimeout(ctx, time.Second)
				if m, err := cons.Receive(rctx); err == nil {
					t.Fatalf("the resend was stored again: %q", m.Payload())
				}
				rcancel()
			} else if stall > 2*time.Second {
				t.Fatalf("graceful hand-off: receipts paused %s after SIGTERM", stall)
			}
		})
	}
}

func mustAtoi(s string) int {
	v, _ := strconv.Atoi(s)
	return v
}
