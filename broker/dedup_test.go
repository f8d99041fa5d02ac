package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/mlpb"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// Tests of issue 30, item 6: deduplication state is bounded (producer
// names at most meta.MaxProducerNameBytes, state of producers gone for
// the inactivity timeout expires) and its snapshot is kept in a ledger,
// so a state larger than etcd's request limit still bounds a reload's
// replay.

// sendFrameAs is a SEND whose metadata names the producer as a client
// library does (the broker's replay at load keys the state by it).
func sendFrameAs(t *testing.T, producerID, seq uint64, name string, payload []byte) []byte {
	t.Helper()
	msg, err := codec.EncodeMessage(&pb.MessageMetadata{ProducerName: proto.String(name), SequenceId: proto.Uint64(seq), PublishTime: proto.Uint64(1)}, payload)
	if err != nil {
		t.Fatal(err)
	}
	b, err := codec.AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(producerID), SequenceId: proto.Uint64(seq), NumMessages: proto.Int32(1)}}, nil, msg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// answers reads frames until every request id in want has its answer
// (PRODUCER_SUCCESS, ERROR, SUCCESS) or every producer id its
// SEND_RECEIPT / SEND_ERROR, keyed by that id.
func (r *rawConn) answers(n int, key func(*pb.BaseCommand) (uint64, bool)) map[uint64]*pb.BaseCommand {
	r.t.Helper()
	out := make(map[uint64]*pb.BaseCommand, n)
	for len(out) < n {
		f := r.next()
		if id, ok := key(f.Cmd); ok {
			out[id] = f.Cmd
		}
	}
	return out
}

func requestAnswer(c *pb.BaseCommand) (uint64, bool) {
	switch c.GetType() {
	case pb.BaseCommand_PRODUCER_SUCCESS:
		return c.GetProducerSuccess().GetRequestId(), true
	case pb.BaseCommand_ERROR:
		return c.GetError().GetRequestId(), true
	case pb.BaseCommand_SUCCESS:
		return c.GetSuccess().GetRequestId(), true
	}
	return 0, false
}

func sendAnswer(c *pb.BaseCommand) (uint64, bool) {
	switch c.GetType() {
	case pb.BaseCommand_SEND_RECEIPT:
		return c.GetSendReceipt().GetProducerId(), true
	case pb.BaseCommand_SEND_ERROR:
		return c.GetSendError().GetProducerId(), true
	}
	return 0, false
}

// produceAs creates a producer per name (ids from base), sends one
// message with sequence id 0 from each, waits for every receipt and closes
// the producers, in batches under the connection's request limit.
func produceAs(t *testing.T, r *rawConn, topic string, names []string, base uint64) {
	t.Helper()
	const batch = 500
	for lo := 0; lo < len(names); lo += batch {
		hi := min(lo+batch, len(names))
		var buf []byte
		for i := lo; i < hi; i++ {
			b, err := codec.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
				Topic: proto.String(topic), ProducerId: proto.Uint64(base + uint64(i)), RequestId: proto.Uint64(base + uint64(i)), ProducerName: proto.String(names[i])}})
			if err != nil {
				t.Fatal(err)
			}
			buf = append(buf, b...)
		}
		r.write(buf)
		for id, c := range r.answers(hi-lo, requestAnswer) {
			if c.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
				t.Fatalf("producer %d: %v %v %s", id, c.GetType(), c.GetError().GetError(), c.GetError().GetMessage())
			}
		}
		buf = buf[:0]
		for i := lo; i < hi; i++ {
			buf = append(buf, sendFrameAs(t, base+uint64(i), 0, names[i], []byte(fmt.Sprintf("message of producer %d", i)))...)
		}
		r.write(buf)
		for id, c := range r.answers(hi-lo, sendAnswer) {
			if c.GetType() != pb.BaseCommand_SEND_RECEIPT {
				t.Fatalf("send of producer %d: %v", id, c)
			}
		}
		buf = buf[:0]
		for i := lo; i < hi; i++ {
			b, err := codec.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{
				ProducerId: proto.Uint64(base + uint64(i)), RequestId: proto.Uint64(base + uint64(i))}})
			if err != nil {
				t.Fatal(err)
			}
			buf = append(buf, b...)
		}
		r.write(buf)
		r.answers(hi-lo, requestAnswer)
	}
}

