package georep

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/broker/codec"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/tools/up"
)

// A replication target applies batches pipelined (each batch's entries
// go to the log as it arrives, before the earlier batches are persisted),
// and must still: answer in the order the batches arrived, acknowledge
// an entry only with everything before it, write every entry once (a
// batch resent while its first copy is still being written is a
// duplicate), and keep the origin's order. Here a stream from "east" to
// west's broker sends 30 batches of 5 entries without waiting for acks,
// with a resend of batch 5 among them; then west's consumer must get the
// 150 entries exactly once, in order.
func TestReplicationTargetPipelinedBatchesAckInOrderAndApplyOnce(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3})
	d.createNamespace("public/pipe", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-active"})
	const topic = "persistent://public/pipe/stream"
	const batches, per = 30, 5

	conn, err := grpc.NewClient(d.proc("west-broker-1").Replication, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := replpb.NewReplicationClient(conn).Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Hello{Hello: &replpb.Hello{
		Version: replpb.ProtocolVersion_PROTOCOL_VERSION_1, Source: "east", Target: "west", Topic: topic}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil || resp.GetWelcome() == nil {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	entry := func(seq uint64) *replpb.Entry {
		msg, err := codec.EncodeMessage(&pb.MessageMetadata{ProducerName: proto.String("east-pipe"), SequenceId: proto.Uint64(seq),
			PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}, fmt.Appendf(nil, "m-%d", seq))
		if err != nil {
			t.Fatal(err)
		}
		return &replpb.Entry{OriginSeq: seq, PublishMs: time.Now().UnixMilli(), Data: msg,
			OriginId: &replpb.MessageId{Ledger: 900000, Entry: int64(seq), Batch: -1}}
	}
	batch := func(id uint64, first uint64) *replpb.ReplicateRequest {
		b := &replpb.Batch{Id: id, Origin: "east", Stream: 1}
		for s := first; s < first+per; s++ {
			b.Entries = append(b.Entries, entry(s))
		}
		return &replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Batch{Batch: b}}
	}
	// Batch ids increase in send order; id 11 carries batch 5's entries
	// again (a resend while they may still be in flight).
	var sentIDs []uint64
	id := uint64(0)
	for i := range batches {
		id++
		if err := st.Send(batch(id, uint64(i*per+1))); err != nil {
			t.Fatal(err)
		}
		sentIDs = append(sentIDs, id)
		if i == 9 {
			id++
			if err := st.Send(batch(id, 4*per+1)); err != nil {
				t.Fatal(err)
			}
			sentIDs = append(sentIDs, id)
		}
	}
	const last = batches * per
	var lastID, lastThrough uint64
	acks := 0
	for lastThrough < last {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d acks (through %d): %v", acks, lastThrough, err)
		}
		a := resp.GetAck()
		if a == nil {
			continue
		}
		acks++
		if a.BatchId < lastID || a.Through < lastThrough {
			t.Fatalf("ack %d (batch %d, through %d) after batch %d through %d: replies out of order", acks, a.BatchId, a.Through, lastID, lastThrough)
		}
		if a.ResendFrom != 0 || a.Regressed {
			t.Fatalf("unexpected nack %v", a)
		}
		lastID, lastThrough = a.BatchId, a.Through
	}
	if lastID != sentIDs[len(sentIDs)-1] {
		t.Fatalf("the ack through %d names batch %d, want the last batch %d", lastThrough, lastID, sentIDs[len(sentIDs)-1])
	}
	t.Logf("%d batches (one a resend) → %d acks, in order", len(sentIDs), acks)
	_ = st.CloseSend()

	c, err := d.client("west").Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for want := uint64(1); want <= last; want++ {
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := c.Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("waiting for entry %d: %v", want, err)
		}
		if got := string(m.Payload()); got != fmt.Sprintf("m-%d", want) {
			t.Fatalf("entry %d: got %q (out of order or duplicated)", want, got)
		}
		c.Ack(m)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer rcancel()
	if m, err := c.Receive(rctx); err == nil {
		t.Fatalf("an extra message after the %d: %q (a duplicate)", last, m.Payload())
	}
}
