package autorecovery

import (
	"slices"
	"time"
)

// LossDetector decides when a bookie that left the registry is lost, and so
// its fragments must be re-replicated. Pure: time is an input. Not safe for
// concurrent use.
//
// A bookie is absent when it is known (it appears in some ledger's ensemble
// or was registered once) and is not registered now. An absent bookie is
// declared lost:
//   - when it has been absent for Delay without coming back (a restart within
//     the delay triggers no copy), or
//   - at once when two or more known bookies are absent and not yet lost at
//     the same instant, i.e. a second one went within the first one's delay
//     (BookKeeper's Auditor does the same: a rack or several hosts are down,
//     and each further minute at reduced replication is a risk). Bookies
//     already lost do not count: a long-gone bookie does not make the next
//     single restart look like a rack failure.
//
// A lost bookie that registers again stops being lost. Its markers stay;
// a worker leaves its replicas where they are if it came back with their
// data (Worker.dropReturned), and moves them off if it came back without.
type LossDetector struct {
	delay     time.Duration
	goneSince map[string]time.Time
	lost      map[string]bool
}

// NewLossDetector returns a detector with the given delay (0: lost at once).
func NewLossDetector(delay time.Duration) *LossDetector {
	return &LossDetector{delay: delay, goneSince: map[string]time.Time{}, lost: map[string]bool{}}
}

// Observe records the registry at now: known is every bookie the caller
// cares about, present says whether one is registered (or otherwise alive).
// It returns every bookie lost now and the ones that became lost at this
// call, both sorted.
func (d *LossDetector) Observe(now time.Time, known []string, present func(id string) bool) (lost, newly []string) {
	pending := 0
	for _, id := range known {
		if present(id) {
			delete(d.goneSince, id)
			delete(d.lost, id)
			continue
		}
		if !d.lost[id] {
			pending++
		}
		if _, ok := d.goneSince[id]; !ok {
			d.goneSince[id] = now
		}
	}
	for id, since := range d.goneSince {
		if !slices.Contains(known, id) {
			delete(d.goneSince, id) // no longer of interest
			delete(d.lost, id)
			continue
		}
		if d.lost[id] {
			continue
		}
		if pending >= 2 || now.Sub(since) >= d.delay {
			d.lost[id] = true
			newly = append(newly, id)
		}
	}
	for id := range d.lost {
		lost = append(lost, id)
	}
	slices.Sort(lost)
	slices.Sort(newly)
	return lost, newly
}

// GoneSince returns when a bookie was first seen absent (zero if present).
func (d *LossDetector) GoneSince(id string) time.Time { return d.goneSince[id] }