// reconnectAs creates a producer named name and returns the last sequence
// id the broker holds for it.
func reconnectAs(t *testing.T, r *rawConn, topic, name string, id uint64) int64 {
	t.Helper()
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(id), ProducerName: proto.String(name)}})
	c := r.answers(1, requestAnswer)[id]
	if c.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer %s: %v %s", name[:min(len(name), 16)], c.GetType(), c.GetError().GetMessage())
	}
	return c.GetProducerSuccess().GetLastSequenceId()
}

// resend sends sequence id 0 again and waits for its receipt.
func resend(t *testing.T, r *rawConn, id uint64, name string) {
	t.Helper()
	r.write(sendFrameAs(t, id, 0, name, []byte("a resend")))
	if c := r.answers(1, sendAnswer)[id]; c.GetType() != pb.BaseCommand_SEND_RECEIPT {
		t.Fatalf("resend: %v", c)
	}
}

func topicLabel(topic string) string { return `topic="` + topic + `"` }

// The long-name flood of issue 30: 1,100 producers with 2 KB names grew
// the dedup state past etcd's request limit. Every one is now refused at
// PRODUCER with an error saying why (a Go client's creation fails with
// it), the topic keeps no state for them, and the other producer's
// acknowledged messages are all there.
func TestDedupLongProducerNamesRefused(t *testing.T) {
	s := standalone(t)
	topic := topicName(t)
	client := newPulsarClient(t, s.URL)
	good, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, good, 100, nil)

	const n = 1100
	r := dialRaw(t, s.URL)
	for lo := 0; lo < n; lo += 500 {
		hi := min(lo+500, n)
		var buf []byte
		for i := lo; i < hi; i++ {
			name := fmt.Sprintf("flood-%04d-", i) + strings.Repeat("x", 2048-11)
			b, err := codec.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
				Topic: proto.String(topic), ProducerId: proto.Uint64(uint64(i + 1)), RequestId: proto.Uint64(uint64(i + 1)), ProducerName: proto.String(name)}})
			if err != nil {
				t.Fatal(err)
			}
			buf = append(buf, b...)
		}
		r.write(buf)
		for id, c := range r.answers(hi-lo, requestAnswer) {
			if c.GetType() != pb.BaseCommand_ERROR || c.GetError().GetError() != pb.ServerError_NotAllowedError ||
				!strings.Contains(c.GetError().GetMessage(), fmt.Sprintf("producer name of 2048 bytes is longer than the limit of %d bytes", meta.MaxProducerNameBytes)) {
				t.Fatalf("producer %d with a 2 KB name: %v %v %q, want ERROR NotAllowedError naming the limit", id, c.GetType(), c.GetError().GetError(), c.GetError().GetMessage())
			}
		}
	}
	r.ping() // the connection still serves
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(5000), RequestId: proto.Uint64(5000), ProducerName: proto.String("not-utf8-\xff")}})
	if c := r.answers(1, requestAnswer)[5000]; c.GetType() != pb.BaseCommand_ERROR || !strings.Contains(c.GetError().GetMessage(), "not valid UTF-8") {
		t.Fatalf("producer with a name that is not UTF-8: %v %q", c.GetType(), c.GetError().GetMessage())
	}

	// The Go client fails the creation with the broker's message.
	_, err = client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: strings.Repeat("y", 2048)})
	if err == nil || !strings.Contains(err.Error(), "longer than the limit") {
		t.Fatalf("Go client producer with a 2 KB name: err = %v", err)
	}
	// At the limit is fine.
	atLimit, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: strings.Repeat("z", meta.MaxProducerNameBytes), DisableBatching: true})
	if err != nil {
		t.Fatalf("producer with a name of %d bytes: %v", meta.MaxProducerNameBytes, err)
	}
	produce(t, atLimit, 10, nil)
	atLimit.Close()

	if got := metricValue(t, s.AdminURL, "meridian_broker_topic_dedup_producers", topicLabel(topic)); got != 2 {
		t.Fatalf("dedup state for %v producer names, want 2 (the flood kept none)", got)
	}
	produce(t, good, 100, nil)
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	msgs := receiveN(t, cons, 210, true)
	var fromGood []string
	for _, m := range msgs {
		if m.ProducerName() == good.Name() {
			fromGood = append(fromGood, string(m.Payload()))
		}
	}
	if len(fromGood) != 200 {
		t.Fatalf("%d of the 200 acknowledged messages of the other producer read back", len(fromGood))
	}
	for i, p := range fromGood {
		if want := fmt.Sprint(i % 100); p != want {
			t.Fatalf("message %d is %q, want %q", i, p, want)
		}
	}
}

