package bookie

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/meridian-mq/meridian/internal/grpcpool"
	"github.com/meridian-mq/meridian/internal/healthz"
	"github.com/meridian-mq/meridian/internal/httpserve"
	"github.com/meridian-mq/meridian/internal/ratelog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
)

// identityTimeout bounds the metadata calls of the startup identity check.
const identityTimeout = 30 * time.Second

// Server is a bookie: the Bookie gRPC service over a Store, its registration
// in cluster metadata, a disk-usage watchdog and Prometheus metrics.
//
// Lifecycle: New (opens the store, checks identity) → Start (listens,
// registers) → Close. A Server is not restartable after Close.
type Server struct {
	bookiepb.UnimplementedBookieServer

	cfg    Config
	reg    Registry
	log    *slog.Logger
	store  *Store
	cookie *metapb.Cookie
	m      *metrics

	ctx    context.Context // lives until Close; the registration lease follows it
	cancel context.CancelFunc

	draining    atomic.Bool   // decommission: read-only whatever the disk says
	removed     chan struct{} // closed when the decommission removed this bookie
	removedOnce sync.Once

	diskTrigger  chan struct{}
	diskBudget   atomic.Int64 // bytes commits may write before they trigger a check
	diskMu       sync.Mutex   // serializes checkDisk
	diskFull     atomic.Bool
	diskErrShown bool // guarded by diskMu
	diskUsed     atomic.Uint64
	diskTotal    atomic.Uint64

	health     *healthz.Checker // /healthz, /readyz on the metrics port
	diskTurned func()           // the disk loop's turn, for /healthz

	gcMu sync.Mutex // serializes garbage collection passes

	regMu        sync.Mutex // serializes Register calls
	registered   bool       // Start registered; guarded by regMu
	registeredRO bool       // read_only of the last successful Register; guarded by regMu
	regDirty     bool       // a Register update is due; guarded by regMu

	mu         sync.Mutex
	started    bool
	closed     bool
	advertise  string
	lis        net.Listener
	grpcSrv    *grpc.Server
	httpSrv    *httpserve.Server
	metricsLis net.Listener
	wg         sync.WaitGroup
}

// New opens the bookie's store in cfg.DataDir and runs the identity check
// against reg (nil: no cluster metadata; the cookie lives on disk only):
//   - empty data dir, no cookie in metadata: a new bookie, formatted with a
//     new instance id;
//   - empty data dir, a cookie in metadata: the disk was wiped; formatted
//     with a new instance id and every ledger allocated so far in limbo;
//   - data dir and metadata cookies with different instance ids: refused
//     (ErrIdentity).
//
// New does not listen; see Start.
func New(cfg Config, reg Registry) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger.With("bookie", cfg.ID)
	s := &Server{
		cfg:         cfg,
		reg:         reg,
		log:         log,
		m:           newMetrics(cfg.Region, cfg.Rack, cfg.ID),
		diskTrigger: make(chan struct{}, 1),
		removed:     make(chan struct{}),
	}
	st, err := OpenStore(cfg.DataDir, StoreOptions{
		FS:                  cfg.fs,
		MemTableSizeBytes:   cfg.MemTableSizeBytes,
		GroupCommitMaxDelay: cfg.GroupCommitMaxDelay,
		GroupCommitMaxBytes: cfg.GroupCommitMaxBytes,
		Logger:              log,
		OnCommit:            s.onCommit,
	})
	if err != nil {
		return nil, err
	}
	s.store = st
	ctx, cancel := context.WithTimeout(context.Background(), identityTimeout)
	cookie, err := ensureIdentity(ctx, st, cfg.ID, reg, log, time.Now())
	cancel()
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	s.cookie = cookie
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.health, s.diskTurned = s.newHealth()
	s.checkDisk()
	return s, nil
}

// Store returns the server's store (for in-process tools and tests).
func (s *Server) Store() *Store { return s.store }

// Gatherer returns the server's private metrics registry.
func (s *Server) Gatherer() prometheus.Gatherer { return s.m.reg }

