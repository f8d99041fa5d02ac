package broker_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// TestDelayedIndexMemoryBench is `make bench-delayed` (not CI): the
// broker's memory with MERIDIAN_BENCH_DELAYED messages (1,000,000 by
// default) delayed by 10 to 60 minutes and held by one Shared
// subscription, with the bucketed index (the default) and, side by side,
// with every delayed message in memory (--delayed-bucket-entries -1). It
// prints the standalone's Go heap in use after a GC and its RSS before
// and after, and the index's own estimate (msgDelayed,
// delayedMessageIndexSizeInBytes), with the buckets it holds and the
// merges it did. RSS covers the whole standalone (etcd and bookies too);
// the heap difference is what the held messages cost. The bucketed run
// takes MERIDIAN_BENCH_DELAYED_BUCKET_ENTRIES (--delayed-bucket-entries)
// and MERIDIAN_BENCH_DELAYED_MAX_BUCKETS (--delayed-max-buckets) when set:
// a bound below the buckets the messages fill makes it merge.
func TestDelayedIndexMemoryBench(t *testing.T) {
	env := os.Getenv("MERIDIAN_BENCH_DELAYED")
	if env == "" {
		t.Skip("MERIDIAN_BENCH_DELAYED=N runs it (make bench-delayed)")
	}
	n, err := strconv.Atoi(env)
	if err != nil || n <= 0 {
		n = 1_000_000
	}
	pprofDir := t.TempDir()
	t.Setenv("MERIDIAN_PPROF_DIR", pprofDir)
	type result struct {
		mode                           string
		heapBefore, heapAfter          int64
		rssBefore, rssAfter, indexSize int64
		buckets                        int
		merges                         int64
		took                           time.Duration
	}
	var results []result
	bucketed := []string{"--delayed-bucket-entries", "0"}
	name := "bucketed (default)"
	if v := os.Getenv("MERIDIAN_BENCH_DELAYED_BUCKET_ENTRIES"); v != "" {
		bucketed[1] = v
		name = "bucketed, " + v + " entries a bucket"
	}
	if v := os.Getenv("MERIDIAN_BENCH_DELAYED_MAX_BUCKETS"); v != "" {
		bucketed = append(bucketed, "--delayed-max-buckets", v)
		name += ", at most " + v + " buckets"
	}
	for _, mode := range []struct {
		name  string
		flags []string
	}{{name, bucketed}, {"all in memory", []string{"--delayed-bucket-entries", "-1"}}} {
		s := testutil.StartStandalone(t, t.TempDir(), mode.flags...)
		client := newPulsarClient(t, s.URL)
		topic := topicName(t)
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "held", Type: pulsar.Shared})
		if err != nil {
			t.Fatal(err)
		}
		r := result{mode: mode.name}
		r.heapBefore, r.rssBefore = brokerMemory(t, pprofDir, s.Pid())
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, MaxPendingMessages: 5000, SendTimeout: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rng := rand.New(rand.NewPCG(1, 2))
		var wg sync.WaitGroup
		var mu sync.Mutex
		var sendErr error
		payload := make([]byte, 100)
		for i := range n {
			wg.Add(1)
			d := 10*time.Minute + time.Duration(rng.Int64N(int64(50*time.Minute)))
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload, DeliverAfter: d}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					mu.Lock()
					sendErr = err
					mu.Unlock()
				}
				wg.Done()
			})
			if i%100_000 == 0 {
				t.Logf("%s: %d sent", mode.name, i)
			}
		}
		wg.Wait()
		if sendErr != nil {
			t.Fatal(sendErr)
		}
		testutil.Eventually(t, 30*time.Minute, "every message held", func() bool {
			st := topicStats(t, s.AdminURL, topic)
			return st.Subscriptions["held"].MsgDelayed == int64(n)
		})
		r.took = time.Since(start)
		time.Sleep(2 * time.Second) // the last seal's I/O
		r.heapAfter, r.rssAfter = brokerMemory(t, pprofDir, s.Pid())
		ss := topicStats(t, s.AdminURL, topic).Subscriptions["held"]
		r.buckets, r.merges = ss.DelayedIndexBuckets, ss.DelayedIndexMerges
		code, b := adminCall(t, "GET", s.AdminURL+"/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/stats", nil)
		if m := regexp.MustCompile(`"delayedMessageIndexSizeInBytes":(\d+)`).FindSubmatch(b); code == 200 && m != nil {
			r.indexSize, _ = strconv.ParseInt(string(m[1]), 10, 64)
		}
		results = append(results, r)
		p.Close()
		c.Close()
		s.Kill()
	}
	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%d messages delayed 10-60 min, one Shared subscription, meridian standalone:\n", n)
	fmt.Fprintf(&sb, "| index | heap before | heap after | heap delta | RSS before | RSS after | index estimate | buckets | merges | produce+index |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s | %s | %d | %d | %s |\n", r.mode, mb(r.heapBefore), mb(r.heapAfter), mb(r.heapAfter-r.heapBefore),
			mb(r.rssBefore), mb(r.rssAfter), mb(r.indexSize), r.buckets, r.merges, r.took.Round(time.Second))
	}
	t.Log(sb.String())
}

// brokerMemory returns the process's Go heap in use after a GC (from its
// pprof listener, MERIDIAN_PPROF_DIR) and its RSS.
func brokerMemory(t *testing.T, pprofDir string, pid int) (heap, rss int64) {
	t.Helper()
	addr, err := os.ReadFile(filepath.Join(pprofDir, strconv.Itoa(pid)+".addr"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + string(addr) + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if m := regexp.MustCompile(`# HeapInuse = (\d+)`).FindSubmatch(body); m != nil {
		heap, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(status); m != nil {
		kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
		rss = kb << 10
	}
	return heap, rss
}
