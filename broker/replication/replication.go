package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/internal/grpcpool"
	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
)

const (
	replCursorPrefix = "meridian.repl."
	propSeq          = "seq"
	propBytes        = "bytes"
	propStream       = "stream"
	propBase         = "base"

	replEndpointsKey = "/replication/endpoints/"
)

func isReplCursor(name string) bool { return strings.HasPrefix(name, replCursorPrefix) }

// IsCursor reports whether a cursor of a topic's log is a replicator's
// (meridian.repl.REGION), not a subscription's.
func IsCursor(name string) bool { return isReplCursor(name) }

// CursorSeq is the local sequence number a replicator's cursor records
// as passed (0 for another cursor): it may be past what retention kept of
// the log, so a topic loading takes it into account.
func CursorSeq(props map[string]int64) uint64 {
	if n := props[propSeq]; n > 0 {
		return uint64(n)
	}
	return 0
}

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

// ---- target side -----------------------------------------------------

type applierSlot struct {
	// order is held while a batch is received and its write handed to the
	// managed ledger, so writes reach the log in handout order.
	order sync.Mutex
	// mu guards a and broken; the write callbacks take it (never order).
	mu sync.Mutex
	a  *replicator.Applier
	// broken: a write failed; the writes handed out after it are void.
	broken bool
}

// topicRepl is a topic's replication state.
type topicRepl struct {
	mu       sync.Mutex
	appliers map[string]*applierSlot
	senders  map[string]*replSender
}

func (t *Topic) replState() *topicRepl {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.repl == nil {
		t.repl = &topicRepl{appliers: map[string]*applierSlot{}, senders: map[string]*replSender{}}
	}
	return t.repl
}

func (t *Topic) applierFor(origin string) (*applierSlot, error) {
	r := t.replState()
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.appliers[origin]; s != nil {
		return s, nil
	}
	through := t.log.Applied(origin)
	a, err := replicator.NewApplier(t.svc.cfg.Cluster, replicator.State{Origin: origin, Through: through})
	if err != nil {
		return nil, err
	}
	s := &applierSlot{a: a}
	r.appliers[origin] = s
	return s, nil
}

// freshAck raises a reply's Through to what the origin's applier holds
// durable when the reply is sent: a reply computed when its batch arrived
// (a duplicate, a nack) may be sent after the writes of earlier batches
// were persisted, and must not report less than the acks before it.
func (t *Topic) freshAck(a replicator.Ack) replicator.Ack {
	r := t.replState()
	r.mu.Lock()
	slot := r.appliers[a.Origin]
	r.mu.Unlock()
	if slot == nil {
		return a
	}
	slot.mu.Lock()
	d := slot.a.State()
	slot.mu.Unlock()
	if d.Stream == a.Stream && d.Through > a.Through {
		a.Through = d.Through
	}
	return a
}

// applyBatch applies one batch from an origin region: it queues the
// batch's replies on rq, in arrival order, and hands the batch's write to
// the managed ledger without waiting for it; the write's ack is released
// when it is persisted. Batches of one origin are received and handed to
// the log one at a time (slot.order), so the writes reach the log in the
// order the applier handed them out, and the managed ledger persists them
// in that order. An error is the stream's end (a malformed batch, or a
// write that could not be started).
func (t *Topic) applyBatch(b replicator.Batch, rq *replyQueue) error {
	slot, err := t.applierFor(b.Origin)
	if err != nil {
		return err
	}
	slot.order.Lock()
	defer slot.order.Unlock()
	slot.mu.Lock()
	if slot.broken {
		// An earlier write of this applier failed: the ones after it are
		// void (PersistFailed); the topic is reloading.
		slot.mu.Unlock()
		return fmt.Errorf("%w: %s: an earlier replicated write failed; the topic is reloading", meta.ErrTopicFenced, t.name)
	}
	res, err := slot.a.Receive(b)
	slot.mu.Unlock()
	if err != nil {
		return err
	}
	r := rq.push()
	var out []replicator.Ack
	if res.Reply != nil {
		out = append(out, *res.Reply)
	}
	if res.Duplicates > 0 {
		t.svc.metrics.Duplicates.Add(float64(res.Duplicates))
	}
	if res.Regressed {
		t.svc.log.Error("replication: this region lost entries it had acknowledged", "topic", t.name.String(), "origin", b.Origin)
	}
	w := res.Write
	if w == nil {
		r.done(out, nil)
		return nil
	}
	// failed voids w (and, in the applier, every write after it).
	failed := func(err error) {
		slot.mu.Lock()
		slot.a.PersistFailed(w)
		slot.broken = true
		slot.mu.Unlock()
		r.done(out, err)
	}
	if !w.Skipped.Empty() {
		t.svc.log.Error("replication: a new stream skipped entries (declared loss)", "topic", t.name.String(), "origin", w.Origin, "from", w.Skipped.From, "through", w.Skipped.Through)
	}
	// The async tail of a failover (orphans.go): listed, and by policy
	// kept aside instead of appended.
	rec, maybe := t.orphanRecord()
	var orphans []int
	if maybe {
		orphans = findOrphans(rec, w.Entries)
	}
	quarantine := ""
	if len(orphans) > 0 && t.policies().Effective().Orphans == meta.OrphansQuarantine {
		ctx, cancel := context.WithTimeout(t.svc.ctx, 30*time.Second)
		quarantine, err = t.quarantine(ctx, w.Entries, orphans)
		cancel()
		if err != nil {
			failed(fmt.Errorf("quarantine the orphans of the failover: %w", err))
			return nil
		}
		for _, i := range orphans {
			w.Entries[i].Skip = true // kept aside: only the sequence advances here
		}
	}
	// The callback runs on the managed ledger's delivery goroutine once
	// every entry of w is persisted or failed (or at once when nothing is
	// to be written, or the topic is closed): it takes slot.mu, never
	// slot.order, which this goroutine holds.
	t.log.AppendReplicated(w.Entries, func(err error) {
		if err != nil {
			failed(err)
			return
		}
		slot.mu.Lock()
		if slot.broken {
			// An earlier write failed after this one was handed out:
			// this one is void; the topic reloads and rebuilds the
			// record from the log.
			slot.mu.Unlock()
			r.done(out, fmt.Errorf("%w: %s: an earlier replicated write failed", meta.ErrTopicFenced, t.name))
			return
		}
		ack, err := slot.a.Persisted(w)
		slot.mu.Unlock()
		if err != nil {
			r.done(out, err)
			return
		}
		t.svc.metrics.Applied.Add(float64(len(w.Entries)))
		t.recordOrphans(rec, w.Entries, orphans, quarantine)
		r.done(append(out, ack), nil)
	})
	return nil
}