// A dedup state larger than etcd's request limit (1.5 MiB): 7,500
// producers with names at the limit, one message each. It is snapshotted
// (in a ledger), and after the broker is killed and restarted the topic's
// load replays only the entries after the last snapshot (the 500 after the
// 7,000th entry, the interval being 1,000), yet every producer's resend is
// still refused as a duplicate. Deleting the topic deletes the snapshot's
// ledger.
func TestDedupSnapshotLargerThanEtcdLimit(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir(), "--log-level", "info")
	topic := topicName(t)
	const n = 7500
	names := make([]string, n)
	for i := range names {
		p := fmt.Sprintf("big-%05d-", i)
		names[i] = p + strings.Repeat("n", meta.MaxProducerNameBytes-len(p))
	}
	r := dialRaw(t, s.URL)
	start := time.Now()
	produceAs(t, r, topic, names, 1)
	t.Logf("%d producers with %d-byte names, one message each: %s", n, meta.MaxProducerNameBytes, time.Since(start).Round(time.Millisecond))

	// Wait for the background snapshot writer to finish the last one, the
	// snapshot at entry 7,000: it holds 7,000 names of MaxProducerNameBytes,
	// each quoted, so it is at least 7,000 × (limit + 2) bytes, which the
	// one before it (6,000 names, ~28 bytes of fields each besides the
	// name) is not. Not "no write for a while": on a slow machine one
	// write can take longer than any quiet period chosen.
	var size float64
	covers7000 := float64(7000 * (meta.MaxProducerNameBytes + 2))
	testutil.Eventually(t, 2*time.Minute, "the dedup snapshot at entry 7,000 written", func() bool {
		size = metricValue(t, s.AdminURL, "meridian_broker_topic_dedup_snapshot_bytes", topicLabel(topic))
		return size >= covers7000
	})
	if size <= 1.5*(1<<20) {
		t.Fatalf("dedup snapshot of %v bytes, want more than 1.5 MiB for this test to mean anything", size)
	}
	// The record in etcd is small: it points to a ledger.
	store := testutil.Store(t, standaloneEtcd(t, s), "/meridian/regions/standalone")
	tn, err := meta.ParseTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	key := "/managed-ledgers/" + mledger.EscapeName(tn.ManagedLedgerName()) + "/snapshots/dedup"
	kv, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("snapshot record %s: %v", key, err)
	}
	rec := &mlpb.SnapshotRecord{}
	if err := proto.Unmarshal(kv.Value, rec); err != nil {
		t.Fatal(err)
	}
	if rec.LedgerId == 0 || rec.SizeBytes != int64(size) || len(kv.Value) > 1024 {
		t.Fatalf("snapshot record: ledger %d, %d bytes (gauge %v), record of %d bytes", rec.LedgerId, rec.SizeBytes, size, len(kv.Value))
	}
	t.Logf("dedup snapshot: %d bytes (%.2f MiB) in ledger %d (%d entries), version %d; its etcd record %d bytes",
		rec.SizeBytes, float64(rec.SizeBytes)/(1<<20), rec.LedgerId, rec.Entries, rec.Version, len(kv.Value))
	if _, err := store.Get(context.Background(), "/dedup/"+tn.ManagedLedgerName()); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("the etcd form of the snapshot: err = %v, want none", err)
	}

	s.Restart() // SIGKILL: no snapshot at unload
	r = dialRaw(t, s.URL)
	start = time.Now()
	sample := []int{0, 1, 2999, 6999, 7000, 7250, n - 1}
	if last := reconnectAs(t, r, topic, names[sample[0]], 100001); last != 0 {
		t.Fatalf("after the restart, producer %d's last sequence id is %d, want 0", sample[0], last)
	}
	reload := time.Since(start)
	replayed := metricValue(t, s.AdminURL, "meridian_broker_dedup_replayed_entries_total", "")
	t.Logf("reload after kill -9: first producer ready in %s (the topic's load, its snapshot read), %v entries replayed",
		reload.Round(time.Millisecond), replayed)
	if b, err := os.ReadFile(s.LogPath()); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "topic loaded") && strings.Contains(l, tn.Local) {
				t.Logf("broker: %s", l[strings.Index(l, "topic loaded"):])
			}
		}
	}
	if replayed >= 1000 || replayed != n%1000 {
		t.Fatalf("the load replayed %v entries, want the %d after the last snapshot (not all %d)", replayed, n%1000, n)
	}
	if got := metricValue(t, s.AdminURL, "meridian_broker_topic_dedup_producers", topicLabel(topic)); got != n {
		t.Fatalf("dedup state for %v producers after the reload, want %d", got, n)
	}
	resend(t, r, 100001, names[sample[0]])
	for j, i := range sample[1:] {
		id := uint64(100002 + j)
		if last := reconnectAs(t, r, topic, names[i], id); last != 0 {
			t.Fatalf("after the restart, producer %d's last sequence id is %d, want 0", i, last)
		}
		resend(t, r, id, names[i])
	}
	if d := metricValue(t, s.AdminURL, "meridian_broker_dedup_dropped_total", ""); d != float64(len(sample)) {
		t.Fatalf("%v resends dropped as duplicates, want %d", d, len(sample))
	}
	if e := metricValue(t, s.AdminURL, "meridian_broker_topic_entries", topicLabel(topic)); e != n {
		t.Fatalf("topic holds %v entries after the resends, want %d", e, n)
	}

	// Graceful restarts: the unload writes a snapshot at the last entry,
	// so the next load replays nothing — and the load after a load that
	// replayed nothing too (its unload's snapshot is at the snapshot's
	// position, not at -1:-1, which replayed the whole log).
	for round := range 2 {
		r.c.Close()
		s.Signal(syscall.SIGTERM)
		if !s.Wait(60 * time.Second) {
			t.Fatal("standalone did not stop on SIGTERM")
		}
		s.Restart()
		r = dialRaw(t, s.URL)
		id := uint64(200000 + round)
		if last := reconnectAs(t, r, topic, names[n-1], id); last != 0 {
			t.Fatalf("after graceful restart %d, the last sequence id is %d, want 0", round+1, last)
		}
		if replayed := metricValue(t, s.AdminURL, "meridian_broker_dedup_replayed_entries_total", ""); replayed != 0 {
			t.Fatalf("the load after graceful restart %d replayed %v entries, want 0", round+1, replayed)
		}
	}

	// Deleting the topic deletes the snapshot's ledger and record.
	r.c.Close()
	req, _ := http.NewRequest(http.MethodDelete, s.AdminURL+"/admin/v2/persistent/"+tn.NamespaceName()+"/"+tn.Local+"?force=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("delete topic: %s", resp.Status)
	}
	if _, err := ledger.ReadMetadata(context.Background(), store, rec.LedgerId); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("snapshot ledger %d after the topic's deletion: err = %v", rec.LedgerId, err)
	}
	if _, err := store.Get(context.Background(), key); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("snapshot record after the topic's deletion: err = %v", err)
	}
}

