package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
)

// The handshake (Hello, then Welcome or Redirect) and the streams it
// opens, on both sides.

// Hello is what a stream opens with: it replicates topic from region
// Source to region Target.
type Hello struct {
	Source, Target, Topic string
}

// maxRedirects bounds the redirects a sender follows to reach the
// topic's owner in the target region (one is the usual: any broker of
// the region names the owner).
const maxRedirects = 4

// handshakeTimeout bounds the wait for the answer to a Hello.
const handshakeTimeout = 15 * time.Second

// Stream is an open replication stream to a remote region's owner of a
// topic: batches and subscription positions go out, acks come back.
// SendBatch and SendSubscription are called from one goroutine, Recv from
// one other.
type Stream struct {
	cs     replpb.Replication_ReplicateClient
	cancel context.CancelFunc
	addr   string
}

// Open opens a stream for h at addr, following Redirects to the owner,
// until a Welcome. ctx bounds the stream's life, not only the
// handshake's; the answer to a Hello is awaited at most 15 s.
func (d *Dialer) Open(ctx context.Context, addr string, h Hello) (*Stream, error) {
	for range maxRedirects {
		conn, release, err := d.acquire(addr)
		if err != nil {
			return nil, err
		}
		sctx, scancel := streamContext(ctx, release) // the stream's slot is freed when it ends
		cs, err := replpb.NewReplicationClient(conn).Replicate(sctx)
		if err == nil {
			err = cs.Send(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Hello{Hello: &replpb.Hello{
				Version: replpb.ProtocolVersion_PROTOCOL_VERSION_1, Source: h.Source, Target: h.Target, Topic: h.Topic}}})
		}
		var resp *replpb.ReplicateResponse
		if err == nil {
			timer := time.AfterFunc(handshakeTimeout, scancel)
			resp, err = cs.Recv()
			timer.Stop()
		}
		if err != nil {
			scancel()
			return nil, fmt.Errorf("handshake with %s: %w", addr, err)
		}
		if r := resp.GetRedirect(); r != nil {
			scancel()
			addr = r.Addr
			continue
		}
		if resp.GetWelcome() == nil {
			scancel()
			return nil, fmt.Errorf("handshake with %s: unexpected answer %v", addr, resp)
		}
		return &Stream{cs: cs, cancel: scancel, addr: addr}, nil
	}
	return nil, fmt.Errorf("too many redirects reaching the owner in region %s", h.Target)
}

// Addr is the address of the broker the stream reached (the owner).
func (s *Stream) Addr() string { return s.addr }

// SendBatch sends b, stamped with the time it is handed to the stream.
func (s *Stream) SendBatch(b replicator.Batch) error {
	return s.cs.Send(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Batch{Batch: BatchToProto(b, time.Now().UnixNano())}})
}

// SendSubscription sends a subscription's position.
func (s *Stream) SendSubscription(u *replpb.SubscriptionUpdate) error {
	return s.cs.Send(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Subscription{Subscription: u}})
}

// Recv returns the next ack from the target; io.EOF when the target
// closed the stream.
func (s *Stream) Recv() (replicator.Ack, error) {
	for {
		resp, err := s.cs.Recv()
		if err != nil {
			return replicator.Ack{}, err
		}
		if a := resp.GetAck(); a != nil {
			return AckFromProto(a), nil
		}
	}
}

// Close ends the stream (a Recv in progress returns an error).
func (s *Stream) Close() { s.cancel() }

// Target is a topic's replication on the broker that owns it in the
// target region, as the stream's server sees it. Safe for concurrent use.
type Target interface {
	// ApplyBatch applies a batch from the stream's source region: it
	// pushes the batch's slot on rq at once, in arrival order, and fills
	// it when the batch's write is persisted (without waiting for it). An
	// error ends the stream: one wrapping replicator.ErrBadBatch or
	// replicator.ErrLoop as InvalidArgument, any other as Unavailable.
	ApplyBatch(b replicator.Batch, rq *ReplyQueue) error
	// FreshAck raises a reply's Through to what is durable when it is
	// sent.
	FreshAck(a replicator.Ack) replicator.Ack
	// ApplySubscription applies a subscription's position sent by region
	// from.
	ApplySubscription(ctx context.Context, from string, u *replpb.SubscriptionUpdate)
}