// Cookie returns the identity the bookie runs with.
func (s *Server) Cookie() *metapb.Cookie { return s.cookie }

// Addr returns the address the gRPC service listens on ("" before Start).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lis == nil {
		return ""
	}
	return s.lis.Addr().String()
}

// MetricsAddr returns the address of the metrics HTTP listener ("" if none).
func (s *Server) MetricsAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metricsLis == nil {
		return ""
	}
	return s.metricsLis.Addr().String()
}

// newHealth returns the bookie's answers to a prober (internal/healthz),
// served on its metrics port: live while the disk loop turns; ready when
// registered (the last registration update went through), writable (not
// read-only: disk full, decommissioning) and not stopping.
func (s *Server) newHealth() (*healthz.Checker, func()) {
	h := healthz.New()
	turned := h.Loop("disk-loop", 2*s.cfg.DiskCheckInterval+30*time.Second)
	h.Ready("registration", func(context.Context) error {
		if s.reg == nil {
			return nil
		}
		s.regMu.Lock()
		defer s.regMu.Unlock()
		switch {
		case !s.registered:
			return errors.New("not registered")
		case s.regDirty:
			return errors.New("a registration update is failing")
		}
		return nil
	})
	h.Ready("writable", func(context.Context) error {
		if s.store.ReadOnly() || s.draining.Load() {
			return errors.New("read-only")
		}
		return nil
	})
	return h, turned
}

// maxConcurrentStreams bounds the streams one connection may hold open at
// once (gRPC's default is unbounded: a caller could open streams until the
// bookie runs out of memory). A ledger client uses one add stream per
// bookie connection and one stream per read in flight; a broker's reads
// beyond the bound wait for a stream to end, they do not fail.
const maxConcurrentStreams = 4096

// Who may call a bookie over mutual TLS (the handshake admits any
// certificate of the CA): adds and reads, fencing (ReadLac) included,
// want a certificate naming RoleBroker or RoleAutorecovery — not a
// user's certificate from the same CA (the Pulsar listener's "tls"
// authentication), nor another bookie's or an etcd member's. Info (disk
// usage, read-only state; `meridian admin bookies list`) is served to
// any certificate of the CA. Without TLS the bookie serves anyone: a
// broker with authentication on refuses to start without TLS, so it
// never writes to such a bookie (cmd/meridian).
var ledgerRoles = []string{tlsutil.RoleBroker, tlsutil.RoleAutorecovery}

// ClientAuth says how a bookie with TLS on or off authenticates its
// callers: what its start-up line and its
// meridian_bookie_client_auth_required gauge say.
func ClientAuth(tlsOn bool) string {
	if tlsOn {
		return "mutual TLS: adds, reads and fencing only for a certificate of the CA naming role broker or autorecovery"
	}
	return "none: plaintext, any caller may add, read and fence"
}

// roleCheck refuses a call whose caller may not make it.
func roleCheck(ctx context.Context, method string) error {
	if method == bookiepb.Bookie_Info_FullMethodName {
		return nil
	}
	if err := tlsutil.RoleError(ctx, method, ledgerRoles...); err != nil {
		return status.Error(codes.PermissionDenied, "bookie: "+err.Error())
	}
	return nil
}

