package broker_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/mlpb"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// Issue 35, the Pulsar features applications rely on, with the unmodified
// Go client against one `meridian standalone`: producer access modes and
// the topic epoch, a producer's initial subscription, non-durable
// subscriptions, batch-index acknowledgements with cumulative acks (the
// last one restarts the standalone).
func TestApplicationFeatures(t *testing.T) {
	s := standalone(t)
	client := newPulsarClient(t, s.URL)

	// Exclusive (Pulsar's AbstractTopic): a second Exclusive is fenced
	// (ProducerFenced), a Shared one busy (ProducerBusy); an Exclusive is
	// fenced while Shared producers are attached.
	t.Run("exclusive", func(t *testing.T) {
		topic := topicName(t)
		p1, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
		if err != nil {
			t.Fatal(err)
		}
		wantRefused(t, client, topic, pulsar.ProducerAccessModeExclusive, "ProducerFenced")
		wantRefused(t, client, topic, pulsar.ProducerAccessModeShared, "ProducerBusy")
		p1.Close()
		shared, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatalf("a shared producer after the exclusive one left: %v", err)
		}
		wantRefused(t, client, topic, pulsar.ProducerAccessModeExclusive, "ProducerFenced")
		shared.Close()
		p2, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
		if err != nil {
			t.Fatalf("an exclusive producer on a topic without producers: %v", err)
		}
		p2.Close()
	})

	// WaitForExclusive: the PRODUCER request is held (producer_ready=false)
	// while another producer holds the topic, and granted when it leaves.
	t.Run("wait-for-exclusive", func(t *testing.T) {
		topic := topicName(t)
		p1, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
		if err != nil {
			t.Fatal(err)
		}
		type created struct {
			p   pulsar.Producer
			err error
		}
		done := make(chan created, 1)
		go func() {
			p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeWaitForExclusive})
			done <- created{p, err}
		}()
		// Queued: it holds the topic's queue, so a Shared producer is busy
		// (the refusal also shows the waiter reached the broker).
		testutil.Eventually(t, time.Minute, "the waiting producer to be queued", func() bool {
			p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 5 * time.Second})
			if err == nil {
				p.Close()
				t.Fatal("a shared producer joined a topic with an exclusive producer")
			}
			return strings.Contains(err.Error(), "waiting for exclusive")
		})
		select {
		case c := <-done:
			t.Fatalf("WaitForExclusive returned while the exclusive producer is open: %v", c.err)
		default:
		}
		if _, err := p1.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("first")}); err != nil {
			t.Fatalf("the exclusive producer, with one waiting: %v", err)
		}
		p1.Close()
		var c created
		select {
		case c = <-done:
		case <-time.After(time.Minute):
			t.Fatal("WaitForExclusive not granted a minute after the exclusive producer closed")
		}
		if c.err != nil {
			t.Fatalf("WaitForExclusive: %v", c.err)
		}
		defer c.p.Close()
		if _, err := c.p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("second")}); err != nil {
			t.Fatalf("the granted producer: %v", err)
		}
	})

	// ExclusiveWithFencing takes over (the Go client v0.19 has no such
	// mode: the taker speaks the protocol itself): the Go producer holding
	// the topic is closed, its reconnect is refused (ProducerFenced) so it
	// closes for good, and nothing it sends afterwards is stored.
	t.Run("exclusive-with-fencing", func(t *testing.T) {
		topic := topicName(t)
		cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		old, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		if _, err := old.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("old-0")}); err != nil {
			t.Fatal(err)
		}
		r := dialRaw(t, s.URL)
		rawProducer(t, r, topic, 1, pb.ProducerAccessMode_ExclusiveWithFencing, nil)
		r.write(sendFrame(t, 1, 0, []byte("new-0")))
		if f := r.next(); f.Cmd.GetType() != pb.BaseCommand_SEND_RECEIPT {
			t.Fatalf("the taker's send: %v", f.Cmd)
		}
		testutil.Eventually(t, time.Minute, "the fenced producer's sends to fail", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := old.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("old-late")})
			return err != nil && !errors.Is(err, context.DeadlineExceeded)
		})
		r.write(sendFrame(t, 1, 1, []byte("new-1")))
		if f := r.next(); f.Cmd.GetType() != pb.BaseCommand_SEND_RECEIPT {
			t.Fatalf("the taker's send: %v", f.Cmd)
		}
		var got []string
		for _, m := range receiveN(t, cons, 3, true) {
			got = append(got, string(m.Payload()))
		}
		if strings.Join(got, ",") != "old-0,new-0,new-1" {
			t.Fatalf("stored %v, want old-0,new-0,new-1 (nothing of the fenced producer after the take-over)", got)
		}
	})

	// The topic epoch in PRODUCER_SUCCESS moves with every exclusive grant
	// and is persisted: after the topic reloads, a producer carrying an
	// epoch the topic has passed is still fenced; one with the current
	// epoch (a reconnect) is granted and keeps it.
	t.Run("topic-epoch", func(t *testing.T) {
		topic := topicName(t)
		a, b := dialRaw(t, s.URL), dialRaw(t, s.URL)
		ea := rawProducer(t, a, topic, 1, pb.ProducerAccessMode_Exclusive, nil)
		eb := rawProducer(t, b, topic, 1, pb.ProducerAccessMode_ExclusiveWithFencing, nil)
		if ea.GetTopicEpoch() >= eb.GetTopicEpoch() || ea.TopicEpoch == nil || eb.TopicEpoch == nil {
			t.Fatalf("epochs %v then %v: an exclusive take-over must move the epoch", ea.TopicEpoch, eb.TopicEpoch)
		}
		if f := a.next(); f.Cmd.GetType() != pb.BaseCommand_CLOSE_PRODUCER {
			t.Fatalf("the fenced producer got %v, want CLOSE_PRODUCER", f.Cmd.GetType())
		}
		b.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(1), RequestId: proto.Uint64(7)}})
		b.next()
		code, body := adminCall(t, "PUT", s.AdminURL+"/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/unload", nil)
		if code/100 != 2 {
			t.Fatalf("unload: %d %s", code, body)
		}
		c := dialRaw(t, s.URL)
		stale := ea.GetTopicEpoch()
		c.send(rawProducerCmd(topic, 2, pb.ProducerAccessMode_Exclusive, &stale))
		if f := c.next(); f.Cmd.GetType() != pb.BaseCommand_ERROR || f.Cmd.Error.GetError() != pb.ServerError_ProducerFenced {
			t.Fatalf("after a reload, a producer with the passed epoch %d got %v, want ProducerFenced", stale, f.Cmd)
		}
		cur := eb.GetTopicEpoch()
		if ec := rawProducer(t, c, topic, 3, pb.ProducerAccessMode_Exclusive, &cur); ec.GetTopicEpoch() != cur {
			t.Fatalf("reconnect with the current epoch %d got epoch %d", cur, ec.GetTopicEpoch())
		}
	})

	// A producer's initial_subscription_name creates that durable
	// subscription at the earliest position (Pulsar's): the Go client's
	// dead-letter producer asks for one, so a consumer subscribing to the
	// dead-letter topic later, at the latest position, still gets what was
	// routed there.
	t.Run("initial-subscription", func(t *testing.T) {
		topic := topicName(t)
		dlq := topic + "-DLQ"
		cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "work", Type: pulsar.Shared,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, NackRedeliveryDelay: 50 * time.Millisecond,
			DLQ: &pulsar.DLQPolicy{MaxDeliveries: 1, DeadLetterTopic: dlq, InitialSubscriptionName: "dead"}})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		produce(t, p, 1, nil)
		cons.Nack(receiveN(t, cons, 1, false)[0]) // its redelivery goes to the DLQ
		testutil.Eventually(t, time.Minute, "the dead-letter topic's initial subscription", func() bool {
			code, body := adminCall(t, "GET", s.AdminURL+"/admin/v2/persistent/"+strings.TrimPrefix(dlq, "persistent://")+"/subscriptions", nil)
			return code == 200 && strings.Contains(string(body), `"dead"`)
		})
		dead, err := client.Subscribe(pulsar.ConsumerOptions{Topic: dlq, SubscriptionName: "dead"}) // Latest: the subscription exists
		if err != nil {
			t.Fatal(err)
		}
		defer dead.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m, err := dead.Receive(ctx)
		if err != nil || string(m.Payload()) != "0" {
			t.Fatalf("the dead-lettered message on the initial subscription: %v %v", m, err)
		}
	})

	// A non-durable subscription lives as long as its consumers: closed
	// and subscribed again, it starts at the latest message (not where
	// the last consumer was), and it never has a record in the store.
	t.Run("non-durable", func(t *testing.T) {
		topic := topicName(t)
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "nd", SubscriptionMode: pulsar.NonDurable}
		c1, err := client.Subscribe(opts)
		if err != nil {
			t.Fatal(err)
		}
		produce(t, p, 3, nil)
		receiveN(t, c1, 1, true) // "0" acknowledged; "1" and "2" not
		c1.Close()
		code, body := adminCall(t, "GET", s.AdminURL+"/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/subscriptions", nil)
		if code != 200 || strings.Contains(string(body), `"nd"`) {
			t.Fatalf("subscriptions after the non-durable one's only consumer closed: %d %s", code, body)
		}
		c2, err := client.Subscribe(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
			t.Fatal(err)
		}
		if m := receiveN(t, c2, 1, true)[0]; string(m.Payload()) != "after" {
			t.Fatalf("the re-created non-durable subscription started with %q, want the message sent after it (latest)", m.Payload())
		}
		// Its cursor has no record; a durable subscription's has.
		d, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "d"})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		tn, err := meta.ParseTopic(topic)
		if err != nil {
			t.Fatal(err)
		}
		store := testutil.Store(t, standaloneEtcd(t, s), "/meridian/regions/standalone")
		dir := "/managed-ledgers/" + mledger.EscapeName(tn.ManagedLedgerName()) + "/cursors/"
		if _, err := store.Get(context.Background(), dir+"d"); err != nil {
			t.Fatalf("the durable subscription's record %s: %v", dir+"d", err)
		}
		if _, err := store.Get(context.Background(), dir+"nd"); !errors.Is(err, cluster.ErrNotFound) {
			t.Fatalf("the non-durable subscription's record: err = %v, want none", err)
		}
	})

	// Batch-index acknowledgements (EnableBatchIndexAcknowledgment): the
	// first 5 messages of a 10-message batch acknowledged — cumulatively
	// (5th message) or one by one, with the ack grouping's defaults, with
	// acks sent at once (MaxSize 0), or with AckWithResponse — and the
	// consumer closed: its successor gets only messages 5..9 (from 0),
	// and so does one after a kill -9 and restart of the broker, from
	// the cursor's persisted record. Last: it restarts the standalone.
	t.Run("batch-index-ack", func(t *testing.T) {
		type variant struct {
			name       string
			cumulative bool
			opts       func(*pulsar.ConsumerOptions)
		}
		variants := []variant{
			{"cumulative", true, func(*pulsar.ConsumerOptions) {}},
			{"cumulative-immediate", true, func(o *pulsar.ConsumerOptions) { o.AckGroupingOptions = &pulsar.AckGroupingOptions{MaxSize: 0} }},
			{"cumulative-with-response", true, func(o *pulsar.ConsumerOptions) { o.AckWithResponse = true }},
			{"individual", false, func(*pulsar.ConsumerOptions) {}},
			{"individual-with-response", false, func(o *pulsar.ConsumerOptions) { o.AckWithResponse = true }},
		}
		store := testutil.Store(t, standaloneEtcd(t, s), "/meridian/regions/standalone")
		topics := make([]string, len(variants))
		optsOf := func(i int) pulsar.ConsumerOptions {
			o := pulsar.ConsumerOptions{Topic: topics[i], SubscriptionName: "s", Type: pulsar.Exclusive,
				SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, EnableBatchIndexAcknowledgment: true}
			variants[i].opts(&o)
			return o
		}
		// wantRest receives the rest of the batch, "5".."9", first.
		wantRest := func(t *testing.T, c pulsar.Consumer, ack bool) {
			t.Helper()
			var got []string
			for _, m := range receiveN(t, c, 5, ack) {
				got = append(got, string(m.Payload()))
			}
			if strings.Join(got, ",") != "5,6,7,8,9" {
				t.Fatalf("after the first 5 of the batch were acknowledged: %v, want 5..9", got)
			}
		}
		for i, v := range variants {
			topics[i] = topicName(t) + "-" + v.name
			c, err := client.Subscribe(optsOf(i))
			if err != nil {
				t.Fatal(err)
			}
			p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topics[i], BatchingMaxMessages: 10, BatchingMaxPublishDelay: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]pulsar.MessageID, 10)
			errs := make(chan error, 10)
			for j := range ids {
				p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(j))}, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					ids[j] = id
					errs <- err
				})
			}
			if err := p.Flush(); err != nil { // one batch, sent now
				t.Fatal(err)
			}
			for range ids {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			p.Close()
			for j, id := range ids {
				if id.EntryID() != ids[0].EntryID() || id.BatchIdx() != int32(j) {
					t.Fatalf("message %d has id %v: the 10 messages are not one batch", j, id)
				}
			}
			msgs := receiveN(t, c, 10, false)
			if v.cumulative {
				err = c.AckCumulative(msgs[4])
			} else {
				for _, m := range msgs[:5] {
					if err = c.Ack(m); err != nil {
						break
					}
				}
			}
			if err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			c.Close()
			c, err = client.Subscribe(optsOf(i))
			if err != nil {
				t.Fatal(err)
			}
			wantRest(t, c, false)
			c.Close()
			// The partial batch is in the cursor's record.
			tn, _ := meta.ParseTopic(topics[i])
			key := "/managed-ledgers/" + mledger.EscapeName(tn.ManagedLedgerName()) + "/cursors/s"
			testutil.Eventually(t, 30*time.Second, v.name+": the partial batch in the cursor record", func() bool {
				kv, err := store.Get(context.Background(), key)
				rec := &mlpb.CursorInfo{}
				return err == nil && proto.Unmarshal(kv.Value, rec) == nil && len(rec.BatchAcks) == 1 &&
					rec.BatchAcks[0].GetPosition().GetEntryId() == int64(ids[0].EntryID())
			})
		}
		s.Restart() // kill -9: only what the cursor persisted counts
		client := newPulsarClient(t, s.URL)
		for i, v := range variants {
			c, err := client.Subscribe(optsOf(i))
			if err != nil {
				t.Fatalf("%s after the restart: %v", v.name, err)
			}
			wantRest(t, c, true)
			p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topics[i]})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("end")}); err != nil {
				t.Fatal(err)
			}
			p.Close()
			if m := receiveN(t, c, 1, true)[0]; string(m.Payload()) != "end" {
				t.Fatalf("%s: %q after the rest of the batch, want end (nothing of it again)", v.name, m.Payload())
			}
			c.Close()
		}
	})
}

// wantRefused creates a producer of mode on topic and expects the error
// code want.
func wantRefused(t *testing.T, client pulsar.Client, topic string, mode pulsar.ProducerAccessMode, want string) {
	t.Helper()
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: mode})
	if err == nil {
		p.Close()
		t.Fatalf("a producer of access mode %d was created, want %s", mode, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("producer of access mode %d: %v, want %s", mode, err, want)
	}
}

func rawProducerCmd(topic string, id uint64, mode pb.ProducerAccessMode, epoch *uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(100 + id),
		ProducerAccessMode: mode.Enum(), TopicEpoch: epoch}}
}

// rawProducer creates a producer on r and returns its PRODUCER_SUCCESS.
func rawProducer(t *testing.T, r *rawConn, topic string, id uint64, mode pb.ProducerAccessMode, epoch *uint64) *pb.CommandProducerSuccess {
	t.Helper()
	r.send(rawProducerCmd(topic, id, mode, epoch))
	f := r.next()
	if f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS || !f.Cmd.ProducerSuccess.GetProducerReady() {
		t.Fatalf("producer %d (%v): %v", id, mode, f.Cmd)
	}
	return f.Cmd.ProducerSuccess
}
