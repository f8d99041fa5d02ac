// Package broker is the broker's composition root and its topic serving:
// it wires the rooms below into one Broker and serves topics over the
// Pulsar binary protocol.
//
// # The house
//
// Each concern of the broker is a package of its own (a room); this root
// wires them and holds what they serve — topics.
//
//	broker/            the root: Config, Broker (Start, Close), the Pulsar
//	                   listener and connections (conn.go, handlers.go,
//	                   connauth.go), topics and producers with
//	                   deduplication (topic.go), producer access modes
//	                   (the access shell, produceraccess.go), subscriptions (the
//	                   dispatch shell, subscription.go), ownership of bundles and
//	                   lookups (ownership.go, balance.go), namespace
//	                   policies enforced on loaded topics (policies.go),
//	                   and the glue each room talks to (adminhost.go,
//	                   failoverhost.go, replhost.go, stretchedhost.go)
//	broker/admin       the admin HTTP API (Pulsar's /admin/v2)
//	broker/security    TLS, authentication, authorization
//	broker/failoverctl the failover shell over the failover core: the
//	                   active region's record, steering, the controller,
//	                   the write probe
//	broker/replication the geo-replication shell over the replicator core
//	broker/stretched   stretched placement: ledgers over bookies of several
//	                   regions, degraded placement after a region loss
//	broker/dispatch    the pure dispatch core: which consumer receives
//	                   which entry for each subscription type, permits,
//	                   replay and redelivery, Key_Shared ordering
//	broker/access      the pure producer-access core: Shared, Exclusive,
//	                   WaitForExclusive, ExclusiveWithFencing, the topic
//	                   epoch
//	broker/meta        the floor every room stands on: names, tenants,
//	                   namespaces and their policies, schemas, the failover
//	                   record, shared errors
//	broker/entry       the stored entry format
//	broker/codec       the Pulsar frame codec
//	broker/mledger     managed ledgers and cursors over bookie/ledger
//
// Imports point down: the root imports every room; a room imports the
// floor (meta, entry, codec, mledger) and the cores and libraries below
// the broker, never the root or a sibling — what it needs of the broker it
// declares as an interface (admin.Broker, failoverctl.Host,
// replication.Log, ...) and the root implements it, in the glue files
// named above. layout_test.go holds this.
//
// # Contracts the root keeps
//
//  1. Persist before acknowledging: a producer's receipt goes out only
//     after the managed ledger confirmed the entry on the ack quorum, and,
//     for a sync namespace, after replication.Topic.Hold released it.
//  2. For an active-standby namespace, admit producers and subscriptions
//     and acknowledge produce only where failoverctl.Shell says the region
//     may serve (it holds the namespace's lease at the current epoch).
//  3. Errors on the wire come from meta's sentinels through one table
//     (errors.go, serverError); what makes a Go client give up for good
//     (TopicNotFound) is only answered for names that do not exist.
package broker
