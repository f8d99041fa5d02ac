package gctune

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live, headroom uint64
		base, want     int
	}{
		{45 << 20, 256 << 20, 100, 568},   // a standalone under load: ~5.7× fewer collections
		{1200 << 20, 256 << 20, 100, 100}, // a broker holding 100,000 topics: GOGC's own growth
		{256 << 20, 256 << 20, 100, 100},  // the crossover
		{1 << 20, 256 << 20, 100, maxPercent},
		{0, 256 << 20, 100, maxPercent},
		{100 << 20, 50 << 20, 200, 200}, // base wins
	} {
		if got := Percent(c.live, c.headroom, c.base); got != c.want {
			t.Errorf("Percent(%d MiB live, %d MiB headroom, base %d) = %d, want %d", c.live>>20, c.headroom>>20, c.base, got, c.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "268435456": 256 << 20, "256MiB": 256 << 20, "1GiB": 1 << 30, " 64 KiB ": 64 << 10, "10B": 10} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5GiB", "12 MB"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) succeeded", in)
		}
	}
}

func gogc(t *testing.T) uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatal("runtime/metrics has no /gc/gogc:percent")
	}
	return s[0].Value.Uint64()
}

// waitGOGC runs collections until the tuner (on the finalizer goroutine)
// has set want, or fails.
func waitGOGC(t *testing.T, ok func(uint64) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(gogc(t)) {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC is %d; want %s", gogc(t), what)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// The real runtime, both directions: a small live heap gets a percentage
// above the base (the headroom), a live heap larger than the headroom goes
// back to the base.
func TestTunerFollowsTheLiveHeap(t *testing.T) {
	if gogc(t) != 100 {
		t.Skip("GOGC is set for this test process; the tuner would be off")
	}
	Start(64<<20, 100)
	waitGOGC(t, func(p uint64) bool { return p >= 400 }, "≥ 400 with a few MiB live and 64 MiB headroom")

	live := make([][]byte, 0, 256)
	for range 256 {
		live = append(live, make([]byte, 1<<20)) // 256 MiB live
	}
	waitGOGC(t, func(p uint64) bool { return p == 100 }, "100 with 256 MiB live and 64 MiB headroom")
	runtime.KeepAlive(live)
	live = nil

	waitGOGC(t, func(p uint64) bool { return p >= 400 }, "≥ 400 again once the 256 MiB are garbage")
}
