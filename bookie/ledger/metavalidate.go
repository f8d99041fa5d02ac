package ledger

import (
	"fmt"

	"github.com/meridian-mq/meridian/proto/metapb"
)

// validateMeta checks decoded ledger metadata against what the client's
// arithmetic relies on — 1 <= Qa <= Qw <= E (writeSet divides by E and
// indexes the ensemble with (e+w) mod E), every fragment an ensemble of E
// named bookies, fragments in entry order — so corrupt or hostile
// metadata in etcd is an error, never a panic or a read from the wrong
// bookie.
func validateMeta(key string, m *metapb.LedgerMetadata) error {
	e, qw, qa := m.EnsembleSize, m.WriteQuorum, m.AckQuorum
	if !(e >= qw && qw >= qa && qa >= 1) || e > 1024 {
		return fmt.Errorf("ledger: metadata %s: quorums E=%d Qw=%d Qa=%d (need E >= Qw >= Qa >= 1, E <= 1024)", key, e, qw, qa)
	}
	var prev int64 = -1
	for i, f := range m.Fragments {
		if int32(len(f.Ensemble)) != e {
			return fmt.Errorf("ledger: metadata %s: fragment %d has %d bookies, ensemble size is %d", key, i, len(f.Ensemble), e)
		}
		for _, b := range f.Ensemble {
			if b.GetId() == "" {
				return fmt.Errorf("ledger: metadata %s: fragment %d names a bookie without an id", key, i)
			}
		}
		if f.FirstEntryId < 0 || f.FirstEntryId < prev {
			return fmt.Errorf("ledger: metadata %s: fragment %d starts at entry %d, after %d", key, i, f.FirstEntryId, prev)
		}
		prev = f.FirstEntryId
	}
	return nil
}