func unaryRoleCheck(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := roleCheck(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func streamRoleCheck(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := roleCheck(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// Start listens on cfg.ListenAddr (and cfg.MetricsAddr), serves, and
// registers the bookie (writable or read-only) in the Registry.
//
// Start and Close must not be called concurrently. After a failed Start,
// call Close.
func (s *Server) Start() error {
	if d, ok := s.reg.(Decommissioner); ok && s.reg != nil {
		state, err := d.WatchDecommission(s.ctx, s.cfg.ID, s.onDecommission)
		if err != nil {
			return fmt.Errorf("bookie: read decommission state: %w", err)
		}
		switch state {
		case DecommissionRemoved:
			return fmt.Errorf("%w: %s", ErrDecommissioned, s.cfg.ID)
		case DecommissionDraining:
			s.draining.Store(true)
			s.log.Warn("bookie: being decommissioned; starting read-only")
		}
	}
	if err := s.listen(); err != nil {
		return err
	}
	s.checkDisk()
	if s.reg != nil {
		s.regMu.Lock()
		s.registered = true
		s.regDirty = true
		s.regMu.Unlock()
		if err := s.syncRegistration(); err != nil {
			return fmt.Errorf("bookie: register: %w", err)
		}
	}
	s.log.Info("bookie: serving", "addr", s.Addr(), "advertise", s.registration().GetAddr(),
		"instance", s.cookie.GetInstanceId(), "limbo_below_or_at", s.cookie.GetLimboBelowOrAt(), "read_only", s.store.ReadOnly(),
		"client_auth", ClientAuth(s.cfg.TLS.Enabled()))
	return nil
}

// listen starts the listeners, the gRPC and metrics servers and the disk
// watchdog.
func (s *Server) listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.started {
		return errors.New("bookie: server already started")
	}
	lis, err := net.Listen("tcp", s.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("bookie: listen on %s: %w", s.cfg.ListenAddr, err)
	}
	var mlis net.Listener
	if s.cfg.MetricsAddr != "" {
		if mlis, err = net.Listen("tcp", s.cfg.MetricsAddr); err != nil {
			lis.Close()
			return fmt.Errorf("bookie: metrics listen on %s: %w", s.cfg.MetricsAddr, err)
		}
	}
	s.advertise = s.cfg.AdvertiseAddr
	if _, port, _ := net.SplitHostPort(s.advertise); port == "0" {
		s.advertise = lis.Addr().String()
	}
	msgMax := s.cfg.MaxEntryBytes + 1<<20 // payload plus request fields
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(msgMax), grpc.MaxSendMsgSize(msgMax), grpcpool.ServerOption(),
		grpc.ForceServerCodecV2(newServerCodec()), // adds alias their receive buffer (addcodec.go)
		// Ledger clients ping idle connections every 10 s to notice a dead
		// bookie; gRPC's default policy (5 min) would answer that with
		// GOAWAY "too_many_pings" and break every add stream.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.MaxConcurrentStreams(maxConcurrentStreams)}
	opts = append(opts, grpcpool.TransportServerOptions()...)
	var tlsSrc *tlsutil.Source
	if s.cfg.TLS.Enabled() {
		if tlsSrc, err = tlsutil.NewSource(s.cfg.TLS); err != nil {
			lis.Close()
			if mlis != nil {
				mlis.Close()
			}
			return fmt.Errorf("bookie: %w", err)
		}
		opts = append(opts, grpc.Creds(tlsSrc.GRPCServer(tlsutil.RequireClientCert)),
			grpc.UnaryInterceptor(unaryRoleCheck), grpc.StreamInterceptor(streamRoleCheck))
		s.m.clientAuth.Set(1)
	}
	s.grpcSrv = grpc.NewServer(opts...)
	bookiepb.RegisterBookieServer(s.grpcSrv, s)
	s.lis = lis
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpcSrv.Serve(lis); err != nil {
			s.log.Error("bookie: grpc serve", "err", err)
		}
	}()
	if mlis != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
		rl := ratelog.New(s.log, time.Minute)
		s.health.Register(mux, func(endpoint string, err error) {
			rl.Log(slog.LevelWarn, endpoint, "bookie: health probe answered red", "endpoint", endpoint, "err", err)
		})
		s.httpSrv = httpserve.New(mux, httpserve.Options{Logger: s.log})
		s.metricsLis = mlis
		serve := mlis
		if tlsSrc != nil {
			serve = tls.NewListener(mlis, tlsSrc.ServerConfig(tlsutil.NoClientCert, "http/1.1"))
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.httpSrv.Serve(serve); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("bookie: metrics serve", "err", err)
			}
		}()
	}
	s.started = true
	s.wg.Add(1)
	go s.diskLoop()
	if _, ok := s.reg.(LedgerLister); ok && s.reg != nil && s.cfg.GCInterval > 0 {
		s.wg.Add(1)
		go s.gcLoop()
	} else if s.reg != nil && s.cfg.GCInterval > 0 {
		s.log.Warn("bookie: the registry lists no ledgers: garbage collection is off, nothing on this disk is freed")
	}
	return nil
}

