// Package broker serves topics: managed ledgers over bookies (quorum writes,
// ensemble change, recovery, rollover), topic ownership, producers with
// deduplication, subscriptions (exclusive, failover, shared, key_shared) and
// their cursors, the Pulsar binary-protocol listener, lookup and the admin
// API. It is built by the broker issue on top of the ledger client in
// bookie/ledger; replication (replicator/) and the active-region decision
// (failover/) plug into it through small interfaces.
package broker
