package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A bookie's decommission is a durable record in its region's store,
// /bookies/decommission/ID, written by the operator's tool (`meridian admin
// bookies decommission`) and read by the bookie itself (it turns read-only,
// and once removed deregisters and stops) and by auto-recovery (which moves
// every fragment off a draining bookie). The record outlives the bookie's
// process: a draining bookie that restarts comes back read-only, a removed
// one refuses to start.
const bookiesDecommission = "/bookies/decommission/"

// DecommissionState is a bookie's place in its decommission.
type DecommissionState string

const (
	// DecommissionNone: not being decommissioned (no record).
	DecommissionNone DecommissionState = ""
	// DecommissionDraining: read-only; its fragments are being copied to
	// other bookies.
	DecommissionDraining DecommissionState = "draining"
	// DecommissionRemoved: no fragment names it any more; it deregistered
	// and does not serve.
	DecommissionRemoved DecommissionState = "removed"
)

// Decommission is the record of one bookie's decommission (JSON in etcd).
type Decommission struct {
	BookieID  string            `json:"bookie_id"`
	State     DecommissionState `json:"state"`
	StartedMs int64             `json:"started_ms"`
	// FragmentsAtStart: how many fragments named the bookie when the
	// drain started (for progress).
	FragmentsAtStart int   `json:"fragments_at_start"`
	RemovedMs        int64 `json:"removed_ms,omitempty"`
}

func decommissionKey(id string) string { return bookiesDecommission + id }

func decodeDecommission(kv KV) (Decommission, error) {
	var d Decommission
	if err := json.Unmarshal(kv.Value, &d); err != nil {
		return Decommission{}, fmt.Errorf("cluster: decommission record %s: %w", kv.Key, err)
	}
	return d, nil
}

// StartDecommission writes a draining record for the bookie unless one
// exists, and returns the record in force (an existing one is returned as
// is: starting twice is harmless).
func StartDecommission(ctx context.Context, s *Store, id string, fragments int) (Decommission, error) {
	if id == "" || strings.Contains(id, "/") {
		return Decommission{}, fmt.Errorf("cluster: bad bookie id %q", id)
	}
	d := Decommission{BookieID: id, State: DecommissionDraining, StartedMs: time.Now().UnixMilli(), FragmentsAtStart: fragments}
	b, _ := json.Marshal(d)
	_, err := s.Create(ctx, decommissionKey(id), b)
	if errors.Is(err, ErrExists) {
		cur, found, err := GetDecommission(ctx, s, id)
		if err != nil {
			return Decommission{}, err
		}
		if found {
			return cur, nil
		}
		return StartDecommission(ctx, s, id, fragments)
	}
	if err != nil {
		return Decommission{}, err
	}
	return d, nil
}

// MarkDecommissionRemoved moves a draining record to removed. The caller
// has checked that no fragment names the bookie.
func MarkDecommissionRemoved(ctx context.Context, s *Store, id string) error {
	kv, err := s.Get(ctx, decommissionKey(id))
	if err != nil {
		return err
	}
	d, err := decodeDecommission(kv)
	if err != nil {
		return err
	}
	if d.State == DecommissionRemoved {
		return nil
	}
	d.State, d.RemovedMs = DecommissionRemoved, time.Now().UnixMilli()
	b, _ := json.Marshal(d)
	_, err = s.CAS(ctx, kv.Key, b, kv.ModRevision)
	return err
}

// CancelDecommission deletes the record: a draining bookie turns writable
// again, a removed one may start again (its old data is garbage: every
// fragment was copied elsewhere).
func CancelDecommission(ctx context.Context, s *Store, id string) error {
	return s.Delete(ctx, decommissionKey(id))
}

// GetDecommission returns the bookie's record, found=false if none.
func GetDecommission(ctx context.Context, s *Store, id string) (Decommission, bool, error) {
	kv, err := s.Get(ctx, decommissionKey(id))
	if errors.Is(err, ErrNotFound) {
		return Decommission{}, false, nil
	}
	if err != nil {
		return Decommission{}, false, err
	}
	d, err := decodeDecommission(kv)
	return d, err == nil, err
}

// ListDecommissions returns every decommission record of the region, by
// bookie id.
func ListDecommissions(ctx context.Context, s *Store) ([]Decommission, error) {
	kvs, _, err := s.List(ctx, bookiesDecommission)
	if err != nil {
		return nil, err
	}
	out := make([]Decommission, 0, len(kvs))
	for _, kv := range kvs {
		d, err := decodeDecommission(kv)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// WatchDecommission returns the bookie's decommission state now and then
// calls f with each new state until ctx ends (f runs on one goroutine, in
// order). It implements bookie.Decommissioner.
func (r *BookieRegistry) WatchDecommission(ctx context.Context, id string, f func(state string)) (string, error) {
	key := decommissionKey(id)
	read := func() (DecommissionState, int64, error) {
		kv, err := r.s.Get(ctx, key)
		if errors.Is(err, ErrNotFound) {
			_, rev, err := r.s.List(ctx, key) // the revision to watch from
			return DecommissionNone, rev, err
		}
		if err != nil {
			return "", 0, err
		}
		d, err := decodeDecommission(kv)
		if err != nil {
			return "", 0, err
		}
		return d.State, kv.ModRevision, nil
	}
	state, rev, err := read()
	if err != nil {
		return "", err
	}
	go func() {
		last := state
		for ctx.Err() == nil {
			for evs := range r.s.Watch(ctx, key, rev+1) {
				for _, ev := range evs {
					if ev.KV.Key != key {
						continue // another id with this one as prefix
					}
					rev = max(rev, ev.KV.ModRevision)
					next := DecommissionNone
					if !ev.Deleted {
						d, err := decodeDecommission(ev.KV)
						if err != nil {
							continue
						}
						next = d.State
					}
					if next != last {
						last = next
						f(string(next))
					}
				}
			}
			// The watch ended (compaction, etcd restart): read again.
			for ctx.Err() == nil {
				s, r2, err := read()
				if err == nil {
					rev = r2
					if s != last {
						last = s
						f(string(s))
					}
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
	return string(state), nil
}
