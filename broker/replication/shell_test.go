package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/internal/clock/fakeclock"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
	"github.com/meridian-mq/meridian/replicator/transport"
)

// The shells obey their cores (DESIGN.md, "A shell obeys its core"): a
// sender and the sync receipts sleep until their core's WakeAt or an
// input, on an injected clock. These tests drive them on a fake clock
// whose timers fire exactly at their deadline: a shell that polled, or
// woke before its core asked, would fire a timer the tests advance the
// clock to just short of the deadline, and fail. No test sleeps; a
// 10 s guard only turns a hang into a failure.

var t0 = time.Unix(1_700_000_000, 0)

const guard = 10 * time.Second

// testLog is the topic's Log: its policies and, for sync receipts, its
// end. The rest of Log is not used by the shells under test.
type testLog struct {
	Log
	pol meta.Policies
}

func (l *testLog) Policies() meta.Policies { return l.pol }
func (l *testLog) End() (mledger.Position, uint64, int64) {
	return mledger.Position{Ledger: -1, Entry: -1}, 0, 0
}
func (l *testLog) Closed() bool { return false }

// noActive is a failover shell that knows no record.
type noActive struct{}

func (noActive) ActiveRegion(string, meta.Policies) string            { return "" }
func (noActive) Record(string, meta.Policies) meta.FailoverRecord     { return meta.FailoverRecord{} }
func (noActive) FailedOver(string, meta.Policies) meta.FailoverRecord { return meta.FailoverRecord{} }
func (noActive) RegionDown(string) bool                               { return false }

// memLog is a sender's topic in memory: local entries of region east in
// ledger 1.
type memLog struct {
	mu      sync.Mutex
	entries []replicator.Entry
	bytes   int64
	cursor  replicator.Cursor
	markers []bool // SetBacklogged calls
	subs    int    // Subscriptions calls
}

func (l *memLog) add(n, size int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range n {
		seq := uint64(len(l.entries) + 1)
		pos := replicator.Position{Ledger: 1, Entry: int64(seq - 1)}
		l.entries = append(l.entries, replicator.Entry{Pos: pos, Origin: "east", OriginSeq: seq, PublishMs: t0.UnixMilli(),
			OriginID: replicator.MessageID{Ledger: 1, Entry: pos.Entry, Batch: -1}, Data: make([]byte, size)})
		l.bytes += int64(size)
	}
}

func (l *memLog) End() replicator.LogEnd {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) == 0 {
		return replicator.LogEnd{Pos: replicator.Earliest}
	}
	return replicator.LogEnd{Pos: l.entries[len(l.entries)-1].Pos, Seq: uint64(len(l.entries)), Bytes: l.bytes}
}

func (l *memLog) Read(_ context.Context, req replicator.ReadRequest, _ uint64) ([]replicator.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []replicator.Entry
	for _, e := range l.entries {
		if req.After.Less(e.Pos) && len(out) < req.MaxEntries {
			out = append(out, e)
		}
	}
	return out, nil
}

func (l *memLog) SaveCursor(c replicator.Cursor) { l.mu.Lock(); l.cursor = c; l.mu.Unlock() }
func (l *memLog) FlushCursor(context.Context) error {
	return nil
}
func (l *memLog) HoldRetention(bool) {}
func (l *memLog) Start(context.Context, meta.ReplicationPolicy) (replicator.Cursor, error) {
	return replicator.Cursor{}, errors.New("memLog: no resync")
}
func (l *memLog) Subscriptions(map[string]subSent, time.Time) []*replpb.SubscriptionUpdate {
	l.mu.Lock()
	l.subs++
	l.mu.Unlock()
	return nil
}
func (l *memLog) SetBacklogged(_ context.Context, b bool) error {
	l.mu.Lock()
	l.markers = append(l.markers, b)
	l.mu.Unlock()
	return nil
}

// memStream is a stream that keeps what is sent; the test answers.
type memStream struct {
	mu     sync.Mutex
	sent   []replicator.Batch
	acks   chan replicator.Ack
	closed chan struct{}
	once   sync.Once
}

