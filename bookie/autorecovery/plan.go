package autorecovery

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
)

// Key layout, relative to the region's store prefix.
const (
	markerPrefix = "/underreplicated/ledgers/"
	lockPrefix   = "/underreplicated/locks/"
	electionKey  = "/underreplicated/auditor"
)

func markerKey(id int64) string { return fmt.Sprintf("%s%020d", markerPrefix, id) }
func lockKey(id int64) string   { return fmt.Sprintf("%s%020d", lockPrefix, id) }

// Marker is the durable under-replication record of one ledger (JSON in
// etcd). It is a hint: a worker re-plans from the ledger's metadata.
type Marker struct {
	LedgerID int64 `json:"ledger_id"`
	// Lost are the bookies whose fragments must move, sorted: lost ones,
	// and ones being decommissioned (draining).
	Lost []string `json:"lost"`
	// Fragments are the indexes of the fragments that held one of them when
	// the auditor looked.
	Fragments []int `json:"fragments"`
	// Misplaced are the indexes of fragments whose ensemble breaks the
	// ledger's placement rule under the bookies' current labels (the scrub
	// found them, e.g. after racks were relabelled), sorted.
	Misplaced []int `json:"misplaced,omitempty"`
	// Missing are replicas the scrub found without their data although
	// their bookie is registered (a disk wiped and the bookie back within
	// the delay, entries lost or corrupt there): the worker copies the
	// fragment's entries for that position back onto the same bookie.
	Missing []Replica `json:"missing,omitempty"`
	// Entries: how many entries of the marked fragments had a replica on a
	// lost bookie when the auditor looked (-1 for an open ledger's last
	// fragment, whose end is unknown, is not counted).
	Entries int64 `json:"entries,omitempty"`
	// CtimeMs is when the marker was first written (auditor's clock, Unix ms).
	CtimeMs int64 `json:"ctime_ms"`
}

func (m Marker) encode() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("autorecovery: marshal marker: %v", err))
	}
	return b
}

func decodeMarker(b []byte) (Marker, error) {
	var m Marker
	if err := json.Unmarshal(b, &m); err != nil {
		return Marker{}, fmt.Errorf("autorecovery: marker: %w", err)
	}
	return m, nil
}

// merge returns m with the lost bookies and fragments of o added, and
// whether anything changed. Entries takes o's count when o adds anything.
func (m Marker) merge(o Marker) (Marker, bool) {
	changed := false
	for _, id := range o.Lost {
		if !slices.Contains(m.Lost, id) {
			m.Lost = append(m.Lost, id)
			changed = true
		}
	}
	for _, f := range o.Fragments {
		if !slices.Contains(m.Fragments, f) {
			m.Fragments = append(m.Fragments, f)
			changed = true
		}
	}
	for _, f := range o.Misplaced {
		if !slices.Contains(m.Misplaced, f) {
			m.Misplaced = append(m.Misplaced, f)
			changed = true
		}
	}
	for _, r := range o.Missing {
		if !slices.Contains(m.Missing, r) {
			m.Missing = append(m.Missing, r)
			changed = true
		}
	}
	slices.SortFunc(m.Missing, func(a, b Replica) int {
		if a.Fragment != b.Fragment {
			return a.Fragment - b.Fragment
		}
		return strings.Compare(a.Bookie, b.Bookie)
	})
	if changed && o.Entries > m.Entries {
		m.Entries = o.Entries
	}
	slices.Sort(m.Lost)
	slices.Sort(m.Fragments)
	slices.Sort(m.Misplaced)
	return m, changed
}

// Replica is one member of one fragment.
type Replica struct {
	Fragment int    `json:"fragment"`
	Bookie   string `json:"bookie"`
}

// SampleEntries returns the entries the scrub reads from position p of
// fragment fi of a ledger (completed fragments only): the first and the
// last entry that position stores (BookKeeper's LedgerChecker samples the
// same way). None when the fragment is empty or not complete.
func SampleEntries(m *metapb.LedgerMetadata, fi, p int) []int64 {
	last, ok := ledger.FragmentLastEntry(m, fi)
	f := m.Fragments[fi]
	if !ok || m.State != metapb.LedgerState_CLOSED && fi == len(m.Fragments)-1 || last < f.FirstEntryId {
		return nil
	}
	e, qw := int(m.EnsembleSize), int(m.WriteQuorum)
	stores := func(id int64) bool {
		_, ok := CopiesOf(id, e, qw, []int{p})
		return ok
	}
	var out []int64
	for id := f.FirstEntryId; id <= last; id++ {
		if stores(id) {
			out = append(out, id)
			break
		}
	}
	for id := last; id >= f.FirstEntryId && len(out) > 0; id-- {
		if stores(id) {
			if id != out[0] {
				out = append(out, id)
			}
			break
		}
	}
	return out
}

// WriterState is what a worker knows of an open ledger's writer.
type WriterState int

