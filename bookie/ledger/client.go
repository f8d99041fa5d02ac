package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Errors of the ledger client; match with errors.Is.
var (
	// ErrFenced: the ledger was fenced by a recovery; this writer can no
	// longer get acknowledgements. An add that fails with it has an unknown
	// outcome: recovery may or may not have kept it.
	ErrFenced = errors.New("ledger: fenced")
	// ErrClosed: the ledger is closed (or this writer was closed).
	ErrClosed = errors.New("ledger: closed")
	// ErrNoSuchLedger: no metadata for this ledger id.
	ErrNoSuchLedger = errors.New("ledger: no such ledger")
	// ErrNoSuchEntry: the entry is beyond the ledger's last entry (or LAC).
	ErrNoSuchEntry = errors.New("ledger: no such entry")
	// ErrNotEnoughBookies: no ensemble (or replacement) satisfies the
	// placement policy with the bookies available.
	ErrNotEnoughBookies = errors.New("ledger: not enough bookies")
	// ErrCorrupt: every replica that answered had a bad digest.
	ErrCorrupt = errors.New("ledger: entry corrupt on every replica read")
	// ErrTooLarge: the payload exceeds MaxEntryBytes.
	ErrTooLarge = errors.New("ledger: entry too large")
	// ErrRecovery: recovery could not establish the ledger's end safely (too
	// many bookies unreachable or unable to tell); retry later.
	ErrRecovery = errors.New("ledger: recovery incomplete")
)

// BookieSource tells the client which bookies exist. Implementations must be
// safe for concurrent use.
type BookieSource interface {
	// Writable returns the bookies new ensembles and replacements may use.
	Writable() []*metapb.BookieRegistration
	// Lookup returns a registered bookie (writable or read-only) by id.
	Lookup(id string) (*metapb.BookieRegistration, bool)
}

// ReadOnlyLister is an optional BookieSource method: the registered
// bookies that are read-only. A source that has it lets "not enough
// bookies" errors count them ("0 usable (4 live, 4 read-only)"); the
// client never writes to them.
type ReadOnlyLister interface {
	ReadOnly() []*metapb.BookieRegistration
}

// ViewSource adapts a cluster.BookieView to BookieSource.
type ViewSource struct{ View *cluster.BookieView }

// ReadOnly returns the bookies registered read-only (ReadOnlyLister).
func (v ViewSource) ReadOnly() []*metapb.BookieRegistration {
	var out []*metapb.BookieRegistration
	for _, b := range v.View.Bookies(false) {
		if b.State == cluster.BookieReadOnly {
			out = append(out, b.Reg)
		}
	}
	return out
}

func (v ViewSource) Writable() []*metapb.BookieRegistration {
	bs := v.View.Bookies(true)
	out := make([]*metapb.BookieRegistration, len(bs))
	for i, b := range bs {
		out[i] = b.Reg
	}
	return out
}

func (v ViewSource) Lookup(id string) (*metapb.BookieRegistration, bool) {
	b, ok := v.View.Lookup(id)
	return b.Reg, ok
}

