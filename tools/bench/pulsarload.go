package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/meridian-mq/meridian/internal/clientopts"
)

// The load generator: pulsar-client-go (unmodified) driven the way
// pulsar-client-go's perf tool drives it — SendAsync in a loop, optionally
// paced — but recording every latency and counting errors instead of
// exiting on the first.

// loadSpec is one produce measurement.
type loadSpec struct {
	Topics     []string // one producer, on its own client and connection, per topic
	Batching   bool     // BatchingMaxPublishDelay 1 ms, 1000 messages / 128 KiB per batch (the client's defaults)
	Rate       float64  // total messages/s over all producers; 0 = unthrottled
	Duration   time.Duration
	Size       int // payload bytes
	MaxPending int // MaxPendingMessages per producer
	BatchDelay time.Duration
	// Sync: one message at a time (Send waits for the receipt), as
	// `nats bench js pub sync` publishes; latency is Send's duration.
	Sync bool
}

func quietPulsarLogger() plog.Logger {
	return plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func newPulsarClient(serviceURL string) (pulsar.Client, error) {
	o := pulsar.ClientOptions{URL: serviceURL, Logger: quietPulsarLogger()}
	clientopts.Apply(&o) // what the README recommends and the drills use
	return pulsar.NewClient(o)
}

// produce runs one producer per topic, each on its own client (so each has
// its own TCP connection: the broker stops reading a connection when one
// producer on it has its pending sends full), for s.Duration, then waits
// for every outstanding send's callback. Latency runs from the SendAsync
// call (which blocks while MaxPendingMessages are outstanding) to its
// callback. Elapsed runs from the first send to the last callback.
func produce(ctx context.Context, serviceURL string, s loadSpec) (Result, error) {
	type side struct {
		client pulsar.Client
		prod   pulsar.Producer
		mu     sync.Mutex
		lat    []time.Duration
		ok     int
		errs   int
		first  error
		// Receipts come back in send order, so the storage entries written
		// are the changes of (ledger, entry) between successive receipts
		// (a batch's messages share one entry).
		entries       int64
		ledger, entry int64
	}
	sides := make([]*side, len(s.Topics))
	defer func() {
		for _, sd := range sides {
			if sd == nil {
				continue
			}
			if sd.prod != nil {
				sd.prod.Close()
			}
			sd.client.Close()
		}
	}()
	for i, topic := range s.Topics {
		c, err := newPulsarClient(serviceURL)
		if err != nil {
			return Result{}, err
		}
		sides[i] = &side{client: c, ledger: -1, entry: -1}
		p, err := c.CreateProducer(pulsar.ProducerOptions{
			Topic:                   topic,
			DisableBatching:         !s.Batching,
			BatchingMaxPublishDelay: s.BatchDelay,
			MaxPendingMessages:      s.MaxPending,
			SendTimeout:             30 * time.Second,
		})
		if err != nil {
			return Result{}, fmt.Errorf("bench: create producer on %s: %w", topic, err)
		}
		sides[i].prod = p
	}
	payload := make([]byte, s.Size)
	for i := range payload {
		payload[i] = byte(i*31 + 7)
	}
	perRate := s.Rate / float64(len(sides))
	var wg sync.WaitGroup
	start := time.Now()
	for _, sd := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var inflight sync.WaitGroup
			send := func() {
				inflight.Add(1)
				t := time.Now()
				sd.prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					lat := time.Since(t)
					sd.mu.Lock()
					if err != nil {
						sd.errs++
						if sd.first == nil {
							sd.first = err
						}
					} else {
						sd.ok++
						sd.lat = append(sd.lat, lat)
						if l, e := id.LedgerID(), id.EntryID(); l != sd.ledger || e != sd.entry {
							sd.entries++
							sd.ledger, sd.entry = l, e
						}
					}
					sd.mu.Unlock()
					inflight.Done()
				})
			}
			sent := 0
			for ctx.Err() == nil {
				el := time.Since(start)
				if el >= s.Duration {
					break
				}
				if s.Sync {
					t := time.Now()
					_, err := sd.prod.Send(ctx, &pulsar.ProducerMessage{Payload: payload})
					lat := time.Since(t)
					sd.mu.Lock()
					if err != nil {
						sd.errs++
						if sd.first == nil {
							sd.first = err
						}
					} else {
						sd.ok++
						sd.entries++
						sd.lat = append(sd.lat, lat)
					}
					sd.mu.Unlock()
					continue
				}
				if perRate == 0 {
					send()
					continue
				}
				// Paced: send what is due by now, then sleep until the next
				// message is due (bursts of ~1 ms worth at most).
				for due := int(el.Seconds()*perRate) + 1; sent < due; sent++ {
					send()
				}
				next := time.Duration(float64(sent) / perRate * float64(time.Second))
				if w := next - time.Since(start); w > 0 {
					time.Sleep(w)
				}
			}
			inflight.Wait()
		}()
	}
	wg.Wait()
	res := Result{Elapsed: time.Since(start)}
	var firstErr error
	for _, sd := range sides {
		res.Ops += sd.ok
		res.Errors += sd.errs
		res.Entries += sd.entries
		res.Lat = append(res.Lat, sd.lat...)
		if firstErr == nil {
			firstErr = sd.first
		}
	}
	res.Bytes = int64(res.Ops) * int64(s.Size)
	res.FirstErr = firstErr
	return res, ctx.Err()
}