func newMemStream() *memStream {
	return &memStream{acks: make(chan replicator.Ack, 16), closed: make(chan struct{})}
}

func (s *memStream) SendBatch(b replicator.Batch) error {
	s.mu.Lock()
	s.sent = append(s.sent, b)
	s.mu.Unlock()
	return nil
}
func (s *memStream) SendSubscription(*replpb.SubscriptionUpdate) error { return nil }
func (s *memStream) Recv() (replicator.Ack, error) {
	select {
	case a := <-s.acks:
		return a, nil
	case <-s.closed:
		return replicator.Ack{}, errors.New("memStream: closed")
	}
}
func (s *memStream) Addr() string { return "mem" }
func (s *memStream) Close()       { s.once.Do(func() { close(s.closed) }) }

// batches returns the sequence numbers of every batch sent so far.
func (s *memStream) batches() [][]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]uint64
	for _, b := range s.sent {
		var seqs []uint64
		for _, e := range b.Entries {
			seqs = append(seqs, e.OriginSeq)
		}
		out = append(out, seqs)
	}
	return out
}

func (s *memStream) last() replicator.Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[len(s.sent)-1]
}

// shellEnv is a service of region east on a fake clock, with the shells'
// sleeps reported on idles (each shell waits until the test takes it).
type shellEnv struct {
	clk   *fakeclock.Clock
	svc   *Service
	idles chan time.Time
}

func newShellEnv(t *testing.T) *shellEnv {
	t.Helper()
	e := &shellEnv{clk: fakeclock.New(t0), idles: make(chan time.Time)}
	e.svc = NewService(Config{Cluster: "east", BrokerID: "b1", Logger: slog.New(slog.DiscardHandler),
		Metrics: Metrics{Alerts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "alerts"}, []string{"kind"})}}, nil, noActive{})
	e.svc.clock = e.clk
	report := func(stopped <-chan struct{}, wake time.Time) {
		select {
		case e.idles <- wake:
		case <-stopped:
		}
	}
	e.svc.hooks.senderIdle = func(rs *replSender, wake time.Time) { report(rs.ctx.Done(), wake) }
	e.svc.hooks.syncIdle = func(ss *syncState, wake time.Time) { report(ss.stop, wake) }
	t.Cleanup(e.svc.Close)
	return e
}

// sleep waits for a shell to go to sleep and returns when it wakes next.
func (e *shellEnv) sleep(t *testing.T) time.Time {
	t.Helper()
	select {
	case w := <-e.idles:
		return w
	case <-time.After(guard):
		t.Fatal("the shell did not go to sleep")
		return time.Time{}
	}
}

// advanceTo moves the clock to at and returns how many timers fired.
func (e *shellEnv) advanceTo(at time.Time) int { return e.clk.Advance(at.Sub(e.clk.Now())) }

func (e *shellEnv) topic(pol meta.Policies) *Topic {
	tn, err := meta.ParseTopic("persistent://t/ns/x")
	if err != nil {
		panic(err)
	}
	return e.svc.NewTopic(tn, nil, &testLog{pol: pol})
}

// activeActive: no subscription positions travel, so the sender has no
// deadline of its own while the region keeps up.
var activeActive = meta.Policies{ReplicationClusters: []string{"east", "west"},
	Replication: &meta.ReplicationPolicy{Failover: meta.FailoverActiveActive}}

// sender starts a sender towards west over l, dialling st.
func (e *shellEnv) sender(t *testing.T, top *Topic, cfg replicator.SenderConfig, l *memLog, st *memStream) *replSender {
	t.Helper()
	rs, err := top.newSender("west", cfg, replicator.InitialCursor(replicator.Earliest, 0, 0), l,
		func(context.Context) (stream, error) { return st, nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.stop(); st.Close() })
	return rs
}