func (s *Server) registration() *metapb.BookieRegistration {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &metapb.BookieRegistration{
		Id:         s.cfg.ID,
		Addr:       s.advertise,
		Region:     s.cfg.Region,
		Rack:       s.cfg.Rack,
		InstanceId: s.cookie.GetInstanceId(),
		ReadOnly:   s.store.ReadOnly(),
	}
	if s.metricsLis != nil {
		r.MetricsAddr = s.metricsLis.Addr().String()
	}
	return r
}

// syncRegistration publishes the registration if the read-only state changed
// since the last successful Register (or one is due).
func (s *Server) syncRegistration() error {
	if s.reg == nil {
		return nil
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if !s.registered {
		return nil
	}
	r := s.registration()
	if !s.regDirty && r.ReadOnly == s.registeredRO {
		return nil
	}
	// The lease lives as long as the context given to Register: the server's.
	if err := s.reg.Register(s.ctx, r); err != nil {
		s.regDirty = true
		s.log.Warn("bookie: registration update failed; will retry", "read_only", r.ReadOnly, "err", err)
		return err
	}
	s.regDirty = false
	s.registeredRO = r.ReadOnly
	return nil
}

// diskLoop checks disk usage every DiskCheckInterval and when commits have
// written the budget the last check left.
func (s *Server) diskLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.DiskCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.diskTrigger:
		}
		s.diskTurned()
		s.refresh()
	}
}

// refresh re-checks disk usage and publishes a changed read-only state.
func (s *Server) refresh() {
	s.checkDisk()
	_ = s.syncRegistration()
}

// onCommit runs on the committer goroutine after each group commit. It
// triggers a disk check once the commits since the last one wrote the
// budget that check left (diskBudgetFor), not after every commit: a check
// is a goroutine wake-up and a statfs, and at 1,000 commits a second per
// bookie they were ~5 % of a standalone's system calls (perf trace).
func (s *Server) onCommit(ci CommitInfo) {
	s.m.onCommit(ci)
	if s.diskBudget.Add(-int64(ci.Bytes)) > 0 {
		return
	}
	select {
	case s.diskTrigger <- struct{}{}:
	default:
	}
}

// Disk check budget: commits may write an eighth of the headroom left below
// the threshold before the next check, between 1 MiB and 64 MiB.
const (
	minDiskBudget = 1 << 20
	maxDiskBudget = 64 << 20
)

// diskBudgetFor is the bytes commits may write before the next check, for
// used of total bytes: an eighth of what is left below the threshold, so
// commits alone cannot overshoot it by more than that between two checks
// (the periodic check covers other writers of the filesystem).
func diskBudgetFor(used, total uint64, threshold float64) int64 {
	limit := threshold * float64(total)
	headroom := limit - float64(used)
	return int64(min(max(headroom/8, minDiskBudget), maxDiskBudget))
}