// Config configures a Client.
type Config struct {
	// Store holds ledger metadata (a region's store; for stretched ledgers
	// the global store). Required.
	Store *cluster.Store
	// IDs allocates ledger ids. Default: an allocator on Store.
	IDs *cluster.IDAllocator
	// Bookies is the source of live bookies. Required.
	Bookies BookieSource
	// Region and Rack of this client, for read locality and for placing the
	// first ensemble member near the writer.
	Region, Rack string
	// AddTimeout: a bookie that has not answered an add within it is treated
	// as failed and replaced by an ensemble change. Default 5s
	// (BookKeeper's addEntryTimeoutSec). Shorter reacts faster to a paused
	// bookie; too short replaces healthy bookies during fsync stalls.
	AddTimeout time.Duration
	// ReadTimeout bounds each read request to one bookie. Default 5s.
	ReadTimeout time.Duration
	// EnsembleChangeTimeout: how long a pending add may be unable to reach
	// its ack quorum on the current ensemble's live bookies while the
	// ensemble change finds no replacement (or cannot commit one to
	// metadata) before the writer fails. While every pending add can still
	// reach Qa, the writer goes on and the change keeps retrying
	// (BookKeeper's delayEnsembleChange). Default 30s.
	EnsembleChangeTimeout time.Duration
	// MaxEntryBytes: the largest payload accepted. Default 5 MiB + 64 KiB (a
	// 5 MiB message plus its metadata). Must not exceed the bookies' limit.
	MaxEntryBytes int
	// DegradedRecovery lets recovery close a ledger whose last entries it
	// could re-write to fewer than the ack quorum — but to at least
	// Qw-Qa+1 bookies of each write set, the replicas recovery itself
	// needs to decide — instead of failing. For stretched ledgers after a
	// region loss: the survivor's copies are all there is until the region
	// returns and auto-recovery restores the write quorum. Logged.
	DegradedRecovery bool
	// WriterLeaseTTL: the TTL of the etcd lease this client keeps alive
	// while it lives and records in the metadata of every ledger it creates
	// (LedgerMetadata.writer_lease). Auto-recovery fences and closes an OPEN
	// ledger only after that lease expired, i.e. its writer's process is
	// gone (or cut off from etcd for the TTL); an idle ledger of a live
	// writer is never fenced. Default 10 s (the bookies' registration TTL):
	// a dead writer's open ledgers can be recovered ~10 s after it died;
	// shorter risks fencing the ledgers of a writer that merely stalled.
	// Negative: record no lease (auto-recovery then never fences this
	// client's ledgers).
	WriterLeaseTTL time.Duration
	// WriterName is recorded with the lease (LedgerMetadata.writer), for
	// operators. Default: host-pid.
	WriterName string
	// IdleReplaceAfter: when a writer has no add in flight and a member of
	// its current ensemble has been unregistered or read-only for this
	// long, the writer replaces it by an ensemble change without waiting
	// for an add to fail. Then the entries written so far sit in a
	// completed fragment, which auto-recovery re-replicates, and a bookie
	// being decommissioned drains even from idle ledgers. Default 5 s
	// (after the registration TTL has run out, so a bookie is then dead for
	// ~15 s, or stopped cleanly 5 s ago). The replacement is tried only
	// when the placement rule can be met; otherwise the writer waits.
	// Negative: off (an idle writer notices only at its next add).
	IdleReplaceAfter time.Duration
	// DialOptions are added to every bookie connection (TLS, a later issue).
	DialOptions []grpc.DialOption
	// Logger receives ensemble changes and recovery decisions. Default: discard.
	Logger *slog.Logger
}

// Client creates, writes, recovers and reads ledgers. Safe for concurrent use.
type Client struct {
	cfg  Config
	pool pool
	rng  *rand.Rand
	rmu  sync.Mutex

	ctx    context.Context // lives until Close; the writer lease follows it
	cancel context.CancelFunc

	// byBookie: the open writers by the members of their current
	// ensembles, for the idle sweep (sweepIdle), one goroutine per client
	// rather than a ticker per writer.
	wmu       sync.Mutex
	byBookie  map[string]map[*Writer]struct{}
	sweepOnce sync.Once

	lmu   sync.Mutex
	lease *cluster.Lease // nil until the first Create (or after it was lost)

	// breaking counts Stats.ReplacementsBreakingPlacement.
	breaking atomic.Uint64

	// probes: the last Info probe of each bookie that failed (is it
	// back?), shared by the writers (answersShared).
	bmu    sync.Mutex
	probes map[string]*backProbe
}

// Stats are a client's counters since New.
type Stats struct {
	// ReplacementsBreakingPlacement: ensemble members replaced, under an
	// enforced placement policy, by a bookie that breaks its rack rule
	// because no bookie kept it (each logged as a warning). The broker
	// exports it as meridian_broker_ensemble_replacements_breaking_placement_total.
	ReplacementsBreakingPlacement uint64
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{ReplacementsBreakingPlacement: c.breaking.Load()}
}

