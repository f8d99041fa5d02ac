package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// The tagged produce-and-replicate measurement: every message carries
// its sequence number and send time, and west's consumers record its
// arrival.

// tagRec holds, by sequence number, each message's send time, its receipt
// in east and its arrival in west (unix ns; 0 = none).
type tagRec struct {
	mu                  sync.Mutex
	send, receipt, recv []int64
	dups                int
	lastRecv            int64
	received            int
}

func (t *tagRec) grow(seq int) {
	for len(t.send) <= seq {
		n := max(1024, 2*len(t.send))
		t.send = append(t.send, make([]int64, n-len(t.send))...)
		t.receipt = append(t.receipt, make([]int64, n-len(t.receipt))...)
		t.recv = append(t.recv, make([]int64, n-len(t.recv))...)
	}
}

// tagged produces into topics (one producer each, in east) at rate
// (0 = unthrottled) for o.Duration with consumers in west subscribed
// first, waits until west received every acknowledged message (or 10 s
// pass without one), and fills row: the produce result, lag and e2e, the
// missing and duplicate counts, and row.replRate (messages received in
// west ÷ time from the first send to the last arrival).
func (g *geoDeployment) tagged(ctx context.Context, row *geoRow, topics []string, rate float64, o GeorepOptions) error {
	type side struct {
		client pulsar.Client
		prod   pulsar.Producer
	}
	sides := make([]*side, len(topics))
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
	for i, topic := range topics {
		c, err := newPulsarClient(g.east.ServiceURL)
		if err != nil {
			return err
		}
		sides[i] = &side{client: c}
		p, err := c.CreateProducer(pulsar.ProducerOptions{
			Topic: topic, BatchingMaxPublishDelay: batchDelay, MaxPendingMessages: o.MaxPending, SendTimeout: 30 * time.Second,
		})
		if err != nil {
			return fmt.Errorf("bench: create producer on %s: %w", topic, err)
		}
		sides[i].prod = p
	}
	// West's consumers, from the earliest message (the warm-up's).
	var cons *consumers
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		cons, err = subscribe(g.west.ServiceURL, consumeSpec{Topics: topics, Sub: "bench", Earliest: true})
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("bench: consumer in west: %w", err)
	}
	defer cons.unsubscribe()

	rec := &tagRec{}
	var warm atomic.Int64 // warm-up messages received in west
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, con := range cons.cons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case m := <-con.Chan():
					now := time.Now().UnixNano()
					_ = con.Ack(m)
					pl := m.Payload()
					if len(pl) < 16 {
						continue
					}
					seq := int64(binary.BigEndian.Uint64(pl))
					if seq < 0 {
						warm.Add(1)
						continue
					}
					rec.mu.Lock()
					rec.grow(int(seq))
					if rec.recv[seq] != 0 {
						rec.dups++
					} else {
						rec.recv[seq] = now
						rec.received++
						rec.lastRecv = now
					}
					rec.mu.Unlock()
				case <-done:
					return
				}
			}
		}()
	}
	stopConsumers := func() {
		select {
		case <-done:
		default:
			close(done)
			wg.Wait()
		}
	}
	defer stopConsumers()

	msg := func(seq int64) *pulsar.ProducerMessage {
		b := make([]byte, o.Size)
		binary.BigEndian.PutUint64(b, uint64(seq))
		binary.BigEndian.PutUint64(b[8:], uint64(time.Now().UnixNano()))
		for i := 16; i < len(b); i++ {
			b[i] = byte(i*31 + 7)
		}
		return &pulsar.ProducerMessage{Payload: b}
	}
	// Warm up: one message per topic until west has them all (the
	// replication streams are open).
	for _, sd := range sides {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := sd.prod.Send(sctx, msg(-1))
		cancel()
		if err != nil {
			return fmt.Errorf("bench: warm-up send: %w", err)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); warm.Load() < int64(len(sides)); {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the warm-up message did not reach west within 60 s")
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}

	admins := g.brokerAdmins()
	histsBefore := scrapeLagHists(admins)
	var seqs atomic.Int64
	var mu sync.Mutex
	res := Result{}
	perRate := rate / float64(len(sides))
	var pwg sync.WaitGroup
	start := time.Now()
	var lastReceipt int64
	for _, sd := range sides {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			var inflight sync.WaitGroup
			send := func() {
				seq := seqs.Add(1) - 1
				m := msg(seq)
				t := time.Now()
				rec.mu.Lock()
				rec.grow(int(seq))
				rec.send[seq] = t.UnixNano()
				rec.mu.Unlock()
				inflight.Add(1)
				sd.prod.SendAsync(ctx, m, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					now := time.Now()
					mu.Lock()
					if err != nil {
						res.Errors++
						if res.FirstErr == nil {
							res.FirstErr = err
						}
					} else {
						res.Ops++
						res.Lat = append(res.Lat, now.Sub(t))
						lastReceipt = max(lastReceipt, now.UnixNano())
					}
					mu.Unlock()
					if err == nil {
						rec.mu.Lock()
						rec.receipt[seq] = now.UnixNano()
						rec.mu.Unlock()
					}
					inflight.Done()
				})
			}
			sent := 0
			for ctx.Err() == nil {
				el := time.Since(start)
				if el >= o.Duration {
					break
				}
				if perRate == 0 {
					send()
					continue
				}
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
	pwg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	mu.Lock()
	res.Elapsed = time.Duration(lastReceipt - start.UnixNano())
	res.Bytes = int64(res.Ops) * int64(o.Size)
	mu.Unlock()
	// Wait for west: every acknowledged message, or 10 s without one.
	for {
		rec.mu.Lock()
		n, last := rec.received, rec.lastRecv
		rec.mu.Unlock()
		if n >= res.Ops || time.Since(time.Unix(0, max(last, lastReceipt))) > 10*time.Second || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopConsumers()
	if err := ctx.Err(); err != nil {
		return err
	}
	row.hists = scrapeLagHists(admins).sub(histsBefore)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	n := int(seqs.Load())
	for i := 0; i < n; i++ {
		if rec.receipt[i] == 0 {
			continue
		}
		if rec.recv[i] == 0 {
			row.missing++
			continue
		}
		row.lag = append(row.lag, time.Duration(rec.recv[i]-rec.receipt[i]))
		row.e2e = append(row.e2e, time.Duration(rec.recv[i]-rec.send[i]))
	}
	row.dups = rec.dups
	row.r = res
	if rec.received > 0 {
		row.replRate = float64(rec.received) / time.Duration(rec.lastRecv-start.UnixNano()).Seconds()
		// West's rate while east was still producing, and the catch-up.
		during := 0
		for i := 0; i < n; i++ {
			if rec.recv[i] != 0 && rec.recv[i] <= lastReceipt {
				during++
			}
		}
		row.replDuring = float64(during) / res.Elapsed.Seconds()
		row.catchUp = time.Duration(max(0, rec.lastRecv-lastReceipt))
	}
	return nil
}