// checkDisk samples the data directory's filesystem usage and turns the
// store read-only at or above the threshold (writable again below it).
func (s *Server) checkDisk() {
	s.diskMu.Lock()
	defer s.diskMu.Unlock()
	usageFn := s.cfg.diskUsage
	if usageFn == nil {
		usageFn = func() (vfs.DiskUsage, error) { return s.cfg.fs.GetDiskUsage(s.cfg.DataDir) }
	}
	u, err := usageFn()
	if err != nil || u.TotalBytes == 0 {
		s.diskBudget.Store(maxDiskBudget) // the periodic check retries
		if !s.diskErrShown {
			s.diskErrShown = true
			s.log.Warn("bookie: cannot read disk usage; the read-only watchdog is off until it can", "dir", s.cfg.DataDir, "err", err)
		}
		s.m.readOnly.Set(boolGauge(s.store.ReadOnly()))
		return
	}
	s.diskErrShown = false
	// Space reserved for root counts as used: a non-root bookie cannot use it.
	used := u.TotalBytes - min(u.AvailBytes, u.TotalBytes)
	ratio := float64(used) / float64(u.TotalBytes)
	s.diskBudget.Store(diskBudgetFor(used, u.TotalBytes, s.cfg.DiskUsageThreshold))
	s.diskUsed.Store(used)
	s.diskTotal.Store(u.TotalBytes)
	s.m.diskUsage.Set(ratio)
	full := ratio >= s.cfg.DiskUsageThreshold
	s.store.SetReadOnly(full || s.draining.Load())
	if full != s.diskFull.Load() {
		s.diskFull.Store(full)
		if full {
			s.log.Warn("bookie: disk usage at or above threshold; turning read-only", "usage", ratio, "threshold", s.cfg.DiskUsageThreshold)
		} else {
			s.log.Info("bookie: disk usage below threshold; writable again", "usage", ratio, "threshold", s.cfg.DiskUsageThreshold)
		}
	}
	s.m.readOnly.Set(boolGauge(s.store.ReadOnly()))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Close deregisters the bookie, stops serving (gracefully up to
// ShutdownTimeout, then cutting the remaining calls) and closes the store
// after completing its queued operations.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	s.mu.Unlock()
	s.health.Drain("stopping")

	var errs []error
	if started && s.reg != nil {
		// Stop registration updates first, so none re-publishes after
		// Deregister.
		s.regMu.Lock()
		s.registered = false
		s.regMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		if err := s.reg.Deregister(ctx); err != nil {
			errs = append(errs, fmt.Errorf("bookie: deregister: %w", err))
		}
		cancel()
	}
	s.cancel()
	if started {
		done := make(chan struct{})
		go func() {
			s.grpcSrv.GracefulStop()
			close(done)
		}()
		t := time.NewTimer(s.cfg.ShutdownTimeout)
		select {
		case <-done:
		case <-t.C:
			s.log.Warn("bookie: graceful stop timed out; closing open calls", "timeout", s.cfg.ShutdownTimeout)
			s.grpcSrv.Stop()
			<-done
		}
		t.Stop()
		if s.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
			if err := s.httpSrv.Shutdown(ctx); err != nil {
				_ = s.httpSrv.Close()
			}
			cancel()
		}
	}
	s.wg.Wait()
	if err := s.store.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// statusOf maps a Store error to the wire status. Corruption and "unknown"
// are checked first: they must never be reported as anything milder.
func statusOf(err error) bookiepb.Status {
	switch {
	case err == nil:
		return bookiepb.Status_OK
	case errors.Is(err, ErrCorrupt):
		return bookiepb.Status_CORRUPT
	case errors.Is(err, ErrUnknown), errors.Is(err, ErrLimbo):
		return bookiepb.Status_UNKNOWN
	case errors.Is(err, ErrFenced):
		return bookiepb.Status_FENCED
	case errors.Is(err, ErrReadOnly):
		return bookiepb.Status_READ_ONLY
	case errors.Is(err, ErrInvalid):
		return bookiepb.Status_INVALID
	case errors.Is(err, ErrNoSuchEntry):
		return bookiepb.Status_NO_SUCH_ENTRY
	case errors.Is(err, ErrNoSuchLedger):
		return bookiepb.Status_NO_SUCH_LEDGER
	default:
		return bookiepb.Status_INTERNAL_ERROR
	}
}

func errMessage(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// AddEntries serves a stream of adds. The receive loop validates each add and
// queues it to the committer without waiting; responses are sent by a second
// goroutine as adds complete, so one stream pipelines many adds (responses
// may be out of order; the client matches them by request_id). At most
// MaxInflightPerStream adds of the stream are unanswered at any time.
func (s *Server) AddEntries(stream grpc.BidiStreamingServer[bookiepb.AddRequest, bookiepb.AddResponse]) error {
	ctx := stream.Context()
	n := s.cfg.MaxInflightPerStream
	sem := make(chan struct{}, n)
	// Capacity n and the semaphore guarantee a send on resps never blocks,
	// so the committer's callbacks never wait on a slow client.
	resps := make(chan *bookiepb.AddResponse, n)
	sendDone := make(chan error, 1)
	go func() {
		var err error
		for r := range resps {
			if err == nil {
				err = stream.Send(r)
			}
			<-sem
		}
		sendDone <- err
	}()

	var inflight sync.WaitGroup
	var recvErr error
recv:
	for {
		req := new(recvAdd) // its payload aliases the receive buffer until release
		err := stream.RecvMsg(req)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				recvErr = err
			}
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			recvErr = ctx.Err()
			break recv
		}
		start := time.Now()
		resp := &bookiepb.AddResponse{RequestId: req.requestID, LedgerId: req.ledgerID, EntryId: req.entryID}
		complete := func(err error) {
			st := statusOf(err)
			resp.Status, resp.Message = st, errMessage(err)
			s.m.adds.WithLabelValues(st.String()).Inc()
			s.m.addLatency.Observe(time.Since(start).Seconds())
			resps <- resp
		}
		if len(req.payload) > s.cfg.MaxEntryBytes {
			n := len(req.payload)
			req.release()
			complete(fmt.Errorf("%w: payload of %d bytes exceeds max_entry_bytes %d", ErrInvalid, n, s.cfg.MaxEntryBytes))
			continue
		}
		inflight.Add(1)
		// The store reads the payload until done; the buffer goes back to
		// the pool then.
		s.store.AddAsync(Entry{
			LedgerID: req.ledgerID,
			EntryID:  req.entryID,
			LAC:      req.lac,
			Payload:  req.payload,
			Digest:   req.digest,
			Recovery: req.recovery,
		}, func(err error) {
			req.release()
			complete(err)
			inflight.Done()
		})
	}
	inflight.Wait()
	close(resps)
	sendErr := <-sendDone
	if recvErr != nil {
		return recvErr
	}
	return sendErr
}

