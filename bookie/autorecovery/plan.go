package autorecovery

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"

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
	// Lost are the bookies whose fragments must move, sorted.
	Lost []string `json:"lost"`
	// Fragments are the indexes of the fragments that held one of them when
	// the auditor looked.
	Fragments []int `json:"fragments"`
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
// whether anything changed.
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
	slices.Sort(m.Lost)
	slices.Sort(m.Fragments)
	return m, changed
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

// PlanRepairs returns the repairs of a CLOSED ledger for the lost bookies,
// in fragment order. A ledger that is not CLOSED yields none (see the
// package doc: open ledgers are left to their writer).
func PlanRepairs(m *metapb.LedgerMetadata, lost map[string]bool) []FragmentRepair {
	if m.State != metapb.LedgerState_CLOSED {
		return nil
	}
	var out []FragmentRepair
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
		last, _ := ledger.FragmentLastEntry(m, i)
		out = append(out, FragmentRepair{Index: i, Positions: pos, First: f.FirstEntryId, Last: last})
	}
	return out
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
// policy (rack.Check fails), for the scrub's report.
func Misplaced(m *metapb.LedgerMetadata) []int {
	pol := ledger.PolicyOf(m)
	var out []int
	for i, f := range m.Fragments {
		ens := make([]rack.Bookie, len(f.Ensemble))
		for j, b := range f.Ensemble {
			ens[j] = ledger.RackBookie(b)
		}
		if rack.Check(pol, ens, int(m.WriteQuorum), int(m.AckQuorum)) == rack.AdherenceFail {
			out = append(out, i)
		}
	}
	return out
}
