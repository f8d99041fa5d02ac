package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// Issue 8 (lookups p99 at scale): a lookup of a topic whose bundle has an
// owner is answered from memory — the watched copies of the namespace's
// policies, its bundle boundaries and the bundle keys — with no etcd read,
// on the owner and on any other broker; when the owner dies, the copy
// loses its key with the lease and the lookup no longer names it.
func TestLookupsAnsweredFromMemory(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	b1 := r.AddBroker("broker-1", "--ownership-ttl", "3s")
	b2 := r.AddBroker("broker-2", "--ownership-ttl", "3s")
	topic := topicName(t)
	// The bundle's owner: whichever broker the client's lookup placed it on.
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b1.URL(), OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	owner, other := b1, b2
	if ownerOf(t, r) == b2.ID {
		owner, other = b2, b1
	}
	p.Close()

	var id uint64
	lookup := func(b *testutil.BrokerProc) string {
		t.Helper()
		raw := dialRaw(t, b.URL())
		defer raw.c.Close()
		id++
		resp := raw.ask(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String(topic), RequestId: proto.Uint64(id)}}).GetLookupTopicResponse()
		if resp.GetResponse() != pb.CommandLookupTopicResponse_Connect {
			t.Fatalf("lookup at %s: %v %v %s", b.ID, resp.GetResponse(), resp.GetError(), resp.GetMessage())
		}
		return resp.GetBrokerServiceUrl()
	}
	memory := func(b *testutil.BrokerProc) float64 {
		return metricValue(t, b.AdminURL(), "meridian_broker_lookups_total", `answered="memory"`)
	}
	store := func(b *testutil.BrokerProc) float64 {
		return metricValue(t, b.AdminURL(), "meridian_broker_lookups_total", `answered="store"`)
	}
	for _, b := range []*testutil.BrokerProc{owner, other} {
		// The copies catch up within the watch's delivery.
		testutil.Eventually(t, 10*time.Second, "a lookup at "+b.ID+" answered from memory", func() bool {
			m := memory(b)
			if u := lookup(b); u != owner.URL() {
				t.Fatalf("lookup at %s names %s, the owner is %s", b.ID, u, owner.URL())
			}
			return memory(b) == m+1
		})
		m0, s0 := memory(b), store(b)
		for range 20 {
			if u := lookup(b); u != owner.URL() {
				t.Fatalf("lookup at %s names %s, the owner is %s", b.ID, u, owner.URL())
			}
		}
		if m, s := memory(b)-m0, store(b)-s0; m != 20 || s != 0 {
			t.Errorf("20 lookups at %s (owner %s): %v answered from memory, %v from the store; want 20 and 0", b.ID, owner.ID, m, s)
		}
	}

	// The owner dies: once its lease expires, the survivor's copy drops the
	// bundle key and its lookup places the bundle anew (on itself).
	owner.Kill()
	testutil.Eventually(t, 30*time.Second, "the survivor's lookup names itself", func() bool {
		return lookup(other) == other.URL()
	})
}