const (
	// WriterUnknown: the ledger records no writer lease, or etcd could not
	// say: the writer is presumed alive.
	WriterUnknown WriterState = iota
	// WriterAlive: the writer's lease is alive.
	WriterAlive
	// WriterGone: the writer's lease expired: its process died (or was cut
	// off from etcd for the lease's TTL, and could not have changed the
	// ledger's metadata since).
	WriterGone
)

// Action is what a worker does with a marked ledger.
type Action int

const (
	// ActRepair: CLOSED: re-replicate every affected fragment.
	ActRepair Action = iota
	// ActRepairCompleted: OPEN with a live (or unknown) writer: re-replicate
	// the completed fragments only (every one but the last, whose entries
	// are all acknowledged and immutable); the last fragment is the
	// writer's, which replaces a member itself (ensemble change). Never
	// fence: an idle writer would have its next add refused (Pulsar #26074).
	ActRepairCompleted
	// ActRecover: OPEN whose writer is gone, or IN_RECOVERY (a recovery
	// started and may have died): recover it first (fence, close at the
	// last entry that may have been acknowledged), then ActRepair.
	ActRecover
)

// Decide returns what to do with a marked ledger in state st.
func Decide(st metapb.LedgerState, w WriterState) Action {
	switch {
	case st == metapb.LedgerState_CLOSED:
		return ActRepair
	case st == metapb.LedgerState_IN_RECOVERY, w == WriterGone:
		return ActRecover
	}
	return ActRepairCompleted
}

// FragmentRepair is the work on one fragment: the ensemble positions held by
// lost bookies and the fragment's entry range.
type FragmentRepair struct {
	Index     int   // fragment index in the metadata
	Positions []int // ensemble positions to replace, ascending
	// First and Last bound the fragment's entries; Last < First when it
	// holds none (only the metadata changes then).
	First, Last int64
}

// Affected returns the fragments of m with a member in lost, and the lost
// bookies it found, for the auditor. It looks at every fragment, whatever
// the ledger's state.
func Affected(m *metapb.LedgerMetadata, lost map[string]bool) (frags []int, found []string) {
	for i, f := range m.Fragments {
		hit := false
		for _, b := range f.Ensemble {
			if lost[b.Id] {
				hit = true
				if !slices.Contains(found, b.Id) {
					found = append(found, b.Id)
				}
			}
		}
		if hit {
			frags = append(frags, i)
		}
	}
	slices.Sort(found)
	return frags, found
}

// PlanRepairs returns the repairs of the fragments of m that hold a bookie
// in lost, in fragment order: every fragment of a CLOSED ledger; of any
// other ledger only the completed fragments (all but the last, see
// ActRepairCompleted). waiting reports that the last fragment of a ledger
// that is not closed holds one, left to its writer.
func PlanRepairs(m *metapb.LedgerMetadata, lost map[string]bool) (repairs []FragmentRepair, waiting bool) {
	closed := m.State == metapb.LedgerState_CLOSED
	for i, f := range m.Fragments {
		var pos []int
		for p, b := range f.Ensemble {
			if lost[b.Id] {
				pos = append(pos, p)
			}
		}
		if len(pos) == 0 {
			continue
		}
		last, ok := ledger.FragmentLastEntry(m, i)
		if !closed && i == len(m.Fragments)-1 || !ok {
			waiting = true
			continue
		}
		repairs = append(repairs, FragmentRepair{Index: i, Positions: pos, First: f.FirstEntryId, Last: last})
	}
	return repairs, waiting
}

// UnderReplicatedEntries counts the entries of m's completed fragments
// that have a replica on a bookie in lost (an open ledger's last fragment
// is not counted: its end is unknown).
func UnderReplicatedEntries(m *metapb.LedgerMetadata, lost map[string]bool) int64 {
	var n int64
	e, qw := int(m.EnsembleSize), int(m.WriteQuorum)
	for i, f := range m.Fragments {
		var pos []int
		for p, b := range f.Ensemble {
			if lost[b.Id] {
				pos = append(pos, p)
			}
		}
		last, ok := ledger.FragmentLastEntry(m, i)
		if len(pos) == 0 || !ok || last < f.FirstEntryId {
			continue
		}
		if len(pos) >= e-qw+1 || e == qw { // every entry has one there
			n += last - f.FirstEntryId + 1
			continue
		}
		for id := f.FirstEntryId; id <= last; id++ {
			if _, ok := CopiesOf(id, e, qw, pos); ok {
				n++
			}
		}
	}
	return n
}

// EntryCopy is one entry to copy: the positions of the fragment that must
// receive it and the positions that may serve it (survivors of its write
// set, in write-set order).
type EntryCopy struct {
	Entry   int64
	Targets []int
	Sources []int
}

