// Package grpcpool is the gRPC buffer pool of Meridian's servers and
// clients (bookie adds, replication).
//
// gRPC's default pool (google.golang.org/grpc/mem) has tiers of 256 B,
// 4 KiB, 16 KiB, 32 KiB and 1 MiB, and clears a buffer's whole capacity on
// every Get. A broker's batched entry is ~90 KiB (100 messages of 1 KiB),
// so each one received took a 1 MiB buffer and cleared it: in a profile of
// the standalone under batched produce that clearing was ~9 % of all CPU
// (runtime.memclrNoHeapPointers under sizedBufferPool.Get). Here every
// power of two from 256 B to 8 MiB is a tier, so a buffer is at most
// twice the message and clearing costs at most two bytes per byte
// received. Buffers are still cleared (the same safety as the default).
//
// The connections' pool is only half of it: gRPC's proto codec marshals
// every request and unmarshals every reply through mem.DefaultBufferPool,
// the process-wide default, whatever a connection was given. So this
// package makes Pool the default too, at init (the only time gRPC allows
// it): any process that links a bookie, the ledger client or the
// replication service gets it. Before that, the standalone under batched
// produce still spent ~10 % of its CPU clearing 1 MiB buffers, half of it
// under codecV2.Marshal.
package grpcpool

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// Pool is the shared pool.
var Pool = func() mem.BufferPool {
	var exps []uint8
	for e := uint8(8); e <= 23; e++ {
		exps = append(exps, e)
	}
	p, err := mem.NewBinaryTieredBufferPool(exps...)
	if err != nil {
		panic("grpcpool: " + err.Error())
	}
	return p
}()

func init() { experimental.SetDefaultBufferPool(Pool) }

// ServerOption makes a gRPC server use Pool.
func ServerOption() grpc.ServerOption { return experimental.BufferPool(Pool) }

// DialOption makes a gRPC client connection use Pool.
func DialOption() grpc.DialOption { return experimental.WithBufferPool(Pool) }
