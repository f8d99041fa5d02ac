// Package ledger is the ledger client: how brokers (and recovery) create,
// write, recover and read ledgers stored on bookies.
//
// A ledger has one writer. Its metadata (state, quorums E/Qw/Qa, placement
// policy, fragments with their ensembles) lives in etcd and changes only by
// compare-and-swap on the key's mod revision. Entry e goes to the write set
// (e+w) mod E, w in [0, Qw), of the fragment that holds e.
//
// Contracts:
//   - An add completes only when Qa bookies of its write set, in the
//     ensemble committed to metadata, acknowledged it (each only after
//     fsync) and every earlier entry completed.
//   - Ensemble change: when a bookie fails (error, broken stream, or no
//     answer within AddTimeout), the writer stops sending to its position
//     and chooses a replacement: rack.Replace among the bookies that did not
//     fail within the last minute; else one that failed, went away and
//     answers again (a rolling restart's bookie restarted just before), or
//     the failed member itself once it is back; else, under an enforced
//     policy, a bookie that breaks the rack rule (a warning, and
//     Stats.ReplacementsBreakingPlacement). It then holds completions for
//     the compare-and-swap of a new fragment starting at LAC+1 only (one
//     etcd round trip), and after it re-sends pending entries to the
//     replacement. While it searches, adds that reach Qa on the current
//     ensemble's live members complete. With no replacement at all the
//     writer goes on so and keeps retrying (BookKeeper's
//     delayEnsembleChange); it fails only when a pending add cannot reach
//     Qa for EnsembleChangeTimeout. The caller sees no error while a
//     replacement exists or Qa can be met.
//   - The cost of going on: an entry acknowledged while a position waits
//     has fewer than Qw copies, and nothing writes the missing copy when the
//     bookie returns. The hole runs to the end of its fragment, so the
//     auto-recovery scrub (which samples the last entry each member of a
//     completed fragment stores, when it reads data: the brokers' do) queues
//     the fragment once it is completed (by the next ensemble change or the
//     ledger's close) and a worker copies it back, within ScrubInterval
//     (1 h); nothing covers the open ledger's last fragment.
//   - FENCED from any bookie fails the writer: a recovery owns the ledger.
//   - Recovery fences before reading and reads with fencing; it treats
//     UNKNOWN as "cannot tell", never as "absent" (see Recover).
//   - Reads go to the write set in locality order and skip replicas that are
//     corrupt, unknown, missing the entry or unreachable.
//
// Callers:
//  1. New a Client with the metadata Store and a BookieSource (ViewSource
//     over cluster.WatchBookies).
//  2. Create a ledger (Writer), AppendAsync/Append entries, Close it.
//  3. To take over a ledger whose writer may be alive, Recover it: the old
//     writer's later adds fail with ErrFenced.
//  4. Open ledgers to read; Close the Client last.
package ledger