func testShellConfig() replicator.SenderConfig {
	cfg := replicator.DefaultSenderConfig("east", "west")
	cfg.AckTimeout = 5 * time.Second
	cfg.BackoffInitial = 100 * time.Millisecond
	cfg.BackoffMax = time.Second
	return cfg
}

func wantBatches(t *testing.T, st *memStream, want string) {
	t.Helper()
	if got := fmt.Sprint(st.batches()); got != want {
		t.Fatalf("batches sent %s, want %s", got, want)
	}
}

// "Shells obey their cores": a sender whose batch is not acknowledged
// sleeps until the core's ack timeout, then until the end of the backoff,
// and resends exactly then — not a nanosecond before; once the region
// caught up it sleeps until the backlog marker is due to be cleared, and
// then without any wake-up time: no ticker.
func TestSenderShellResendsAtTheCoresWakeAt(t *testing.T) {
	e := newShellEnv(t)
	l, st := &memLog{}, newMemStream()
	l.add(1, 10)
	cfg := testShellConfig()
	rs := e.sender(t, e.topic(activeActive), cfg, l, st)
	go rs.run()

	wake := e.sleep(t)
	wantBatches(t, st, "[[1]]")
	if want := t0.Add(cfg.AckTimeout); !wake.Equal(want) {
		t.Fatalf("asleep until %v, want the ack timeout %v", wake.Sub(t0), want.Sub(t0))
	}
	if n := e.advanceTo(wake.Add(-time.Nanosecond)); n != 0 {
		t.Fatalf("%d timers fired before the ack timeout", n)
	}
	if n := e.advanceTo(wake); n != 1 {
		t.Fatalf("%d timers fired at the ack timeout, want 1", n)
	}
	wake = e.sleep(t)
	wantBatches(t, st, "[[1]]") // timed out: backing off, nothing resent yet
	if want := t0.Add(cfg.AckTimeout + cfg.BackoffInitial); !wake.Equal(want) {
		t.Fatalf("asleep until %v, want the end of the backoff %v", wake.Sub(t0), want.Sub(t0))
	}
	if n := e.advanceTo(wake.Add(-time.Nanosecond)); n != 0 {
		t.Fatalf("%d timers fired before the end of the backoff", n)
	}
	e.advanceTo(wake)
	resentAt := wake
	wake = e.sleep(t)
	wantBatches(t, st, "[[1] [1]]")
	// The status was published 100 ms ago (at the ack timeout): it is
	// published again statusEvery after that, then the sender sleeps until
	// the resend's ack timeout.
	if want := t0.Add(cfg.AckTimeout + statusEvery); !wake.Equal(want) {
		t.Fatalf("asleep until %v after the resend, want the status's %v", wake.Sub(t0), want.Sub(t0))
	}
	e.advanceTo(wake)
	wake = e.sleep(t)
	wantBatches(t, st, "[[1] [1]]")
	if want := resentAt.Add(cfg.AckTimeout); !wake.Equal(want) {
		t.Fatalf("asleep until %v after the resend, want its ack timeout %v", wake.Sub(t0), want.Sub(t0))
	}

	// The reply is an input: the sender wakes for it, with no timer.
	b := st.last()
	st.acks <- replicator.Ack{Origin: "east", BatchID: b.ID, Stream: b.Stream, Through: 1}
	wake = e.sleep(t)
	if want := e.clk.Now().Add(markerIdle); !wake.Equal(want) {
		t.Fatalf("caught up, asleep until %v, want the backlog marker's clearing %v", wake.Sub(t0), want.Sub(t0))
	}
	if n := e.advanceTo(wake.Add(-time.Nanosecond)); n != 0 {
		t.Fatalf("%d timers fired before the marker is due", n)
	}
	e.advanceTo(wake)
	if wake = e.sleep(t); !wake.IsZero() {
		t.Fatalf("idle and caught up, asleep until %v, want no wake-up time", wake.Sub(t0))
	}
	if n := e.clk.Advance(time.Hour); n != 0 {
		t.Fatalf("an idle sender's timer fired %d times in an hour", n)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if fmt.Sprint(l.markers) != "[true false]" || l.cursor.Seq != 1 {
		t.Fatalf("markers %v (want set, then cleared), cursor %v", l.markers, l.cursor)
	}
}

// A rate-limited sender sleeps until the limiter's refill time and sends
// the next batch exactly then.
func TestSenderShellRateLimitedWakesAtTheLimitersTime(t *testing.T) {
	e := newShellEnv(t)
	l, st := &memLog{}, newMemStream()
	l.add(3, 600)
	cfg := testShellConfig()
	cfg.BatchMaxEntries = 1
	// 1000 bytes a second, a full bucket at t0: the first 600-byte batch
	// goes, the second lacks 200 bytes (200 ms), the third 600 (600 ms).
	cfg.Limiter = replicator.NewTokenBucket(replicator.RateLimit{BytesPerSecond: 1000}, t0)
	rs := e.sender(t, e.topic(activeActive), cfg, l, st)
	go rs.run()

	for i, want := range []time.Duration{200 * time.Millisecond, 800 * time.Millisecond} {
		wake := e.sleep(t)
		wantBatches(t, st, fmt.Sprint([][]uint64{{1}, {2}, {3}}[:i+1]))
		if !wake.Equal(t0.Add(want)) {
			t.Fatalf("asleep until %v, want the limiter's %v", wake.Sub(t0), want)
		}
		if n := e.advanceTo(wake.Add(-time.Nanosecond)); n != 0 {
			t.Fatalf("%d timers fired before the limiter's time", n)
		}
		e.advanceTo(wake)
	}
	wake := e.sleep(t)
	wantBatches(t, st, "[[1] [2] [3]]")
	if !wake.Equal(t0.Add(cfg.AckTimeout)) {
		t.Fatalf("asleep until %v, want the first batch's ack timeout %v", wake.Sub(t0), cfg.AckTimeout)
	}
}

// step is the loop's body, testable on its own: in an active-standby
// namespace with a stream open it wakes for the subscriptions' positions
// every subSyncEvery (a consumer's ack reaches no sender: they are
// polled), elsewhere only for its core.
func TestSenderStepPollsSubscriptionsOnlyWhereTheyTravel(t *testing.T) {
	for _, tc := range []struct {
		name string
		pol  meta.Policies
		want time.Duration
	}{
		{"active-standby", meta.Policies{ReplicationClusters: []string{"east", "west"}}, subSyncEvery},
		{"active-active", activeActive, 5 * time.Second}, // the ack timeout
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newShellEnv(t)
			l, st := &memLog{}, newMemStream()
			l.add(1, 10)
			rs := e.sender(t, e.topic(tc.pol), testShellConfig(), l, st)
			defer close(rs.done) // never run: stop waits for this
			if wake := rs.step(t0); !wake.Equal(t0.Add(tc.want)) {
				t.Fatalf("step at t0 wakes at %v, want %v", wake.Sub(t0), tc.want)
			}
			wantBatches(t, st, "[[1]]")
			if l.subs != 1 {
				t.Fatalf("subscriptions asked %d times, want once", l.subs)
			}
			rs.step(t0.Add(subSyncEvery - time.Nanosecond))
			rs.step(t0.Add(subSyncEvery))
			if l.subs != 2 {
				t.Fatalf("subscriptions asked %d times by %v, want twice", l.subs, subSyncEvery)
			}
		})
	}
}

