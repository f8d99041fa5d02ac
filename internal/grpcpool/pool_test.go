package grpcpool

import (
	"testing"

	"google.golang.org/grpc/mem"
)

// The codec marshals through the process default: it must be Pool.
func TestPoolIsTheDefault(t *testing.T) {
	if mem.DefaultBufferPool() != Pool {
		t.Fatal("mem.DefaultBufferPool() is not grpcpool.Pool: the proto codec still marshals into 1 MiB buffers")
	}
}

// A buffer is at most twice what was asked for (so at most twice its
// bytes are cleared), from 256 B to 8 MiB.
func TestPoolBuffersAtMostTwiceTheSize(t *testing.T) {
	for _, n := range []int{300, 5 << 10, 40 << 10, 90 << 10, 600 << 10, 3 << 20, 8 << 20} {
		b := Pool.Get(n)
		if len(*b) != n {
			t.Errorf("Get(%d): len %d", n, len(*b))
		}
		if c := cap(*b); c > 2*n {
			t.Errorf("Get(%d): cap %d, more than twice the size", n, c)
		}
		Pool.Put(b)
	}
}
