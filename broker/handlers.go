package broker

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/broker/security"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

func (c *conn) handlePartitionedMetadata(m *pb.CommandPartitionedTopicMetadata) {
	ctx, cancel := c.ctx()
	defer cancel()
	resp := &pb.CommandPartitionedTopicMetadataResponse{RequestId: proto.Uint64(m.GetRequestId())}
	err := c.authorizeTopic(ctx, m.GetTopic(), security.OpLookup)
	var n int
	if err == nil {
		n, err = c.b.partitions(ctx, m.GetTopic())
	}
	if err != nil {
		resp.Response = pb.CommandPartitionedTopicMetadataResponse_Failed.Enum()
		resp.Error = serverError(err).Enum()
		resp.Message = proto.String(err.Error())
	} else {
		resp.Partitions = proto.Uint32(uint32(n))
		resp.Response = pb.CommandPartitionedTopicMetadataResponse_Success.Enum()
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: resp})
}

func (c *conn) handleLookup(m *pb.CommandLookupTopic) {
	ctx, cancel := c.ctx()
	defer cancel()
	resp := &pb.CommandLookupTopicResponse{RequestId: proto.Uint64(m.GetRequestId())}
	if err := c.authorizeTopic(ctx, m.GetTopic(), security.OpLookup); err != nil {
		resp.Response = pb.CommandLookupTopicResponse_Failed.Enum()
		resp.Error = serverError(err).Enum()
		resp.Message = proto.String(err.Error())
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: resp})
		return
	}
	listener := c.lookupListener(m.GetAdvertisedListenerName())
	if other, err := c.b.fo.CrossRegionLookup(ctx, m.GetTopic(), listener); other != "" || err != nil {
		// The namespace is active in another region: ask a broker there.
		if err != nil {
			resp.Response = pb.CommandLookupTopicResponse_Failed.Enum()
			resp.Error = serverError(err).Enum()
			resp.Message = proto.String(err.Error())
		} else {
			resp.Response = pb.CommandLookupTopicResponse_Redirect.Enum()
			resp.BrokerServiceUrl = proto.String(other)
			resp.BrokerServiceUrlTls = security.TLSURL(other)
			resp.Authoritative = proto.Bool(false)
		}
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: resp})
		return
	}
	url, redirect, err := c.b.lookup(ctx, m.GetTopic(), m.GetAuthoritative(), listener)
	switch {
	case err != nil:
		resp.Response = pb.CommandLookupTopicResponse_Failed.Enum()
		resp.Error = serverError(err).Enum()
		resp.Message = proto.String(err.Error())
	case redirect:
		// The chosen broker acquires the bundle when it answers the
		// client's authoritative follow-up lookup.
		resp.Response = pb.CommandLookupTopicResponse_Redirect.Enum()
		resp.BrokerServiceUrl = proto.String(url)
		resp.BrokerServiceUrlTls = security.TLSURL(url)
		resp.Authoritative = proto.Bool(true)
	default:
		resp.Response = pb.CommandLookupTopicResponse_Connect.Enum()
		resp.BrokerServiceUrl = proto.String(url)
		resp.BrokerServiceUrlTls = security.TLSURL(url)
		resp.Authoritative = proto.Bool(true)
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: resp})
}