// The sync receipts' goroutine sleeps until the tracker's WakeAt: a
// receipt held for a region that does not answer is released (policy
// degrade) exactly at the sync timeout, not before, and then the
// goroutine sleeps without a wake-up time.
func TestSyncReceiptsWakeAtTheTimeout(t *testing.T) {
	e := newShellEnv(t)
	top := e.topic(meta.Policies{ReplicationClusters: []string{"east", "west"}, Replication: &meta.ReplicationPolicy{
		Mode: meta.ReplicationSync, SyncOnUnreachable: meta.SyncDegrade, SyncTimeoutMs: 1000}})
	top.refreshSync()
	defer top.stopSync()
	if wake := e.sleep(t); !wake.IsZero() {
		t.Fatalf("nothing held, asleep until %v", wake.Sub(t0))
	}
	released := make(chan struct{})
	if !top.Hold(1, func() { close(released) }) {
		t.Fatal("a sync namespace did not hold the receipt")
	}
	wake := e.sleep(t)
	if want := t0.Add(time.Second); !wake.Equal(want) {
		t.Fatalf("holding a receipt, asleep until %v, want the timeout %v", wake.Sub(t0), want.Sub(t0))
	}
	if n := e.advanceTo(wake.Add(-time.Nanosecond)); n != 0 {
		t.Fatalf("%d timers fired before the timeout", n)
	}
	select {
	case <-released:
		t.Fatal("released before the timeout")
	default:
	}
	e.advanceTo(wake)
	if wake := e.sleep(t); !wake.IsZero() {
		t.Fatalf("after the timeout, asleep until %v", wake.Sub(t0))
	}
	select {
	case <-released:
	default:
		t.Fatal("not released at the timeout (degrade)")
	}
	var m dto.Metric
	if err := e.svc.metrics.Alerts.WithLabelValues("sync-degraded").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		n := m.GetCounter().GetValue()
		t.Fatalf("sync-degraded counted %v times", n)
	}
	if n := e.clk.Advance(time.Hour); n != 0 {
		t.Fatalf("an idle sync state's timer fired %d times in an hour", n)
	}
}

