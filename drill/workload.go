package drill

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/meridian-mq/meridian/drill/check"
)

// recorder keeps the workload's history and writes it as it happens:
// receipts.jsonl (every send's outcome, written when the receipt or the
// error arrives) and deliveries.jsonl (every message received).
type recorder struct {
	mu         sync.Mutex
	attempts   map[string][]check.Attempt // producer → by seq
	deliveries []check.Delivery
	receipts   *jsonl
	delivered  *jsonl
	acked      atomic.Int64
	received   atomic.Int64
	failed     atomic.Int64
}

type jsonl struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

func newJSONL(path string) (*jsonl, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &jsonl{f: f, w: bufio.NewWriter(f)}, nil
}

func (j *jsonl) write(v any) {
	b, _ := json.Marshal(v)
	j.mu.Lock()
	j.w.Write(b)
	j.w.WriteByte('\n')
	j.mu.Unlock()
}

func (j *jsonl) flush() {
	j.mu.Lock()
	j.w.Flush()
	j.mu.Unlock()
}

func (j *jsonl) close() error {
	j.flush()
	return j.f.Close()
}

func newRecorder(dir string) (*recorder, error) {
	r, err := newJSONL(dir + "/receipts.jsonl")
	if err != nil {
		return nil, err
	}
	d, err := newJSONL(dir + "/deliveries.jsonl")
	if err != nil {
		r.close()
		return nil, err
	}
	return &recorder{attempts: map[string][]check.Attempt{}, receipts: r, delivered: d}, nil
}

func (r *recorder) close() {
	r.receipts.close()
	r.delivered.close()
}

// sent registers an attempt and returns its seq.
func (r *recorder) sent(a check.Attempt) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	a.Seq = int64(len(r.attempts[a.Producer]))
	r.attempts[a.Producer] = append(r.attempts[a.Producer], a)
	return a.Seq
}

func (r *recorder) receipt(producer string, seq int64, id pulsar.MessageID, err error, at time.Time) {
	r.mu.Lock()
	a := &r.attempts[producer][seq]
	if err != nil {
		a.Err = err.Error()
	} else {
		a.AckedAt, a.MsgID = at, msgID(id)
	}
	rec := *a
	r.mu.Unlock()
	if err != nil {
		r.failed.Add(1)
	} else {
		r.acked.Add(1)
	}
	r.receipts.write(rec)
}

func (r *recorder) delivery(d check.Delivery) {
	r.mu.Lock()
	r.deliveries = append(r.deliveries, d)
	r.mu.Unlock()
	r.received.Add(1)
	r.delivered.write(d)
}

func msgID(id pulsar.MessageID) string {
	return fmt.Sprintf("%d:%d:%d", id.LedgerID(), id.EntryID(), id.BatchIdx())
}

// ledgerOf is the ledger of a message id written by msgID.
func ledgerOf(id string) (int64, bool) {
	l, _, ok := strings.Cut(id, ":")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(l, 10, 64)
	return n, err == nil
}

// payload is "PRODUCER|SEQ|KEY|" padded to size.
func payload(producer string, seq int64, key string, size int) []byte {
	b := fmt.Appendf(nil, "%s|%d|%s|", producer, seq, key)
	for len(b) < size {
		b = append(b, 'x')
	}
	return b
}

func parsePayload(b []byte) (producer string, seq int64, key string, ok bool) {
	parts := strings.SplitN(string(b), "|", 4)
	if len(parts) < 4 {
		return "", 0, "", false
	}
	seq, err := strconv.ParseInt(parts[1], 10, 64)
	return parts[0], seq, parts[2], err == nil
}

// workload runs the drill's clients.
type workload struct {
	s       *Scenario
	rec     *recorder
	urls    map[string]string // region ("" = all) → service URL
	rng     *rand.Rand
	log     *slog.Logger
	clients map[string]pulsar.Client
	prods   []*producer
	conss   []*consumer
	stopP   chan struct{}
	stopC   chan struct{}
	began   time.Time  // when start ran
	mu      sync.Mutex // guards consumer.c of late consumers (close reads it)
	wgP     sync.WaitGroup
	wgC     sync.WaitGroup
}

type producer struct {
	spec ProducerSpec
	p    pulsar.Producer
}

