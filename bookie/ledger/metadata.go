package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
	"google.golang.org/protobuf/proto"
)

// MetadataFormatVersion is the version of the ledger metadata record this
// code writes; it refuses to act on a record of a higher version.
const MetadataFormatVersion = 1

// ledgerKey is the etcd key of a ledger's metadata, relative to the store's
// prefix. Fixed width so keys sort by id.
func ledgerKey(id int64) string { return fmt.Sprintf("/ledgers/%020d", id) }

// Metadata is a ledger's metadata with the etcd mod revision it was read at
// (its version for compare-and-swap). Treat Meta as immutable: updates copy.
type Metadata struct {
	Meta *metapb.LedgerMetadata
	Rev  int64
}

// LastFragment returns the fragment being written (the last one).
func (m Metadata) LastFragment() *metapb.Fragment {
	f := m.Meta.Fragments
	return f[len(f)-1]
}

// FragmentFor returns the fragment holding entry e.
func (m Metadata) FragmentFor(e int64) *metapb.Fragment {
	f := m.Meta.Fragments
	for i := len(f) - 1; i > 0; i-- {
		if f[i].FirstEntryId <= e {
			return f[i]
		}
	}
	return f[0]
}

// FragmentEnd returns the last entry id of the fragment holding entry e
// (math.MaxInt64 for the last fragment: it ends where the ledger does).
func (m Metadata) FragmentEnd(e int64) int64 {
	for _, f := range m.Meta.Fragments {
		if f.FirstEntryId > e {
			return f.FirstEntryId - 1
		}
	}
	return math.MaxInt64
}

// writeSet returns the ensemble positions that store entry e: (e+w) mod E
// for w in [0, Qw), BookKeeper's round-robin striping.
func writeSet(e int64, ensembleSize, qw int) []int {
	ws := make([]int, qw)
	for w := range qw {
		ws[w] = int((e + int64(w)) % int64(ensembleSize))
	}
	return ws
}

func toRack(b *metapb.BookieRef) rack.Bookie {
	return rack.Bookie{ID: b.Id, Region: b.Region, Rack: b.Rack}
}

func policyToProto(p rack.Policy) *metapb.PlacementPolicy {
	return &metapb.PlacementPolicy{
		Kind:                    string(p.Kind),
		MinRacksPerWriteQuorum:  int32(p.MinRacksPerWriteQuorum),
		Enforce:                 p.Enforce,
		Regions:                 p.Regions,
		MinRegionsForDurability: int32(p.MinRegionsForDurability),
	}
}

func policyFromProto(p *metapb.PlacementPolicy) rack.Policy {
	if p == nil {
		return rack.DefaultPolicy()
	}
	return rack.Policy{
		Kind:                    rack.Kind(p.Kind),
		MinRacksPerWriteQuorum:  int(p.MinRacksPerWriteQuorum),
		Enforce:                 p.Enforce,
		Regions:                 p.Regions,
		MinRegionsForDurability: int(p.MinRegionsForDurability),
	}
}

func decodeMeta(kv cluster.KV) (Metadata, error) {
	m := &metapb.LedgerMetadata{}
	if err := proto.Unmarshal(kv.Value, m); err != nil {
		return Metadata{}, fmt.Errorf("ledger: metadata %s: %w", kv.Key, err)
	}
	if m.FormatVersion > MetadataFormatVersion {
		return Metadata{}, fmt.Errorf("ledger: metadata %s has format version %d, this build knows up to %d", kv.Key, m.FormatVersion, MetadataFormatVersion)
	}
	if len(m.Fragments) == 0 {
		return Metadata{}, fmt.Errorf("ledger: metadata %s has no fragment", kv.Key)
	}
	if err := validateMeta(kv.Key, m); err != nil {
		return Metadata{}, err
	}
	return Metadata{Meta: m, Rev: kv.ModRevision}, nil
}

// ReadMetadata reads a ledger's metadata. A missing ledger is ErrNoSuchLedger.
func ReadMetadata(ctx context.Context, s *cluster.Store, id int64) (Metadata, error) {
	kv, err := s.Get(ctx, ledgerKey(id))
	if errors.Is(err, cluster.ErrNotFound) {
		return Metadata{}, fmt.Errorf("%w: %d", ErrNoSuchLedger, id)
	}
	if err != nil {
		return Metadata{}, err
	}
	return decodeMeta(kv)
}

// ListLedgers returns the ids of every ledger in the store, ascending.
func ListLedgers(ctx context.Context, s *cluster.Store) ([]int64, error) {
	kvs, _, err := s.List(ctx, "/ledgers/")
	if err != nil {
		return nil, err
	}
	ids := make([]int64, 0, len(kvs))
	for _, kv := range kvs {
		var id int64
		if _, err := fmt.Sscanf(kv.Key, "/ledgers/%d", &id); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// DeleteLedger removes a ledger's metadata. Its entries on bookies become
// garbage: each bookie's garbage collection (bookie/gc.go) deletes them
// within its gc_interval and frees their entry log files.
func DeleteLedger(ctx context.Context, s *cluster.Store, id int64) error {
	return s.Delete(ctx, ledgerKey(id))
}

// metaUnknownAttempts bounds the compare-and-swaps of one updateMeta whose
// outcome came back unknown (cluster.OutcomeUnknown).
const metaUnknownAttempts = 3

// updateMeta is BookKeeper's MetadataUpdateLoop: transform a copy of the
// current metadata and compare-and-swap it; on a lost race re-read and call
// transform again. transform returns (nil, nil) when no write is needed,
// or an error to stop.
//
// A compare-and-swap whose outcome is unknown (etcd answered "request
// timed out": it may have been applied, now or later) is settled by
// reading the metadata back: if it holds what was written, the write
// landed and updateMeta succeeds with it; otherwise transform runs again
// on what is stored (still cur: the same write is sent again, and can
// land only once; changed by another process: as after a lost race). Up
// to metaUnknownAttempts unknown outcomes; then the error is returned.
// Without this, a close, an ensemble change or a recovery step that had
// landed was reported failed, and a later compare-and-swap of the same
// writer lost against its own change.
func updateMeta(ctx context.Context, s *cluster.Store, cur Metadata, transform func(*metapb.LedgerMetadata) (*metapb.LedgerMetadata, error)) (Metadata, error) {
	unknown := 0
	for {
		next, err := transform(proto.Clone(cur.Meta).(*metapb.LedgerMetadata))
		if err != nil {
			return cur, err
		}
		if next == nil {
			return cur, nil
		}
		b, err := proto.Marshal(next)
		if err != nil {
			return cur, err
		}
		rev, err := s.CAS(ctx, ledgerKey(next.LedgerId), b, cur.Rev)
		if err == nil {
			return Metadata{Meta: next, Rev: rev}, nil
		}
		mismatch := errors.Is(err, cluster.ErrVersionMismatch)
		switch {
		case mismatch:
		case cluster.OutcomeUnknown(err) && unknown+1 < metaUnknownAttempts && ctx.Err() == nil:
			unknown++
		default:
			return cur, err
		}
		stored, rerr := ReadMetadata(ctx, s, next.LedgerId)
		if rerr != nil {
			if mismatch {
				return cur, rerr
			}
			return cur, err
		}
		if unknown > 0 && proto.Equal(stored.Meta, next) {
			return stored, nil // an attempt whose answer was lost landed
		}
		cur = stored
	}
}

func nowMillis() int64 { return time.Now().UnixMilli() }
