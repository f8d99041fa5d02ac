// Package replication is the broker's geo-replication shell: the shell
// around replicator's pure machines (replicator/doc.go is the design
// note). It owns, for the topics loaded on one broker:
//
//   - the Replication gRPC service (server.go): every broker serves
//     it on its replication address and registers it in the global store
//     under /replication/endpoints/REGION/BROKER, bound to a lease of its
//     own; a stream starts with Hello and is answered Welcome, or Redirect
//     to the owner of the topic in this region. The transport — the
//     handshake, the endpoint registry, the client connections, the
//     conversions to the protocol and the reply queue — is
//     replicator/transport's; this package admits a stream (server.go,
//     accept) and applies it;
//   - the senders: on the owner broker of a topic whose namespace lists
//     several regions, one per remote region reads the topic's log through
//     a durable cursor named meridian.repl.REGION (its position and the
//     sender's sequence numbers persisted together) and streams the entries
//     that originated here, under the namespace's rate limit, with resync
//     after retention trimmed what a region never received, and a backlog
//     marker so a restarted region resumes without clients. A sender's
//     goroutine (sender.go) obeys its core: it sleeps until the core's
//     WakeAt, its own next deadline or an input, on an injected clock
//     (internal/clock), and reaches the topic only through senderLog and
//     a dial function (senderlog.go);
//   - the target: one Applier per (topic, origin region); a batch is
//     appended through the topic with its origin region, origin id and
//     sequence number in the entry header (broker/entry), and acknowledged
//     only once every entry of it is persisted, in arrival order
//     (transport.ReplyQueue). Its record — the highest sequence number
//     persisted per origin — is rebuilt on load from the dedup snapshot
//     plus the entries after it, so it is exactly as durable as the
//     entries;
//   - sync receipts (sync.go): in mode sync a producer's receipt waits
//     until the namespace's other regions persisted the entry; the
//     tracker's timeouts act when its goroutine wakes at the tracker's
//     WakeAt;
//   - replicated subscriptions (subscriptions.go): the active region
//     sends its subscriptions' positions every 200 ms in ids that mean the
//     same message everywhere, and the standby applies them;
//   - orphans (orphans.go): the async tail of an unplanned failover,
//     listed and, by policy, kept aside in a quarantine topic;
//   - non-persistent topics (nonpersistent.go): best effort, nothing
//     stored — an NPSender per (topic, remote region) ships what it is
//     offered over the same stream and drops (and counts) what it cannot
//     send; the target hands a batch to the host's NonPersistentTarget and
//     acknowledges it at once;
//   - status (status.go), for the admin API and metrics.
//
// Mode stretched does not use replicators (the ledgers themselves span
// regions: the broker's stretched placement).
//
// It imports broker/meta, broker/entry, broker/mledger, cluster, the
// replicator core, its transport and its protocol, never the broker's root
// or another room: what it needs of a topic it asks through Log (read the
// log and its cursors, append replicated entries, the log's end, origin
// ids), of the broker through Host, and of the failover shell through
// ActiveRegions — interfaces it declares and the root implements.
//
// Contract with its caller:
//  1. NewService, then Start once the Pulsar listener is up; Close when
//     the broker stops.
//  2. For every loaded topic, NewTopic; call Sync after load and when
//     policies change, Wake after every append, EntryArrived (under the
//     topic's lock, in log order) after every replicated entry persisted,
//     and Stop on unload.
//  3. Before acknowledging a produce, offer the receipt to Hold: when it
//     reports true the receipt is released once the sync set persisted
//     the entry ("persist before acknowledging", across regions).
//  4. Fault injection comes in Config.Faults, never from the environment.
package replication
