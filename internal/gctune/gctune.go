// Package gctune keeps the Go garbage collector from running on a small
// heap. With the default GOGC=100 a process whose live heap is small
// collects each time it has allocated as much again: a standalone broker
// with 45 MiB live that allocates a few hundred MB/s under load ran seven
// collections a second, and each one's mark phase took a P of the two on
// the machine and put assists on the request path (broker storage-write
// p99 at 24,000 msgs/s: 49–81 ms with GOGC=100, 25 ms with GOGC=400).
//
// The tuner sets, after every collection, the GC percentage that lets the
// heap grow by at least a fixed headroom before the next one:
//
//	percent = max(base, headroom / live × 100)
//
// so a small heap gets the headroom (fewer collections) and a large one the
// base percentage (GOGC's usual proportional growth: a broker holding
// 100,000 topics collects as it does without the tuner). GOMEMLIMIT still
// caps the heap. An explicit GOGC in the environment turns the tuner off:
// the operator's choice stands.
package gctune

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
)

// EnvHeadroom names the environment variable that sets the headroom: a
// byte count with an optional KiB, MiB or GiB suffix; 0 turns the tuner
// off.
const EnvHeadroom = "MERIDIAN_GC_HEADROOM"

// DefaultHeadroom is the headroom when EnvHeadroom is unset.
const DefaultHeadroom = 256 << 20

// maxPercent bounds the percentage (a nearly empty heap right after start).
const maxPercent = 5000

// Percent is the GC percentage for a live heap of live bytes: the larger of
// base and the percentage that grows live by headroom.
func Percent(live, headroom uint64, base int) int {
	if live == 0 {
		return maxPercent
	}
	p := headroom * 100 / live
	if p > maxPercent {
		return maxPercent
	}
	return max(base, int(p))
}

// ParseBytes parses a byte count such as "268435456", "256MiB" or "1GiB".
func ParseBytes(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("gctune: %q is not a byte count (e.g. 268435456, 256MiB, 1GiB)", s)
	}
	return n * mult, nil
}

var startOnce sync.Once

// StartFromEnv starts the tuner with the headroom from EnvHeadroom (or
// DefaultHeadroom), unless GOGC is set or the headroom is 0. It reports
// what it did; an unparsable EnvHeadroom is an error and starts nothing.
func StartFromEnv() (string, error) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		return "GOGC=" + v + " set: GC tuner off", nil
	}
	headroom := uint64(DefaultHeadroom)
	if v, ok := os.LookupEnv(EnvHeadroom); ok {
		h, err := ParseBytes(v)
		if err != nil {
			return "", fmt.Errorf("%s: %w", EnvHeadroom, err)
		}
		headroom = h
	}
	if headroom == 0 {
		return EnvHeadroom + "=0: GC tuner off", nil
	}
	Start(headroom, 100)
	return fmt.Sprintf("GC tuner on: heap grows by at least %d MiB between collections", headroom>>20), nil
}

// Start runs the tuner for the life of the process (once; later calls do
// nothing). It re-computes the percentage after every collection, from a
// finalizer that re-arms itself, and calls debug.SetGCPercent (a short
// stop-the-world) only when the value moves by more than an eighth.
func Start(headroom uint64, base int) {
	startOnce.Do(func() {
		t := &tuner{headroom: headroom, base: base, current: base}
		t.sample = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		t.arm()
		runtime.GC() // a first sample, so the percentage is set from the start
	})
}

type tuner struct {
	headroom uint64
	base     int
	current  int
	sample   []metrics.Sample
}

type sentinel struct{ _ [16]byte }

// arm registers a finalizer on a fresh unreachable object: it runs after
// the next collection finds the object dead.
func (t *tuner) arm() {
	s := &sentinel{}
	runtime.SetFinalizer(s, func(*sentinel) { t.afterGC() })
}

func (t *tuner) afterGC() {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		p := Percent(t.sample[0].Value.Uint64(), t.headroom, t.base)
		if d := p - t.current; d > t.current/8 || -d > t.current/8 {
			debug.SetGCPercent(p)
			t.current = p
		}
	}
	t.arm()
}