// ReadEntry reads one entry; with fence set it first fences the ledger
// durably (a fence failure is answered, the read is not attempted).
func (s *Server) ReadEntry(_ context.Context, req *bookiepb.ReadEntryRequest) (*bookiepb.ReadEntryResponse, error) {
	resp := &bookiepb.ReadEntryResponse{LedgerId: req.GetLedgerId(), EntryId: req.GetEntryId()}
	if req.GetFence() {
		if _, err := s.fence(req.GetLedgerId()); err != nil {
			resp.Status, resp.Message = statusOf(err), err.Error()
			s.m.reads.WithLabelValues(resp.Status.String()).Inc()
			return resp, nil
		}
	}
	lac, payload, digest, err := s.store.Read(req.GetLedgerId(), req.GetEntryId())
	resp.Status, resp.Message = statusOf(err), errMessage(err)
	if err == nil {
		resp.Lac, resp.Payload, resp.Digest = lac, payload, digest
	} else if resp.Status == bookiepb.Status_CORRUPT || resp.Status == bookiepb.Status_INTERNAL_ERROR {
		s.log.Error("bookie: read failed", "ledger", req.GetLedgerId(), "entry", req.GetEntryId(), "status", resp.Status, "err", err)
	}
	s.m.reads.WithLabelValues(resp.Status.String()).Inc()
	return resp, nil
}

// Bounds of one ReadEntries answer (within the server's send limit, which
// is MaxEntryBytes + 1 MiB: an entry past the first is included only if
// the answer stays within readEntriesMaxBytes).
const (
	readEntriesMaxEntries = 1000
	readEntriesMaxBytes   = 4 << 20
)