// Issue 29: the topic's Status carries the rate its sender sends at
// (entries and bytes a second, on the injected clock), for the
// replication section of the topic's stats.
func TestSenderStatusRateOut(t *testing.T) {
	e := newShellEnv(t)
	l, st := &memLog{}, newMemStream()
	l.add(6, 100)
	// Two of them are not for west (replicate_to): they go as Skip
	// placeholders, which carry no message and count in no rate, as the
	// applier's msgRateIn does not count them either.
	l.mu.Lock()
	for i := 1; i < 6; i += 3 {
		l.entries[i].ReplicateTo = []string{"south"}
	}
	l.mu.Unlock()
	top := e.topic(activeActive)
	rs := e.sender(t, top, testShellConfig(), l, st)
	r := top.replState() // as syncReplication registers a sender it starts
	r.mu.Lock()
	r.senders["west"] = rs
	r.mu.Unlock()
	go rs.run()
	e.sleep(t)
	b := st.last()
	skips := 0
	for _, en := range b.Entries {
		if en.Skip {
			skips++
		}
	}
	if len(b.Entries) != 6 || skips != 2 {
		t.Fatalf("sent %d entries, %d of them placeholders, want 6 and 2", len(b.Entries), skips)
	}
	sts := top.Status()
	if len(sts) != 1 || sts[0].Remote != "west" {
		t.Fatalf("status %+v, want the sender to west", sts)
	}
	// 4 entries at t0, read at t0: over the meter's 1 s minimum span.
	if s := sts[0]; s.MsgRateOut != 4 || s.MsgThroughputOut != float64(b.Bytes()) {
		t.Fatalf("msgRateOut %v msgThroughputOut %v, want 4 and %d", s.MsgRateOut, s.MsgThroughputOut, b.Bytes())
	}
	// Read 2 s later, still in the first 10 s interval: half.
	e.clk.Advance(2 * time.Second)
	if s := top.Status()[0]; s.MsgRateOut != 2 {
		t.Fatalf("2 s later: msgRateOut %v, want 2", s.MsgRateOut)
	}
}

// applyLog is a target topic's Log: replicated entries are persisted at
// once (the callback runs before AppendReplicated returns).
type applyLog struct {
	testLog
	mu       sync.Mutex
	appended int
}

func (l *applyLog) Applied(string) uint64 { return 0 }
func (l *applyLog) AppendReplicated(es []replicator.Entry, done func(error)) {
	l.mu.Lock()
	l.appended += len(es)
	l.mu.Unlock()
	done(nil)
}

