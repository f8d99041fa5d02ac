// Package ledger is the ledger client: how brokers (and recovery) create,
// write, recover and read ledgers stored on bookies.
//
// A ledger has one writer. Its metadata (state, quorums E/Qw/Qa, placement
// policy, fragments with their ensembles) lives in etcd and changes only by
// compare-and-swap on the key's mod revision. Entry e goes to the write set
// (e+w) mod E, w in [0, Qw), of the fragment that holds e.
//
// Contracts:
//   - An add completes only when Qa bookies of its write set acknowledged it
//     (each only after fsync) and every earlier entry completed.
//   - Ensemble change: when a bookie fails (error, broken stream, or no
//     answer within AddTimeout), the writer freezes completions, chooses a
//     replacement with rack.Replace, CASes a new fragment starting at LAC+1
//     into the metadata, and only then re-sends pending entries to the
//     replacement and resumes completions. The caller sees no error while a
//     replacement exists.
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
