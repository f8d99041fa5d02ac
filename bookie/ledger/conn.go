package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/internal/grpcpool"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// errStreamBroken is what pending adds of a broken stream complete with.
var errStreamBroken = errors.New("ledger: bookie stream broken")

// addCallback receives a bookie's answer to one add, or the error that
// prevented an answer. It runs on the stream's receive goroutine: it must
// not block.
type addCallback func(resp *bookiepb.AddResponse, err error)

// bookieConn is the client side of one bookie: a gRPC connection and one
// pipelined AddEntries stream shared by every ledger this client writes.
type bookieConn struct {
	addr   string
	cc     *grpc.ClientConn
	client bookiepb.BookieClient

	mu      sync.Mutex
	stream  *addStream
	nextReq uint64
	closed  bool
}

type addStream struct {
	s       bookiepb.Bookie_AddEntriesClient
	cancel  context.CancelFunc
	mu      sync.Mutex // guards pending and dead; held by the sender while registering
	pending map[uint64]addCallback
	dead    bool
}

func dialBookie(addr string, opts []grpc.DialOption) (*bookieConn, error) {
	o := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
		grpcpool.DialOption(),
		// A restarted bookie must be reachable again within seconds, not
		// after gRPC's default reconnect backoff (up to 120 s).
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second,
		}, MinConnectTimeout: 3 * time.Second}),
	}, grpcpool.TransportDialOptions()...)
	o = append(o, opts...)
	cc, err := grpc.NewClient(addr, o...)
	if err != nil {
		return nil, fmt.Errorf("ledger: dial bookie %s: %w", addr, err)
	}
	return &bookieConn{addr: addr, cc: cc, client: bookiepb.NewBookieClient(cc)}, nil
}

// add sends one add on the shared stream; cb gets exactly one call. The
// stream is (re)opened on demand.
func (c *bookieConn) add(req *bookiepb.AddRequest, cb addCallback) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cb(nil, errors.New("ledger: client closed"))
		return
	}
	st := c.stream
	if st == nil || st.isDead() {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := c.client.AddEntries(ctx)
		if err != nil {
			cancel()
			c.mu.Unlock()
			cb(nil, fmt.Errorf("ledger: open add stream to %s: %w", c.addr, err))
			return
		}
		st = &addStream{s: s, cancel: cancel, pending: map[uint64]addCallback{}}
		c.stream = st
		go c.recvLoop(st)
	}
	c.nextReq++
	req.RequestId = c.nextReq
	st.mu.Lock()
	if st.dead {
		st.mu.Unlock()
		c.mu.Unlock()
		cb(nil, errStreamBroken)
		return
	}
	st.pending[req.RequestId] = cb
	st.mu.Unlock()
	// Send under c.mu: a gRPC stream allows one sender at a time, and the
	// order of sends is the order of request ids.
	err := st.s.Send(req)
	c.mu.Unlock()
	if err != nil {
		c.breakStream(st, fmt.Errorf("ledger: send to %s: %w", c.addr, err))
	}
}

func (c *bookieConn) recvLoop(st *addStream) {
	for {
		resp, err := st.s.Recv()
		if err != nil {
			c.breakStream(st, fmt.Errorf("%w: %s: %v", errStreamBroken, c.addr, err))
			return
		}
		st.mu.Lock()
		cb := st.pending[resp.RequestId]
		delete(st.pending, resp.RequestId)
		st.mu.Unlock()
		if cb != nil {
			cb(resp, nil)
		}
	}
}

// isDead reports whether breakStream ended st (dead is st.mu's: a
// receiving goroutine may be breaking it while add reads it).
func (st *addStream) isDead() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.dead
}

// breakStream fails every add pending on st and forgets the stream.
func (c *bookieConn) breakStream(st *addStream, err error) {
	st.mu.Lock()
	if st.dead {
		st.mu.Unlock()
		return
	}
	st.dead = true
	pending := st.pending
	st.pending = nil
	st.mu.Unlock()
	st.cancel()
	for _, cb := range pending {
		cb(nil, err)
	}
}

func (c *bookieConn) close() {
	c.mu.Lock()
	c.closed = true
	st := c.stream
	c.mu.Unlock()
	if st != nil {
		c.breakStream(st, errors.New("ledger: client closed"))
	}
	c.cc.Close()
}

// pool holds one bookieConn per address.
type pool struct {
	opts  []grpc.DialOption
	mu    sync.Mutex
	conns map[string]*bookieConn
}

func (p *pool) get(addr string) (*bookieConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := dialBookie(addr, p.opts)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

func (p *pool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.close()
	}
	p.conns = map[string]*bookieConn{}
}
