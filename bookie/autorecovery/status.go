package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/meridian-mq/meridian/cluster"
)

// Keys of the status records, relative to the region's store prefix.
const (
	statusKey    = "/underreplicated/status"
	workerPrefix = "/underreplicated/workers/"
)

// AuditorStatus is the elected auditor's summary, refreshed in etcd every
// StatusInterval (JSON at /underreplicated/status).
type AuditorStatus struct {
	Auditor   string `json:"auditor"`
	UpdatedMs int64  `json:"updated_ms"`
	// Lost: bookies declared lost; Draining: being decommissioned.
	Lost     []string `json:"lost"`
	Draining []string `json:"draining"`
	// Absent: unregistered bookies not yet declared lost, with when they
	// went (Unix ms): the delay is running for them.
	Absent map[string]int64 `json:"absent,omitempty"`
	// LostBookieDelayMs is the configured delay.
	LostBookieDelayMs int64 `json:"lost_bookie_delay_ms"`
	// Under-replication now (from the markers).
	UnderReplicatedLedgers   int   `json:"underreplicated_ledgers"`
	UnderReplicatedFragments int   `json:"underreplicated_fragments"`
	UnderReplicatedEntries   int64 `json:"underreplicated_entries"`
	// Misplaced: fragments breaking their placement rule at the last scan.
	Misplaced int `json:"misplaced"`
	// EpisodeStartMs: when the current under-replication began (a bookie
	// declared lost or draining, or a scrub finding); 0 when none.
	EpisodeStartMs int64 `json:"episode_start_ms,omitempty"`
	// The last completed episode: how long from its start until no marker
	// was left, and when it ended.
	LastFullReplicationSeconds float64 `json:"last_full_replication_seconds,omitempty"`
	LastFullReplicationAtMs    int64   `json:"last_full_replication_at_ms,omitempty"`
	LastScanMs                 int64   `json:"last_scan_ms"`
	Scans                      int     `json:"scans"`
	// ScanStartedMs: when the scan running now started (Unix ms); 0 when
	// none runs. Lost bookies are detected and published during a scan;
	// their markers are written by it.
	ScanStartedMs int64 `json:"scan_started_ms,omitempty"`
}

// WorkerStatus is one worker's progress (JSON at
// /underreplicated/workers/ID, bound to the worker's lease: it disappears
// with the worker).
type WorkerStatus struct {
	ID        string `json:"id"`
	UpdatedMs int64  `json:"updated_ms"`
	// Totals since the worker started.
	Entries   int64 `json:"entries"`
	Bytes     int64 `json:"bytes"`
	Fragments int   `json:"fragments"`
	Ledgers   int   `json:"ledgers"`
	Recovered int   `json:"recovered"`
	Failures  int   `json:"failures"`
	// CopyBytesPerSec: payload bytes copied per second over the last
	// StatusInterval.
	CopyBytesPerSec float64 `json:"copy_bytes_per_sec"`
	// Current: the ledger being repaired (0: none).
	Current   int64  `json:"current,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// Status is what `meridian admin recovery status` shows.
type Status struct {
	Auditor       *AuditorStatus         `json:"auditor,omitempty"` // nil: no auditor ever ran
	Workers       []WorkerStatus         `json:"workers"`
	Markers       []Marker               `json:"markers"`
	Decommissions []cluster.Decommission `json:"decommissions"`
}

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

// ReadStatus reads the region's recovery status from etcd.
func ReadStatus(ctx context.Context, s *cluster.Store) (Status, error) {
	var st Status
	kv, err := s.Get(ctx, statusKey)
	switch {
	case errors.Is(err, cluster.ErrNotFound):
	case err != nil:
		return st, err
	default:
		var a AuditorStatus
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			return st, err
		}
		st.Auditor = &a
	}
	kvs, _, err := s.List(ctx, workerPrefix)
	if err != nil {
		return st, err
	}
	for _, kv := range kvs {
		var w WorkerStatus
		if json.Unmarshal(kv.Value, &w) == nil {
			if w.ID == "" {
				w.ID = strings.TrimPrefix(kv.Key, workerPrefix)
			}
			st.Workers = append(st.Workers, w)
		}
	}
	if st.Markers, err = ListMarkers(ctx, s); err != nil {
		return st, err
	}
	if st.Decommissions, err = cluster.ListDecommissions(ctx, s); err != nil {
		return st, err
	}
	return st, nil
}