// New returns a client.
func New(cfg Config) (*Client, error) {
	if cfg.Store == nil || cfg.Bookies == nil {
		return nil, errors.New("ledger: Config.Store and Config.Bookies are required")
	}
	if cfg.IDs == nil {
		cfg.IDs = cluster.NewIDAllocator(cfg.Store)
	}
	if cfg.AddTimeout == 0 {
		cfg.AddTimeout = 5 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 5 * time.Second
	}
	if cfg.EnsembleChangeTimeout == 0 {
		cfg.EnsembleChangeTimeout = 30 * time.Second
	}
	if cfg.MaxEntryBytes == 0 {
		cfg.MaxEntryBytes = 5<<20 + 64<<10
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.WriterLeaseTTL == 0 {
		cfg.WriterLeaseTTL = DefaultWriterLeaseTTL
	}
	if cfg.WriterName == "" {
		h, _ := os.Hostname()
		cfg.WriterName = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	if cfg.IdleReplaceAfter == 0 {
		cfg.IdleReplaceAfter = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{cfg: cfg, pool: pool{opts: cfg.DialOptions, conns: map[string]*bookieConn{}}, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6d65726964)),
		ctx: ctx, cancel: cancel}, nil
}

// DefaultWriterLeaseTTL is Config.WriterLeaseTTL's default.
const DefaultWriterLeaseTTL = 10 * time.Second

// Close closes every bookie connection and revokes the writer lease.
// Writers still open fail; auto-recovery may then recover their ledgers.
func (c *Client) Close() {
	c.lmu.Lock()
	l := c.lease
	c.lease = nil
	c.lmu.Unlock()
	if l != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = l.Revoke(ctx)
		cancel()
	}
	c.cancel()
	c.pool.closeAll()
}

// writerLease returns the lease to record in a new ledger's metadata (0
// when WriterLeaseTTL is negative), granting one on first use and again
// after the previous one was lost (etcd unreachable for its TTL: the
// ledgers recorded under it may be recovered by auto-recovery, as their
// writer could no longer have changed their metadata anyway).
func (c *Client) writerLease(ctx context.Context) (int64, error) {
	if c.cfg.WriterLeaseTTL < 0 {
		return 0, nil
	}
	c.lmu.Lock()
	defer c.lmu.Unlock()
	if c.lease != nil {
		select {
		case <-c.lease.Lost():
			c.lease = nil
		default:
			return int64(c.lease.ID), nil
		}
	}
	if c.ctx.Err() != nil {
		return 0, ErrClosed
	}
	// The grant itself is bounded by ctx; the keep-alive lives with the client.
	type res struct {
		l   *cluster.Lease
		err error
	}
	ch := make(chan res, 1)
	go func() {
		l, err := c.cfg.Store.GrantLease(c.ctx, c.cfg.WriterLeaseTTL)
		ch <- res{l, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return 0, fmt.Errorf("ledger: writer lease: %w", r.err)
		}
		c.lease = r.l
		return int64(r.l.ID), nil
	case <-ctx.Done():
		go func() { // a grant that completes late is not kept
			if r := <-ch; r.l != nil {
				rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = r.l.Revoke(rctx)
				cancel()
			}
		}()
		return 0, ctx.Err()
	}
}

// CreateOptions are a new ledger's quorums and placement.
type CreateOptions struct {
	// EnsembleSize E, WriteQuorum Qw, AckQuorum Qa: E >= Qw >= Qa >= 1.
	EnsembleSize, WriteQuorum, AckQuorum int
	// Placement policy; zero value means rack.DefaultPolicy().
	Placement rack.Policy
	// Custom metadata stored with the ledger (e.g. the topic it belongs to).
	Custom map[string]string
	// Reserve, if set, runs with the ledger's id once it is allocated and
	// before the ledger's metadata is written (the ledger exists from that
	// write on). If it fails, Create writes nothing and returns its error:
	// the id is never used. For a caller that records a ledger before the
	// ledger can exist, so that no crash leaves a ledger it does not know
	// of (mledger's snapshots list the id as garbage first).
	Reserve func(ctx context.Context, id int64) error
}

func (o *CreateOptions) normalize() error {
	if o.Placement.Kind == "" {
		o.Placement = rack.DefaultPolicy()
	}
	return o.Placement.Validate(o.EnsembleSize, o.WriteQuorum, o.AckQuorum)
}

// WritableBookies returns how many bookies new ensembles may use now.
func (c *Client) WritableBookies() int { return len(c.cfg.Bookies.Writable()) }

