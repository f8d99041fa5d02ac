package broker_test

import (
	"testing"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// A client repeats PRODUCER or SUBSCRIBE with the same id on the same
// connection when its first request timed out on its side (a failover
// holds creation for seconds, the Go client's operation timeout can be
// shorter). The repeat gets the producer or consumer the first created —
// a ProducerBusy there left the Go client retrying against its own
// producer for good (TestAutomaticFailoverOnSilentOutage: no receipt in
// 90 s after the failover).
func TestRepeatedCreationOnOneConnection(t *testing.T) {
	s := standalone(t)
	topic := topicName(t)
	r := dialRaw(t, s.URL)
	first := r.producer(topic, 7)
	if first.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer: %v %v", first.GetType(), first.GetError())
	}
	name := first.GetProducerSuccess().GetProducerName()
	// The Go client's repeat carries the name the broker gave.
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(7), RequestId: proto.Uint64(201), ProducerName: proto.String(name)}})
	again := r.next().Cmd
	if again.GetType() != pb.BaseCommand_PRODUCER_SUCCESS || again.GetProducerSuccess().GetProducerName() != name || again.GetProducerSuccess().GetRequestId() != 201 {
		t.Fatalf("repeated PRODUCER: %v %v, want PRODUCER_SUCCESS for %s", again.GetType(), again.GetError(), name)
	}
	r.write(sendFrame(t, 7, 0, []byte("after the repeat")))
	if c := r.next().Cmd; c.GetType() != pb.BaseCommand_SEND_RECEIPT {
		t.Fatalf("send through the repeated producer: %v %v", c.GetType(), c.GetSendError())
	}
	// The same id for another topic is still refused.
	if c := r.producer(topic+"-other", 7); c.GetType() != pb.BaseCommand_ERROR || c.GetError().GetError() != pb.ServerError_ProducerBusy {
		t.Fatalf("producer id 7 for another topic: %v %v, want ProducerBusy", c.GetType(), c.GetError())
	}

	sub := func(req uint64) *pb.BaseCommand {
		r.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
			Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Exclusive.Enum(),
			ConsumerId: proto.Uint64(3), RequestId: proto.Uint64(req)}})
		for {
			c := r.next().Cmd
			if c.GetType() == pb.BaseCommand_SUCCESS || c.GetType() == pb.BaseCommand_ERROR {
				return c
			}
		}
	}
	if c := sub(301); c.GetType() != pb.BaseCommand_SUCCESS {
		t.Fatalf("subscribe: %v %v", c.GetType(), c.GetError())
	}
	if c := sub(302); c.GetType() != pb.BaseCommand_SUCCESS || c.GetSuccess().GetRequestId() != 302 {
		t.Fatalf("repeated SUBSCRIBE: %v %v, want SUCCESS", c.GetType(), c.GetError())
	}
}