type consumer struct {
	spec ConsumerSpec
	c    pulsar.Consumer
	rng  *rand.Rand
}

// quietLogger discards the Go client's logs, unless
// MERIDIAN_DRILL_CLIENT_LOG names a file to append them to (debugging a
// drill).
func quietLogger() plog.Logger {
	if path := os.Getenv("MERIDIAN_DRILL_CLIENT_LOG"); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			return plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(f, nil)))
		}
	}
	return plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func (w *workload) client(region string) (pulsar.Client, error) {
	if c, ok := w.clients[region]; ok {
		return c, nil
	}
	cs := w.s.Workload.Client
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: w.urls[region], ConnectionTimeout: cs.ConnectionTimeout,
		OperationTimeout: cs.OperationTimeout, KeepAliveInterval: cs.KeepAliveInterval, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	w.clients[region] = c
	return c, nil
}

var subTypes = map[string]pulsar.SubscriptionType{"exclusive": pulsar.Exclusive, "shared": pulsar.Shared, "failover": pulsar.Failover, "key_shared": pulsar.KeyShared}

// open subscribes every consumer (from the earliest message) and creates
// every producer.
func (w *workload) open() error {
	w.clients = map[string]pulsar.Client{}
	for i, cs := range w.s.Workload.Consumers {
		cl, err := w.client(cs.Region)
		if err != nil {
			return err
		}
		c := &consumer{spec: cs, rng: rand.New(rand.NewPCG(w.rng.Uint64(), uint64(i)))}
		w.conss = append(w.conss, c)
		if cs.Start > 0 {
			continue // subscribes later (consume)
		}
		if c.c, err = subscribe(cl, cs); err != nil {
			return fmt.Errorf("consumer %s: %w", cs.Name, err)
		}
	}
	for _, ps := range w.s.Workload.Producers {
		cl, err := w.client(ps.Region)
		if err != nil {
			return err
		}
		o := pulsar.ProducerOptions{Topic: ps.Topic, Name: ps.Name, SendTimeout: w.s.Workload.Client.SendTimeout, DisableBatching: !ps.Batching}
		if ps.Batching {
			o.BatchingMaxPublishDelay = time.Millisecond
		}
		p, err := cl.CreateProducer(o)
		if err != nil {
			return fmt.Errorf("producer %s: %w", ps.Name, err)
		}
		w.prods = append(w.prods, &producer{spec: ps, p: p})
	}
	return nil
}

func (w *workload) start() {
	w.began = time.Now()
	w.stopP, w.stopC = make(chan struct{}), make(chan struct{})
	for _, c := range w.conss {
		w.wgC.Add(1)
		go w.consume(c)
	}
	for _, p := range w.prods {
		w.wgP.Add(1)
		go w.produce(p)
	}
}

func (w *workload) produce(p *producer) {
	defer w.wgP.Done()
	interval := time.Second / time.Duration(p.spec.Rate)
	next := time.Now()
	for {
		next = next.Add(interval)
		if d := time.Until(next); d > 0 {
			select {
			case <-w.stopP:
				return
			case <-time.After(d):
			}
		} else {
			select {
			case <-w.stopP:
				return
			default:
			}
			if d < -time.Second {
				next = time.Now() // blocked (queue full): do not burst to catch up
			}
		}
		key := ""
		if p.spec.Keys > 0 {
			key = "k" + strconv.Itoa(int(w.keyIndex(p.spec.Keys)))
		}
		now := time.Now()
		seq := w.rec.sent(check.Attempt{Producer: p.spec.Name, Topic: p.spec.Topic, Key: key, SentAt: now})
		msg := &pulsar.ProducerMessage{Payload: payload(p.spec.Name, seq, key, p.spec.Size), Key: key}
		name := p.spec.Name
		p.p.SendAsync(context.Background(), msg, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			w.rec.receipt(name, seq, id, err, time.Now())
		})
	}
}

var keyMu sync.Mutex

func (w *workload) keyIndex(n int) int {
	keyMu.Lock()
	defer keyMu.Unlock()
	return w.rng.IntN(n)
}

func subscribe(cl pulsar.Client, cs ConsumerSpec) (pulsar.Consumer, error) {
	return cl.Subscribe(pulsar.ConsumerOptions{Topic: cs.Topic, SubscriptionName: cs.Subscription, Type: subTypes[cs.Type],
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, Name: cs.Name})
}

