// Package rack owns placement: which bookies store a ledger fragment. It
// chooses a new ensemble (Place), a replacement for a failed member
// (Replace), grades an existing ensemble (Check) and orders a write set for
// reads (ReadOrder), from the bookies' (region, rack) labels under a Policy.
// These are BookKeeper's newEnsemble, replaceBookie,
// isEnsembleAdheringToPlacementPolicy and reorderReadSequence.
//
// The package is pure: no I/O, clocks, goroutines or logging. Every input is
// an argument and randomness comes only from the caller's *rand.Rand, so the
// same inputs and seed give the same answer. The shell that calls it logs the
// decisions and counts them in metrics.
//
// # Caller's duties
//
//  1. Validate the Policy when loading configuration, and for each ledger's
//     quorums (Policy.Validate); an error wraps ErrInvalidPolicy and is a
//     configuration error, not something to retry.
//  2. Pass the live, writable bookies with their labels from the current
//     cluster snapshot, and Request.Exclude for bookies known to be bad.
//     Give each goroutine its own *rand.Rand (or serialise its use).
//  3. Persist the chosen ensemble in the ledger metadata — with every
//     member's Region and Rack — before writing any entry to it. Placement
//     decides; it does not record.
//  4. When a member fails, call Replace with the ensemble's labels as
//     recorded in step 3, not as looked up among live bookies: the failed
//     bookie may have left the cluster and its location still guides the
//     choice (BookKeeper #2642). Replace changes only that position; persist
//     the new ensemble (compare-and-swap) before writing through it.
//  5. Treat ErrNotEnoughBookies (*PlacementError says what was missing) as
//     "not now": fail the ledger creation or the ensemble change, alert, and
//     retry when membership changes. Never lower the policy silently.
//  6. Use an ensemble returned with AdherenceFail (only possible without
//     Enforce) but report it; periodically Check stored ensembles and
//     re-replicate those that do not adhere.
//  7. For reads, try a write set's bookies in ReadOrder, with the reader's
//     location and the bookies currently known to be down.
//
// # Rules
//
// Ensemble E, write quorum Qw, ack quorum Qa, with E >= Qw >= Qa >= 1. Entry
// e is written to the write set at positions (e+w) mod E, w = 0..Qw-1
// (round-robin striping), so an ensemble has E write sets and every rule
// below must hold for each of them. A rack is the pair (Region, Rack).
//
// Rack rule (both kinds): every write set spans at least
// min(Qw, MinRacksPerWriteQuorum) distinct racks; under Enforce it holds no
// bookie with an empty Rack, and such bookies are never chosen.
//
// Durability rule (RegionAware, N = MinRegionsForDurability >= 2): in every
// write set, every subset of Qa bookies spans at least N regions;
// equivalently the N-1 regions holding most of the write set hold at most
// Qa-1 of its bookies. An acknowledged entry therefore survives the loss of
// any N-1 regions. Validate also demands BookKeeper's Qa >= N and
// Qa > Qw - floor(Qw/N): otherwise a write set spread evenly over N regions
// would let Qa acks come from N-1 of them.
//
// RegionAware placement uses only bookies in the region set (Policy.Regions,
// or every non-empty region when unset) and spreads the ensemble over the
// regions with usable bookies as evenly as their capacity allows, local
// region first; inside that it spreads over racks.
//
// Enforce makes the rules hard: Place and Replace return AdherenceStrict or
// an error. For RegionAware this includes the rack rule; BookKeeper's
// region policy applies rack awareness per region, and we decided that an
// operator who enforces min-racks wants it enforced in both kinds (with the
// default 2 and N >= 2 the region rule already implies it). Without Enforce,
// Place returns the best ensemble it can — satisfying the durability rule
// before the rack rule — graded AdherenceStrict, AdherenceSoft (RegionAware:
// durable, racks short) or AdherenceFail.
//
// Place searches exhaustively (depth-first over positions, choosing racks
// rather than bookies, pruning partial write sets that can no longer meet the
// rule, skipping racks interchangeable with one that already failed, and
// checking at each step that the sequence of regions chosen so far can still
// be completed), so it returns ErrNotEnoughBookies under Enforce only when no
// valid ensemble of the usable bookies exists. A step budget (about a second
// of work; unreached by 50-bookie, E <= 8 topologies, which need well under
// 10^5 steps) turns a pathological case into a "gave up" PlacementError
// rather than a hung caller.
package rack