// ---- source side -----------------------------------------------------

// syncReplication starts a sender for every remote region of the
// namespace that has none and stops (and deletes the cursor of) those no
// longer listed. Called after load and when policies change.
func (t *Topic) syncReplication(ctx context.Context) {
	pol := t.policies()
	if t.log.Closed() {
		return
	}
	t.refreshSync()
	eff := pol.Effective()
	want := map[string]bool{}
	if len(pol.ReplicationClusters) > 1 && slices.Contains(pol.ReplicationClusters, t.svc.cfg.Cluster) && eff.Mode != meta.ReplicationStretched {
		for _, r := range pol.ReplicationClusters {
			if r != t.svc.cfg.Cluster {
				want[r] = true
			}
		}
	}
	for remote := range want {
		t.svc.replLimiter(t.name.NamespaceName(), remote, eff.RateBytesPerSecond) // a changed rate applies at once
	}
	r := t.replState()
	r.mu.Lock()
	var stop []*replSender
	for name, s := range r.senders {
		if !want[name] {
			stop = append(stop, s)
			delete(r.senders, name)
		}
	}
	var start []string
	for name := range want {
		if r.senders[name] == nil {
			start = append(start, name)
		}
	}
	r.mu.Unlock()
	for _, s := range stop {
		s.stop()
		if err := t.ml.DeleteCursor(ctx, replCursorPrefix+s.remote); err != nil {
			t.svc.log.Warn("replication cursor not deleted", "topic", t.name.String(), "remote", s.remote, "err", err)
		}
		t.svc.log.Info("replication stopped: region removed from the namespace", "topic", t.name.String(), "remote", s.remote)
	}
	for _, name := range start {
		s, err := t.newReplSender(ctx, name, eff)
		if err != nil {
			t.svc.log.Warn("replicator not started", "topic", t.name.String(), "remote", name, "err", err)
			continue
		}
		r.mu.Lock()
		if r.senders[name] != nil || t.log.Closed() {
			r.mu.Unlock()
			s.stop()
			continue
		}
		r.senders[name] = s
		r.mu.Unlock()
		if ss := t.syncState(); ss != nil {
			ss.acked(name, s.s.Status().Cursor.Seq)
		}
		go s.run()
		t.svc.log.Info("replicator started", "topic", t.name.String(), "remote", name, "cursor", s.s.Status().Cursor.String())
	}
}

// stopReplication stops every sender (on unload; their cursors stay).
func (t *Topic) stopReplication(ctx context.Context) {
	t.mu.Lock()
	r := t.repl
	t.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	senders := make([]*replSender, 0, len(r.senders))
	for _, s := range r.senders {
		senders = append(senders, s)
	}
	r.senders = map[string]*replSender{}
	r.mu.Unlock()
	for _, s := range senders {
		s.stopWithin(ctx)
	}
}

