// Package mledger is the managed ledger: a topic's log built from ledgers
// (bookie/ledger), with durable cursors, in the manner of Pulsar's
// ManagedLedger. It owns the list of ledgers that make up the log, the
// rollover from one ledger to the next, trimming by cursors and retention,
// the tail cache, and the cursor records. It knows entries and positions,
// never messages, producers or subscriptions' dispatch (broker/ does).
//
// # Key layout (relative to the region store's prefix)
//
//	/managed-ledgers/<name>/info              ManagedLedgerInfo (proto/mlpb)
//	/managed-ledgers/<name>/cursors/<cursor>  CursorInfo, one per durable cursor
//	/managed-ledgers/<name>/snapshots/<snap>  SnapshotRecord, one per snapshot
//
// <name> and <cursor> are escaped with EscapeName: every byte outside
// [A-Za-z0-9._-] becomes %XX, so a name is one key segment ('/' is %2F)
// and distinct names never collide or nest:
// "public/default/persistent/my-topic" → "public%2Fdefault%2Fpersistent%2Fmy-topic".
// The ledgers themselves keep their metadata under /ledgers/ (bookie/ledger);
// each carries the custom field managed-ledger=<name>.
//
// The info record lists the ledgers in order with, for each closed one,
// its entry count, payload size, creation and close times. The last ledger
// is the one being written; its counts are recorded when it is closed.
//
// # Takeover ("ledgers into a log")
//
// One owner writes a managed ledger at a time; Open takes over from the
// previous owner, alive or dead:
//
//  1. Read the info record (create it if absent) and claim it: rewrite it by
//     compare-and-swap with its owner epoch incremented. Every write of an
//     owner compares the record's mod revision, so from here on the previous
//     owner can no longer roll over, trim or write cursor records; in
//     particular it cannot append one more ledger to the list behind the
//     new owner's back (without the claim, an owner that keeps rolling over
//     could win every later CAS and starve the new one).
//  2. Recover every ledger the record does not mark closed, normally only
//     the last one: ledger.Client.Recover fences it on its bookies and
//     closes it at the last entry that may have been acknowledged. From
//     then on the previous owner's appends fail (ErrFenced). Recover the
//     last ledger BEFORE creating the next: otherwise the old owner could
//     still append to a ledger the new owner has already counted.
//  3. Create a new ledger.
//  4. Compare-and-swap the record: recovered ledgers with their final
//     counts (empty ones dropped), the new ledger appended. Serve appends
//     only AFTER this CAS: a process whose CAS lost does not own the log.
//     On a lost CAS (at 1 or 4) the new ledger is deleted (unless the list
//     references it: see "Writes whose outcome etcd left unknown") and
//     Open starts again once from fresh metadata; a second loss is
//     ErrConcurrentOpen.
//     A loser that retries takes over from the winner: ownership is
//     arbitrated above this package (topic ownership); this protocol only
//     guarantees that at most one owner can append and that no
//     acknowledged entry is lost.
//
// Rollover uses the same order: stop handing appends to the current
// ledger, close it (its writer waits for its pending appends), create the
// next one, CAS the record (the closed ledger's final counts and the new
// ledger), and only then hand the queued appends to the new ledger. So every
// ledger but the last is closed in its own metadata before it stops being
// the last of the list, and a new owner only ever needs to recover the
// last one. Every write of an owner (the info CAS, and each cursor record,
// written in a transaction that also compares the info record's mod
// revision) fails once another owner has claimed the info record: the old
// owner is fenced for acknowledgements as well as for appends.
//
// # Writes whose outcome etcd left unknown
//
// etcd answers "request timed out" (a leadership move, a slow disk) for a
// write it may have applied, or may apply later; the store does not resend
// a compare-and-swap (cluster.OutcomeUnknown). Every write of the list
// (casInfo) therefore reads the list back after such an answer: if it
// holds exactly what was written (an owner epoch or a ledger id that is
// this process's own), the write landed and counts as done; if it is still
// at the revision compared, the write is sent again (it can land only
// once); if it moved on to something else, the write can never land. A
// ledger created for a list write that did not succeed is deleted only
// when the list does not reference it and never can (releaseUnrecorded):
// deleting a ledger the list references made the log unopenable ("recover
// ledger N: no such ledger" at every Open). A list write still unsettled
// when its time is up fails the managed ledger (ErrFailed); Open settles
// it. A list that references a ledger without metadata (what that bug
// left behind) opens by dropping the ledger when it is the last one and
// no cursor acknowledged anything in it — it was never written to — and
// is refused with ErrMissingLedger otherwise (missingLedger says why).
//
// # Appends
//
// Callbacks run in append order on one delivery goroutine. A fenced ledger
// fences the managed ledger (ErrFenced; the broker closes the topic). Any
// other writer failure is settled exactly: the failed ledger is recovered,
// appends it holds succeed with their positions, the others — certainly
// not in the log — are re-sent in order to a new ledger; nothing is
// reported failed while stored or stored twice (see AppendAsync).
//
// The decisions of the append path are a pure core, appendCore
// (appendcore.go), as cursorCore is for cursors: no goroutine, no clock
// read, no I/O, no lock. The shell (AppendAsync, the writer's callbacks,
// the switch goroutine, Close) holds mu around each call, passes the time
// in, and does what the result asks:
//   - add/place: an append goes to the current ledger with the next entry
//     id (the shell hands it to the writer, in that order), or is queued
//     behind a ledger switch — started when the ledger is due for rollover
//     (entries, size, age: rollReason), RollNext was called, or there is no
//     ledger; refused (done at once, delivered in order) once closing or
//     terminated;
//   - writerResult: the writer's answer: confirmed, too large (that append
//     fails alone, its entry id given back), fenced (the shell fences:
//     terminate fails every pending and later append with ErrFenced), or
//     failed (the append is held, and the first failure of the current
//     ledger starts the switch that recovers it);
//   - settle: once the switch closed or recovered the old ledger at its
//     last entry, with no add in flight: appends it holds are confirmed
//     with their positions, the others are re-queued in order ahead of
//     those queued since, or fail after maxTries ledgers; a ledger that
//     ends below an entry already confirmed fails the managed ledger
//     (ErrFailed);
//   - readyForNext, switched, requeue, switchFailed, switchAborted: the
//     rest of a switch — none when closing with nothing queued; the new
//     ledger becomes current and the queue is placed on it in order (the
//     rest queued again if it is full at once); a creation that failed
//     fails the queued appends and the next append retries; a termination
//     meanwhile releases the new ledger;
//   - terminate (fenced, failed — e.g. a ledger not recovered within
//     SwitchTimeout, whose contexts stay in the shell — or closed) and
//     takeDelivered (the done appends at the head, in append order, for
//     the deliverer).
//
// Its contract: an append is done with a position only when its ledger
// confirmed it (the writer, or recovery); callbacks run in append order;
// an append is queued or handed to exactly one ledger. Scripted tests:
// testdata/append (TestAppendCore).
//
// # Cursors and what survives a crash
//
// A durable cursor's record holds its mark-delete position (everything at
// or before it acknowledged), its individually acknowledged ranges above
// it, and small properties. Changes are batched: a record is written at
// most once per CursorPersistInterval (default 100ms), or at once by
// Cursor.Flush, ResetTo and Close. Bounds after a crash of the owner:
//   - acknowledgements of at most the last CursorPersistInterval (plus the
//     write in flight) are lost, and their entries redelivered — never
//     skipped;
//   - at most MaxPersistedAckRanges ranges are persisted (the lowest);
//     acknowledgements in ranges beyond are lost on restart and
//     redelivered.
//
// Trimming deletes whole ledgers, oldest first, once every durable
// cursor's persisted mark-delete position is past them and retention no
// longer keeps them (Trim). Non-durable cursors (readers) hold nothing
// back.
//
// # Snapshots
//
// A snapshot (OpenSnapshot, snapshot.go) is a blob of any size the owner
// keeps beside the log — the broker's deduplication state, a
// delayed-delivery index — written as the entries of a ledger of its own
// (placed like the log's) behind a small record, or inline in the record
// when small. Persist the ledger before pointing to it; point before
// deleting the old: a crash at any step leaves the previous or the new
// blob readable, and every ledger made for it listed in its record, for
// the next write or open to delete.
//
// # Sizes
//
// Entry counts are exact. Sizes are exact for ledgers this process wrote;
// a ledger recovered from a dead owner takes the size its metadata records,
// which ledger recovery does not set (0), so TotalSizeBytes and retention
// by size under-count such ledgers (erring towards keeping data).
//
// # Callers
//
//  1. Open the managed ledger when the broker acquires the topic.
//  2. AppendAsync entries; read with ReadEntries or cursors; wait for new
//     entries with Notify.
//  3. OpenCursor per subscription; Ack / AckCumulative as consumers
//     acknowledge; Rewind on consumer reconnect; ResetTo to seek.
//  4. Call Trim periodically if retention by time must expire on idle
//     topics (it also runs after rollovers and cursor flushes).
//  5. Keep state that is costly to rebuild from the log in a snapshot
//     (OpenSnapshot; Write, Read).
//  6. On ErrFenced or ErrFailed, close the topic. Close the managed ledger
//     when the broker releases the topic; Delete to remove it.
package mledger
