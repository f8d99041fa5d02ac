package transport

import (
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/meridian-mq/meridian/internal/grpcpool"
)

// Dialer holds the client connections to other regions' brokers, one per
// address, shared by every stream to it. Safe for concurrent use.
type Dialer struct {
	opts []grpc.DialOption

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewDialer returns a Dialer whose connections are plaintext, carry
// messages up to MaxMessageBytes, use internal/grpcpool's buffers and
// windows and ping every 10 s, then opts (the transport's security),
// which override them.
func NewDialer(opts ...grpc.DialOption) *Dialer {
	return &Dialer{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

// Conn returns the connection to addr, made on first use.
func (d *Dialer) Conn(addr string) (*grpc.ClientConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)), grpcpool.DialOption(),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 10 * time.Second})},
		append(grpcpool.TransportDialOptions(), d.opts...)...)...)
	if err != nil {
		return nil, err
	}
	d.conns[addr] = c
	return c, nil
}

// Close closes every connection; a later Conn makes new ones.
func (d *Dialer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = map[string]*grpc.ClientConn{}
}
