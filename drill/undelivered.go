package drill

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// dumpSubscriptions writes, while the deployment and the consumers still
// run, what every live region's brokers say of each workload topic: its
// stats (each subscription's backlog, consumers, permits, unacknowledged
// messages, mark-delete and read positions) and its internal stats (the
// ledgers and each cursor's positions and acknowledged ranges), to
// DIR/undelivered/REGION/TOPIC.{stats,internal}.json. The drill calls it
// when the drain ended with acknowledged messages not delivered (issue
// 32): whether a cursor sits past them, or dispatch holds them, is read
// from the live brokers, not from what is left after the teardown.
func (r *runner) dumpSubscriptions(ctx context.Context) {
	topics := map[string]bool{}
	for _, c := range r.s.Workload.Consumers {
		topics[c.Topic] = true
	}
	type job struct{ topic, region string }
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range min(8, len(topics)*len(r.s.Topology.Regions)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				dir := filepath.Join(r.o.Out, "undelivered", j.region)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					continue
				}
				base := filepath.Join(dir, strings.ReplaceAll(trimScheme(j.topic), "/", "_"))
				for suffix, path := range map[string]string{".stats.json": "/stats", ".internal.json": "/internalStats"} {
					var raw json.RawMessage
					c, cancel := context.WithTimeout(ctx, 3*time.Second)
					err := r.adm.call(c, j.region, "GET", "/admin/v2/persistent/"+trimScheme(j.topic)+path, nil, &raw)
					cancel()
					if err != nil {
						raw, _ = json.Marshal(map[string]string{"error": err.Error()})
					}
					_ = os.WriteFile(base+suffix, raw, 0o644)
				}
			}
		}()
	}
	for t := range topics {
		for _, reg := range r.s.Topology.Regions {
			if r.regionDown(reg) {
				continue
			}
			jobs <- job{t, reg}
		}
	}
	close(jobs)
	wg.Wait()
}

// regionDown reports whether a kill or stop of the whole region is in
// force (its brokers cannot answer).
func (r *runner) regionDown(region string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.faults {
		if f.EndAt.IsZero() && (f.Name == "kill region:"+region || f.Name == "stop region:"+region) {
			return true
		}
	}
	return false
}
