// Package transport is the replicator's gRPC transport: it moves the
// replicator core's batches and acks between regions and decides nothing
// about them. The core (package replicator) stays pure; this package is
// the part of the shell that speaks gRPC, shared by every shell that
// replicates (broker/replication). It never imports broker: what it needs
// of a topic it declares (Target).
//
// It owns:
//
//   - the handshake (handshake.go): a stream opens with Hello (protocol
//     version, source and target regions, topic) and is answered Welcome,
//     or Redirect to the address of the topic's owner in the target
//     region, which the client follows (Dialer.Open, at most a few hops);
//     a Hello of another protocol version, for another region or from the
//     region itself is refused with a status that says so;
//   - the endpoint registry (registry.go): every broker registers its
//     replication address in the global store under
//     /replication/endpoints/REGION/BROKER, bound to a lease of its own,
//     and a sender dials any of the target region's registered brokers;
//   - the conversions between the core's values and replpb's messages
//     (convert.go);
//   - the reply queue of a pipelined target (replies.go): the replies of
//     a stream go back in the order its batches arrived, each ack only
//     once its write and every earlier one are persisted;
//   - the server's and the client connections' gRPC options (server.go,
//     dial.go).
//
// Contract with its caller (the shell):
//  1. A target broker serves Serve from its ReplicationServer's
//     Replicate; Accept decides, after the handshake's checks, whether
//     this broker takes the topic (a Target), redirects, or refuses.
//  2. A Target applies each batch, queueing its replies on the stream's
//     ReplyQueue in arrival order, and never blocks the stream on a
//     write: the queue sends the replies as the writes complete.
//  3. A sender opens a Stream with Dialer.Open over the addresses of
//     Endpoints, sends on it from one goroutine, receives from another
//     (Recv), and closes it when it fails: a broken stream turns into
//     failed sends for every batch in flight (the core's SendFailed).
package transport
