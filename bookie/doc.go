// Package bookie is Meridian's storage node: it stores ledger entries
// durably in an entry log indexed in Pebble and serves them over the Bookie gRPC service
// (proto/bookiepb). It owns the bytes on disk, fencing, and the last-add-
// confirmed (LAC) a bookie has seen. It knows ledgers and entries, never
// topics. The ledger client (ensembles, quorums, recovery) lives in
// bookie/ledger and uses Digest from here.
//
// # Durability contracts
//
//  1. Persist before acknowledging. An add is answered OK only after the
//     entry log frame holding it was written and fdatasynced. If the write
//     or sync fails (ENOSPC, EIO) every add of the frame is answered with an
//     error, never OK, and the store turns read-only until restart; entries
//     of that frame then read as UNKNOWN (they may or may not be durable).
//  2. Fence persisted before the fence answer. A fence (ReadLac or ReadEntry
//     with fence set) goes through the same committer as adds: it is durable
//     before it is answered, and it is totally ordered with adds (one queue,
//     one goroutine; BookKeeper #4701 lost an acknowledged entry because
//     fence and add took different locks). An add queued before the fence is
//     durable and counted in the fence's LAC/last entry; an add queued after
//     it is refused FENCED. Recovery adds are accepted on fenced ledgers.
//     Fencing is idempotent and never undone.
//  3. Never answer "no such entry" unless authoritative. NO_SUCH_ENTRY and
//     NO_SUCH_LEDGER mean "this bookie never stored it", or, for
//     NO_SUCH_LEDGER, "the ledger was deleted from cluster metadata and
//     this bookie collected it" (garbage collection). A stored entry that
//     fails its CRC32C digest, or a Pebble corruption error, is CORRUPT
//     (BookKeeper #2908 truncated ledgers by answering NoSuchEntry on a read
//     error). A ledger this bookie may have held before losing its disk is in
//     limbo and answers UNKNOWN.
//  4. Never silently replace an entry. An add of an entry id already stored
//     is an idempotent retry when the payload is identical (OK, nothing
//     written) and refused INVALID otherwise; only a recovery add may
//     replace a stored copy that fails its digest.
//
// # Group commit
//
// One committer goroutine drains a queue of operations (add, recovery add,
// fence), applies them in queue order to the in-memory ledger state (fenced,
// limbo, LAC = max piggybacked LAC, last entry) and to one entry log frame,
// writes the frame with one fdatasync, applies the frame's index writes to
// Pebble (without sync), and then completes every operation of it.
// With Config.GroupCommitMaxDelay 0 the committer takes whatever queued up
// during the previous fsync; it stops gathering at GroupCommitMaxBytes.
//
// # On-disk layout (format version 2)
//
// The data directory is a Pebble store that holds the index, and
// entrylog/, the entry log: the journal and the entries' home in one (as
// BookKeeper's journal and entry logs are, without a second copy). Every
// mutation (an entry, a ledger record) is appended to the log, one frame
// per group commit, CRC32C-checked; Pebble holds
//
//	"m/format-version"          uint32 format version (FormatVersion)
//	"m/cookie"                  metapb.Cookie
//	"m/checkpoint"              log file(4) offset(8)
//	'l' ledger(8)               flags(1: bit0 fenced, bit1 limbo, bit2 deleted) maxLAC(8)
//	'e' ledger(8) entry(8)      lac(8) digest(4) log file(4) offset(8) len(4)
//
// (big-endian, so keys sort numerically). Index writes are not synced: the
// checkpoint, written with sync every 64 MiB of log and at each new log
// file, is the log position before which Pebble has them all, and OpenStore
// replays the log from it. A frame that fails its CRC ends the log only if
// no valid frame follows it (a torn last write, never acknowledged);
// otherwise the open fails with ErrCorrupt, since the entries after it were
// acknowledged. Each open starts a new log file; files grow to 256 MiB.
// On the real disk a background writer keeps up to 8 MiB of synced zeros
// ahead of the frames (at most 8 MiB/s), so a commit's fdatasync
// overwrites allocated blocks and flushes data only (zeroer.go).
//
// Entries are written once, as sent (uncompressed; producers compress
// their batches when they want to): an LSM holding them wrote each entry to
// its WAL, to a table at flush and again at every compaction, and those
// compactions stalled adds (docs/performance.md).
//
// # Garbage collection
//
// Every Config.GCInterval (default 15 min, BookKeeper's gcWaitTime) the
// bookie lists the ledgers it holds, then the ledgers in cluster metadata
// (twice, through the Registry's LedgerLister; a failed listing deletes
// nothing), checks that metadata still holds its cookie (a wiped metadata
// store lists no ledger), and deletes from its index every ledger it held
// before the listing that metadata no longer has. The ledger's record
// stays as a fenced tombstone (no add is acknowledged for it again; reads
// answer NO_SUCH_LEDGER, or UNKNOWN in limbo). Per log file the store
// keeps the bytes of each ledger in it (BookKeeper's EntryLogMetadata,
// built from the index at open); a file with no ledger left, before the
// checkpoint and not the one being written, is unlinked — after the index
// deletions are synced, so a crash in between leaves only a file nothing
// points to, removed by the next pass. A file whose live entries fill
// less than Config.CompactionThreshold (0.2, BookKeeper's minor
// compaction) has them written again at the end of the log (each index
// entry moved only if it still points where it was read) and is then
// removed the same way (compact.go); a read-only bookie (disk at its
// threshold) does not compact, as compaction writes before it frees.
// So a bookie's disk holds its live
// data plus up to a fifth of dead data per file still in use (more with
// compaction off). In a multi-region deployment the bookie must be
// given the global store (--global-etcd): stretched ledgers' metadata is
// there, not in the region's etcd. See gc.go.
//
// OpenStore refuses a directory whose format version it does not know, and
// a non-empty directory that is not a bookie store. Format version 1 (entries
// in Pebble) is refused too: there is no upgrade step from it, as no
// deployment outside tests holds one; decommission such a bookie and start
// it on an empty directory. A future format bumps FormatVersion and adds an
// explicit upgrade step.
//
// # Identity, cookies and limbo
//
// The cookie (bookie id, instance id, limbo_below_or_at) is stored in the
// data directory and, through a Registry, in cluster metadata. At startup
// (New):
//
//  1. empty data dir, no cookie in metadata: a new bookie; a new instance id,
//     limbo_below_or_at = 0 (it never held data);
//  2. empty data dir, a cookie in metadata: the disk was wiped (BookKeeper
//     #544, #4812); a new instance id and limbo_below_or_at = the ledger id
//     high water, so every ledger that existed may have lost data here;
//     the high water (Registry.LedgerIDHighWater) bounds the ids of every
//     allocator whose ledgers can be placed on this bookie: in a
//     multi-region deployment the global store's (brokers allocate ledger
//     ids there, stretched ledgers live there) as well as the region's
//     (cluster.NewBookieRegistry's allocators). A store it cannot read
//     fails the start (after retries until identityTimeout): never a bound
//     too low;
//  3. both cookies, different instance ids: refuse to start (ErrIdentity);
//  4. both cookies, same instance id: start.
//
// Cookies are written to metadata first, then to disk, so a crash between
// the two writes leads to case 2 (safe), never 3.
//
// A ledger with id <= limbo_below_or_at is in limbo: reads of entries the
// bookie does not have and ReadLac answer UNKNOWN (never NO_SUCH_*; #2612),
// normal adds are refused UNKNOWN (the writer replaces this bookie), recovery
// adds are accepted and the ledger is marked limbo durably in its record;
// entries it received are served.
//
// # Read-only
//
// At or above Config.DiskUsageThreshold of filesystem usage (checked every
// DiskCheckInterval, and whenever commits have written an eighth of the
// headroom left below the threshold) the bookie refuses adds with
// READ_ONLY, keeps serving reads and fences, and re-registers as read-only;
// it turns writable when usage drops. A failed commit makes it read-only until
// restart.
//
// # Using a Server
//
//  1. Build a Config (DefaultConfig, then set DataDir, ListenAddr, ID, labels)
//     and pass a Registry (or nil to run without cluster metadata).
//  2. New opens the store and checks identity; it fails rather than serve a
//     data directory whose identity it cannot vouch for.
//  3. Start listens and registers; Addr gives the actual address.
//  4. Close deregisters, drains calls, completes queued operations, closes.
package bookie
