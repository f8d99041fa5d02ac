package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/grpcpool"
	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
)

// The Replication gRPC service: the listener, the endpoint's
// registration, the client connections, and the incoming streams.

// Start listens for incoming streams on Config.ListenAddr (or, when "",
// on a free port of pulsarAddr's host) and registers this broker's
// endpoint and serviceURL in the global store.
func (svc *Service) Start(pulsarAddr, serviceURL string) error {
	svc.serviceURL = serviceURL
	addr := svc.cfg.ListenAddr
	if addr == "" {
		host, _, err := net.SplitHostPort(pulsarAddr)
		if err != nil {
			return err
		}
		addr = net.JoinHostPort(host, "0")
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("broker: replication listen %s: %w", addr, err)
	}
	svc.lis, svc.addr = lis, svc.cfg.AdvertisedAddr
	if svc.addr == "" {
		svc.addr = lis.Addr().String()
	}
	svc.srv = grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(64 << 20), grpcpool.ServerOption(),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true})},
		append(grpcpool.TransportServerOptions(), svc.cfg.ServerOptions...)...)...)
	replpb.RegisterReplicationServer(svc.srv, svc)
	go func() { _ = svc.srv.Serve(lis) }()
	svc.wg.Add(1)
	go svc.registerLoop()
	return nil
}

// Addr returns the advertised replication address.
func (svc *Service) Addr() string { return svc.addr }

// registerLoop keeps this broker's replication endpoint in the global
// store, re-registering after a lost lease.
func (svc *Service) registerLoop() {
	defer svc.wg.Done()
	key := replEndpointsKey + svc.cfg.Cluster + "/" + svc.cfg.BrokerID
	for svc.ctx.Err() == nil {
		lease, err := svc.cfg.GlobalStore.GrantLease(svc.ctx, svc.cfg.OwnershipTTL)
		if err == nil {
			ctx, cancel := context.WithTimeout(svc.ctx, 10*time.Second)
			_, err = svc.cfg.GlobalStore.PutWithLease(ctx, key, []byte(svc.addr), lease.ID)
			if err == nil {
				// The region's brokers, for lookups redirected from other
				// regions (broker/failoverctl).
				_, err = svc.cfg.GlobalStore.PutWithLease(ctx, meta.RegionBrokersKey(svc.cfg.Cluster)+svc.cfg.BrokerID, []byte(svc.serviceURL), lease.ID)
			}
			cancel()
			if err == nil {
				select {
				case <-lease.Lost():
					svc.log.Warn("replication endpoint lease lost; registering again")
					continue
				case <-svc.ctx.Done():
					rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
					_ = lease.Revoke(rctx)
					rcancel()
					return
				}
			}
			rctx, rcancel := context.WithTimeout(svc.ctx, 2*time.Second)
			_ = lease.Revoke(rctx)
			rcancel()
		}
		svc.log.Warn("replication endpoint not registered in the global store; retrying", "err", err)
		select {
		case <-svc.ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (svc *Service) close() {
	if svc.srv != nil {
		svc.srv.Stop()
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for _, c := range svc.conns {
		c.Close()
	}
	svc.conns = map[string]*grpc.ClientConn{}
}

// endpoints lists the registered replication addresses of region.
func (svc *Service) endpoints(ctx context.Context, region string) ([]string, error) {
	return svc.cfg.GlobalStore.ListValues(ctx, replEndpointsKey+region+"/")
}

func (svc *Service) conn(addr string) (*grpc.ClientConn, error) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if c, ok := svc.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)), grpcpool.DialOption(),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 10 * time.Second})},
		append(grpcpool.TransportDialOptions(), svc.cfg.DialOptions...)...)...)
	if err != nil {
		return nil, err
	}
	svc.conns[addr] = c
	return c, nil
}