// wakeSenders tells the senders the log grew.
func (t *Topic) wakeSenders() {
	t.mu.Lock()
	r := t.repl
	t.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.senders {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (t *Topic) logEnd() replicator.LogEnd {
	last, seq, bytes := t.log.End()
	return replicator.LogEnd{Pos: toReplPos(last), Seq: seq, Bytes: bytes}
}

// policies returns the namespace's policies as the topic last read them.
func (t *Topic) policies() meta.Policies { return t.log.Policies() }

func toReplPos(p mledger.Position) replicator.Position {
	if p.Ledger < 0 {
		return replicator.Earliest
	}
	return replicator.Position{Ledger: p.Ledger, Entry: p.Entry}
}

func toMLPos(p replicator.Position) mledger.Position {
	if p == replicator.Earliest {
		return mledger.Earliest
	}
	return mledger.Position{Ledger: p.Ledger, Entry: p.Entry}
}

// replSender drives one replicator.Sender: a goroutine owns it.
type replSender struct {
	t      *Topic
	remote string
	cur    *mledger.Cursor
	s      *replicator.Sender
	log    *slog.Logger

	wake   chan struct{}
	events chan senderEvent
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	st       *outStream
	gen      int
	dropped  int       // batches dropped by fault injection
	marked   bool      // the backlog marker is set
	caughtUp time.Time // since when the remote region has acked everything
	status   atomic.Pointer[Status]
	lastErr  atomic.Pointer[string]
}

type outStream struct {
	gen    int
	cs     replpb.Replication_ReplicateClient
	cancel context.CancelFunc
	sent   []uint64
	addr   string
}

type senderEvent struct {
	gen int
	ack *replicator.Ack
	err error
}

// Status is what admin and metrics show of a sender.
type Status struct {
	Topic          string  `json:"topic"`
	Remote         string  `json:"remote"`
	Connected      bool    `json:"connected"`
	Target         string  `json:"target,omitempty"`
	BacklogEntries int64   `json:"backlogEntries"`
	BacklogBytes   int64   `json:"backlogBytes"`
	SecondsBehind  float64 `json:"secondsBehind"`
	AckedSeq       uint64  `json:"ackedSeq"`
	LocalSeq       uint64  `json:"localSeq"`
	Inflight       int     `json:"inflightBatches"`
	OverQuota      bool    `json:"overQuota"`
	NeedsResync    string  `json:"needsResync,omitempty"`
	LastError      string  `json:"lastError,omitempty"`
}

func (t *Topic) newReplSender(ctx context.Context, remote string, eff meta.ReplicationPolicy) (*replSender, error) {
	cur, err := t.ml.OpenCursor(ctx, replCursorPrefix+remote, mledger.Earliest)
	if err != nil {
		return nil, err
	}
	props := cur.Properties()
	var c replicator.Cursor
	if props[propStream] == 0 {
		c, err = t.initialReplCursor(ctx, eff)
		if err != nil {
			return nil, err
		}
		cur.AckCumulativeWith(toMLPos(c.Pos), cursorProps(c))
		if err := cur.Flush(ctx); err != nil {
			return nil, fmt.Errorf("persist the new replication cursor: %w", err)
		}
	} else {
		c = replicator.Cursor{Pos: toReplPos(cur.MarkDeleted()), Seq: uint64(props[propSeq]), Bytes: props[propBytes],
			Stream: uint64(props[propStream]), Base: uint64(props[propBase])}
	}
	s, err := replicator.NewSender(t.senderConfig(remote, eff), c, time.Now())
	if err != nil {
		return nil, err
	}
	rs := &replSender{t: t, remote: remote, cur: cur, s: s, log: t.svc.log,
		wake: make(chan struct{}, 1), events: make(chan senderEvent, 256), done: make(chan struct{})}
	rs.ctx, rs.cancel = context.WithCancel(t.svc.ctx)
	// The backlog marker is set before anything is sent and cleared only
	// once the remote region caught up, so a crash at any moment leaves it
	// for the next owner's loader (loadBacklogged).
	if _, err := t.svc.cfg.Store.Put(ctx, backlogMarker(t.name.String()), nil); err != nil {
		rs.cancel()
		return nil, fmt.Errorf("set the replication backlog marker: %w", err)
	}
	rs.marked = true
	rs.publishStatus()
	return rs, nil
}

// senderConfig is the sender configuration towards remote under the
// namespace's replication policy: its rate limit and backlog quota.
func (t *Topic) senderConfig(remote string, eff meta.ReplicationPolicy) replicator.SenderConfig {
	cfg := replicator.DefaultSenderConfig(t.svc.cfg.Cluster, remote)
	cfg.Limiter = t.svc.replLimiter(t.name.NamespaceName(), remote, eff.RateBytesPerSecond)
	if eff.BacklogQuotaBytes > 0 {
		cfg.Quota.MaxBytes = eff.BacklogQuotaBytes
	}
	return cfg
}

func cursorProps(c replicator.Cursor) map[string]int64 {
	return map[string]int64{propSeq: int64(c.Seq), propBytes: c.Bytes, propStream: int64(c.Stream), propBase: int64(c.Base)}
}

// initialReplCursor is where a new replicator starts: after the log's end
// (start-at latest) or before the first retained entry (earliest, the
// default: a new region gets the whole retained history).
func (t *Topic) initialReplCursor(ctx context.Context, eff meta.ReplicationPolicy) (replicator.Cursor, error) {
	last, seq, bytes := t.log.End()
	if eff.StartAt == "latest" {
		return replicator.InitialCursor(toReplPos(last), seq, bytes), nil
	}
	first := t.ml.FirstPosition()
	if t.ml.LastConfirmed().Less(first) || seq == 0 {
		return replicator.InitialCursor(replicator.Earliest, 0, 0), nil
	}
	// The first retained local entry's number tells where the retained
	// sequence starts; with none retained, the next local entry is seq+1.
	before := seq
	from := first
	for range 20 {
		es, err := t.ml.ReadEntries(ctx, from, 500, 8<<20)
		if err != nil {
			return replicator.Cursor{}, err
		}
		found := false
		for _, e := range es {
			if d, err := entry.Decode(e.Data); err == nil && d.Origin.Region == "" && d.Origin.Seq > 0 {
				before, found = d.Origin.Seq-1, true
				break
			}
		}
		if found || len(es) == 0 {
			break
		}
		from = t.ml.Next(es[len(es)-1].Pos)
	}
	var b int64
	if seq > 0 {
		b = bytes * int64(before) / int64(seq)
	}
	return replicator.InitialCursor(replicator.Position{Ledger: first.Ledger, Entry: first.Entry - 1}, before, b), nil
}

func (rs *replSender) stop() {
	rs.cancel()
	<-rs.done
}

// stopWithin is stop waiting no longer than ctx (an unload's): the sender's
// goroutine leaves once its context is cancelled, whatever it was waiting
// for; its cursor's progress not yet flushed is sent again, never lost.
func (rs *replSender) stopWithin(ctx context.Context) {
	rs.cancel()
	select {
	case <-rs.done:
	case <-ctx.Done():
		rs.log.Warn("replication sender still stopping", "err", ctx.Err())
	}
}

func (rs *replSender) run() {
	defer close(rs.done)
	defer rs.closeStream()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastStatus, lastSubSync := time.Time{}, time.Time{}
	sentSubs, subGen := map[string]subSent{}, 0
	for {
		rs.s.Appended(rs.t.logEnd())
		now := time.Now()
		rs.s.Tick(now)
		rs.drive()

		if time.Since(lastStatus) > 200*time.Millisecond {
			rs.publishStatus()
			lastStatus = time.Now()
		}
		if rs.st != nil && rs.st.gen != subGen {
			subGen, sentSubs = rs.st.gen, map[string]subSent{} // a new stream: send every position again
		}
		if rs.st != nil && time.Since(lastSubSync) >= subSyncEvery {
			lastSubSync = time.Now()
			for _, u := range rs.t.subscriptionUpdates(sentSubs) {
				if err := rs.st.cs.Send(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Subscription{Subscription: u}}); err != nil {
					delete(sentSubs, u.Name)
					break
				}
			}
		}
		select {
		case <-rs.ctx.Done():
			rs.flushCursor()
			return
		case <-rs.wake:
		case ev := <-rs.events:
			rs.handle(ev)
			for more := true; more; {
				select {
				case ev := <-rs.events:
					rs.handle(ev)
				default:
					more = false
				}
			}
			rs.publishStatus()
		case <-tick.C:
		}
	}
}

func (rs *replSender) flushCursor() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = rs.cur.Flush(ctx)
}