// Accept decides, once a stream's Hello passed the handshake's checks,
// whether this broker takes it: a Target, or the address of the broker
// of this region to redirect to (a redirect wins over an error), or an
// error (a gRPC status) that refuses it.
type Accept func(ctx context.Context, h Hello) (t Target, redirect string, err error)

// Serve serves one incoming replication stream for the broker broker of
// region (see repl.proto): the handshake, then batches applied pipelined
// through the accepted Target and their replies in arrival order. It
// returns when the stream ends: once the source closed its side and the
// replies due are sent (nil, or the error that kept one from going), or
// with the error that ended it.
func Serve(st replpb.Replication_ReplicateServer, region, broker string, accept Accept) error {
	req, err := st.Recv()
	if err != nil {
		return err
	}
	h := req.GetHello()
	switch {
	case h == nil:
		return status.Error(codes.InvalidArgument, "replication: the first message must be a Hello")
	case h.Version != replpb.ProtocolVersion_PROTOCOL_VERSION_1:
		return status.Errorf(codes.FailedPrecondition, "replication: region %s speaks replication protocol version 1, not %d: upgrade the older side", region, h.Version)
	case h.Target != region:
		return status.Errorf(codes.FailedPrecondition, "replication: this broker is in region %s, not %s", region, h.Target)
	case h.Source == region:
		return status.Errorf(codes.InvalidArgument, "replication: a stream from region %s to itself", h.Source)
	}
	t, redirect, err := accept(st.Context(), Hello{Source: h.Source, Target: h.Target, Topic: h.Topic})
	switch {
	case redirect != "":
		return st.Send(&replpb.ReplicateResponse{Msg: &replpb.ReplicateResponse_Redirect{Redirect: &replpb.Redirect{Addr: redirect}}})
	case err != nil:
		return err
	}
	if err := st.Send(&replpb.ReplicateResponse{Msg: &replpb.ReplicateResponse_Welcome{Welcome: &replpb.Welcome{
		Version: replpb.ProtocolVersion_PROTOCOL_VERSION_1, Region: region, Broker: broker}}}); err != nil {
		return err
	}
	// Batches are applied pipelined: each one's entries go to the managed
	// ledger as it arrives, without waiting for the previous batch to be
	// persisted (the sender keeps up to MaxInflightBatches in flight), and
	// the replies go back in arrival order, each ack only once its write
	// and every earlier one are persisted (replies.go).
	rq := NewReplyQueue(func(a replicator.Ack) error {
		return st.Send(&replpb.ReplicateResponse{Msg: &replpb.ReplicateResponse_Ack{Ack: AckToProto(t.FreshAck(a))}})
	})
	defer rq.Close() // nothing is sent on the stream once this returns
	type received struct {
		req *replpb.ReplicateRequest
		at  int64 // Unix ns: the entries' Stamps.Received
	}
	reqs := make(chan received)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- received{req, time.Now().UnixNano()}:
			case <-st.Context().Done():
				recvErr <- st.Context().Err()
				return
			}
		}
	}()
	// streamErr maps an apply error to the stream's status.
	streamErr := func(err error) error {
		if errors.Is(err, replicator.ErrBadBatch) || errors.Is(err, replicator.ErrLoop) {
			return status.Errorf(codes.InvalidArgument, "replication: %v", err)
		}
		return status.Errorf(codes.Unavailable, "replication: %v", err)
	}
	for {
		var req *replpb.ReplicateRequest
		var at int64
		select {
		case r := <-reqs:
			req, at = r.req, r.at
		case err := <-recvErr:
			if err == io.EOF {
				// The sender closed its side: the replies still due are
				// sent before the stream ends.
				rq.Wait()
				return rq.Err()
			}
			return err
		case <-rq.Failed():
			return streamErr(rq.Err())
		}
		if err := CheckRequest(req, h.Source); err != nil {
			return err
		}
		if su := req.GetSubscription(); su != nil {
			sctx, scancel := context.WithTimeout(st.Context(), 10*time.Second)
			t.ApplySubscription(sctx, h.Source, su)
			scancel()
			continue
		}
		pb := req.GetBatch() // CheckRequest: a batch of the source region
		if err := t.ApplyBatch(BatchFromProto(pb, at), rq); err != nil {
			rq.Wait()
			return streamErr(err)
		}
	}
}
