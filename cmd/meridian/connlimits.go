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
	// the admin listener's (internal/httpserve; issue 30, item 5)
	adminReadHeader, adminRead, adminWrite, adminIdle time.Duration
	adminMaxConns                                     int
}

func (l *connLimitFlags) register(f *pflag.FlagSet) {
	f.IntVar(&l.maxUnauthConns, "max-unauthenticated-connections", 0, "connections open and not yet CONNECTED, over all clients (0: the broker default, 1000; -1: no limit)")
	f.IntVar(&l.maxUnauthFrame, "max-unauthenticated-frame-bytes", 0, "largest frame accepted before CONNECTED; a larger one closes the connection (0: the broker default, 64 KiB; -1: the message size limit)")
	f.DurationVar(&l.handshakeTimeout, "handshake-timeout", 0, "a connection that has not sent CONNECT this long after accept is closed (0: the broker default, 10s; negative: none)")
	f.IntVar(&l.maxBufferedFrames, "max-buffered-frame-bytes", 0, "bytes of frames larger than 64 KiB being read at once, over all connections (0: the broker default, 128 MiB; -1: no limit)")
	f.IntVar(&l.maxConnsPerIP, "max-connections-per-ip", 0, "Pulsar connections allowed from one client IP (0: the broker default, 1000; -1: no limit)")
	f.IntVar(&l.maxProducers, "max-producers-per-topic", 0, "producers allowed on one topic (0: the broker default, 10000; -1: no limit)")
	f.DurationVar(&l.adminReadHeader, "admin-read-header-timeout", 0, "admin API (with /metrics and health): time to read a request's headers (0: 10s; negative: none)")
	f.DurationVar(&l.adminRead, "admin-read-timeout", 0, "admin API: time to read a whole request, body included; a trickled body past it closes the connection (0: 30s; negative: none)")
	f.DurationVar(&l.adminWrite, "admin-write-timeout", 0, "admin API: time from a request's headers to the end of its answer; must outlast the longest call (30s) and a /metrics scrape (0: 60s; negative: none)")
	f.DurationVar(&l.adminIdle, "admin-idle-timeout", 0, "admin API: how long a keep-alive connection waits for its next request (0: 30s; negative: none)")
	f.IntVar(&l.adminMaxConns, "admin-max-connections", 0, "admin API connections open at once; more wait in the accept queue (0: 256; -1: no limit)")
}

func (l *connLimitFlags) apply(c *broker.Config) {
	c.MaxUnauthenticatedConnections = l.maxUnauthConns
	c.MaxUnauthenticatedFrameBytes = l.maxUnauthFrame
	c.HandshakeTimeout = l.handshakeTimeout
	c.MaxBufferedFrameBytes = l.maxBufferedFrames
	c.MaxConnectionsPerIP = l.maxConnsPerIP
	c.MaxProducersPerTopic = l.maxProducers
	c.AdminHTTP.ReadHeaderTimeout, c.AdminHTTP.ReadTimeout = l.adminReadHeader, l.adminRead
	c.AdminHTTP.WriteTimeout, c.AdminHTTP.IdleTimeout = l.adminWrite, l.adminIdle
	c.AdminHTTP.MaxConns = l.adminMaxConns
}