func (rs *replSender) handle(ev senderEvent) {
	if ev.ack != nil {
		rs.s.Acked(*ev.ack)
		if rs.st != nil && ev.gen == rs.st.gen {
			// Batches up to the acked one are settled.
			i := 0
			for i < len(rs.st.sent) && rs.st.sent[i] <= ev.ack.BatchID {
				i++
			}
			rs.st.sent = rs.st.sent[i:]
		}
		return
	}
	if rs.st != nil && ev.gen == rs.st.gen {
		rs.failStream(ev.err)
	}
}

// failStream reports every batch sent on the current stream as failed
// and drops the stream.
func (rs *replSender) failStream(err error) {
	msg := err.Error()
	rs.lastErr.Store(&msg)
	if st := rs.st; st != nil {
		for _, id := range st.sent {
			rs.s.SendFailed(id, err)
		}
	}
	rs.closeStream()
	rs.log.Warn("replication stream failed", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
}

func (rs *replSender) closeStream() {
	if rs.st != nil {
		rs.st.cancel()
		rs.st = nil
	}
}

// drive acts on everything the sender asks for.
func (rs *replSender) drive() {
	for i := 0; rs.s.HasReady() && i < 64; i++ {
		r := rs.s.Ready()
		if r.Cursor != nil {
			rs.cur.AckCumulativeWith(toMLPos(r.Cursor.Pos), cursorProps(*r.Cursor))
		}
		if r.Acked > 0 {
			if ss := rs.t.syncState(); ss != nil {
				ss.acked(rs.remote, r.Acked)
			}
		}
		resync := false
		for _, a := range r.Alerts {
			rs.t.svc.metrics.Alerts.WithLabelValues(a.Kind.String()).Inc()
			rs.log.Warn("replication alert", "topic", rs.t.name.String(), "remote", rs.remote, "alert", a.String())
			if a.Kind == replicator.AlertNeedsResync && a.Reason == replicator.ResyncTrimmed {
				resync = true
			}
		}
		if resync {
			rs.resync()
			continue
		}
		if len(r.Send) > 0 {
			rs.send(r.Send)
		}
		if r.Read != nil {
			entries, err := rs.read(*r.Read)
			if len(entries) == 0 && err != nil {
				rs.s.ReadFailed(r.Read.ID, err)
			} else if err := rs.s.Read(r.Read.ID, entries); err != nil {
				rs.log.Warn("replication read refused", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
			}
		}
	}
}

func (rs *replSender) read(req replicator.ReadRequest) ([]replicator.Entry, error) {
	ml := rs.t.ml
	ctx, cancel := context.WithTimeout(rs.ctx, 30*time.Second)
	defer cancel()
	after := toMLPos(req.After)
	if after != mledger.Earliest && !slices.ContainsFunc(ml.Ledgers(), func(l mledger.LedgerInfo) bool { return l.ID == after.Ledger }) {
		// The ledger the cursor is in was deleted: retention trimmed
		// entries the region had not received (the cursor had stopped
		// holding them, over its backlog quota).
		return nil, fmt.Errorf("%w: ledger %d of %s", replicator.ErrTrimmed, after.Ledger, rs.t.name)
	}
	es, err := ml.ReadEntries(ctx, ml.Next(after), req.MaxEntries, req.MaxBytes)
	out := make([]replicator.Entry, 0, len(es))
	local := rs.t.svc.cfg.Cluster
	for i, e := range es {
		d, derr := entry.Decode(e.Data)
		if i == 0 && after == mledger.Earliest && derr == nil && d.Origin.Region == "" && d.Origin.Seq > rs.s.Status().Cursor.Seq+1 {
			// From the start of the log, and its first local entries are
			// gone: trimmed before the region received them.
			return nil, fmt.Errorf("%w: %s starts at local sequence number %d", replicator.ErrTrimmed, rs.t.name, d.Origin.Seq)
		}
		re := replicator.Entry{Pos: toReplPos(e.Pos)}
		switch {
		case derr != nil:
			re.Origin = "?" // unreadable: passed over, never sent
		case d.Origin.Region == "":
			re.Origin, re.OriginSeq, re.PublishMs, re.Data = local, d.Origin.Seq, d.PublishMs, d.Msg
			re.OriginID = replicator.MessageID{Ledger: e.Pos.Ledger, Entry: e.Pos.Entry, Batch: -1}
		default:
			re.Origin, re.OriginSeq, re.PublishMs = d.Origin.Region, d.Origin.Seq, d.PublishMs
			re.OriginID = replicator.MessageID{Ledger: d.Origin.ID.Ledger, Entry: d.Origin.ID.Entry, Batch: -1}
		}
		out = append(out, re)
	}
	return out, err
}

func (rs *replSender) send(batches []replicator.Batch) {
	if rs.st == nil {
		if err := rs.connect(); err != nil {
			msg := err.Error()
			rs.lastErr.Store(&msg)
			rs.log.Warn("replication: cannot reach the remote region", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
			for _, b := range batches {
				rs.s.SendFailed(b.ID, err)
			}
			return
		}
	}
	faults := rs.t.svc.cfg.Faults
	if faults.Delay > 0 {
		time.Sleep(faults.Delay)
	}
	for i, b := range batches {
		if rs.dropped < faults.DropBatches {
			// Fault injection: the batch is lost on the way; later ones
			// go through, so the target sees a gap.
			rs.dropped++
			rs.st.sent = append(rs.st.sent, b.ID)
			rs.log.Warn("fault injection: replication batch dropped", "topic", rs.t.name.String(), "remote", rs.remote, "batch", b.ID, "seq", b.FirstSeq())
			continue
		}
		if err := rs.st.cs.Send(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Batch{Batch: batchToProto(b)}}); err != nil {
			rs.st.sent = append(rs.st.sent, b.ID)
			rs.failStream(err)
			for _, rest := range batches[i+1:] {
				rs.s.SendFailed(rest.ID, err)
			}
			return
		}
		rs.st.sent = append(rs.st.sent, b.ID)
		rs.t.svc.metrics.Sent.Add(float64(len(b.Entries)))
	}
}

// connect opens a stream to the topic's owner in the remote region: any
// registered broker of that region, following at most a few redirects.
func (rs *replSender) connect() error {
	ctx, cancel := context.WithTimeout(rs.ctx, 10*time.Second)
	addrs, err := rs.t.svc.endpoints(ctx, rs.remote)
	cancel()
	if err != nil {
		return fmt.Errorf("list the endpoints of region %s: %w", rs.remote, err)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("region %s has no registered broker", rs.remote)
	}
	addr := addrs[rand.IntN(len(addrs))]
	for hop := 0; hop < 4; hop++ {
		conn, err := rs.t.svc.conn(addr)
		if err != nil {
			return err
		}
		sctx, scancel := context.WithCancel(rs.ctx)
		cs, err := replpb.NewReplicationClient(conn).Replicate(sctx)
		if err == nil {
			err = cs.Send(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Hello{Hello: &replpb.Hello{
				Version: replpb.ProtocolVersion_PROTOCOL_VERSION_1, Source: rs.t.svc.cfg.Cluster, Target: rs.remote, Topic: rs.t.name.String()}}})
		}
		var resp *replpb.ReplicateResponse
		if err == nil {
			timer := time.AfterFunc(15*time.Second, scancel)
			resp, err = cs.Recv()
			timer.Stop()
		}
		if err != nil {
			scancel()
			return fmt.Errorf("handshake with %s: %w", addr, err)
		}
		if r := resp.GetRedirect(); r != nil {
			scancel()
			addr = r.Addr
			continue
		}
		if resp.GetWelcome() == nil {
			scancel()
			return fmt.Errorf("handshake with %s: unexpected answer %v", addr, resp)
		}
		rs.gen++
		rs.st = &outStream{gen: rs.gen, cs: cs, cancel: scancel, addr: addr}
		rs.lastErr.Store(nil)
		go rs.recvLoop(rs.st)
		return nil
	}
	return fmt.Errorf("too many redirects reaching the owner in region %s", rs.remote)
}

func (rs *replSender) recvLoop(st *outStream) {
	for {
		resp, err := st.cs.Recv()
		if err != nil {
			if err == io.EOF {
				err = errors.New("stream closed by the target")
			}
			select {
			case rs.events <- senderEvent{gen: st.gen, err: err}:
			case <-rs.ctx.Done():
			}
			return
		}
		if a := resp.GetAck(); a != nil {
			ack := ackFromProto(a)
			select {
			case rs.events <- senderEvent{gen: st.gen, ack: &ack}:
			case <-rs.ctx.Done():
				return
			}
		}
	}
}

func (rs *replSender) publishStatus() {
	s := rs.s.Status()
	st := &Status{
		Topic: rs.t.name.String(), Remote: rs.remote, Connected: rs.st != nil,
		BacklogEntries: s.Backlog.Entries, BacklogBytes: s.Backlog.Bytes, SecondsBehind: s.Backlog.Age.Seconds(),
		AckedSeq: s.Acked, Inflight: s.InflightBatches, OverQuota: s.OverQuota,
	}
	if rs.st != nil {
		st.Target = rs.st.addr
	}
	if s.NeedsResync != replicator.ResyncNone {
		st.NeedsResync = s.NeedsResync.String()
	}
	if e := rs.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	st.LocalSeq = rs.t.logEnd().Seq
	rs.status.Store(st)
	rs.cur.SetHoldsRetention(s.HoldsRetention)
	// A backlog marker in the region's store lets a broker that owns the
	// topic later load it to replicate even if no client ever comes back.
	// Cleared only after the remote region has been caught up for a while
	// (an idle topic), set again at the first entry behind: a crash in the
	// moment between a new entry and the marker's write is the one case a
	// client (or a stream) must load the topic again.
	behind := st.AckedSeq < st.LocalSeq
	if behind {
		rs.caughtUp = time.Time{}
	} else if rs.caughtUp.IsZero() {
		rs.caughtUp = time.Now()
	}
	if !behind && time.Since(rs.caughtUp) < markerIdle {
		behind = rs.marked // keep it for now
	}
	if behind != rs.marked {
		ctx, cancel := context.WithTimeout(rs.ctx, 5*time.Second)
		var err error
		if behind {
			_, err = rs.t.svc.cfg.Store.Put(ctx, backlogMarker(rs.t.name.String()), nil)
		} else {
			err = rs.t.svc.cfg.Store.Delete(ctx, backlogMarker(rs.t.name.String()))
		}
		cancel()
		if err == nil {
			rs.marked = behind
		}
	}
}

const backlogMarkersKey = "/replication/backlog/"

// markerIdle: how long a replicator must be caught up before its backlog
// marker is cleared.
const markerIdle = 30 * time.Second

func backlogMarker(topic string) string { return backlogMarkersKey + url.PathEscape(topic) }

// loadBacklogged loads, on the broker that owns them (or becomes their
// owner now), the topics whose replicators still have a backlog but that
// no client or stream has loaded: after a restart, replication resumes by
// itself. Called from the policy loop.
func (svc *Service) loadBacklogged(ctx context.Context) {
	kvs, _, err := svc.cfg.Store.List(ctx, backlogMarkersKey)
	if err != nil {
		return
	}
	for _, kv := range kvs {
		name, err := url.PathUnescape(strings.TrimPrefix(kv.Key, backlogMarkersKey))
		if err != nil {
			continue
		}
		if svc.host.Loaded(name) {
			continue
		}
		serves, err := svc.host.Serves(ctx, name)
		if err != nil {
			svc.log.Warn("replication backlog: lookup failed", "topic", name, "err", err)
			continue
		}
		if !serves {
			continue
		}
		if err := svc.host.Topic(ctx, name); errors.Is(err, meta.ErrTopicNotFound) {
			_ = svc.cfg.Store.Delete(ctx, kv.Key)
		} else if err != nil {
			svc.log.Warn("replication backlog: topic not loaded", "topic", name, "err", err)
		} else {
			svc.log.Warn("loaded a topic to resume its replication", "topic", name)
		}
	}
}

// replicationStatus lists the senders of the loaded topics, optionally of
// one namespace or topic.
func (svc *Service) replicationStatus(filter string) []Status {
	var out []Status
	for _, t := range svc.host.Topics() {
		name := t.name.String()
		if filter != "" && name != filter && t.name.NamespaceName() != filter && !strings.HasPrefix(name, filter+"-partition-") {
			continue
		}
		t.mu.Lock()
		r := t.repl
		t.mu.Unlock()
		if r == nil {
			continue
		}
		r.mu.Lock()
		for _, s := range r.senders {
			if st := s.status.Load(); st != nil {
				out = append(out, *st)
			}
		}
		r.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Status) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return strings.Compare(a.Remote, b.Remote)
	})
	return out
}

