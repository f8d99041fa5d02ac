// Package cluster owns Meridian's metadata and membership: a region's view of
// the world.
//
// This package holds:
//
//   - Store: an etcd-backed metadata store (get, put, create, compare-and-swap on
//     the key's mod revision, delete, list, watch, leases) with every key under
//     one prefix, so several regions or tests can share one etcd. Ledger
//     metadata, the bookie registry, cookies and the ledger-id allocator are
//     built on it.
//
//   - Etcd: a real embedded etcd (go.etcd.io/etcd/server/v3/embed) for
//     development, tests and `meridian standalone`; production points Store at
//     an external etcd cluster by URL instead.
//
//   - BookieRegistry: a bookie's registration under a lease (writable or
//     read-only, with region and rack labels), its cookie, and the registry
//     view that ledger clients choose ensembles from.
//
//   - Membership: gossip (hashicorp/serf over memberlist) across every region,
//     with region, rack, role and address tags, encrypted with a keyring;
//     HealthView is its immutable, pure snapshot per region (members alive,
//     suspect, failed or left by role, since when, and write-probe results),
//     which the broker and the failover logic read. ExcludeFailedBookies
//     keeps gossip-failed bookies out of new ensembles before their etcd
//     lease expires.
//
// The global store (tenants, namespaces, policies, schemas, the ledger-id
// allocator; later epochs and leases) is a Store on the etcd cluster whose
// members sit in different regions, plus a witness. cluster knows metadata
// and membership, never serving.
//
// Callers:
//  1. Connect a Store (Connect) with the etcd endpoints and a key prefix.
//  2. Build what they need on it (NewBookieRegistry, NewIDAllocator, ...).
//  3. Close the Store last; leases granted through it are revoked on Close
//     when the caller asked for it, or expire after their TTL otherwise.
package cluster
