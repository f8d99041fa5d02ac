// Package autorecovery is Meridian's self-healing storage: it notices bookies
// that are gone for good and copies the entries they held to replacement
// bookies, so every fragment of every closed ledger is back at its write
// quorum on live bookies, placed by the ledger's placement rule. It is
// BookKeeper's Auditor + ReplicationWorker, built on etcd.
//
// The pieces:
//
//   - LossDetector (pure): given the registered bookies at each instant,
//     decides when an absent bookie is lost — after Config.LostBookieDelay,
//     or at once when two or more bookies are absent together (a rack).
//   - Plan (pure): which fragments of a ledger a lost bookie held, and which
//     entries of each the copy must move (the lost position's write sets).
//   - TokenBucket (pure): the copy throttle, in bytes per second.
//   - Auditor (shell): one per region at a time, elected through etcd. It
//     feeds the registry to the detector and, when bookies become lost (and
//     every ScrubInterval), scans all ledger metadata and writes a durable
//     under-replication marker per affected ledger:
//     /underreplicated/ledgers/<ledger id>.
//   - Worker (shell): claims a marker with a lock key bound to its etcd lease
//     (/underreplicated/locks/<ledger id>; a dead worker's claim expires with
//     its lease), copies, CASes the ledger's metadata, deletes the marker.
//
// A caller runs it in these steps (cmd/meridian autorecovery does):
//
//  1. Connect a cluster.Store to the region's etcd and start a
//     cluster.WatchBookies view on it.
//  2. Fill a Config (DefaultConfig, then override), Validate it.
//  3. Run one Auditor (Run campaigns; only the elected one audits) and one or
//     more Workers, each with its own Run goroutine, until the context ends.
//
// Ordering contracts:
//
//   - Copy before swap: a replacement enters a fragment's ensemble only after
//     it acknowledged (durably) every entry of that fragment it must hold.
//     A worker that dies mid-copy leaves the metadata untouched; the entries
//     it copied are garbage on the replacement.
//   - The swap is a CAS that also checks the metadata still names the lost
//     bookie at that position. The lock is for efficiency only: two workers
//     that both copied race on this CAS and one of them re-plans to nothing.
//   - A marker is deleted only at the revision the worker read (DeleteCAS):
//     an auditor that added a lost bookie in between keeps it alive.
//
// Open ledgers (OPEN or IN_RECOVERY) are left alone entirely in this slice:
// their writer replaces failed bookies in the fragment it writes, and this
// package cannot yet tell a gone writer from an idle one, so it never fences
// (Pulsar #26074). Their markers stay until the ledger is closed, then their
// earlier fragments are re-replicated like any closed ledger's.
package autorecovery
