// Package clientopts holds the pulsar-client-go settings Meridian
// recommends (README, "Client settings") and its own tools use: `meridian
// produce` and `consume`, the drills and the benchmarks. One place, so the
// figures in docs/georep.md ("What each client setting buys") describe
// what the tools run with.
//
// The client's own defaults leave a region that dies silently (its
// processes paused, or its network blackholed: nothing resets a
// connection) to the client's timers alone: a connection is dropped only
// when nothing arrived for 2 keepalive intervals, checked once an interval
// (60–90 s at the default 30 s), a handshake with a host that accepts TCP
// and never answers waits one keepalive interval, a lookup one operation
// timeout (30 s), and a dial has no timeout at all (the kernel's SYN
// retries, ~2 minutes). docs/georep.md has what each setting measured.
package clientopts

import (
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

const (
	// ConnectionTimeout bounds a dial: a blackholed host fails in 2 s
	// instead of the kernel's SYN retries (~127 s on Linux). The client's
	// default is none.
	ConnectionTimeout = 2 * time.Second
	// KeepAliveInterval is the client's ping interval: a connection over
	// which nothing arrived for 2 intervals is dropped (checked every
	// interval, so after 2–3 s), and a handshake waits at most one
	// interval. The client's default is 30 s. A ping is one small frame a
	// second per connection.
	KeepAliveInterval = time.Second
	// OperationTimeout bounds a lookup, a producer's or a consumer's
	// creation: one sent to a paused broker is given up after 5 s and
	// retried elsewhere. The client's default is 30 s.
	OperationTimeout = 5 * time.Second
)

// Apply sets the recommended value of every one of the three settings o
// leaves at zero; a value already set is kept.
func Apply(o *pulsar.ClientOptions) {
	if o.ConnectionTimeout == 0 {
		o.ConnectionTimeout = ConnectionTimeout
	}
	if o.KeepAliveInterval == 0 {
		o.KeepAliveInterval = KeepAliveInterval
	}
	if o.OperationTimeout == 0 {
		o.OperationTimeout = OperationTimeout
	}
}
