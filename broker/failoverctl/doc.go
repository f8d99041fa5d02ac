// Package failoverctl is the failover shell of a broker: the shell around
// the pure decision core of package failover (failover/doc.go, "The
// shell's duties"). It owns
//
//   - the watch of the failover records in the global store (which region
//     is active for each active-standby namespace, at which epoch) and the
//     steering of unmodified clients to that region: lookups redirected,
//     held while the active region is only suspected, producers and
//     subscriptions refused elsewhere with a retriable error, and clients
//     closed out of a region that stopped being active (watch.go);
//   - the region's controller — one broker per region, elected through the
//     region's store — which steps one failover.Core per active-standby
//     namespace, commits its proposals by compare-and-swap of the epoch,
//     holds the region's lease and publishes the deadline until which the
//     region's brokers may acknowledge (control.go);
//   - the write probe whose result the broker publishes in its gossip
//     tags (probe.go).
//
// It imports broker/meta, broker/mledger (the probe's ledger), cluster and
// the failover core, never the broker's root or another room: what it
// needs of the broker — the loaded topics of a namespace, the broker's
// lease, the region's replication status — it asks through Host and Topic,
// which it declares and the root implements.
//
// Contract with its caller:
//  1. New, then StartWatch before the broker serves (lookups and admission
//     read the records), StartControl once the broker registered (the
//     controller key is bound to its lease), StartProbe when it serves;
//     Close when the broker stops.
//  2. Before acknowledging produce or admitting a producer or subscription
//     of an active-standby namespace, ask MayServe / CheckActive: a region
//     whose lease lapsed must stop acknowledging before the global store
//     can have given the namespace to another region ("bump the epoch
//     before redirecting"; the lease before acknowledging).
//  3. Answer lookups with CrossRegionLookup first: a non-empty answer is a
//     broker of the active region to redirect to.
package failoverctl
