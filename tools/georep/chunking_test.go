package georep

import (
	"bytes"
	"context"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/meridian-mq/meridian/tools/up"
)

// Issue 35: a chunked message replicated to another region is consumable
// there. The replicator copies entries, each chunk one, with the
// producer's metadata verbatim — uuid, chunk_id, num_chunks_from_msg,
// total_chunk_msg_size — so a consumer in west reassembles what east's
// producer split (2 MiB in chunks of 256 KiB: 8 entries), byte for byte,
// in order among the small messages around it, under the message id east
// gave it (the chunk message id names east's first and last chunk); its
// ack there, translated chunk by chunk to west's positions, empties west's
// backlog.
func TestChunkedMessageReassembledInTheOtherRegion(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3})
	d.createNamespace("public/chunked", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-active"})
	const topic = "persistent://public/chunked/large"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := d.client("east").CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, EnableChunking: true, ChunkMaxMessageSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	big := make([]byte, 2<<20)
	rand.New(rand.NewSource(35)).Read(big)
	var sent []pulsar.MessageID
	for _, b := range [][]byte{[]byte("before"), big, []byte("after")} {
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: b})
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, id)
	}
	first, last, ok := strings.Cut(sent[1].String(), ";")
	if !ok {
		t.Fatalf("the 2 MiB message was not chunked: id %s", sent[1])
	}
	d.waitReplicated("east", topic, []string{"west"}, time.Minute)

	c, err := d.client("west").Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "west-reader",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, AckWithResponse: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, want := range [][]byte{[]byte("before"), big, []byte("after")} {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("west received %d of 3: %v", i, err)
		}
		if !bytes.Equal(m.Payload(), want) {
			t.Fatalf("west's message %d (%s): %d bytes, want the %d east sent", i, m.ID(), len(m.Payload()), len(want))
		}
		if m.ID().String() != sent[i].String() {
			t.Fatalf("west's message %d has id %s, east gave it %s", i, m.ID(), sent[i])
		}
		if err := c.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("west reassembled the chunked message %s (chunks %s to %s of east)", sent[1], first, last)
	testutil.Eventually(t, time.Minute, "west's backlog empty after the acks", func() bool {
		var st struct {
			Subscriptions map[string]struct {
				MsgBacklog int64 `json:"msgBacklog"`
			} `json:"subscriptions"`
		}
		err := d.admin("west", "GET", "/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/stats", nil, &st)
		return err == nil && st.Subscriptions["west-reader"].MsgBacklog == 0
	})
}
