package broker

import (
	"context"
	"errors"
	"testing"

	"github.com/meridian-mq/meridian/broker/access"
	"github.com/meridian-mq/meridian/broker/meta"
)

// A region that stops serving a namespace (failover) closes the topic's
// producers; producers queued for exclusive access are refused first
// (a retriable error) and leave the access core, so the producers'
// leaving grants none of them in a region that no longer serves, and the
// topic takes producers again afterwards (a queued producer left in the
// core would have been promoted to a ghost exclusive holder).
func TestFailoverRefusesQueuedProducers(t *testing.T) {
	c, p := testConn(t) // p: a shared producer
	topic := p.topic
	q := &Producer{id: 2, name: "q", conn: c, topic: topic, mode: access.WaitForExclusive, pending: make(chan struct{}, 1)}
	adm, err := topic.addProducer(context.Background(), q, nil)
	if err != nil || adm.wait == nil {
		t.Fatalf("WaitForExclusive behind a shared producer: %+v %v, want queued", adm, err)
	}
	failoverTopic{topic}.CloseProducers()
	select {
	case got := <-adm.wait:
		if !errors.Is(got.err, meta.ErrTopicFenced) {
			t.Fatalf("the queued producer got %+v, want a retriable refusal", got)
		}
	default:
		t.Fatal("the queued producer was not answered")
	}
	if _, ok := topic.access.Exclusive(); ok || topic.access.Waiting() != 0 {
		t.Fatal("the access core kept the refused producer")
	}
	s := &Producer{id: 3, name: "s", conn: c, topic: topic, pending: make(chan struct{}, 1)}
	if _, err := topic.addProducer(context.Background(), s, nil); err != nil {
		t.Fatalf("a shared producer after the failover's close: %v", err)
	}
}
