package transport

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/meridian-mq/meridian/internal/grpcpool"
)

// MaxMessageBytes bounds a replication message either way (a batch is
// about BatchMaxBytes, 1 MiB by default; the bound leaves room for a
// batch of one large entry).
const MaxMessageBytes = 64 << 20

// NewServer returns a gRPC server for the Replication service: messages
// up to MaxMessageBytes, the pooled buffers and large windows of
// internal/grpcpool, at most MaxStreamsPerConn streams per connection,
// and keepalive pings accepted every 5 s, then opts
// (the transport's security), which override them.
func NewServer(opts ...grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes), grpcpool.ServerOption(), grpc.MaxConcurrentStreams(MaxStreamsPerConn),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true})},
		append(grpcpool.TransportServerOptions(), opts...)...)...)
}
