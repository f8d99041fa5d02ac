package grpcpool

import "google.golang.org/grpc"

// Flow-control windows and socket buffers of Meridian's own gRPC links
// (broker → bookie adds, region → region replication). gRPC's defaults
// start a stream at a 64 KiB window that its BDP estimator grows only
// after round trips, and write through a 32 KiB buffer: a batched entry of
// tens of KiB then waits on a WINDOW_UPDATE, or goes out in several
// writes. These links carry large entries on few streams, so the windows
// are fixed large (which turns the estimator off) and the buffers hold
// several entries.
const (
	streamWindow = 8 << 20
	connWindow   = 32 << 20
	bufferSize   = 256 << 10
)

// TransportServerOptions are the windows and buffers for a server.
func TransportServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow),
		grpc.WriteBufferSize(bufferSize), grpc.ReadBufferSize(bufferSize),
	}
}

// TransportDialOptions are the windows and buffers for a client.
func TransportDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithWriteBufferSize(bufferSize), grpc.WithReadBufferSize(bufferSize),
	}
}