// ---- wire conversions -------------------------------------------------

func batchToProto(b replicator.Batch) *replpb.Batch {
	out := &replpb.Batch{Id: b.ID, Origin: b.Origin, Stream: b.Stream, Base: b.Base, Acked: b.Acked, Entries: make([]*replpb.Entry, len(b.Entries))}
	for i := range b.Entries {
		e := &b.Entries[i]
		out.Entries[i] = &replpb.Entry{OriginSeq: e.OriginSeq, PublishMs: e.PublishMs, Data: e.Data, Skip: e.Skip,
			OriginId: &replpb.MessageId{Ledger: e.OriginID.Ledger, Entry: e.OriginID.Entry, Batch: e.OriginID.Batch}}
	}
	return out
}

func batchFromProto(p *replpb.Batch) replicator.Batch {
	b := replicator.Batch{ID: p.Id, Origin: p.Origin, Stream: p.Stream, Base: p.Base, Acked: p.Acked, Entries: make([]replicator.Entry, len(p.Entries))}
	for i, e := range p.Entries {
		id := e.GetOriginId()
		b.Entries[i] = replicator.Entry{Origin: p.Origin, OriginSeq: e.OriginSeq, PublishMs: e.PublishMs, Data: e.Data, Skip: e.Skip,
			OriginID: replicator.MessageID{Ledger: id.GetLedger(), Entry: id.GetEntry(), Batch: id.GetBatch()}}
	}
	return b
}