// Issue 29: the topic's Status carries the rate the remote region's
// entries are persisted here at (Pulsar's replication.<cluster>.msgRateIn
// and msgThroughputIn, pulsar_replication_rate_in/_throughput_in): the
// entries the applier of that origin appended and their bytes, on the
// injected clock — not a duplicate batch, which appends nothing.
func TestApplierStatusRateIn(t *testing.T) {
	e := newShellEnv(t)
	tn, err := meta.ParseTopic("persistent://t/ns/x")
	if err != nil {
		t.Fatal(err)
	}
	al := &applyLog{testLog: testLog{pol: activeActive}}
	top := e.svc.NewTopic(tn, nil, al)
	// The sender to west, whose Status carries what arrives from west.
	rs := e.sender(t, top, testShellConfig(), &memLog{}, newMemStream())
	r := top.replState()
	r.mu.Lock()
	r.senders["west"] = rs
	r.mu.Unlock()
	go rs.run()
	e.sleep(t)
	if s := top.Status(); len(s) != 1 || s[0].MsgRateIn != 0 || s[0].MsgThroughputIn != 0 {
		t.Fatalf("before any entry from west: %+v, want one status with no inbound rate", s)
	}
	b := replicator.Batch{ID: 1, Origin: "west", Stream: 1}
	var size int
	for i := range 4 {
		data := testMessage(t, i, 100)
		size += len(data)
		b.Entries = append(b.Entries, replicator.Entry{Pos: replicator.Position{Ledger: 9, Entry: int64(i)}, Origin: "west", OriginSeq: uint64(i + 1),
			OriginID: replicator.MessageID{Ledger: 9, Entry: int64(i), Batch: -1}, PublishMs: t0.UnixMilli(), Data: data})
	}
	var mu sync.Mutex
	var acks []replicator.Ack
	rq := transport.NewReplyQueue(func(a replicator.Ack) error { mu.Lock(); acks = append(acks, a); mu.Unlock(); return nil })
	for range 2 { // the second time a duplicate: nothing appended, nothing counted
		if err := top.applyBatch(b, rq); err != nil {
			t.Fatal(err)
		}
	}
	al.mu.Lock()
	appended := al.appended
	al.mu.Unlock()
	if appended != 4 {
		t.Fatalf("appended %d entries, want 4", appended)
	}
	// 4 entries at t0, read at t0: over the meter's 1 s minimum span.
	if s := top.Status()[0]; s.MsgRateIn != 4 || s.MsgThroughputIn != float64(size) {
		t.Fatalf("msgRateIn %v msgThroughputIn %v, want 4 and %d", s.MsgRateIn, s.MsgThroughputIn, size)
	}
	e.clk.Advance(2 * time.Second)
	if s := top.Status()[0]; s.MsgRateIn != 2 || s.MsgThroughputIn != float64(size)/2 {
		t.Fatalf("2 s later: msgRateIn %v msgThroughputIn %v, want 2 and %v", s.MsgRateIn, s.MsgThroughputIn, float64(size)/2)
	}
}

// testMessage is a Pulsar message part (header, CRC32C, metadata) with a
// payload of size bytes, as a producer sends it.
func testMessage(t *testing.T, seq, size int) []byte {
	t.Helper()
	return message(t, &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(uint64(seq)), PublishTime: proto.Uint64(uint64(t0.UnixMilli()))}, make([]byte, size))
}