// candidates returns the writable bookies as placement candidates, and how
// many registered bookies are read-only (for error messages; 0 when the
// source cannot tell: see ReadOnlyLister).
func (c *Client) candidates() ([]rack.Bookie, map[string]*metapb.BookieRegistration, int) {
	regs := c.cfg.Bookies.Writable()
	out := make([]rack.Bookie, 0, len(regs))
	byID := make(map[string]*metapb.BookieRegistration, len(regs))
	for _, r := range regs {
		out = append(out, rack.Bookie{ID: r.Id, Region: r.Region, Rack: r.Rack})
		byID[r.Id] = r
	}
	readOnly := 0
	if l, ok := c.cfg.Bookies.(ReadOnlyLister); ok {
		for _, r := range l.ReadOnly() {
			if byID[r.Id] == nil {
				readOnly++
			}
		}
	}
	return out, byID, readOnly
}

func (c *Client) rand() *rand.Rand {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return rand.New(rand.NewPCG(c.rng.Uint64(), c.rng.Uint64()))
}

// Create allocates a ledger id, places an ensemble and writes the metadata
// (state OPEN). The returned Writer is the ledger's only writer.
func (c *Client) Create(ctx context.Context, o CreateOptions) (*Writer, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	cands, byID, readOnly := c.candidates()
	ens, _, err := rack.Place(cands, o.Placement, rack.Request{E: o.EnsembleSize, Qw: o.WriteQuorum, Qa: o.AckQuorum, LocalRegion: c.cfg.Region, LocalRack: c.cfg.Rack, ReadOnly: readOnly}, c.rand())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotEnoughBookies, err)
	}
	id, err := c.cfg.IDs.Next(ctx)
	if err != nil {
		return nil, err
	}
	lease, err := c.writerLease(ctx)
	if err != nil {
		return nil, err
	}
	writer := ""
	if lease != 0 {
		writer = c.cfg.WriterName
	}
	if o.Reserve != nil {
		if err := o.Reserve(ctx, id); err != nil {
			return nil, fmt.Errorf("ledger: reserve %d: %w", id, err)
		}
	}
	refs := make([]*metapb.BookieRef, len(ens))
	for i, b := range ens {
		r := byID[b.ID]
		refs[i] = &metapb.BookieRef{Id: r.Id, Addr: r.Addr, Region: r.Region, Rack: r.Rack}
	}
	m := &metapb.LedgerMetadata{
		FormatVersion: MetadataFormatVersion,
		LedgerId:      id,
		EnsembleSize:  int32(o.EnsembleSize),
		WriteQuorum:   int32(o.WriteQuorum),
		AckQuorum:     int32(o.AckQuorum),
		State:         metapb.LedgerState_OPEN,
		LastEntryId:   -1,
		Fragments:     []*metapb.Fragment{{FirstEntryId: 0, Ensemble: refs}},
		CtimeMs:       nowMillis(),
		Placement:     policyToProto(o.Placement),
		Custom:        o.Custom,
		WriterLease:   lease,
		Writer:        writer,
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	rev, err := c.cfg.Store.Create(ctx, ledgerKey(id), b)
	if err != nil {
		return nil, fmt.Errorf("ledger: create metadata of %d: %w", id, err)
	}
	c.cfg.Logger.Info("ledger created", "ledger", id, "ensemble", ensembleString(refs), "e", o.EnsembleSize, "qw", o.WriteQuorum, "qa", o.AckQuorum)
	return newWriter(c, Metadata{Meta: m, Rev: rev}), nil
}

// addrOf resolves a bookie's current address: the registry's if it is
// registered, else the one recorded in the ledger metadata.
func (c *Client) addrOf(b *metapb.BookieRef) string {
	if r, ok := c.cfg.Bookies.Lookup(b.Id); ok && r != nil && r.Addr != "" {
		return r.Addr
	}
	return b.Addr
}

func (c *Client) conn(b *metapb.BookieRef) (*bookieConn, error) {
	return c.pool.get(c.addrOf(b))
}

func ensembleString(refs []*metapb.BookieRef) string {
	s := "["
	for i, r := range refs {
		if i > 0 {
			s += " "
		}
		s += r.Id
	}
	return s + "]"
}