func ackToProto(a replicator.Ack) *replpb.Ack {
	return &replpb.Ack{Origin: a.Origin, BatchId: a.BatchID, Stream: a.Stream, Through: a.Through, ResendFrom: a.ResendFrom, Regressed: a.Regressed}
}

func ackFromProto(p *replpb.Ack) replicator.Ack {
	return replicator.Ack{Origin: p.Origin, BatchID: p.BatchId, Stream: p.Stream, Through: p.Through, ResendFrom: p.ResendFrom, Regressed: p.Regressed}
}

// regionReplicationStatus is replicationStatus over every broker of the
// region (asked through their admin APIs).
func (svc *Service) regionReplicationStatus(ctx context.Context, filter string) ([]Status, error) {
	out := svc.replicationStatus(filter)
	if out == nil {
		out = []Status{}
	}
	peers, err := svc.host.Peers(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range peers {
		if p.ID == svc.cfg.BrokerID || p.AdminURL == "" {
			continue
		}
		u := p.AdminURL + "/admin/v2/meridian/replication?local=true&filter=" + url.QueryEscape(filter)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		// A broker that just died stays registered until its lease
		// expires: skip what does not answer soon.
		resp, err := svc.cfg.PeerHTTP(3 * time.Second).Do(req)
		if err != nil {
			svc.log.Debug("replication status: broker did not answer", "broker", p.ID, "err", err)
			continue
		}
		var more []Status
		err = json.NewDecoder(resp.Body).Decode(&more)
		resp.Body.Close()
		if err != nil {
			svc.log.Debug("replication status: bad answer", "broker", p.ID, "err", err)
			continue
		}
		out = append(out, more...)
	}
	slices.SortFunc(out, func(a, b Status) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return strings.Compare(a.Remote, b.Remote)
	})
	return out, nil
}

