package check

import (
	"sort"
	"strings"
	"time"
)

// One cut across topics (issue 33, item 4): an active-standby namespace
// moves at one epoch for all its topics. Cut shows it per topic: the
// region of every receipt, by the epoch in force when it arrived — no
// topic may be acknowledged by two regions in one epoch — and how long
// each topic took to resume after each fault, with the spread over the
// topics.

// Epoch is one epoch of an active-standby namespace's failover record.
type Epoch struct {
	Namespace string    `json:"namespace"`
	Epoch     uint64    `json:"epoch"`
	Active    string    `json:"active"`
	Since     time.Time `json:"since"` // when it was committed (the record's sinceMs)
}

// EpochReceipts are a topic's receipts in one epoch, by the region that
// acknowledged them ("unknown": an id whose ledger both regions' copies
// hold, so its region cannot be told).
type EpochReceipts struct {
	Epoch   uint64         `json:"epoch"`
	Active  string         `json:"active"`
	Regions map[string]int `json:"regions"`
}

// TopicResume is how long one topic took to resume after one fault: its
// longest stall of receipts (produce) and of first deliveries (consume)
// in the fault's window, as FaultRTO measures it for the whole workload.
type TopicResume struct {
	Fault            string  `json:"fault"`
	ProduceSec       float64 `json:"produce_sec"`
	ProduceRecovered bool    `json:"produce_recovered"`
	ConsumeSec       float64 `json:"consume_sec"`
	ConsumeRecovered bool    `json:"consume_recovered"`
}

// TopicCut is one topic's receipts by epoch and its resume per fault.
type TopicCut struct {
	Topic  string          `json:"topic"`
	Epochs []EpochReceipts `json:"epochs"`
	// TwoRegions: in some epoch two regions acknowledged the topic's
	// sends (receipts of an unknown region not counted).
	TwoRegions bool          `json:"two_regions_in_one_epoch"`
	Resume     []TopicResume `json:"resume"`
}

// Spread is the spread over topics of their resume after one fault, in
// seconds; NotRecovered counts the topics that never resumed (left out
// of the figures).
type Spread struct {
	Fault         string  `json:"fault"`
	Topics        int     `json:"topics"`
	ProduceMin    float64 `json:"produce_min"`
	ProduceMedian float64 `json:"produce_median"`
	ProduceMax    float64 `json:"produce_max"`
	ConsumeMin    float64 `json:"consume_min"`
	ConsumeMedian float64 `json:"consume_median"`
	ConsumeMax    float64 `json:"consume_max"`
	NotRecovered  int     `json:"not_recovered"`
}

// CutResult is Cut's verdict.
type CutResult struct {
	Topics []TopicCut `json:"topics"`
	// TwoRegionTopics counts the topics acknowledged by two regions in
	// one epoch of their namespace (a split: never legal).
	TwoRegionTopics int `json:"topics_acked_by_two_regions_in_one_epoch"`
	// Spread holds one entry per fault, in the history's order.
	Spread []Spread `json:"resume_spread"`
	// ResumeProduceMax, ResumeConsumeMax: the largest topic resume over
	// every fault (a topic that never resumed counts with its stall to
	// the end of the history).
	ResumeProduceMax float64 `json:"resume_produce_max"`
	ResumeConsumeMax float64 `json:"resume_consume_max"`
}

// namespaceOf is the tenant/namespace of persistent://tenant/ns/topic.
func namespaceOf(topic string) string {
	t := strings.TrimPrefix(topic, "persistent://")
	if i := strings.LastIndex(t, "/"); i > 0 {
		return t[:i]
	}
	return ""
}

// epochAt is the index in es (sorted by Since) of the epoch in force at
// t: the latest committed at or before t; a time before the first known
// epoch belongs to it.
func epochAt(es []Epoch, t time.Time) int {
	i := sort.Search(len(es), func(i int) bool { return es[i].Since.After(t) })
	return max(i-1, 0)
}

