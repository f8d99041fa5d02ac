// Package autorecovery is Meridian's self-healing storage: it notices bookies
// that are gone for good (or being decommissioned) and copies the entries
// they held to replacement bookies, so every fragment of every ledger is back
// at its write quorum on live bookies, placed by the ledger's placement rule.
// It is BookKeeper's Auditor + ReplicationWorker, built on etcd (BookKeeper's
// own etcd driver has no auditor at all).
//
// # The pieces
//
//   - LossDetector (pure): given which known bookies are present at each
//     instant, decides when an absent one is lost — after
//     Config.LostBookieDelay, or at once when two or more are absent
//     together (a rack). A bookie is absent when its etcd registration lease
//     has expired AND gossip does not have it alive (Config.Alive, from
//     serf: failed, left, or unknown); so a bookie cut off from etcd but
//     alive in gossip is not acted on, and a restart within the delay copies
//     nothing.
//   - Plan, Decide, FixPlacement (pure): which fragments of a ledger hold a
//     lost or draining bookie and which entries each copy must move (the
//     position's write sets); what to do with a ledger in each state (see
//     "Open ledgers"); which members of a misplaced fragment to replace.
//   - TokenBucket / Throttle (pure / shared): the copy throttle, bytes per
//     second, shared by every worker of a process.
//   - Auditor (shell): one per region at a time, elected through etcd
//     (/underreplicated/auditor). Every CheckInterval it feeds the registry
//     and gossip to the detector and reads the decommission records
//     (cluster.ListDecommissions); when a bookie becomes lost or draining,
//     and every ScrubInterval, it scans all ledger metadata and writes a
//     durable under-replication marker per affected ledger,
//     /underreplicated/ledgers/<ledger id>: for fragments naming a lost or
//     draining bookie, and (the scrub) for fragments breaking their
//     placement rule under the bookies' current rack labels. Every
//     StatusInterval, and at once when a bookie is lost or draining, it
//     publishes the region's status (/underreplicated/status: lost,
//     draining and absent bookies, under-replicated ledgers, fragments and
//     entries, time to full replication, a scan running) and sets the
//     Metrics gauges. Detection, the scan and the status each run on their
//     own: a scan (minutes on a large region; a scrub also waits a read
//     timeout on each bookie that does not answer, once per scan) holds
//     back neither the next loss's detection nor the status, and a loss
//     pre-empts a running scrub. A lost bookie stays lost (and in the
//     status) until it registers again or has been gone for ScrubInterval,
//     even when no ledger uses it (a rack's second bookie that no ledger
//     chose); a bookie whose decommission is done (removed) is never lost.
//   - Worker (shell): claims a marker with a lock key bound to its etcd lease
//     (/underreplicated/locks/<ledger id>; a dead worker's claim expires with
//     its lease), copies, CASes the ledger's metadata, deletes the marker.
//     Its progress is at /underreplicated/workers/<id>, under its lease.
//     A bookie a marker names that is registered again, not being
//     decommissioned, and answers the scrub's sample reads of its replicas
//     is back with its data: its replicas stay (a restarted region's
//     bookies, once all declared lost, would otherwise be moved off for
//     ever, or retried for ever where no bookie is spare).
//
// # Where it runs
//
// By default in every broker process (`meridian broker`, so `meridian up`)
// and in `meridian standalone`: each is an auditor candidate and runs
// workers (cmd/meridian/autorecovery.go); the brokers already have the
// region's etcd, the bookie registry, gossip and a ledger client. `meridian
// autorecovery` runs the same as a process of its own (with
// `--autorecovery=false` on the brokers) where copies must stay off the
// serving processes. The throttle is per process: N processes copy at up to
// N times Config.ThrottleBytesPerSec.
//
// # Steps for a caller
//
//  1. Connect a cluster.Store to the region's etcd and start a
//     cluster.WatchBookies view on it; join gossip if the process gossips.
//  2. Fill a Config (DefaultConfig, then override: Alive = GossipAlive(m),
//     a shared Throttle and Metrics), Validate it.
//  3. Run one Auditor (Run campaigns; only the elected one audits) and one or
//     more Workers, each with its own Run goroutine, until the context ends.
//     Give the Workers a ledger.Client: they read, write recovery adds and
//     recover ledgers through it.
//
// # Open ledgers: a gone writer versus an idle one
//
// A ledger has one writer. Fencing an OPEN ledger whose writer is alive but
// idle makes that writer's next add fail (Pulsar #26074: BookKeeper's
// auditor did this to brokers' idle ledgers, and writes failed). So the
// worker must tell a gone writer from an idle one. It does so with a writer
// lease: every ledger.Client keeps an etcd lease alive while it lives
// (ledger.Config.WriterLeaseTTL, default 10 s) and records it in the
// metadata of each ledger it creates (LedgerMetadata.writer_lease, with
// writer = host-pid). The lease lives in the etcd cluster that holds the
// ledger's metadata, so the worker asks that cluster (TimeToLive):
//
//   - CLOSED: every affected fragment is re-replicated (ActRepair).
//   - OPEN, writer lease alive — or no lease recorded, or etcd cannot say:
//     the writer is presumed alive and the ledger is never fenced. Its
//     completed fragments (all but the last: their entries are all
//     acknowledged and immutable) are re-replicated; the last fragment is
//     the writer's: it replaces a lost member itself, at its next add or,
//     when idle, by itself after ledger.Config.IdleReplaceAfter
//     (an ensemble change, which turns the entries so far into a completed
//     fragment that the next pass copies). The marker stays until then.
//   - OPEN, writer lease expired: the writer's process is gone (or was cut
//     off from etcd for the whole TTL, in which case it could not have
//     changed the ledger's metadata since, and its broker has dropped its
//     topics too). The worker recovers the ledger as a new owner would
//     (ledger.Client.Recover: fence, read forward, close at the last entry
//     that may have been acknowledged), then re-replicates it as closed. A
//     broker that later takes the topic over finds it closed.
//   - IN_RECOVERY: a recovery started and may have died; the worker
//     recovers it (recoveries converge: the CAS to CLOSED lets one stand).
//
// # Decommission
//
// `meridian admin bookies decommission B` writes a draining record
// (cluster.StartDecommission). The bookie turns read-only (bookie.Server
// follows the record): writers replace it at their next add, idle ones
// after IdleReplaceAfter, and no new ensemble takes it. The auditor treats a
// draining bookie like a lost one without the delay: markers for every
// fragment naming it. When no fragment names it, the command moves the
// record to removed: the bookie deregisters and its process exits, and it
// refuses to start again until `meridian admin bookies recommission B`.
//
// # Ordering contracts
//
//   - Copy before swap: a replacement enters a fragment's ensemble only after
//     it acknowledged (durably) every entry of that fragment it must hold.
//     A worker that dies mid-copy leaves the metadata untouched; the entries
//     it copied are garbage on the replacement.
//   - The swap is a CAS that also checks the metadata still names the copied-
//     for bookie at that position, and, for a ledger that is not closed, that
//     the fragment is not the last one (never the fragment a writer may be
//     writing). The lock is for efficiency only: two workers that both
//     copied race on this CAS and one of them re-plans to nothing.
//   - Recover before copying the last fragment of an open ledger: its end is
//     known only once it is fenced and closed.
//   - A marker is deleted only at the revision the worker read (DeleteCAS):
//     an auditor that added a lost bookie in between keeps it alive.
//   - A decommission is marked removed only once no fragment names the
//     bookie; a ledger created meanwhile with it in its ensemble never got an
//     entry acknowledged there (it was read-only), and the auditor treats it
//     as lost once it has deregistered.
//
// # Limits
//
//   - Stretched ledgers (metadata in the global store) are not audited by a
//     region's auditor.
//   - The scrub checks metadata (members lost or draining, placement); it does
//     not read entries, so an entry missing from one replica although its
//     fragment's members are all alive (BookKeeper's BP-31 blind spot: a
//     write that failed on a Qw-Qa extra replica after the ack) is not found.
package autorecovery