// Replicate serves one incoming replication stream (see repl.proto).
func (svc *Service) Replicate(st replpb.Replication_ReplicateServer) error {
	req, err := st.Recv()
	if err != nil {
		return err
	}
	h := req.GetHello()
	switch {
	case h == nil:
		return status.Error(codes.InvalidArgument, "replication: the first message must be a Hello")
	case h.Version != replpb.ProtocolVersion_PROTOCOL_VERSION_1:
		return status.Errorf(codes.FailedPrecondition, "replication: region %s speaks replication protocol version 1, not %d: upgrade the older side", svc.cfg.Cluster, h.Version)
	case h.Target != svc.cfg.Cluster:
		return status.Errorf(codes.FailedPrecondition, "replication: this broker is in region %s, not %s", svc.cfg.Cluster, h.Target)
	case h.Source == svc.cfg.Cluster:
		return status.Errorf(codes.InvalidArgument, "replication: a stream from region %s to itself", h.Source)
	}
	if svc.cfg.Authorize != nil {
		if err := svc.cfg.Authorize(st.Context(), h.Source); err != nil {
			return err
		}
	}
	tn, err := meta.ParseTopic(h.Topic)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "replication: %v", err)
	}
	ctx, cancel := context.WithTimeout(st.Context(), 30*time.Second)
	pol, err := svc.cfg.Meta.GetPolicies(ctx, tn.NamespaceName())
	cancel()
	if err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return status.Errorf(codes.NotFound, "replication: namespace %s: %v", tn.NamespaceName(), err)
		}
		return status.Errorf(codes.Unavailable, "replication: namespace %s: %v", tn.NamespaceName(), err)
	}
	if !slices.Contains(pol.ReplicationClusters, h.Source) || !slices.Contains(pol.ReplicationClusters, svc.cfg.Cluster) {
		return status.Errorf(codes.PermissionDenied, "replication: namespace %s replicates between %v: region %s may not write into region %s", tn.NamespaceName(), pol.ReplicationClusters, h.Source, svc.cfg.Cluster)
	}
	ctx, cancel = context.WithTimeout(st.Context(), 30*time.Second)
	t, redirect, err := svc.host.Target(ctx, tn, pol)
	cancel()
	switch {
	case redirect != "":
		return st.Send(&replpb.ReplicateResponse{Msg: &replpb.ReplicateResponse_Redirect{Redirect: &replpb.Redirect{Addr: redirect}}})
	case err != nil:
		return status.Errorf(codes.Unavailable, "replication: %v", err)
	}
	if err := st.Send(&replpb.ReplicateResponse{Msg: &replpb.ReplicateResponse_Welcome{Welcome: &replpb.Welcome{
		Version: replpb.ProtocolVersion_PROTOCOL_VERSION_1, Region: svc.cfg.Cluster, Broker: svc.cfg.BrokerID}}}); err != nil {
		return err
	}
	svc.log.Debug("replication stream accepted", "topic", tn.String(), "from", h.Source)
	// Batches are applied pipelined: each one's entries go to the managed
	// ledger as it arrives, without waiting for the previous batch to be
	// persisted (the sender keeps up to MaxInflightBatches in flight), and
	// the replies go back in arrival order, each ack only once its write
	// and every earlier one are persisted (replies.go).
	rq := newReplyQueue(func(a replicator.Ack) error {
		return st.Send(&replpb.ReplicateResponse{Msg: &replpb.ReplicateResponse_Ack{Ack: ackToProto(t.freshAck(a))}})
	})
	defer rq.close() // nothing is sent on the stream once this returns
	reqs := make(chan *replpb.ReplicateRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
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
		select {
		case req = <-reqs:
		case err := <-recvErr:
			if err == io.EOF {
				// The sender closed its side: the replies still due are
				// sent before the stream ends.
				rq.wait()
				return rq.err()
			}
			return err
		case <-rq.failed:
			return streamErr(rq.err())
		}
		if su := req.GetSubscription(); su != nil {
			sctx, scancel := context.WithTimeout(st.Context(), 10*time.Second)
			t.applySubscription(sctx, h.Source, su)
			scancel()
			continue
		}
		pb := req.GetBatch()
		if pb == nil {
			return status.Error(codes.InvalidArgument, "replication: expected a Batch or a SubscriptionUpdate")
		}
		if pb.Origin != h.Source {
			return status.Errorf(codes.InvalidArgument, "replication: a batch of origin %s on the stream of %s", pb.Origin, h.Source)
		}
		if err := t.applyBatch(batchFromProto(pb), rq); err != nil {
			rq.wait()
			return streamErr(err)
		}
	}
}