// subscribeLate subscribes a consumer with a start time when it comes,
// retrying (the faults may still be in effect) until it succeeds or the
// consumers stop.
func (w *workload) subscribeLate(c *consumer, began time.Time) bool {
	select {
	case <-w.stopC:
		return false
	case <-time.After(time.Until(began.Add(c.spec.Start))):
	}
	cl := w.clients[c.spec.Region]
	for {
		cons, err := subscribe(cl, c.spec)
		if err == nil {
			w.mu.Lock()
			c.c = cons
			w.mu.Unlock()
			return true
		}
		w.log.Warn("drill: late consumer: subscribe", "consumer", c.spec.Name, "err", err)
		select {
		case <-w.stopC:
			return false
		case <-time.After(time.Second):
		}
	}
}

func (w *workload) consume(c *consumer) {
	defer w.wgC.Done()
	if c.c == nil && !w.subscribeLate(c, w.began) {
		return
	}
	var pending []pulsar.Message // out-of-order acks: a shuffled window
	ack := func(m pulsar.Message) {
		switch c.spec.Ack {
		case "cumulative":
			c.c.AckCumulative(m)
		case "out-of-order":
			pending = append(pending, m)
			if len(pending) >= 10 {
				i := c.rng.IntN(len(pending))
				c.c.Ack(pending[i])
				pending = append(pending[:i], pending[i+1:]...)
			}
		default:
			c.c.Ack(m)
		}
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		m, err := c.c.Receive(ctx)
		cancel()
		if err == nil {
			// Recorded before anything else: a message taken off the
			// queue is not delivered again.
			prod, seq, key, ok := parsePayload(m.Payload())
			if ok {
				w.rec.delivery(check.Delivery{Consumer: c.spec.Name, Subscription: c.spec.Subscription, Topic: c.spec.Topic,
					Producer: prod, Seq: seq, Key: key, At: time.Now(), MsgID: msgID(m.ID())})
			}
			ack(m)
		} else if len(pending) > 0 {
			// Nothing came for 300 ms: acknowledge the window, shuffled,
			// as an application does that acknowledges what it finished
			// (a planned switchover stops dispatch and waits for every
			// delivery to be acknowledged; a window held for the next
			// message would never be).
			c.rng.Shuffle(len(pending), func(i, j int) { pending[i], pending[j] = pending[j], pending[i] })
			for _, m := range pending {
				c.c.Ack(m)
			}
			pending = pending[:0]
		}
		select {
		case <-w.stopC:
			for _, m := range pending {
				c.c.Ack(m)
			}
			return
		default:
		}
	}
}

// stopProducing stops the producers and waits (up to timeout) for the
// receipts of what they sent.
func (w *workload) stopProducing(timeout time.Duration) {
	close(w.stopP)
	w.wgP.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, p := range w.prods {
		p.p.FlushWithCtx(ctx)
	}
}

func (w *workload) stopConsuming() {
	close(w.stopC)
	w.wgC.Wait()
}

func (w *workload) close() {
	for _, p := range w.prods {
		p.p.Close()
	}
	w.mu.Lock()
	for _, c := range w.conss {
		if c.c != nil {
			c.c.Close()
		}
	}
	w.mu.Unlock()
	for _, c := range w.clients {
		c.Close()
	}
}

// missing counts acknowledged messages not yet delivered to some
// subscription of their topic.
func (r *recorder) missing(subs []check.Sub) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	type k struct {
		topic, sub, producer string
		seq                  int64
	}
	got := map[k]bool{}
	for _, d := range r.deliveries {
		got[k{d.Topic, d.Subscription, d.Producer, d.Seq}] = true
	}
	byTopic := map[string][]string{} // topic → its subscriptions
	for _, s := range subs {
		byTopic[s.Topic] = append(byTopic[s.Topic], s.Name)
	}
	n := 0
	for _, as := range r.attempts {
		for _, a := range as {
			if a.AckedAt.IsZero() {
				continue
			}
			for _, sub := range byTopic[a.Topic] {
				if !got[k{a.Topic, sub, a.Producer, a.Seq}] {
					n++
				}
			}
		}
	}
	return n
}