func (c *conn) handleProducer(m *pb.CommandProducer) {
	// Creation loads the topic (etcd, bookies): off the reader goroutine,
	// but SENDs of this producer must wait for it.
	id := m.GetProducerId()
	if !c.beginRequest(m.GetRequestId()) {
		return
	}
	if isNonPersistent(m.GetTopic()) {
		c.handleNPProducer(m)
		return
	}
	// The client may ask again with the same producer id on the same
	// connection after its earlier request timed out on its side (a
	// failover holds creation for seconds; the Go client's operation
	// timeout may be shorter). As Pulsar does: while the first creation
	// runs, ServiceNotReady (retried); once it succeeded, its producer is
	// the answer — refusing it as a name already connected left the Go
	// client retrying with back-off against its own producer for good.
	c.mu.Lock()
	old := c.producers[id]
	c.mu.Unlock()
	if old != nil {
		// (The topic's lock is taken without the connection's.)
		if tn, err := meta.ParseTopic(m.GetTopic()); err == nil && tn == old.topic.name {
			if last, epoch, ok := old.topic.producerLastSeq(old); ok {
				c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
					RequestId:      proto.Uint64(m.GetRequestId()),
					ProducerName:   proto.String(old.name),
					LastSequenceId: proto.Int64(last),
					SchemaVersion:  old.schemaVersion,
					ProducerReady:  proto.Bool(true),
					TopicEpoch:     epoch,
				}})
				c.endRequest()
				return
			}
			c.mu.Lock()
			if c.producers[id] == old {
				delete(c.producers, id) // its topic let it go: create anew
			}
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	if _, busy := c.pendingProduce[id]; busy {
		c.mu.Unlock()
		c.sendError(m.GetRequestId(), fmt.Errorf("%w: producer %d is being created on this connection", meta.ErrServiceNotReady, id))
		c.endRequest()
		return
	}
	done := make(chan struct{})
	c.pendingProduce[id] = done
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			delete(c.pendingProduce, id)
			c.mu.Unlock()
			close(done)
			c.endRequest()
		}()
		ctx, cancel := c.ctx()
		defer cancel()
		if err := c.authorizeTopic(ctx, m.GetTopic(), security.OpProduce); err != nil {
			c.sendError(m.GetRequestId(), err)
			return
		}
		if m.GetInitialSubscriptionName() != "" {
			// Creating a subscription is consuming's right (as Pulsar checks
			// SUBSCRIBE for it).
			if err := c.authorizeTopic(ctx, m.GetTopic(), security.OpConsume); err != nil {
				c.sendError(m.GetRequestId(), fmt.Errorf("%w: creating initial subscription %s: %v", meta.ErrAuthorization, m.GetInitialSubscriptionName(), err))
				return
			}
		}
		p, adm, err := c.b.createProducer(ctx, c, m)
		if err != nil {
			c.sendError(m.GetRequestId(), err)
			return
		}
		if adm.wait != nil {
			// Queued for exclusive access: say so (the Go client then waits
			// without a timeout) and hold the request until it is granted,
			// refused, or the client leaves.
			c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
				RequestId:     proto.Uint64(m.GetRequestId()),
				ProducerName:  proto.String(p.name),
				ProducerReady: proto.Bool(false),
			}})
			c.mu.Lock()
			c.waitingProducers[id] = p
			c.mu.Unlock()
			select {
			case adm.admitted = <-adm.wait:
			case <-c.closed:
				p.topic.removeProducer(p)
				adm.admitted = admitted{err: fmt.Errorf("%w: connection closed", meta.ErrServiceNotReady)}
			}
			c.mu.Lock()
			if c.waitingProducers[id] == p {
				delete(c.waitingProducers, id)
			}
			c.mu.Unlock()
			if adm.err != nil {
				c.sendError(m.GetRequestId(), adm.err)
				return
			}
		}
		c.mu.Lock()
		if old := c.producers[id]; old != nil {
			c.mu.Unlock()
			p.topic.removeProducer(p)
			c.sendError(m.GetRequestId(), fmt.Errorf("%w: producer id %d already in use on this connection", meta.ErrProducerBusy, id))
			return
		}
		select {
		case <-c.closed:
			// Closed while it was granted: close already let go of the
			// connection's producers, not of this one.
			c.mu.Unlock()
			p.topic.removeProducer(p)
			return
		default:
		}
		c.producers[id] = p
		delete(c.closedProducers, id) // created again: its SENDs are its own
		c.mu.Unlock()
		ps := &pb.CommandProducerSuccess{
			RequestId:      proto.Uint64(m.GetRequestId()),
			ProducerName:   proto.String(p.name),
			LastSequenceId: proto.Int64(adm.last),
			SchemaVersion:  p.schemaVersion,
			ProducerReady:  proto.Bool(true),
		}
		if adm.hasEpoch {
			ps.TopicEpoch = proto.Uint64(adm.epoch)
		}
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: ps})
	}()
}

func (c *conn) handleSend(m *pb.CommandSend, f *codec.Frame) bool {
	payload := f.Payload
	id := m.GetProducerId()
	c.mu.Lock()
	p := c.producers[id]
	np := c.npProducers[id]
	wait := c.pendingProduce[id]
	c.mu.Unlock()
	if p == nil && np == nil && wait != nil {
		<-wait
		p, np = c.producer(id), c.npProducer(id)
	}
	if np != nil {
		return c.handleNPSend(np, m, f)
	}
	sendErr := func(code pb.ServerError, msg string) {
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
			ProducerId: proto.Uint64(id), SequenceId: proto.Uint64(m.GetSequenceId()), Error: code.Enum(), Message: proto.String(msg)}})
	}
	if p == nil {
		c.mu.Lock()
		_, closedByBroker := c.closedProducers[id]
		c.mu.Unlock()
		if closedByBroker {
			// A SEND the client wrote before it read our CLOSE_PRODUCER
			// (its topic unloaded: a hand-off, a move, a reload): no
			// answer, it resends it after reconnecting, as for the SENDs
			// the closing topic dropped (errDropSilently). A SEND_ERROR
			// NotAllowedError here made the Go client (v0.19) take the
			// producer off the connection without reconnecting it; the
			// CLOSE_PRODUCER behind it then found no producer, and its
			// sends hung until their timeout (TestOwnerBrokerLoss: the
			// new owner never saw the producer).
			return true
		}
		sendErr(pb.ServerError_NotAllowedError, fmt.Sprintf("no producer %d on this connection", id))
		return true
	}
	if err := codec.VerifyChecksum(payload); err != nil {
		// Corrupted in flight: close so the client resends intact bytes.
		c.b.metrics.rejectedFrames.Inc()
		c.peerLog(slog.LevelWarn, "closing connection: message checksum mismatch", "producer", p.name, "err", err)
		return false
	}
	if len(payload) > c.b.cfg.MaxMessageSize+codec.FramePadding {
		sendErr(pb.ServerError_NotAllowedError, "message too large")
		return true
	}
	buf, off := f.PayloadRoom()
	p.publish(m, entry.Framed{Buf: buf, Off: off})
	return true
}

