package main

import (
	"time"

	"github.com/meridian-mq/meridian/broker"
	"github.com/spf13/pflag"
)

// connLimitFlags are the broker's bounds on connections before CONNECTED
// and on the bytes of frames being read (issue 30, item 1), and per client
// IP and topic (issue 28: the broker had none of the latter), shared by
// `meridian broker` and `meridian standalone`. Each 0 is the broker's
// default (broker.Config).
type connLimitFlags struct {
	maxUnauthConns    int
	maxUnauthFrame    int
	handshakeTimeout  time.Duration
	maxBufferedFrames int
	maxConnsPerIP     int
	maxProducers      int
}

func (l *connLimitFlags) register(f *pflag.FlagSet) {
	f.IntVar(&l.maxUnauthConns, "max-unauthenticated-connections", 0, "connections open and not yet CONNECTED, over all clients (0: the broker default, 1000; -1: no limit)")
	f.IntVar(&l.maxUnauthFrame, "max-unauthenticated-frame-bytes", 0, "largest frame accepted before CONNECTED; a larger one closes the connection (0: the broker default, 64 KiB; -1: the message size limit)")
	f.DurationVar(&l.handshakeTimeout, "handshake-timeout", 0, "a connection that has not sent CONNECT this long after accept is closed (0: the broker default, 10s; negative: none)")
	f.IntVar(&l.maxBufferedFrames, "max-buffered-frame-bytes", 0, "bytes of frames larger than 64 KiB being read at once, over all connections (0: the broker default, 128 MiB; -1: no limit)")
	f.IntVar(&l.maxConnsPerIP, "max-connections-per-ip", 0, "Pulsar connections allowed from one client IP (0: the broker default, 1000; -1: no limit)")
	f.IntVar(&l.maxProducers, "max-producers-per-topic", 0, "producers allowed on one topic (0: the broker default, 10000; -1: no limit)")
}

func (l *connLimitFlags) apply(c *broker.Config) {
	c.MaxUnauthenticatedConnections = l.maxUnauthConns
	c.MaxUnauthenticatedFrameBytes = l.maxUnauthFrame
	c.HandshakeTimeout = l.handshakeTimeout
	c.MaxBufferedFrameBytes = l.maxBufferedFrames
	c.MaxConnectionsPerIP = l.maxConnsPerIP
	c.MaxProducersPerTopic = l.maxProducers
}
