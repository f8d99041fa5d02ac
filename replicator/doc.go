// Package replicator moves data between regions: per topic and remote
// region, a state machine with a durable cursor on the topic's local log
// ships entries over gRPC, async or sync; entries carry their origin region,
// origin message id and a dense per-origin sequence so the target applies
// each once, never loops them back and never skips a gap. It never imports
// broker: it defines the small interfaces it needs (a log to read with a
// cursor, an applier that persists replicated entries) and the broker
// implements them. Built by the geo-replication issue.
//
// Those interfaces take the form of requests in the machines' outputs: the
// Sender's Ready asks for a read of the log after a position and for a
// cursor to be persisted; the Applier's Write asks for entries to be
// persisted with a record. The broker fulfils them.
//
// This package doc is the design note. The package is the pure core: no
// I/O, sockets, clocks, goroutines or logging. Time comes in as an input
// (Tick(now)); every decision goes out as a value (raft's Ready). The shell
// — a gRPC stream and the broker — reads the log, moves the bytes, persists
// what it is told and logs what it is told to.
//
// # The machines
//
// Sender (one per topic × remote region, on the topic's owner broker)
// reads the local log after its cursor and sends the local entries to the
// remote region in batches. Inputs: Appended (the log grew), Read (the
// entries it asked for), Acked (the target's reply), SendFailed, Tick.
// Output (Ready): a read request, batches to send, the cursor to persist,
// a backoff, alerts, and when to tick next.
//
// Applier (one per topic × origin region, on the target's owner broker)
// decides, for each batch, which entries to persist (the next ones in the
// origin's sequence), which are duplicates (acknowledged at once), and
// whether the batch skipped ahead (a gap: nothing past it is kept; the
// reply asks to resend from the hole). Its durable State is tiny: the
// origin's stream and highest contiguous sequence number persisted.
//
// SyncTracker (one per topic in sync mode) says when a local entry may be
// receipted to its producer: once every region of the sync set persisted
// it, or the failover decision removed the region, or (policy SyncDegrade)
// the region lagged past the timeout.
//
// # Identity: origin, origin id, dense sequence
//
// Every entry in every region's log records its Origin region, the
// OriginID (message id) the origin issued, and its OriginSeq: the origin
// broker numbers the entries of a topic that producers publish in that
// region 1, 2, 3, ... with no holes, across ledger rollovers and ownership
// changes (the counter is recovered from the log's last local entry). A
// region's log interleaves its own entries with the entries replicated to
// it from every other region; the Sender of region A only ever sends
// entries with Origin == A, so in a full mesh every entry travels exactly
// one hop, from its origin to each other region, and never loops.
//
// Why a sequence and not the origin's (ledger, entry): positions jump at
// each rollover, so a target that keeps a high-water mark of positions
// cannot tell "next entry" from "an entry after a hole", and acks a
// resent entry it never had as a duplicate once a later one arrived
// (Pulsar #26113, silent loss). A dense sequence makes the hole visible:
// the target expects exactly Through+1.
//
// # Invariants
//
//  1. A cursor position is persisted only after the target acknowledged
//     every entry up to it. The Sender's cursor passes an entry only when
//     it and every entry before it are done: a local entry is done when an
//     Ack says the target persisted through its sequence number; an entry
//     of another origin is done at once (it is never sent). So a crash of
//     the sender at any point loses nothing: it restarts from the last
//     persisted cursor and resends, and the target drops what it has.
//  2. Apply contiguous per origin, never past a gap. The Applier hands out
//     for persistence only the entry with OriginSeq == Through+1 (then the
//     next); entries at or below it are duplicates; an entry beyond it is
//     not kept, and the reply is a nack "resend from Through+1". Nothing
//     ever raises Through except persisting that next entry — with one
//     explicit exception: a new stream (below).
//  3. Never forward an entry whose origin is not local. The Sender passes
//     over foreign entries (its cursor still advances over them); the
//     Applier refuses a batch holding entries of its own region (ErrLoop).
//  4. Acks are cumulative facts: "every entry through Through is durable
//     on the target". A late, duplicated or reordered ack is therefore
//     harmless; a nack only moves the sender back, never forward.
//  5. The sender never skips: on a failed send, an ack timeout or a nack it
//     rewinds to the first unacknowledged entry (or the one the nack names)
//     and resends. A rewind moves only the send position within entries
//     already read, never the read position, so no read can race with it
//     and leave entries unread (Pulsar PR #26106, #26002).
//  6. Per-origin order: batches hold consecutive sequence numbers, and the
//     Applier persists in sequence order, so every region holds each
//     origin's entries in the origin's order.
//  7. Skipping sequence numbers takes an explicit new stream. A stream is
//     numbered (Cursor.Stream, carried by every batch). InitialCursor
//     starts stream 1 after a chosen position (replicate everything, or
//     only new messages); Cursor.NextStream starts the next one, as the
//     resync step after the Sender reported NeedsResync. A target adopts a
//     higher stream and jumps its record to the stream's Base, reporting
//     the sequence numbers skipped (Write.Skipped) as declared loss. A
//     sender whose stream is older than the target's stops
//     (ResyncStaleStream); a target that lost acknowledged entries says so
//     (Ack.Regressed, because Batch.Acked is above its record) instead of
//     nacking forever.
//
// # Caller's duties (the shell)
//
// Sender, on the owner broker of topic T, for each remote region R:
//
//  1. Load the cursor persisted for (T, R); for a new replicator, make one
//     with InitialCursor and persist it before anything is sent.
//     NewSender(cfg, cursor, now), then Appended(log end) at once.
//  2. Call Appended whenever the log grows (LogEnd: last position, last
//     local sequence number, cumulative local bytes), and Tick with the
//     current time at Sender.WakeAt (Ready.WakeAt as of the last input)
//     and whenever convenient (after an input; ticks are cheap). Sleep
//     otherwise: no periodic tick is needed, because time moves the
//     Sender only through Tick and a Tick acts on everything due by then
//     (wake_test.go holds it).
//  3. After any input, if HasReady, take Ready and act on all of it (steps
//     4 to 8).
//  4. Ready.Read: read the entries after Read.After (at most MaxEntries,
//     about MaxBytes), each with Origin, OriginID, OriginSeq, PublishMs and
//     ReplicateTo from its stored metadata, then call Read(id, entries), or
//     ReadFailed(id, err) — wrapping ErrTrimmed when retention deleted
//     them. An empty result is fine (nothing readable yet).
//  5. Ready.Send: send each batch on the stream to R, in order; on a
//     transport error call SendFailed(batch.ID, err). Deliver every reply
//     from R (an Ack) with Acked.
//  6. Ready.Cursor: persist it (the managed-ledger cursor: Pos as the
//     mark-delete position, Seq/Bytes/Stream/Base as properties). Lazily is
//     fine: a newer one replaces an older one.
//  7. Ready.Alerts: log, count, notify. For AlertOverQuota apply the
//     policy: Status.HoldsRetention says whether the cursor still holds
//     back trimming. AlertNeedsResync stops replication to R until an
//     operator or policy resyncs: persist cursor.NextStream(...) and make a
//     new Sender from it.
//  8. Ready.Acked (sync mode): pass it to the topic's SyncTracker.
//  9. On ownership loss drop the Sender; the next owner starts at step 1.
//     A Sender is driven by one goroutine (or under one lock).
//
// Applier, on the owner broker of topic T in region R, per origin O:
//
//  1. Load the record State for (T, O) — State{Origin: O} if none — and
//     NewApplier(R, state). The record must be exactly as durable as the
//     entries: either saved atomically with them (one metadata write with
//     the append), or rebuilt on load from a snapshot plus the log's
//     entries of origin O after it (their OriginSeq; a Write without
//     entries but with a new State — a stream change — needs a marker
//     entry or its own record write).
//  2. For each batch from O: Receive(batch). Send Result.Reply at once if
//     set. Persist Result.Write if set: append its entries in order (a
//     Skip entry appends nothing) with their origin metadata, save
//     Write.State, then Persisted(write) and send the Ack it returns.
//  3. Persist writes in the order they were handed out; if one fails, call
//     PersistFailed for it and fail every later one (never persist a later
//     write after an earlier one failed: that would leave a hole in the
//     log). Persisted on a write out of order returns ErrPersistOrder.
//  4. Log and count Write.Skipped (declared loss after a resync) and
//     Result.Regressed (this region lost data it had acknowledged).
//  5. Serve the entries with their OriginID, so ids mean the same message
//     in every region.
//
// SyncTracker (sync mode), per topic on its owner broker:
//
//  1. Track(seq, now) once a local entry is persisted locally; hold the
//     producer's receipt.
//  2. Feed Acked(region, sender's Ready.Acked), and Tick(now) at
//     SyncReady.WakeAt (the tracker's own clock or earlier: at once);
//     release the receipts of every entry through
//     SyncReady.ReceiptThrough. Take Ready after every input: its WakeAt
//     replaces the previous one. No periodic tick is needed.
//  3. Apply the failover decisions: RemoveRegion(region, epoch) when a
//     region of the sync set is declared failed, AddRegion when it comes
//     back and caught up.
//
// # Flow control, rate, backlog
//
// The Sender keeps at most MaxInflightBatches / MaxInflightBytes sent and
// unacknowledged, and reads only when what it holds unsent is below one
// batch, so a slow target stops its reads: the backlog stays in the log,
// not in memory (back-pressure instead of buffering without bound). While
// a read is out it holds back a partial batch, so batches fill up when
// other origins' entries are interleaved. After a failed send or an ack
// timeout it backs off exponentially (BackoffInitial doubling up to
// BackoffMax), reset by progress; a nack is answered at once, but a second
// nack for the same hole counts as a failure, so a link that keeps losing
// one batch is not flooded. Acks keep moving the cursor even after the
// Sender stopped for a resync. An optional Limiter (a TokenBucket, one
// per namespace behind the shell's lock) bounds the send rate. The backlog
// — entries and bytes not acknowledged, age of the oldest — is checked
// against the BacklogQuota on every input; past it AlertOverQuota fires
// and QuotaPolicy decides: keep data up to retention (default: the
// cursor stops holding trimming; if retention trims what R lacks, the
// next read fails with ErrTrimmed and R needs a resync), hold everything,
// or resync now.
//
// # The shell (broker/replication, replicator/transport)
//
// One bidirectional gRPC stream per (topic, remote region) carries
// Batches one way and Acks the other; the transport (replicator/transport:
// the Hello/Welcome/Redirect handshake, the endpoint registry, the
// conversions to the protocol, the target's reply queue) only moves
// bytes, and a broken stream turns into SendFailed for the batches in
// flight. One goroutine per Sender steps on every input (log
// notification, reply, stream error) and at the Sender's WakeAt: it
// feeds the input and the time, acts on Ready, and sleeps on an injected
// clock until the next WakeAt or input — no periodic tick. The sync
// receipts' goroutine sleeps likewise until SyncReady.WakeAt. The
// target's stream handler feeds its Appliers and appends through the
// topic. Ownership changes move both ends; nothing is lost because both
// restart from durable state and resend/deduplicate by sequence number.
package replicator