func (c *conn) handleCloseProducer(m *pb.CommandCloseProducer) {
	c.mu.Lock()
	if np := c.npProducers[m.GetProducerId()]; np != nil {
		delete(c.npProducers, m.GetProducerId())
		c.mu.Unlock()
		np.topic.removeProducer(np)
		c.sendSuccess(m.GetRequestId())
		return
	}
	p := c.producers[m.GetProducerId()]
	delete(c.producers, m.GetProducerId())
	delete(c.closedProducers, m.GetProducerId())
	if p == nil {
		// Still queued for exclusive access: it gives up.
		p = c.waitingProducers[m.GetProducerId()]
	}
	c.mu.Unlock()
	if p != nil {
		p.topic.removeProducer(p)
	}
	c.sendSuccess(m.GetRequestId())
}

func (c *conn) handleSubscribe(m *pb.CommandSubscribe) {
	id := m.GetConsumerId()
	if !c.beginRequest(m.GetRequestId()) {
		return
	}
	if isNonPersistent(m.GetTopic()) {
		c.handleNPSubscribe(m)
		return
	}
	// A repeated SUBSCRIBE for the same consumer id on this connection
	// (the client's earlier one timed out on its side): as for producers,
	// ServiceNotReady while the first runs, success once it succeeded.
	old := c.consumer(id)
	if old != nil {
		if tn, err := meta.ParseTopic(m.GetTopic()); err == nil && tn == old.sub.topic.name && old.sub.name == m.GetSubscription() && old.sub.has(old) {
			c.sendSuccess(m.GetRequestId())
			c.endRequest()
			return
		}
	}
	c.mu.Lock()
	if c.pendingSub[id] {
		c.mu.Unlock()
		c.sendError(m.GetRequestId(), fmt.Errorf("%w: consumer %d is subscribing on this connection", meta.ErrServiceNotReady, id))
		c.endRequest()
		return
	}
	c.pendingSub[id] = true
	c.mu.Unlock()
	go func() {
		defer c.endRequest()
		defer func() {
			c.mu.Lock()
			delete(c.pendingSub, id)
			c.mu.Unlock()
		}()
		ctx, cancel := c.ctx()
		defer cancel()
		if err := c.authorizeTopic(ctx, m.GetTopic(), security.OpConsume); err != nil {
			c.sendError(m.GetRequestId(), err)
			return
		}
		cs, err := c.b.subscribe(ctx, c, m)
		if err != nil {
			c.sendError(m.GetRequestId(), err)
			return
		}
		if d := c.b.cfg.SubscribeFaultDelay; d > 0 {
			time.Sleep(d)
		}
		c.mu.Lock()
		if c.consumers[id] != nil {
			c.mu.Unlock()
			cs.sub.removeConsumer(cs)
			c.sendError(m.GetRequestId(), fmt.Errorf("%w: consumer id %d already in use", meta.ErrConsumerBusy, id))
			return
		}
		select {
		case <-c.closed:
			// The connection closed while the subscription was made:
			// close already let go of the connection's consumers, not of
			// this one. Kept, it stayed in the subscription for good — a
			// consumer no client owns, with no permits: an Exclusive
			// subscription refused every later consumer as busy, and
			// Key_Shared held the keys its hash range took, Shared lost
			// nothing (issue 32: the 100-topic region outage drill's
			// acknowledged messages never delivered on its Exclusive and
			// Key_Shared subscriptions, none on Shared; the Go client
			// drops a connection silent for two keepalives, and every
			// consumer of a client shares one connection per broker).
			c.mu.Unlock()
			cs.sub.removeConsumer(cs)
			return
		default:
		}
		c.consumers[id] = cs
		c.mu.Unlock()
		c.sendSuccess(m.GetRequestId())
		cs.sub.consumerReady(cs)
	}()
}

func positionOf(id *pb.MessageIdData) mledger.Position {
	return mledger.Position{Ledger: int64(id.GetLedgerId()), Entry: int64(id.GetEntryId())}
}

