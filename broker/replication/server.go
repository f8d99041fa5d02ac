package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/netaddr"
	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
	"github.com/meridian-mq/meridian/replicator/transport"
)

// The Replication gRPC service: the listener, the endpoint's
// registration, and the incoming streams' admission; the transport
// (handshake, registry, connections, conversions, reply queue) is
// replicator/transport's.

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
		svc.addr = netaddr.Advertised(lis.Addr().String(), nil)
	}
	svc.srv = transport.NewServer(svc.cfg.ServerOptions...)
	replpb.RegisterReplicationServer(svc.srv, svc)
	go func() { _ = svc.srv.Serve(lis) }()
	kvs := []transport.KV{
		{Key: transport.EndpointKey(svc.cfg.Cluster, svc.cfg.BrokerID), Value: []byte(svc.addr)},
		// The region's brokers, for lookups redirected from other
		// regions (broker/failoverctl).
		{Key: meta.RegionBrokersKey(svc.cfg.Cluster) + svc.cfg.BrokerID, Value: []byte(svc.serviceURL)},
	}
	if svc.cfg.AdminURL != "" {
		// Their admin APIs, Pulsar's web service URLs (Clusters().Get).
		kvs = append(kvs, transport.KV{Key: meta.RegionWebKey(svc.cfg.Cluster) + svc.cfg.BrokerID, Value: []byte(svc.cfg.AdminURL)})
	}
	if len(svc.cfg.Listeners) > 0 || svc.cfg.AdminURL != "" {
		// Their named listeners and web service URLs, for redirects in a
		// client's listener (an HTTP lookup's httpUrl too).
		v, _ := json.Marshal(meta.RegionBroker{ServiceURL: svc.serviceURL, Listeners: svc.cfg.Listeners, AdminURL: svc.cfg.AdminURL, HTTPListeners: svc.cfg.HTTPListeners})
		kvs = append(kvs, transport.KV{Key: meta.RegionListenersKey(svc.cfg.Cluster) + svc.cfg.BrokerID, Value: v})
	}
	svc.wg.Add(1)
	go func() {
		defer svc.wg.Done()
		transport.Register(svc.ctx, svc.cfg.GlobalStore, svc.cfg.OwnershipTTL, kvs, svc.log)
	}()
	svc.wg.Add(1)
	go svc.rpoLoop()
	if svc.cfg.Verifier.Period > 0 {
		svc.wg.Add(1)
		go svc.verifierLoop(svc.cfg.Verifier)
	}
	return nil
}

// Addr returns the advertised replication address.
func (svc *Service) Addr() string { return svc.addr }

func (svc *Service) close() {
	if svc.srv != nil {
		svc.srv.Stop()
	}
	svc.dialer.Close()
}

// endpoints lists the registered replication addresses of region.
func (svc *Service) endpoints(ctx context.Context, region string) ([]string, error) {
	return transport.Endpoints(ctx, svc.cfg.GlobalStore, region)
}

// Replicate serves one incoming replication stream (see repl.proto).
func (svc *Service) Replicate(st replpb.Replication_ReplicateServer) error {
	return transport.Serve(st, svc.cfg.Cluster, svc.cfg.BrokerID, svc.accept)
}

// accept admits a stream whose Hello passed the transport's checks: the
// source region is authorized and one of the namespace's regions, and
// this broker owns the topic (or names the broker of this region that
// does).
func (svc *Service) accept(sctx context.Context, h transport.Hello) (transport.Target, string, error) {
	if svc.cfg.Authorize != nil {
		if err := svc.cfg.Authorize(sctx, h.Source); err != nil {
			return nil, "", err
		}
	}
	tn, err := meta.ParseTopic(h.Topic)
	if err != nil {
		return nil, "", status.Errorf(codes.InvalidArgument, "replication: %v", err)
	}
	ctx, cancel := context.WithTimeout(sctx, 30*time.Second)
	pol, err := svc.cfg.Meta.GetPolicies(ctx, tn.NamespaceName())
	cancel()
	if err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return nil, "", status.Errorf(codes.NotFound, "replication: namespace %s: %v", tn.NamespaceName(), err)
		}
		return nil, "", status.Errorf(codes.Unavailable, "replication: namespace %s: %v", tn.NamespaceName(), err)
	}
	if !slices.Contains(pol.ReplicationClusters, h.Source) || !slices.Contains(pol.ReplicationClusters, svc.cfg.Cluster) {
		return nil, "", status.Errorf(codes.PermissionDenied, "replication: namespace %s replicates between %v: region %s may not write into region %s", tn.NamespaceName(), pol.ReplicationClusters, h.Source, svc.cfg.Cluster)
	}
	if !tn.Persistent() {
		// Best effort, nothing stored (nonpersistent.go).
		ctx, cancel = context.WithTimeout(sctx, 30*time.Second)
		deliver, redirect, err := svc.host.NonPersistentTarget(ctx, tn, pol)
		cancel()
		switch {
		case redirect != "":
			return nil, redirect, nil
		case err != nil:
			return nil, "", status.Errorf(codes.Unavailable, "replication: %v", err)
		}
		return npTarget{deliver: deliver}, "", nil
	}
	ctx, cancel = context.WithTimeout(sctx, 30*time.Second)
	t, redirect, err := svc.host.Target(ctx, tn, pol)
	cancel()
	switch {
	case redirect != "":
		return nil, redirect, nil
	case err != nil:
		return nil, "", status.Errorf(codes.Unavailable, "replication: %v", err)
	}
	svc.log.Debug("replication stream accepted", "topic", tn.String(), "from", h.Source)
	return streamTarget{t}, "", nil
}

// streamTarget is a topic as an incoming stream applies to it
// (transport.Target).
type streamTarget struct{ t *Topic }

func (s streamTarget) ApplyBatch(b replicator.Batch, rq *transport.ReplyQueue) error {
	return s.t.applyBatch(b, rq)
}

func (s streamTarget) FreshAck(a replicator.Ack) replicator.Ack { return s.t.freshAck(a) }

func (s streamTarget) ApplySubscription(ctx context.Context, from string, u *replpb.SubscriptionUpdate) {
	s.t.applySubscription(ctx, from, u)
}