// consumeSpec is one consume measurement.
type consumeSpec struct {
	Topics   []string // one Exclusive consumer, on its own client, per topic
	Sub      string
	Earliest bool
	// Stop after Duration from start (0 = no limit), or after Stall without
	// a message, or once want (set by the caller, maybe later) messages
	// arrived over all topics.
	Duration time.Duration
	Stall    time.Duration
}

type consumers struct {
	clients []pulsar.Client
	cons    []pulsar.Consumer
}

func (c *consumers) close() {
	for _, x := range c.cons {
		x.Close()
	}
	for _, x := range c.clients {
		x.Close()
	}
}

// unsubscribe deletes the subscriptions and closes: a durable subscription
// left behind with a backlog would keep the broker busy (see RunBroker).
func (c *consumers) unsubscribe() {
	for _, x := range c.cons {
		_ = x.Unsubscribe()
		x.Close()
	}
	for _, x := range c.clients {
		x.Close()
	}
}

// subscribe opens the consumers: Exclusive, ReceiverQueueSize 1000.
func subscribe(serviceURL string, s consumeSpec) (*consumers, error) {
	cs := &consumers{}
	for _, topic := range s.Topics {
		c, err := newPulsarClient(serviceURL)
		if err != nil {
			cs.close()
			return nil, err
		}
		cs.clients = append(cs.clients, c)
		pos := pulsar.SubscriptionPositionLatest
		if s.Earliest {
			pos = pulsar.SubscriptionPositionEarliest
		}
		con, err := c.Subscribe(pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: s.Sub, Type: pulsar.Exclusive,
			ReceiverQueueSize: 1000, SubscriptionInitialPosition: pos,
		})
		if err != nil {
			cs.close()
			return nil, fmt.Errorf("bench: subscribe %s: %w", topic, err)
		}
		cs.cons = append(cs.cons, con)
	}
	return cs, nil
}

// receive acks every message (the client groups acks: 1000 or 100 ms) and
// records end-to-end latency from the message's publish time (set by the
// client when a batch opens; millisecond resolution) to its receipt. It
// returns when one of s's stop conditions holds; Elapsed runs from start to
// the last receipt.
func (c *consumers) receive(ctx context.Context, s consumeSpec, start time.Time, want *atomic.Int64) Result {
	var mu sync.Mutex
	res := Result{}
	last := start
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, con := range c.cons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case m := <-con.Chan():
					now := time.Now()
					_ = con.Ack(m)
					e2e := now.Sub(m.PublishTime())
					mu.Lock()
					res.Ops++
					res.Bytes += int64(len(m.Payload()))
					res.Lat = append(res.Lat, e2e)
					last = now
					mu.Unlock()
				case <-done:
					return
				}
			}
		}()
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for stop := false; !stop; {
		select {
		case <-ctx.Done():
			stop = true
		case now := <-tick.C:
			mu.Lock()
			n, l := res.Ops, last
			mu.Unlock()
			w := want.Load()
			stop = (w > 0 && int64(n) >= w) || now.Sub(l) > s.Stall || (s.Duration > 0 && now.Sub(start) >= s.Duration)
		}
	}
	close(done)
	wg.Wait()
	res.Elapsed = last.Sub(start)
	return res
}
