package check

import (
	"sort"
	"strings"
	"time"
)

// Publish is one producer's publish latency (receipt minus send, in
// seconds) for messages sent before the first fault and for those sent
// while it lasted (from its At to its EndAt, or to History.End).
type Publish struct {
	Producer  string  `json:"producer"`
	Before    int     `json:"before"`
	P50Before float64 `json:"p50_before"`
	P99Before float64 `json:"p99_before"`
	During    int     `json:"during"`
	P50During float64 `json:"p50_during"`
	P99During float64 `json:"p99_during"`
}

// publishLatency computes Publish per producer, sorted by name.
func publishLatency(h History) []Publish {
	var from, to time.Time
	if len(h.Faults) > 0 {
		from, to = h.Faults[0].At, h.Faults[0].EndAt
		for _, f := range h.Faults[1:] {
			if f.At.Before(from) {
				from, to = f.At, f.EndAt
			}
		}
		if to.IsZero() {
			to = h.End
		}
	}
	before, during := map[string][]float64{}, map[string][]float64{}
	names := map[string]bool{}
	for _, a := range h.Attempts {
		if a.AckedAt.IsZero() {
			continue
		}
		names[a.Producer] = true
		l := a.AckedAt.Sub(a.SentAt).Seconds()
		switch {
		case from.IsZero() || a.SentAt.Before(from):
			before[a.Producer] = append(before[a.Producer], l)
		case a.SentAt.Before(to):
			during[a.Producer] = append(during[a.Producer], l)
		}
	}
	out := make([]Publish, 0, len(names))
	for n := range names {
		b, d := before[n], during[n]
		out = append(out, Publish{Producer: n, Before: len(b), P50Before: quantile(b, 0.5), P99Before: quantile(b, 0.99),
			During: len(d), P50During: quantile(d, 0.5), P99During: quantile(d, 0.99)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Producer < out[j].Producer })
	return out
}

// quantile is the q-quantile of xs (nearest rank), 0 for none. It sorts xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// publishFigure resolves publish_p50_increase[P], publish_p99_increase[P],
// publish_p50_during[P] and publish_p50_before[P] (seconds).
func publishFigure(name string, r Result) (figure, bool) {
	base, prod, ok := strings.Cut(name, "[")
	if !ok || !strings.HasSuffix(prod, "]") {
		return figure{}, false
	}
	prod = strings.TrimSuffix(prod, "]")
	for _, p := range r.Publish {
		if p.Producer != prod {
			continue
		}
		switch base {
		case "publish_p50_increase":
			return figure{unit: seconds, value: p.P50During - p.P50Before}, true
		case "publish_p99_increase":
			return figure{unit: seconds, value: p.P99During - p.P99Before}, true
		case "publish_p50_during":
			return figure{unit: seconds, value: p.P50During}, true
		case "publish_p50_before":
			return figure{unit: seconds, value: p.P50Before}, true
		}
	}
	return figure{}, false
}
