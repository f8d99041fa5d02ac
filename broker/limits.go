package broker

// Limits on what one client can make the broker hold (Config.Max*). Each
// refusal is answered on the protocol (or, for connections, by closing at
// accept) and counted in meridian_broker_limit_exceeded_total under one of
// these label values; none is logged per occurrence.
const (
	limitFrameSize                = "frame_size"
	limitConnectionsPerIP         = "connections_per_ip"
	limitPendingRequests          = "pending_requests_per_connection"
	limitProducersPerTopic        = "producers_per_topic"
	limitConsumersPerTopic        = "consumers_per_topic"
	limitConsumersPerSubscription = "consumers_per_subscription"
	// limitOutputQueue counts the times a connection stopped being read
	// because its unread answers passed maxQueuedOutputBytes.
	limitOutputQueue = "output_queue_bytes"
	// Issue 30, item 1: what a connection may hold before it CONNECTED,
	// and the bytes of frames being read over all connections
	// (Config.MaxUnauthenticatedConnections, MaxUnauthenticatedFrameBytes,
	// HandshakeTimeout, MaxBufferedFrameBytes).
	limitUnauthConnections = "unauthenticated_connections"
	limitUnauthFrameSize   = "unauthenticated_frame_size"
	limitHandshakeTimeout  = "handshake_timeout"
	limitBufferedFrames    = "buffered_frame_bytes"
)

// limitLabels are every limit label, pre-created so the metric shows 0s.
var limitLabels = []string{limitFrameSize, limitConnectionsPerIP, limitPendingRequests,
	limitProducersPerTopic, limitConsumersPerTopic, limitConsumersPerSubscription, limitOutputQueue,
	limitUnauthConnections, limitUnauthFrameSize, limitHandshakeTimeout, limitBufferedFrames}

// underLimit reports whether one more can be added to n things held under
// limit (a withDefaults value: > 0, or < 0 for no limit).
func underLimit(n, limit int) bool { return limit < 0 || n < limit }

// limitExceeded counts one refusal.
func (b *Broker) limitExceeded(limit string) {
	b.metrics.limitExceeded.WithLabelValues(limit).Inc()
}
