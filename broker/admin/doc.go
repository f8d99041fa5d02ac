// Package admin is the broker's admin HTTP API: Pulsar's /admin/v2 paths
// for tenants, namespaces and their policies (retention, TTL, backlog
// quotas, deduplication, persistence, permissions, regions and the
// replication policy), topics and partitions, subscriptions, schemas and
// stats, cursor operations (skip, reset, expire, peek), bundles, clusters
// and brokers, and /lookup/v2; Meridian's /admin/v2/meridian paths
// (health, replication status, failover records, manual failover,
// orphans, the gossip keyring); and /metrics. Errors are JSON {"reason":
// ...} with Pulsar's status codes (writeAdmin maps the shared errors of
// broker/meta); what Meridian does not have is a 405 with a reason
// (unsupported.go), an unknown path a 404 with one. docs/admin.md is the
// compatibility table with Pulsar's own admin client.
//
// It imports broker/meta and nothing else of the broker: what is not
// metadata it asks through the interfaces it declares — Broker (loaded
// topics, lookups, bundles, the region's brokers) and Topic (stats,
// subscriptions and their cursors, messages, deletion), Failover (records,
// manual moves, orphans), Replication (the replicators' status) and
// Authorizer (broker/security's Guard). The broker's root wires them.
//
// Contract with its caller:
//  1. New with a Config whose Meta is set; Start listens on Config.Addr
//     (Handler alone serves a test or another server), Close stops it.
//  2. Every request is authorized first (Config.Auth, with the route's
//     pattern), bounded to 1 MiB of body and 30 s, and answered with JSON.
//  3. Writes of policies are compare-and-swaps through meta.Metadata and
//     are validated before they are written; a refused change writes
//     nothing.
package admin