// CopiesOf returns, for entry e of a fragment of ensemble size E and write
// quorum qw, which replaced positions store it and which surviving
// positions can serve it. ok is false when no replaced position stores e.
func CopiesOf(e int64, ensembleSize, qw int, replaced []int) (EntryCopy, bool) {
	c := EntryCopy{Entry: e}
	for _, p := range ledger.WriteSet(e, ensembleSize, qw) {
		if slices.Contains(replaced, p) {
			c.Targets = append(c.Targets, p)
		} else {
			c.Sources = append(c.Sources, p)
		}
	}
	return c, len(c.Targets) > 0
}

// ChooseReplacements picks, one position at a time, a replacement for each
// position of ens in positions, under the ledger's policy, from candidates
// (the writable bookies), never choosing a bookie in exclude. The lost
// members' labels guide the choice (rack.Replace). The returned ensemble is
// a copy.
func ChooseReplacements(cands []rack.Bookie, p rack.Policy, qw, qa int, ens []rack.Bookie, positions []int, exclude map[string]bool, rng *rand.Rand) ([]rack.Bookie, error) {
	out := slices.Clone(ens)
	for _, pos := range positions {
		b, _, err := rack.Replace(cands, p, rack.Request{E: len(ens), Qw: qw, Qa: qa, Exclude: exclude}, out, pos, rng)
		if err != nil {
			return nil, fmt.Errorf("autorecovery: replace position %d (%s): %w", pos, ens[pos].ID, err)
		}
		out[pos] = b
	}
	return out, nil
}

// Misplaced returns the fragments of m whose ensemble breaks its placement
// policy (rack.Check fails) with the members' labels given by labels
// (current registry labels; a member labels does not know keeps the labels
// recorded in the metadata).
func Misplaced(m *metapb.LedgerMetadata, labels func(id string) (rack.Bookie, bool)) []int {
	pol := ledger.PolicyOf(m)
	var out []int
	for i, f := range m.Fragments {
		if rack.Check(pol, EnsembleLabels(f, labels), int(m.WriteQuorum), int(m.AckQuorum)) == rack.AdherenceFail {
			out = append(out, i)
		}
	}
	return out
}

// EnsembleLabels returns a fragment's members with their current labels
// (labels, when it knows the bookie) or the recorded ones.
func EnsembleLabels(f *metapb.Fragment, labels func(id string) (rack.Bookie, bool)) []rack.Bookie {
	ens := make([]rack.Bookie, len(f.Ensemble))
	for j, b := range f.Ensemble {
		ens[j] = ledger.RackBookie(b)
		if labels != nil {
			if l, ok := labels(b.Id); ok {
				ens[j] = l
			}
		}
	}
	return ens
}

// FixPlacement chooses positions of ens to replace, and their
// replacements from cands (never a member, never in exclude), so the
// ensemble adheres to its policy again: one position at a time, each time
// the one whose replacement makes the best ensemble (ties: the lowest
// position), until rack.Check no longer fails. It returns the new ensemble
// and the replaced positions, ascending, or an error when no sequence of
// replacements gets there.
func FixPlacement(cands []rack.Bookie, p rack.Policy, qw, qa int, ens []rack.Bookie, exclude map[string]bool, rng *rand.Rand) ([]rack.Bookie, []int, error) {
	cur := slices.Clone(ens)
	var replaced []int
	soft := p
	soft.Enforce = false // Replace refuses outright when the survivors already break the rule
	for rack.Check(p, cur, qw, qa) == rack.AdherenceFail {
		if len(replaced) == len(cur) {
			return nil, nil, fmt.Errorf("autorecovery: no replacement fixes the placement of %v", ens)
		}
		bestPos := -1
		var best rack.Bookie
		bestScore := -1
		for pos := range cur {
			if slices.Contains(replaced, pos) {
				continue
			}
			ex := maps.Clone(exclude)
			if ex == nil {
				ex = map[string]bool{}
			}
			for _, b := range ens {
				ex[b.ID] = true
			}
			b, _, err := rack.Replace(cands, soft, rack.Request{E: len(cur), Qw: qw, Qa: qa, Exclude: ex}, cur, pos, rng)
			if err != nil {
				continue
			}
			next := slices.Clone(cur)
			next[pos] = b
			score := int(rack.Check(p, next, qw, qa))*1000 + racksSpanned(next)
			if score > bestScore {
				bestPos, best, bestScore = pos, b, score
			}
		}
		if bestPos < 0 {
			return nil, nil, fmt.Errorf("autorecovery: no candidate to fix the placement of %v", ens)
		}
		cur[bestPos] = best
		replaced = append(replaced, bestPos)
	}
	slices.Sort(replaced)
	return cur, replaced, nil
}

// racksSpanned counts the distinct (region, rack) pairs of ens.
func racksSpanned(ens []rack.Bookie) int {
	seen := map[[2]string]bool{}
	for _, b := range ens {
		seen[[2]string{b.Region, b.Rack}] = true
	}
	return len(seen)
}
