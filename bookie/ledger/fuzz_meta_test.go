package ledger

import (
	"testing"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/metapb"
	"google.golang.org/protobuf/proto"
)

// FuzzDecodeMetadata: ledger metadata read back from etcd never crashes
// the decoder, and what decodes can be used: every entry's fragment and
// write set name bookies of that fragment's ensemble.
func FuzzDecodeMetadata(f *testing.F) {
	ens := func(ids ...string) []*metapb.BookieRef {
		var out []*metapb.BookieRef
		for _, id := range ids {
			out = append(out, &metapb.BookieRef{Id: id, Addr: "127.0.0.1:1", Region: "r", Rack: "a"})
		}
		return out
	}
	seed, err := proto.Marshal(&metapb.LedgerMetadata{FormatVersion: MetadataFormatVersion, LedgerId: 7, EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2,
		State: metapb.LedgerState_OPEN, Fragments: []*metapb.Fragment{{FirstEntryId: 0, Ensemble: ens("a", "b", "c")}, {FirstEntryId: 5, Ensemble: ens("a", "d", "c")}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	// Near misses: each would divide by zero or index outside an ensemble
	// if it decoded.
	for _, bad := range []*metapb.LedgerMetadata{
		{EnsembleSize: 0, WriteQuorum: 0, AckQuorum: 0, Fragments: []*metapb.Fragment{{}}},
		{EnsembleSize: 2, WriteQuorum: 3, AckQuorum: 2, Fragments: []*metapb.Fragment{{Ensemble: ens("a", "b")}}},
		{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Fragments: []*metapb.Fragment{{Ensemble: ens("a", "b", "c")}, {FirstEntryId: 4, Ensemble: ens("a")}}},
		{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, Fragments: []*metapb.Fragment{{FirstEntryId: 9, Ensemble: ens("a", "b", "c")}, {FirstEntryId: 4, Ensemble: ens("a", "b", "c")}}},
	} {
		b, err := proto.Marshal(bad)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(seed[:len(seed)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(cluster.KV{Key: "/ledgers/7", Value: b})
		if err != nil {
			return
		}
		for _, e := range []int64{0, 1, 4, 5, 6, 1 << 40} {
			fr := m.FragmentFor(e)
			for _, i := range writeSet(e, int(m.Meta.EnsembleSize), int(m.Meta.WriteQuorum)) {
				if i < 0 || i >= len(fr.Ensemble) {
					t.Fatalf("entry %d: write set index %d outside an ensemble of %d", e, i, len(fr.Ensemble))
				}
			}
		}
		_ = m.LastFragment()
		_ = PolicyOf(m.Meta)
	})
}