// standaloneEtcd is the client URL of a standalone's embedded etcd.
func standaloneEtcd(t *testing.T, s *testutil.Standalone) string {
	for i, a := range s.Args {
		if a == "--etcd-client-url" && i+1 < len(s.Args) {
			return s.Args[i+1]
		}
	}
	t.Fatal("no --etcd-client-url")
	return ""
}

// Producers gone for the inactivity timeout lose their dedup state (as
// Pulsar's brokerDeduplicationProducerInactivityTimeoutMinutes); a
// connected producer keeps it however long it is idle; a name that comes
// back after its state expired starts afresh, and the expiry survives a
// restart (a snapshot without the expired names is written).
func TestDedupInactiveProducersExpire(t *testing.T) {
	const timeout = 2 * time.Second
	s := testutil.StartStandalone(t, t.TempDir(), "--dedup-producer-inactivity-timeout", timeout.String(), "--policy-check-interval", "200ms")
	topic := topicName(t)
	client := newPulsarClient(t, s.URL)
	keeper, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "keeper", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, keeper, 1, nil)

	const n = 50
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("gone-%02d", i)
	}
	r := dialRaw(t, s.URL)
	produceAs(t, r, topic, names, 1)
	gone := time.Now()

	testutil.Eventually(t, 30*time.Second, "the gone producers' state expired", func() bool {
		return metricValue(t, s.AdminURL, "meridian_broker_dedup_producers_expired_total", "") == n
	})
	// The broker saw the last producer leave a little before gone (its
	// close's answer was on the way): allow that much, no more.
	if waited := time.Since(gone); waited < timeout-100*time.Millisecond {
		t.Fatalf("state expired %s after the producers left, before the %s timeout", waited, timeout)
	}
	// The connected producer, idle for longer than the timeout, keeps it.
	time.Sleep(2 * timeout)
	if got := metricValue(t, s.AdminURL, "meridian_broker_topic_dedup_producers", topicLabel(topic)); got != 1 {
		t.Fatalf("dedup state for %v producer names, want 1 (the connected one)", got)
	}
	if d := metricValue(t, s.AdminURL, "meridian_broker_dedup_producers_expired_total", ""); d != n {
		t.Fatalf("%v names expired, want %d (not the connected one)", d, n)
	}
	if _, err := keeper.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("still here")}); err != nil {
		t.Fatal(err)
	}
	// A gone name comes back: it starts afresh, its old sequence id is
	// stored again (what expiry means).
	if last := reconnectAs(t, r, topic, names[0], 1000); last != -1 {
		t.Fatalf("producer %s back after expiry: last sequence id %d, want -1", names[0], last)
	}
	resend(t, r, 1000, names[0])
	if d := metricValue(t, s.AdminURL, "meridian_broker_dedup_dropped_total", ""); d != 0 {
		t.Fatalf("%v sends dropped as duplicates, want 0", d)
	}

	// The expiry wrote a snapshot without the expired names: after a
	// restart they stay expired.
	if w := metricValue(t, s.AdminURL, "meridian_broker_dedup_snapshots_written_total", ""); w < 1 {
		t.Fatalf("%v dedup snapshots written after the expiry, want one", w)
	}
	client.Close()
	s.Signal(syscall.SIGKILL)
	s.Wait(30 * time.Second)
	s.Restart()
	r = dialRaw(t, s.URL)
	if last := reconnectAs(t, r, topic, names[1], 2000); last != -1 {
		t.Fatalf("after a restart, expired producer %s: last sequence id %d, want -1", names[1], last)
	}
	if last := reconnectAs(t, r, topic, "keeper", 2001); last != 1 {
		t.Fatalf("after a restart, producer keeper: last sequence id %d, want 1", last)
	}
}