// Cut judges the history's topics, each receipt attributed to its
// namespace's epoch (h.Epochs) in force when it arrived. A topic whose
// namespace has no epoch (active-active, one region) has its receipts
// under epoch 0 and is not judged for two regions.
func Cut(h History) CutResult {
	byNS := map[string][]Epoch{}
	for _, e := range h.Epochs {
		byNS[e.Namespace] = append(byNS[e.Namespace], e)
	}
	for _, es := range byNS {
		sort.SliceStable(es, func(i, j int) bool { return es[i].Epoch < es[j].Epoch })
	}
	attempts := map[string][]Attempt{}
	deliveries := map[string][]Delivery{}
	var topics []string
	for _, a := range h.Attempts {
		if _, ok := attempts[a.Topic]; !ok {
			topics = append(topics, a.Topic)
		}
		attempts[a.Topic] = append(attempts[a.Topic], a)
	}
	for _, d := range h.Deliveries {
		deliveries[d.Topic] = append(deliveries[d.Topic], d)
	}
	sort.Strings(topics)
	out := CutResult{Topics: make([]TopicCut, 0, len(topics))}
	resumes := make([][]TopicResume, len(h.Faults))
	for _, t := range topics {
		tc := TopicCut{Topic: t}
		es := byNS[namespaceOf(t)]
		counts := make([]map[string]int, max(len(es), 1))
		for _, a := range attempts[t] {
			if !acked(a) {
				continue
			}
			i := 0
			if len(es) > 0 {
				i = epochAt(es, a.AckedAt)
			}
			if counts[i] == nil {
				counts[i] = map[string]int{}
			}
			region := a.Region
			if region == "" {
				region = "unknown"
			}
			counts[i][region]++
		}
		for i, c := range counts {
			if c == nil {
				continue
			}
			er := EpochReceipts{Regions: c}
			if len(es) > 0 {
				er.Epoch, er.Active = es[i].Epoch, es[i].Active
				known := 0
				for r := range c {
					if r != "unknown" {
						known++
					}
				}
				tc.TwoRegions = tc.TwoRegions || known > 1
			}
			tc.Epochs = append(tc.Epochs, er)
		}
		if tc.TwoRegions {
			out.TwoRegionTopics++
		}
		sub := History{Start: h.Start, End: h.End, StopAt: h.StopAt, Attempts: attempts[t], Deliveries: deliveries[t], Faults: h.Faults, Readers: h.Readers}
		for i, f := range faultRTOs(sub, indexAttempts(sub.Attempts)) {
			r := TopicResume{Fault: f.Fault, ProduceSec: f.ProduceRTO, ProduceRecovered: f.ProduceRecovered, ConsumeSec: f.ConsumeRTO, ConsumeRecovered: f.ConsumeRecovered}
			tc.Resume = append(tc.Resume, r)
			resumes[i] = append(resumes[i], r)
			out.ResumeProduceMax = max(out.ResumeProduceMax, r.ProduceSec)
			out.ResumeConsumeMax = max(out.ResumeConsumeMax, r.ConsumeSec)
		}
		out.Topics = append(out.Topics, tc)
	}
	for i, f := range h.Faults {
		out.Spread = append(out.Spread, spread(f.Name, resumes[i]))
	}
	return out
}

// spread sums up the topics' resumes after one fault.
func spread(fault string, rs []TopicResume) Spread {
	s := Spread{Fault: fault, Topics: len(rs)}
	var p, c []float64
	for _, r := range rs {
		if !r.ProduceRecovered || !r.ConsumeRecovered {
			s.NotRecovered++
		}
		if r.ProduceRecovered {
			p = append(p, r.ProduceSec)
		}
		if r.ConsumeRecovered {
			c = append(c, r.ConsumeSec)
		}
	}
	s.ProduceMin, s.ProduceMedian, s.ProduceMax = minMedianMax(p)
	s.ConsumeMin, s.ConsumeMedian, s.ConsumeMax = minMedianMax(c)
	return s
}

// minMedianMax of vs (zeros when empty); the median of an even count is
// the mean of the two middle values.
func minMedianMax(vs []float64) (lo, med, hi float64) {
	if len(vs) == 0 {
		return 0, 0, 0
	}
	vs = append([]float64(nil), vs...)
	sort.Float64s(vs)
	n := len(vs)
	med = vs[n/2]
	if n%2 == 0 {
		med = (vs[n/2-1] + vs[n/2]) / 2
	}
	return vs[0], med, vs[n-1]
}
