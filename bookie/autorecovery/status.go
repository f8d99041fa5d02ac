package autorecovery

import (
	"context"

	"github.com/meridian-mq/meridian/cluster"
)

// ListMarkers returns the under-replication markers of a region (what is
// still to be re-replicated), for status tools.
func ListMarkers(ctx context.Context, s *cluster.Store) ([]Marker, error) {
	kvs, _, err := s.List(ctx, markerPrefix)
	if err != nil {
		return nil, err
	}
	out := make([]Marker, 0, len(kvs))
	for _, kv := range kvs {
		m, err := decodeMarker(kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}
