package bookie

import (
	"context"
	"errors"
	"time"
)

// Decommission states, as a Decommissioner reports them.
const (
	DecommissionNone     = ""
	DecommissionDraining = "draining"
	DecommissionRemoved  = "removed"
)

// ErrDecommissioned: the bookie was decommissioned and removed from its
// region; it refuses to start until the decommission is cancelled.
var ErrDecommissioned = errors.New("bookie: decommissioned and removed (cancel with `meridian admin bookies recommission`)")

// Decommissioner is an optional extension of Registry (cluster.BookieRegistry
// implements it): the operator's decommission of this bookie.
//
//   - draining: the bookie turns read-only (adds are refused READ_ONLY, so
//     writers replace it; reads and fences go on) and registers read-only,
//     so no new ensemble takes it, while auto-recovery copies its fragments
//     elsewhere;
//   - removed (no fragment names it any more): it deregisters, and Removed
//     is closed (the process stops); it refuses to Start again;
//   - none (cancelled): writable again (unless the disk is full).
type Decommissioner interface {
	// WatchDecommission returns the state now, then calls f with each new
	// state until ctx ends, from one goroutine.
	WatchDecommission(ctx context.Context, bookieID string, f func(state string)) (string, error)
}

// Removed is closed once a decommission removed this bookie: it has
// deregistered and its owner should Close it.
func (s *Server) Removed() <-chan struct{} { return s.removed }

// Draining reports whether the bookie is being decommissioned.
func (s *Server) Draining() bool { return s.draining.Load() }

func (s *Server) onDecommission(state string) {
	switch state {
	case DecommissionDraining, DecommissionRemoved:
		if !s.draining.Swap(true) {
			s.log.Warn("bookie: decommissioning: turning read-only; its fragments move to other bookies")
		}
	default:
		if s.draining.Swap(false) {
			s.log.Info("bookie: decommission cancelled: writable again")
		}
	}
	s.refresh() // read-only state and registration
	if state != DecommissionRemoved {
		return
	}
	s.regMu.Lock()
	s.registered = false // no later registration update
	s.regMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := s.reg.Deregister(ctx)
	cancel()
	s.log.Warn("bookie: decommissioned: no fragment names it any more; deregistered", "err", err)
	s.removedOnce.Do(func() { close(s.removed) })
}