func (c *conn) handleAck(m *pb.CommandAck) {
	cs := c.consumer(m.GetConsumerId())
	if cs != nil {
		cs.sub.ack(cs, m)
	}
	if m.RequestId != nil {
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_ACK_RESPONSE.Enum(), AckResponse: &pb.CommandAckResponse{
			ConsumerId: proto.Uint64(m.GetConsumerId()), RequestId: m.RequestId}})
	}
}

func (c *conn) handleCloseConsumer(m *pb.CommandCloseConsumer) {
	c.mu.Lock()
	cs := c.consumers[m.GetConsumerId()]
	delete(c.consumers, m.GetConsumerId())
	c.mu.Unlock()
	if cs != nil {
		cs.sub.removeConsumer(cs)
	}
	c.sendSuccess(m.GetRequestId())
}

func (c *conn) handleUnsubscribe(m *pb.CommandUnsubscribe) {
	cs := c.consumer(m.GetConsumerId())
	if cs == nil {
		c.sendError(m.GetRequestId(), fmt.Errorf("%w: no consumer %d", meta.ErrNotAllowed, m.GetConsumerId()))
		return
	}
	ctx, cancel := c.ctx()
	defer cancel()
	if err := cs.sub.topic.unsubscribe(ctx, cs); err != nil {
		c.sendError(m.GetRequestId(), err)
		return
	}
	c.mu.Lock()
	delete(c.consumers, m.GetConsumerId())
	c.mu.Unlock()
	c.sendSuccess(m.GetRequestId())
}

// handleSeek resets the subscription, answers SUCCESS and then closes the
// consumer: the Go client pauses dispatch after a seek until it
// reconnects, as the Java broker disconnects consumers on a cursor reset.
func (c *conn) handleSeek(m *pb.CommandSeek) {
	cs := c.consumer(m.GetConsumerId())
	if cs == nil {
		c.sendError(m.GetRequestId(), fmt.Errorf("%w: no consumer %d", meta.ErrNotAllowed, m.GetConsumerId()))
		return
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var err error
	if m.MessageId != nil {
		err = cs.sub.seekTo(ctx, cs.sub.topic.localPos(positionOf(m.MessageId)), false)
	} else {
		err = cs.sub.seekTime(ctx, int64(m.GetMessagePublishTime()))
	}
	if err != nil {
		c.sendError(m.GetRequestId(), err)
		return
	}
	c.sendSuccess(m.GetRequestId())
	cs.sub.mu.Lock()
	cs.sub.seeking = true
	cs.sub.mu.Unlock()
	cs.sub.closeConsumers(nil)
}

func (c *conn) handleGetLastMessageID(m *pb.CommandGetLastMessageId) {
	cs := c.consumer(m.GetConsumerId())
	if cs == nil {
		c.sendError(m.GetRequestId(), fmt.Errorf("%w: no consumer %d", meta.ErrNotAllowed, m.GetConsumerId()))
		return
	}
	last, wire := cs.sub.topic.lastIDs()
	md := cs.sub.cursor.MarkDeleted()
	id := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(wire.Ledger)), EntryId: proto.Uint64(uint64(wire.Entry))}
	if part := cs.sub.topic.name.Partition; part >= 0 {
		id.Partition = proto.Int32(int32(part))
	}
	if last.Entry >= 0 {
		// The batch index of the last message, so readers with
		// StartMessageIDInclusive stop at the right message.
		if n := cs.sub.topic.lastEntryBatchSize(); n > 1 {
			id.BatchIndex = proto.Int32(int32(n - 1))
			id.BatchSize = proto.Int32(int32(n))
		}
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE.Enum(), GetLastMessageIdResponse: &pb.CommandGetLastMessageIdResponse{
		RequestId:                  proto.Uint64(m.GetRequestId()),
		LastMessageId:              id,
		ConsumerMarkDeletePosition: &pb.MessageIdData{LedgerId: proto.Uint64(uint64(md.Ledger)), EntryId: proto.Uint64(uint64(md.Entry))},
	}})
}

func (c *conn) handleGetTopics(m *pb.CommandGetTopicsOfNamespace) {
	ctx, cancel := c.ctx()
	defer cancel()
	ns := m.GetNamespace()
	if err := meta.ValidateNamespace(ns); err != nil {
		c.sendError(m.GetRequestId(), err)
		return
	}
	if err := c.authorizeNamespace(ctx, ns, security.OpLookup); err != nil {
		c.sendError(m.GetRequestId(), err)
		return
	}
	topics, err := c.b.meta.ListTopics(ctx, ns)
	if err != nil {
		c.sendError(m.GetRequestId(), err)
		return
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(), GetTopicsOfNamespaceResponse: &pb.CommandGetTopicsOfNamespaceResponse{
		RequestId: proto.Uint64(m.GetRequestId()), Topics: topics, Filtered: proto.Bool(false), Changed: proto.Bool(true),
	}})
}