// nsLimiter is a namespace's replication rate limit towards one remote
// region, shared by the senders of all its topics on this broker.
type nsLimiter struct {
	mu   sync.Mutex
	rate int64
	tb   *replicator.TokenBucket
}

func (l *nsLimiter) Take(now time.Time, entries, bytes int) (bool, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tb == nil {
		return true, time.Time{}
	}
	return l.tb.Take(now, entries, bytes)
}

// replLimiter returns the limiter of (namespace, remote), set to rate
// bytes per second (0: none).
func (svc *Service) replLimiter(ns, remote string, rate int64) *nsLimiter {
	v, _ := svc.limiters.LoadOrStore(ns+"\x00"+remote, &nsLimiter{})
	l := v.(*nsLimiter)
	l.mu.Lock()
	defer l.mu.Unlock()
	if rate != l.rate {
		l.rate, l.tb = rate, nil
		if rate > 0 {
			l.tb = replicator.NewTokenBucket(replicator.RateLimit{BytesPerSecond: rate}, time.Now())
		}
	}
	return l
}

// resync restarts replication to the remote region as a new stream from
// the first entry still retained, after retention trimmed entries the
// region never received (the namespace's default backlog-quota policy:
// keep data up to retention, then resync). The target adopts the new
// stream and logs the skipped sequence numbers as declared loss; the
// alert needs-resync was counted.
func (rs *replSender) resync() {
	ctx, cancel := context.WithTimeout(rs.ctx, 30*time.Second)
	defer cancel()
	st := rs.s.Status()
	eff := rs.t.policies().Effective()
	eff.StartAt = meta.StartAtEarliest
	start, err := rs.t.initialReplCursor(ctx, eff)
	if err != nil {
		rs.log.Warn("replication resync: cannot find the first retained entry", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
		return
	}
	next := st.Cursor.NextStream(start.Pos, start.Seq, start.Bytes)
	s, err := replicator.NewSender(rs.t.senderConfig(rs.remote, eff), next, time.Now())
	if err != nil {
		rs.log.Warn("replication resync", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
		return
	}
	rs.cur.AckCumulativeWith(toMLPos(next.Pos), cursorProps(next))
	if err := rs.cur.Flush(ctx); err != nil {
		rs.log.Warn("replication resync: cursor not persisted", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
		return
	}
	rs.closeStream()
	rs.s = s
	rs.log.Warn("replication resynced: a new stream from the first retained entry (the region lacks what retention trimmed)",
		"topic", rs.t.name.String(), "remote", rs.remote, "from_seq", next.Base+1, "stream", next.Stream)
}

// ---- replicated subscriptions -----------------------------------------

// subSyncEvery: how often a replicator sends its topic's subscription
// positions to the remote region (the target: 200 ms).
const subSyncEvery = 200 * time.Millisecond

// subResendEvery: how often an unchanged subscription position is sent
// again.
const subResendEvery = time.Second

// subSent is the last position sent of a subscription, and when.
type subSent struct {
	sig string
	at  time.Time
}

// maxSubAcked bounds the individually acknowledged entries one update
// carries (the rest follow once mark-delete passes them).
const maxSubAcked = 10000

// wireOfPos is the message id, valid in every region, of the entry at
// local position p.
func (t *Topic) wireOfPos(p mledger.Position) mledger.Position {
	if o, ok := t.log.OriginOf(p); ok {
		return o
	}
	return p
}

// lastEntryBefore returns the last stored entry before {ledger, 0}, if any.
func (t *Topic) lastEntryBefore(ledger int64) (mledger.Position, bool) {
	ls := t.ml.Ledgers()
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].ID < ledger && ls[i].Entries > 0 {
			return mledger.Position{Ledger: ls[i].ID, Entry: ls[i].Entries - 1}, true
		}
	}
	return mledger.Position{}, false
}

// subscriptionUpdates returns the positions of the topic's durable
// subscriptions that changed since last (updated in place), in ids that
// mean the same message in every region. Only the active region of an
// active-standby namespace sends them: that is where consumers are.
//
// An unchanged position is sent again every subResendEvery: the target
// applies only what it can translate, and the entries an update names may
// not have been replicated yet when it first arrived.
func (t *Topic) subscriptionUpdates(last map[string]subSent) []*replpb.SubscriptionUpdate {
	pol := t.policies()
	if !meta.ActiveStandby(pol) || t.svc.active.ActiveRegion(t.name.NamespaceName(), pol) != t.svc.cfg.Cluster {
		return nil
	}
	var out []*replpb.SubscriptionUpdate
	for _, c := range t.ml.Cursors() {
		if isReplCursor(c.Name()) || !c.Durable() {
			continue
		}
		md := c.MarkDeleted()
		if md.Entry < 0 {
			p, ok := t.lastEntryBefore(md.Ledger)
			if !ok {
				continue // nothing acknowledged yet
			}
			md = p
		}
		ranges := c.AckedRanges()
		sig := fmt.Sprint(md, ranges)
		if l := last[c.Name()]; l.sig == sig && time.Since(l.at) < subResendEvery {
			continue
		}
		w := t.wireOfPos(md)
		u := &replpb.SubscriptionUpdate{Name: c.Name(), MarkDelete: &replpb.MessageId{Ledger: w.Ledger, Entry: w.Entry, Batch: -1}}
		n := 0
		for _, r := range ranges {
			for p := r.From; !r.To.Less(p) && n < maxSubAcked; p = t.ml.Next(p) {
				w := t.wireOfPos(p)
				u.Acked = append(u.Acked, &replpb.MessageId{Ledger: w.Ledger, Entry: w.Entry, Batch: -1})
				n++
				if p == r.To {
					break
				}
			}
		}
		last[c.Name()] = subSent{sig: sig, at: time.Now()}
		out = append(out, u)
	}
	return out
}

// pendingSubUpdate is a subscription update that named entries that had
// not arrived when it was applied.
type pendingSubUpdate struct {
	from string
	u    *replpb.SubscriptionUpdate
	n    uint64 // received n-th: a retry never replaces a newer update
}

// retryPendingSubscriptions applies again, shortly after replicated entries
// arrived, the updates that named entries not here yet. Without it such an
// update waited for its resend (subResendEvery, 1 s): when replication lags
// the 200 ms sync, every update names entries still in flight, and a
// region that died in between left a second of acknowledged messages to be
// delivered again in the new active region (the outage drills' duplicates).
func (t *Topic) retryPendingSubscriptions() {
	time.Sleep(20 * time.Millisecond) // gather the entries of a few batches
	t.subMu.Lock()
	pending := t.subPending
	t.subPending, t.subRetrying = nil, false
	t.subMu.Unlock()
	for _, p := range pending {
		ctx, cancel := context.WithTimeout(t.svc.ctx, 5*time.Second)
		t.applySubscriptionUpdate(ctx, p)
		cancel()
	}
}

// setPendingSubscription records (or, with incomplete false, forgets) the
// latest update of p's subscription that named entries not here yet,
// unless a newer update of it is pending already.
func (t *Topic) setPendingSubscription(p pendingSubUpdate, incomplete bool) {
	t.subMu.Lock()
	defer t.subMu.Unlock()
	if cur, ok := t.subPending[p.u.Name]; ok && cur.n > p.n {
		return
	}
	if !incomplete {
		delete(t.subPending, p.u.Name)
		return
	}
	if t.subPending == nil {
		t.subPending = map[string]pendingSubUpdate{}
	}
	t.subPending[p.u.Name] = p
}

// applySubscription moves the local subscription to the position another
// region's update names, as far as the ids translate here; an update that
// names entries not arrived yet is applied again as they arrive
// (retryPendingSubscriptions). Only for an active-standby namespace, from
// its active region.
func (t *Topic) applySubscription(ctx context.Context, from string, u *replpb.SubscriptionUpdate) {
	if u.Name == "" {
		return
	}
	t.subMu.Lock()
	t.subRecv++
	n := t.subRecv
	t.subMu.Unlock()
	t.applySubscriptionUpdate(ctx, pendingSubUpdate{from: from, u: u, n: n})
}

func (t *Topic) applySubscriptionUpdate(ctx context.Context, p pendingSubUpdate) {
	from, u := p.from, p.u
	// The one place a region's cursor moves without a local consumer's
	// ack: when a message is acknowledged and never delivered, this line
	// (at debug level) says whether a remote position skipped it.
	decision, before, after := "", mledger.Position{}, mledger.Position{}
	mdOK, nAcked := false, 0
	defer func() {
		t.svc.log.Debug("replication: subscription update", "topic", t.name.String(), "subscription", u.Name, "from", from,
			"decision", decision, "remote_mark_delete", fmt.Sprintf("%d:%d", u.MarkDelete.GetLedger(), u.MarkDelete.GetEntry()),
			"translated", mdOK, "acked", nAcked, "acked_named", len(u.Acked), "mark_delete_before", before.String(), "mark_delete", after.String())
	}()
	pol := t.policies()
	if !meta.ActiveStandby(pol) || t.svc.active.ActiveRegion(t.name.NamespaceName(), pol) != from || isReplCursor(u.Name) {
		decision = "ignored: not from the active region"
		t.setPendingSubscription(p, false)
		return
	}
	translate := func(id *replpb.MessageId) (mledger.Position, bool) {
		p := mledger.Position{Ledger: id.GetLedger(), Entry: id.GetEntry()}
		if l, ok := t.log.LocalOf(p); ok {
			return l, true
		}
		// An entry that originated here keeps its local id.
		for _, l := range t.ml.Ledgers() {
			if l.ID == p.Ledger {
				return p, p.Entry >= 0 && p.Entry < l.Entries
			}
		}
		return mledger.Position{}, false
	}
	md, mdOK := translate(u.MarkDelete)
	var acked []mledger.Position
	for _, id := range u.Acked {
		if p, ok := translate(id); ok {
			acked = append(acked, p)
		}
	}
	nAcked = len(acked)
	if t.log.HasConsumers(u.Name) {
		decision = "ignored: consumers here"
		t.setPendingSubscription(p, false)
		return // consumers here own this position now
	}
	t.setPendingSubscription(p, !mdOK || len(acked) < len(u.Acked))
	if !mdOK && len(acked) == 0 {
		decision = "pending: nothing translates yet"
		return
	}
	cur, err := t.ml.OpenCursor(ctx, u.Name, mledger.Earliest)
	if err != nil {
		decision = "failed: " + err.Error()
		return
	}
	decision, before = "applied", cur.MarkDeleted()
	if mdOK {
		cur.AckCumulative(md)
	}
	if len(acked) > 0 {
		cur.Ack(acked...)
	}
	after = cur.MarkDeleted()
}