// Issue 30: another region's entries are checked as the broker checks a
// producer's SEND (header sizes, CRC32C) before they are stored: a batch
// holding one that is not a Pulsar message is refused whole — nothing
// appended, nothing acknowledged, the applier where it was — and the
// sender's resend of intact bytes is then applied.
func TestApplierRefusesEntriesThatAreNotMessages(t *testing.T) {
	e := newShellEnv(t)
	tn, err := meta.ParseTopic("persistent://t/ns/x")
	if err != nil {
		t.Fatal(err)
	}
	al := &applyLog{testLog: testLog{pol: activeActive}}
	top := e.svc.NewTopic(tn, nil, al)
	good := testMessage(t, 1, 50)
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-1] ^= 1
	entryOf := func(i int, data []byte) replicator.Entry {
		return replicator.Entry{Pos: replicator.Position{Ledger: 9, Entry: int64(i)}, Origin: "west", OriginSeq: uint64(i + 1),
			OriginID: replicator.MessageID{Ledger: 9, Entry: int64(i), Batch: -1}, PublishMs: t0.UnixMilli(), Data: data}
	}
	var mu sync.Mutex
	var acks []replicator.Ack
	rq := transport.NewReplyQueue(func(a replicator.Ack) error { mu.Lock(); acks = append(acks, a); mu.Unlock(); return nil })
	for _, c := range []struct {
		name string
		bad  []byte
		want error
	}{
		{"a payload bit flipped", flipped, codec.ErrBadChecksum},
		{"no message header", make([]byte, 50), codec.ErrMalformed},
		{"empty", nil, codec.ErrMalformed},
	} {
		b := replicator.Batch{ID: 1, Origin: "west", Stream: 1, Entries: []replicator.Entry{entryOf(0, good), entryOf(1, c.bad)}}
		if err := top.applyBatch(b, rq); !errors.Is(err, c.want) {
			t.Fatalf("%s: applyBatch: %v, want %v", c.name, err, c.want)
		}
	}
	al.mu.Lock()
	appended := al.appended
	al.mu.Unlock()
	mu.Lock()
	nacks := len(acks)
	mu.Unlock()
	if appended != 0 || nacks != 0 {
		t.Fatalf("after the refused batches: %d entries appended, %d acks sent, want none", appended, nacks)
	}
	b := replicator.Batch{ID: 1, Origin: "west", Stream: 1, Entries: []replicator.Entry{entryOf(0, good), entryOf(1, testMessage(t, 2, 50))}}
	if err := top.applyBatch(b, rq); err != nil {
		t.Fatalf("the intact resend: %v", err)
	}
	al.mu.Lock()
	appended = al.appended
	al.mu.Unlock()
	if appended != 2 {
		t.Fatalf("the intact resend appended %d entries, want 2", appended)
	}
}

// Issue 34: between an entry's persistence and its send the sender waits
// for nothing but its goroutine: the append's Wake is an input, so the
// entry goes at the same instant of the injected clock, no timer fired —
// also when the append lands after a step read the log's end and before
// the shell went to sleep (the wake is kept, not lost).
func TestSenderSendsAnAppendAtOnce(t *testing.T) {
	e := newShellEnv(t)
	l, st := &memLog{}, newMemStream()
	l.add(1, 10)
	top := e.topic(activeActive)
	rs := e.sender(t, top, testShellConfig(), l, st)
	r := top.replState()
	r.mu.Lock()
	r.senders["west"] = rs // as syncReplication registers it: Wake reaches it
	r.mu.Unlock()
	// The second sleep's hook appends an entry and wakes the senders: the
	// append lands between that step's End and its select. Each hook
	// notes what was sent by then (the shell runs on once it reported).
	var sent []string
	report := e.svc.hooks.senderIdle
	rs.idle = func(wake time.Time) {
		sent = append(sent, fmt.Sprint(st.batches()))
		if len(sent) == 2 {
			l.add(1, 10)
			top.Wake()
		}
		report(rs, wake)
	}
	go rs.run()

	e.sleep(t)
	l.add(1, 10) // persisted while the sender sleeps
	top.Wake()
	e.sleep(t) // the second sleep: its hook appended entry 3
	e.sleep(t)
	if want := "[[[1]] [[1] [2]] [[1] [2] [3]]]"; fmt.Sprint(sent) != want {
		t.Fatalf("sent by each sleep %v, want %v", sent, want)
	}
	if now := e.clk.Now(); !now.Equal(t0) {
		t.Fatalf("the clock moved to %v", now.Sub(t0))
	}
}
