package check

import (
	"math"
	"sort"
	"time"
)

// faultRTOs computes the recovery of each fault, in the history's order.
//
// A fault's RTO is the longest stall within its window: the longest
// stretch, from the fault on, with no acknowledgement (produce) or no
// first delivery (consume). Its window runs from the fault to the next
// fault (or the end of the workload's sending, for produce, and of its
// deliveries, for consume). The first gap after the fault is not the
// whole story: a region cut off keeps acknowledging until its lease
// lapses, and the outage starts seconds after the fault.
func faultRTOs(h History, msgs map[msgKey]Attempt) []FaultRTO {
	out := make([]FaultRTO, 0, len(h.Faults))
	var lastSent time.Time
	var ackTimes []time.Time
	for _, a := range h.Attempts {
		if a.SentAt.After(lastSent) {
			lastSent = a.SentAt
		}
		if acked(a) {
			ackTimes = append(ackTimes, a.AckedAt)
		}
	}
	sortTimes(ackTimes)
	firsts := firstDeliveryTimes(h, msgs)
	var lastDelivery time.Time
	if len(firsts) > 0 {
		lastDelivery = firsts[len(firsts)-1]
	}
	for _, f := range h.Faults {
		next := nextFault(h.Faults, f)
		sendEnd := lastSent
		if h.StopAt.After(sendEnd) {
			sendEnd = h.StopAt
		}
		pEnd, cEnd := minTime(next, sendEnd), minTime(next, lastDelivery)
		_, pok := produceRecovery(f, h.Attempts)
		_, cok := consumeRecovery(f, rtoDeliveries(h), msgs)
		fr := FaultRTO{Fault: f.Name, At: f.At, ProduceRecovered: pok, ConsumeRecovered: cok}
		fr.ProduceStallFrom, fr.ConsumeStallFrom = f.At, f.At
		if pok {
			fr.ProduceRTO, fr.ProduceStallFrom = longestStall(f.At, pEnd, ackTimes)
		} else {
			fr.ProduceRTO = h.End.Sub(f.At).Seconds()
		}
		if cok {
			fr.ConsumeRTO, fr.ConsumeStallFrom = longestStall(f.At, cEnd, firsts)
		} else {
			fr.ConsumeRTO = h.End.Sub(f.At).Seconds()
		}
		out = append(out, fr)
	}
	return out
}

// longestStall is the longest gap, in seconds, in from, the times in
// (from, to], and to (when to is after from), and where it starts.
func longestStall(from, to time.Time, times []time.Time) (float64, time.Time) {
	prev, longest, start := from, 0.0, from
	gap := func(t time.Time) {
		if d := t.Sub(prev).Seconds(); d > longest {
			longest, start = d, prev
		}
	}
	i := sort.Search(len(times), func(i int) bool { return times[i].After(from) })
	for ; i < len(times) && !times[i].After(to); i++ {
		gap(times[i])
		prev = times[i]
	}
	if to.After(prev) {
		gap(to)
	}
	return longest, start
}

// firstDeliveryTimes lists, sorted, the time of each message's first
// delivery in each subscription.
func firstDeliveryTimes(h History, msgs map[msgKey]Attempt) []time.Time {
	type subMsg struct {
		topic, sub string
		k          msgKey
	}
	first := map[subMsg]time.Time{}
	for _, d := range rtoDeliveries(h) {
		k := subMsg{d.Topic, d.Subscription, deliveryKey(d)}
		if t, ok := first[k]; !ok || d.At.Before(t) {
			first[k] = d.At
		}
	}
	out := make([]time.Time, 0, len(first))
	for _, t := range first {
		out = append(out, t)
	}
	sortTimes(out)
	return out
}

// rtoDeliveries are the deliveries the consume RTO is measured on: all
// but the readers' (History.Readers).
func rtoDeliveries(h History) []Delivery {
	if len(h.Readers) == 0 {
		return h.Deliveries
	}
	skip := map[Sub]bool{}
	for _, s := range h.Readers {
		skip[s] = true
	}
	out := make([]Delivery, 0, len(h.Deliveries))
	for _, d := range h.Deliveries {
		if !skip[Sub{d.Topic, d.Subscription}] {
			out = append(out, d)
		}
	}
	return out
}

func sortTimes(ts []time.Time) { sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) }) }

// nextFault is the At of the first fault after f, or the zero time.
func nextFault(fs []Fault, f Fault) time.Time {
	var next time.Time
	for _, g := range fs {
		if g.At.After(f.At) && (next.IsZero() || g.At.Before(next)) {
			next = g.At
		}
	}
	return next
}

// minTime is the earlier of a and b, ignoring a zero a.
func minTime(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// produceRecovery returns the earliest AckedAt among the attempts sent
// after fault f.
func produceRecovery(f Fault, as []Attempt) (time.Time, bool) {
	var first time.Time
	for _, a := range as {
		if a.SentAt.After(f.At) && acked(a) && (first.IsZero() || a.AckedAt.Before(first)) {
			first = a.AckedAt
		}
	}
	return first, !first.IsZero()
}

// consumeRecovery returns the earliest delivery of a message sent after
// fault f. Deliveries of messages never attempted are ignored: their send
// time is unknown.
func consumeRecovery(f Fault, ds []Delivery, msgs map[msgKey]Attempt) (time.Time, bool) {
	var first time.Time
	for _, d := range ds {
		a, ok := msgs[deliveryKey(d)]
		if ok && a.SentAt.After(f.At) && (first.IsZero() || d.At.Before(first)) {
			first = d.At
		}
	}
	return first, !first.IsZero()
}

func maxRTOs(fs []FaultRTO) (produce, consume float64) {
	for _, f := range fs {
		produce = math.Max(produce, f.ProduceRTO)
		consume = math.Max(consume, f.ConsumeRTO)
	}
	return produce, consume
}

// ackRateBeforeFault is the acknowledgement rate over [h.Start, first
// fault's At), or over [h.Start, h.End) without faults.
func ackRateBeforeFault(h History) float64 {
	end := h.End
	for i, f := range h.Faults {
		if i == 0 || f.At.Before(end) {
			end = f.At
		}
	}
	period := end.Sub(h.Start).Seconds()
	if period <= 0 {
		return 0
	}
	n := 0
	for _, a := range h.Attempts {
		if acked(a) && !a.AckedAt.Before(h.Start) && a.AckedAt.Before(end) {
			n++
		}
	}
	return float64(n) / period
}

// series builds the timeline from the acknowledged attempts and the
// first deliveries, see Point.
func series(start time.Time, as []Attempt, firsts []Delivery) []Point {
	cells := map[cell]*Point{}
	for _, a := range as {
		if acked(a) {
			pointAt(cells, start, a.AckedAt, a.Region).Acked++
		}
	}
	for _, d := range firsts {
		pointAt(cells, start, d.At, d.Region).Delivered++
	}
	out := make([]Point, 0, len(cells))
	for _, p := range cells {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].T != out[j].T {
			return out[i].T < out[j].T
		}
		return out[i].Region < out[j].Region
	})
	return out
}

// cell is a timeline bucket: a second since the start, a region.
type cell struct {
	sec    int64
	region string
}

// pointAt returns the point of the bucket holding t in region, creating it.
func pointAt(cells map[cell]*Point, start, t time.Time, region string) *Point {
	if region == "" {
		region = "unknown"
	}
	sec := int64(math.Floor(t.Sub(start).Seconds()))
	c := cell{sec, region}
	p, ok := cells[c]
	if !ok {
		p = &Point{T: float64(sec), Region: region}
		cells[c] = p
	}
	return p
}
