package bench

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The store-to-store lag and the stages of the replication lag, from the
// histograms the brokers export (broker/replication/stamps.go):
// meridian_replication_store_to_store_seconds (east's quorum-confirmed add
// → west's, on the brokers' clocks — one machine's here) and
// meridian_replication_stage_seconds{stage}. A measurement scrapes every
// broker before and after and reads percentiles from the difference,
// interpolated inside a bucket as Prometheus' histogram_quantile does (the
// buckets are 1.26× apart: within a few per cent). A binary that exports
// neither (older than them) yields nothing, and the rows say so.

const (
	metricStoreToStore = "meridian_replication_store_to_store_seconds"
	metricStage        = "meridian_replication_stage_seconds"
)

// stageOrder is the order an entry passes the stages (the stage label's
// values).
var stageOrder = []string{"east_persist", "east_read", "east_send", "wire", "west_apply", "west_persist", "west_dispatch"}

// lagHist is a scraped histogram: cumulative counts by upper bound (le),
// ascending, +Inf last.
type lagHist struct {
	le []float64
	n  []float64
}

// lagHists are the replication histograms of a deployment: "s2s" the
// store-to-store lag (every origin), and each stage by its name.
type lagHists map[string]*lagHist

// scrapeLagHists sums the replication histograms of every broker admin
// URL (http://HOST:PORT).
func scrapeLagHists(admins []string) lagHists {
	out := lagHists{}
	for _, a := range admins {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(a + "/metrics")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			key, le, v, ok := parseLagBucket(sc.Text())
			if ok {
				out.add(key, le, v)
			}
		}
		resp.Body.Close()
	}
	return out
}

// parseLagBucket parses one exposition line of a replication histogram's
// bucket: its key in lagHists, its le and its count.
func parseLagBucket(l string) (key string, le, v float64, ok bool) {
	var name string
	switch {
	case strings.HasPrefix(l, metricStoreToStore+"_bucket{"):
		name = metricStoreToStore
	case strings.HasPrefix(l, metricStage+"_bucket{"):
		name = metricStage
	default:
		return "", 0, 0, false
	}
	end := strings.LastIndexByte(l, '}')
	if end < 0 {
		return "", 0, 0, false
	}
	labels := l[len(name)+len("_bucket{") : end]
	v, err := strconv.ParseFloat(strings.TrimSpace(l[end+1:]), 64)
	if err != nil {
		return "", 0, 0, false
	}
	key = "s2s"
	les := ""
	for _, kv := range strings.Split(labels, ",") {
		k, val, found := strings.Cut(kv, "=")
		if !found {
			continue
		}
		val = strings.Trim(val, `"`)
		switch k {
		case "le":
			les = val
		case "stage":
			key = val
		}
	}
	if les == "+Inf" {
		le = math.Inf(1)
	} else if le, err = strconv.ParseFloat(les, 64); err != nil {
		return "", 0, 0, false
	}
	return key, le, v, true
}

func (hs lagHists) add(key string, le, v float64) {
	h := hs[key]
	if h == nil {
		h = &lagHist{}
		hs[key] = h
	}
	i, found := slices.BinarySearch(h.le, le)
	if !found {
		h.le = slices.Insert(h.le, i, le)
		h.n = slices.Insert(h.n, i, 0)
	}
	h.n[i] += v
}

// sub is hs − before, bucket by bucket: what a measurement added.
func (hs lagHists) sub(before lagHists) lagHists {
	out := lagHists{}
	for k, h := range hs {
		b := before[k]
		for i, le := range h.le {
			v := h.n[i]
			if b != nil {
				if j, ok := slices.BinarySearch(b.le, le); ok {
					v -= b.n[j]
				}
			}
			out.add(k, le, v)
		}
	}
	return out
}

// merge adds o into hs (the rounds of one side).
func (hs lagHists) merge(o lagHists) {
	for k, h := range o {
		for i, le := range h.le {
			hs.add(k, le, h.n[i])
		}
	}
}

func (h *lagHist) count() float64 {
	if h == nil || len(h.n) == 0 {
		return 0
	}
	return h.n[len(h.n)-1]
}

// quantile is the q-quantile, linearly interpolated inside its bucket (0
// when empty; the highest finite bound when it falls in +Inf).
func (h *lagHist) quantile(q float64) time.Duration {
	total := h.count()
	if total <= 0 {
		return 0
	}
	rank := q * total
	prevLE, prevN := 0.0, 0.0
	for i, le := range h.le {
		if h.n[i] >= rank {
			if math.IsInf(le, 1) {
				return secs(prevLE)
			}
			if h.n[i] == prevN {
				return secs(le)
			}
			return secs(prevLE + (le-prevLE)*(rank-prevN)/(h.n[i]-prevN))
		}
		prevLE, prevN = le, h.n[i]
	}
	return secs(prevLE)
}

// maxBound is the upper bound of the highest bucket that holds anything:
// the maximum is at most that.
func (h *lagHist) maxBound() time.Duration {
	for i := range h.n {
		if h.n[i] >= h.count() {
			if math.IsInf(h.le[i], 1) && i > 0 {
				return secs(h.le[i-1])
			}
			return secs(h.le[i])
		}
	}
	return 0
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// storeToStore formats the store-to-store lag: p50, p99 and the bound of
// the maximum, with the entries counted.
func (hs lagHists) storeToStore() string {
	h := hs["s2s"]
	if h.count() == 0 {
		return "n/a (the brokers export no store-to-store histogram)"
	}
	return fmt.Sprintf("p50 %v p99 %v max ≤%v (%.0f entries)", round10us(h.quantile(0.5)), round10us(h.quantile(0.99)), round10us(h.maxBound()), h.count())
}

// stages formats each stage's p50 and p99.
func (hs lagHists) stages() string {
	var parts []string
	for _, st := range stageOrder {
		h := hs[st]
		if h.count() == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s p50 %v p99 %v", st, round10us(h.quantile(0.5)), round10us(h.quantile(0.99))))
	}
	if len(parts) == 0 {
		return "n/a"
	}
	return strings.Join(parts, ", ")
}

func round10us(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

// brokerAdmins lists the deployment's brokers' admin URLs.
func (g *geoDeployment) brokerAdmins() []string {
	var out []string
	for _, r := range g.d.Endpoints().Regions {
		scheme := "http://"
		if strings.HasPrefix(r.AdminURL, "https://") {
			scheme = "https://"
		}
		for _, p := range r.Processes {
			if p.Role == "broker" && p.Admin != "" {
				out = append(out, scheme+p.Admin)
			}
		}
	}
	return out
}