// ReadEntries reads consecutive entries of a ledger (a catch-up read): see
// the proto. It stops at the first entry it cannot return OK, so a reader
// falls back to single reads (and other replicas) from there.
func (s *Server) ReadEntries(_ context.Context, req *bookiepb.ReadEntriesRequest) (*bookiepb.ReadEntriesResponse, error) {
	resp := &bookiepb.ReadEntriesResponse{}
	n := int64(min(max(req.GetMaxEntries(), 1), readEntriesMaxEntries))
	budget := int64(readEntriesMaxBytes)
	if b := req.GetMaxBytes(); b > 0 {
		budget = min(budget, b)
	}
	ledgerID, first := req.GetLedgerId(), req.GetFirstEntryId()
	var bytes int64
	for id := first; id < first+n; id++ {
		lac, payload, digest, err := s.store.Read(ledgerID, id)
		if err != nil {
			st := statusOf(err)
			if st == bookiepb.Status_CORRUPT || st == bookiepb.Status_INTERNAL_ERROR {
				s.log.Error("bookie: read failed", "ledger", ledgerID, "entry", id, "status", st, "err", err)
			}
			if id == first {
				resp.Status, resp.Message = st, errMessage(err)
				s.m.reads.WithLabelValues(st.String()).Inc()
			}
			break
		}
		if id > first && bytes+int64(len(payload)) > budget {
			break
		}
		bytes += int64(len(payload))
		resp.Entries = append(resp.Entries, &bookiepb.ReadEntryResponse{
			LedgerId: ledgerID, EntryId: id, Lac: lac, Payload: payload, Digest: digest,
		})
		s.m.reads.WithLabelValues(bookiepb.Status_OK.String()).Inc()
	}
	return resp, nil
}

// ReadLac returns the ledger's LAC and last entry; with fence set it fences
// the ledger durably first and answers with the state at the fence.
func (s *Server) ReadLac(_ context.Context, req *bookiepb.ReadLacRequest) (*bookiepb.ReadLacResponse, error) {
	resp := &bookiepb.ReadLacResponse{Lac: -1, LastEntryId: -1}
	if req.GetFence() {
		r, err := s.fence(req.GetLedgerId())
		switch {
		case err != nil:
			resp.Status, resp.Message = statusOf(err), err.Error()
		case r.Limbo:
			// Fenced durably, but what this bookie has is not authoritative.
			resp.Status = bookiepb.Status_UNKNOWN
			resp.Message = fmt.Sprintf("ledger %d is in limbo here (data may have been lost); fenced", req.GetLedgerId())
			resp.Lac, resp.LastEntryId, resp.Fenced = r.LAC, r.LastEntryID, true
		default:
			resp.Lac, resp.LastEntryId, resp.Fenced = r.LAC, r.LastEntryID, true
		}
		s.m.reads.WithLabelValues(resp.Status.String()).Inc()
		return resp, nil
	}
	lac, last, fenced, err := s.store.ReadLac(req.GetLedgerId())
	resp.Status, resp.Message = statusOf(err), errMessage(err)
	resp.Lac, resp.LastEntryId, resp.Fenced = lac, last, fenced
	s.m.reads.WithLabelValues(resp.Status.String()).Inc()
	return resp, nil
}

func (s *Server) fence(ledgerID int64) (FenceResult, error) {
	r, err := s.store.Fence(ledgerID)
	// Failures are counted, not logged one by one: a broken store fails every
	// fence, and the store logged the cause once.
	s.m.fences.WithLabelValues(statusOf(err).String()).Inc()
	return r, err
}

// Info describes the bookie.
func (s *Server) Info(context.Context, *bookiepb.InfoRequest) (*bookiepb.InfoResponse, error) {
	return &bookiepb.InfoResponse{
		BookieId:       s.cfg.ID,
		InstanceId:     s.cookie.GetInstanceId(),
		Region:         s.cfg.Region,
		Rack:           s.cfg.Rack,
		ReadOnly:       s.store.ReadOnly(),
		DiskUsedBytes:  s.diskUsed.Load(),
		DiskTotalBytes: s.diskTotal.Load(),
		FormatVersion:  FormatVersion,
		Limbo:          s.cookie.GetLimboBelowOrAt() > 0,
	}, nil
}
