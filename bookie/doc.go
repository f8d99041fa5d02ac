// Package bookie is Meridian's storage node: it stores ledger entries
// durably on Pebble and serves them over the Bookie gRPC service
// (proto/bookiepb). It owns the bytes on disk, fencing, and the last-add-
// confirmed (LAC) a bookie has seen. It knows ledgers and entries, never
// topics. The ledger client (ensembles, quorums, recovery) lives in
// bookie/ledger and uses Digest from here.
//
// # Durability contracts
//
//  1. Persist before acknowledging. An add is answered OK only after the
//     Pebble batch holding it was committed with fsync (pebble.Sync). If the
//     commit fails (ENOSPC, EIO) every add of the batch is answered with an
//     error, never OK, and the store turns read-only until restart; entries
//     of that batch then read as UNKNOWN (they may or may not be durable).
//  2. Fence persisted before the fence answer. A fence (ReadLac or ReadEntry
//     with fence set) goes through the same committer as adds: it is durable
//     before it is answered, and it is totally ordered with adds (one queue,
//     one goroutine; BookKeeper #4701 lost an acknowledged entry because
//     fence and add took different locks). An add queued before the fence is
//     durable and counted in the fence's LAC/last entry; an add queued after
//     it is refused FENCED. Recovery adds are accepted on fenced ledgers.
//     Fencing is idempotent and never undone.
//  3. Never answer "no such entry" unless authoritative. NO_SUCH_ENTRY and
//     NO_SUCH_LEDGER mean "this bookie never stored it". A stored entry that
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
// limbo, LAC = max piggybacked LAC, last entry) and to one Pebble batch,
// commits the batch with one fsync, and then completes every operation of it.
// With Config.GroupCommitMaxDelay 0 the committer takes whatever queued up
// during the previous fsync; it stops gathering at GroupCommitMaxBytes.
//
// # On-disk layout (format version 1)
//
// All integers are big-endian so keys sort numerically:
//
//	"m/format-version"          uint32 format version (FormatVersion)
//	"m/cookie"                  metapb.Cookie
//	'l' ledger(8)               flags(1: bit0 fenced, bit1 limbo) maxLAC(8)
//	'e' ledger(8) entry(8)      lac(8) digest(4) payload
//
// Pebble writes its tables uncompressed (payloads are stored as sent; older
// snappy tables in an existing directory stay readable and are rewritten
// uncompressed as compactions reach them). So size a bookie's disk for the
// payload bytes it keeps, times the LSM's space amplification.
//
// OpenStore refuses a directory whose format version it does not know, and
// a non-empty directory that is not a bookie store. A future format bumps
// FormatVersion and adds an explicit upgrade step.
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
// DiskCheckInterval and after commits) the bookie refuses adds with
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
