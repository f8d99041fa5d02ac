package transport

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/meridian-mq/meridian/internal/grpcpool"
)

// MaxStreamsPerConn bounds the streams one replication connection holds
// at once, on both sides. The server announces it (NewServer: gRPC's
// default is unbounded, so one caller could open streams until the
// broker runs out of memory); a stream past it would wait in the client
// for one to end — and a replication stream is one per topic and lives
// as long as the topic replicates, so it would wait for ever. So the
// Dialer never lets a connection reach it: it opens another connection to
// the address when those it has hold MaxStreamsPerConn streams each. A
// broker holding the scale bench's 100,000 topics, all replicated to one
// remote broker, holds 25 connections to it (each ~0.5 MiB of buffers:
// internal/grpcpool's 256 KiB read and write buffers).
const MaxStreamsPerConn = 4096

// Dialer holds the client connections to other regions' brokers, shared
// by every stream to an address: as few as hold its streams at
// MaxStreamsPerConn each. Safe for concurrent use.
type Dialer struct {
	opts []grpc.DialOption
	// perConn is MaxStreamsPerConn (tests lower it).
	perConn int

	mu    sync.Mutex
	conns map[string][]*pooledConn
}

// pooledConn is a connection and the streams Open holds on it.
type pooledConn struct {
	cc      *grpc.ClientConn
	streams int // guarded by Dialer.mu
}

// NewDialer returns a Dialer whose connections are plaintext, carry
// messages up to MaxMessageBytes, use internal/grpcpool's buffers and
// windows and ping every 10 s, then opts (the transport's security),
// which override them.
func NewDialer(opts ...grpc.DialOption) *Dialer {
	return &Dialer{opts: opts, perConn: MaxStreamsPerConn, conns: map[string][]*pooledConn{}}
}

// Conn returns a connection to addr with room for a call (a unary call,
// as Verify: not counted, it ends soon), made on first use.
func (d *Dialer) Conn(addr string) (*grpc.ClientConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	pc, err := d.roomLocked(addr)
	if err != nil {
		return nil, err
	}
	return pc.cc, nil
}

// acquire returns a connection to addr and counts a stream on it until
// release is called (once; later calls do nothing).
func (d *Dialer) acquire(addr string) (cc *grpc.ClientConn, release func(), err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	pc, err := d.roomLocked(addr)
	if err != nil {
		return nil, nil, err
	}
	pc.streams++
	var once sync.Once
	return pc.cc, func() {
		once.Do(func() {
			d.mu.Lock()
			pc.streams--
			d.mu.Unlock()
		})
	}, nil
}

// roomLocked returns the first connection to addr holding fewer than
// perConn streams, or a new one.
func (d *Dialer) roomLocked(addr string) (*pooledConn, error) {
	for _, pc := range d.conns[addr] {
		if pc.streams < d.perConn {
			return pc, nil
		}
	}
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)), grpcpool.DialOption(),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 10 * time.Second})},
		append(grpcpool.TransportDialOptions(), d.opts...)...)...)
	if err != nil {
		return nil, err
	}
	pc := &pooledConn{cc: c}
	d.conns[addr] = append(d.conns[addr], pc)
	return pc, nil
}

// conns counts the connections to addr (tests).
func (d *Dialer) connCount(addr string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns[addr])
}

// Close closes every connection; a later Conn makes new ones.
func (d *Dialer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, pcs := range d.conns {
		for _, pc := range pcs {
			pc.cc.Close()
		}
	}
	d.conns = map[string][]*pooledConn{}
}

// streamContext is ctx for a stream counted on a connection until ctx
// ends or the stream is cancelled.
func streamContext(ctx context.Context, release func()) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(ctx)
	context.AfterFunc(sctx, release)
	return sctx, cancel
}
