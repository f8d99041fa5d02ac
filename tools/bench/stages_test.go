package bench

import (
	"strings"
	"testing"
	"time"
)

// scrape parses an exposition text as scrapeLagHists does.
func scrape(text string) lagHists {
	hs := lagHists{}
	for _, l := range strings.Split(text, "\n") {
		if key, le, v, ok := parseLagBucket(l); ok {
			hs.add(key, le, v)
		}
	}
	return hs
}

// Issue 34: the store-to-store lag and the stages are read from the
// difference of two scrapes of the brokers' histograms, each percentile
// interpolated inside its bucket, the maximum bounded by the highest
// bucket that filled.
func TestLagHistsFromTwoScrapes(t *testing.T) {
	before := scrape(`
meridian_replication_store_to_store_seconds_bucket{origin="east",region="west",le="0.001"} 10
meridian_replication_store_to_store_seconds_bucket{origin="east",region="west",le="0.002"} 10
meridian_replication_store_to_store_seconds_bucket{origin="east",region="west",le="0.004"} 10
meridian_replication_store_to_store_seconds_bucket{origin="east",region="west",le="+Inf"} 10
meridian_replication_stage_seconds_bucket{region="west",stage="west_persist",le="0.001"} 0
meridian_replication_stage_seconds_bucket{region="west",stage="west_persist",le="+Inf"} 0
meridian_broker_storage_write_latency_seconds_bucket{le="0.001"} 99
`)
	after := scrape(`
meridian_replication_store_to_store_seconds_bucket{origin="east",region="west",le="0.001"} 10
meridian_replication_store_to_store_seconds_bucket{origin="east",region="west",le="0.002"} 60
meridian_replication_store_to_store_seconds_bucket{origin="east",region="west",le="0.004"} 110
meridian_replication_store_to_store_seconds_bucket{origin="east",region="west",le="+Inf"} 110
meridian_replication_stage_seconds_bucket{region="west",stage="west_persist",le="0.001"} 4
meridian_replication_stage_seconds_bucket{region="west",stage="west_persist",le="+Inf"} 4
`)
	d := after.sub(before)
	s := d["s2s"]
	if n := s.count(); n != 100 {
		t.Fatalf("store to store: %v entries in the difference, want 100", n)
	}
	// 50 in (1 ms, 2 ms], 50 in (2 ms, 4 ms]: the median is 2 ms, p99 is
	// 98 % of the way through the second bucket.
	if got := s.quantile(0.5); got != 2*time.Millisecond {
		t.Fatalf("p50 %v, want 2ms", got)
	}
	if got, want := s.quantile(0.99), 3960*time.Microsecond; got != want {
		t.Fatalf("p99 %v, want %v", got, want)
	}
	if got := s.maxBound(); got != 4*time.Millisecond {
		t.Fatalf("max bound %v, want 4ms", got)
	}
	if n := d["west_persist"].count(); n != 4 {
		t.Fatalf("west_persist: %v observations, want 4", n)
	}
	if _, ok := d["meridian_broker_storage_write_latency_seconds"]; ok || len(d) != 2 {
		t.Fatalf("histograms read: %v, want only the store-to-store and the stage", d)
	}
	if got := (lagHists{}).storeToStore(); !strings.HasPrefix(got, "n/a") {
		t.Fatalf("no histogram: %q, want n/a", got)
	}
}