// Upgrade: a topic whose dedup snapshot is still the etcd record of
// earlier versions (/dedup/<managed ledger>) loads its state from it once,
// replaying only the entries after it; the first snapshot written (here
// the unload's) goes to the ledger snapshot and deletes the etcd record.
func TestDedupLegacyEtcdSnapshotReadOnce(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir(), "--log-level", "info")
	topic := topicName(t)
	tn, err := meta.ParseTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"old-0", "old-1", "old-2"}
	r := dialRaw(t, s.URL)
	produceAs(t, r, topic, names, 1)
	last := reconnectAs(t, r, topic, "last", 10)
	if last != -1 {
		t.Fatalf("new producer's last sequence id %d", last)
	}
	r.write(sendFrameAs(t, 10, 0, "last", []byte("the last entry")))
	id := r.answers(1, sendAnswer)[10].GetSendReceipt().GetMessageId()
	lastPos := mledger.Position{Ledger: int64(id.GetLedgerId()), Entry: int64(id.GetEntryId())}

	// The record an earlier version wrote at this point, with one name
	// that only it knows (its sequence id can come from nowhere else).
	legacy, err := json.Marshal(struct {
		Position  mledger.Position `json:"position"`
		Producers map[string]int64 `json:"producers"`
	}{lastPos, map[string]int64{"old-0": 0, "old-1": 0, "old-2": 0, "last": 0, "only-in-legacy": 41}})
	if err != nil {
		t.Fatal(err)
	}
	store := testutil.Store(t, standaloneEtcd(t, s), "/meridian/regions/standalone")
	legacyKey := "/dedup/" + tn.ManagedLedgerName()
	if _, err := store.Put(context.Background(), legacyKey, legacy); err != nil {
		t.Fatal(err)
	}
	s.Restart() // SIGKILL: nothing written at unload
	r = dialRaw(t, s.URL)
	if last := reconnectAs(t, r, topic, "only-in-legacy", 20); last != 41 {
		t.Fatalf("after the upgrade, the legacy record's producer has last sequence id %d, want 41", last)
	}
	if replayed := metricValue(t, s.AdminURL, "meridian_broker_dedup_replayed_entries_total", ""); replayed != 0 {
		t.Fatalf("the load replayed %v entries, want 0 (the legacy record is at the last entry)", replayed)
	}
	if last := reconnectAs(t, r, topic, "old-1", 21); last != 0 {
		t.Fatalf("old-1's last sequence id %d, want 0", last)
	}
	resend(t, r, 21, "old-1")
	if d := metricValue(t, s.AdminURL, "meridian_broker_dedup_dropped_total", ""); d != 1 {
		t.Fatalf("%v resends dropped, want 1", d)
	}

	// A graceful restart writes the ledger snapshot and deletes the
	// legacy record; the state is the ledger snapshot's from then on.
	r.c.Close()
	s.Signal(syscall.SIGTERM)
	if !s.Wait(60 * time.Second) {
		t.Fatal("standalone did not stop on SIGTERM")
	}
	s.Restart()
	store = testutil.Store(t, standaloneEtcd(t, s), "/meridian/regions/standalone")
	if _, err := store.Get(context.Background(), legacyKey); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("legacy record after the first ledger snapshot: err = %v, want gone", err)
	}
	if _, err := store.Get(context.Background(), "/managed-ledgers/"+mledger.EscapeName(tn.ManagedLedgerName())+"/snapshots/dedup"); err != nil {
		t.Fatalf("ledger snapshot record: %v", err)
	}
	r = dialRaw(t, s.URL)
	if last := reconnectAs(t, r, topic, "only-in-legacy", 30); last != 41 {
		t.Fatalf("after the legacy record's deletion, last sequence id %d, want 41", last)
	}
	if replayed := metricValue(t, s.AdminURL, "meridian_broker_dedup_replayed_entries_total", ""); replayed != 0 {
		t.Fatalf("the load replayed %v entries, want 0", replayed)
	}
}
