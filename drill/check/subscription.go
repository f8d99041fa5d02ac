package check

import (
	"sort"
	"strings"
	"time"
)

// checkSub judges one durable subscription. It also returns the
// subscription's first deliveries, by delivery time.
func checkSub(s Sub, h History, msgs map[msgKey]Attempt) (SubResult, []Delivery) {
	r := SubResult{
		Topic:              s.Topic,
		Name:               s.Name,
		LostMessages:       []Message{},
		DuplicateExamples:  []Duplicate{},
		LateMessages:       []Reorder{},
		OutOfOrderExamples: []Reorder{},
	}
	firsts := splitDuplicates(subDeliveries(s, h.Deliveries), &r)
	countDelivered(firsts, msgs, &r)
	r.LostMessages = lostMessages(s.Topic, msgs, firsts)
	r.Lost = len(r.LostMessages)
	checkOrder(firsts, msgs, h.Faults, &r)
	return r, firsts
}

// subDeliveries returns the deliveries to subscription s, sorted by
// delivery time (ties keep the history's order).
func subDeliveries(s Sub, all []Delivery) []Delivery {
	var ds []Delivery
	for _, d := range all {
		if d.Topic == s.Topic && d.Subscription == s.Name {
			ds = append(ds, d)
		}
	}
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].At.Before(ds[j].At) })
	return ds
}

// splitDuplicates returns the first delivery of each message and records
// every later one in r as a duplicate.
func splitDuplicates(ds []Delivery, r *SubResult) []Delivery {
	firstAt := map[msgKey]time.Time{}
	var firsts []Delivery
	for _, d := range ds {
		k := deliveryKey(d)
		at, seen := firstAt[k]
		if !seen {
			firstAt[k] = d.At
			firsts = append(firsts, d)
			continue
		}
		r.Duplicates++
		if len(r.DuplicateExamples) < MaxExamples {
			r.DuplicateExamples = append(r.DuplicateExamples, Duplicate{
				Producer: d.Producer, Topic: d.Topic, Seq: d.Seq, Key: d.Key,
				MsgID: d.MsgID, Consumer: d.Consumer, FirstAt: at, At: d.At,
			})
		}
	}
	return firsts
}

// countDelivered sorts the delivered messages into acknowledged,
// unconfirmed and phantom.
func countDelivered(firsts []Delivery, msgs map[msgKey]Attempt, r *SubResult) {
	for _, d := range firsts {
		a, ok := msgs[deliveryKey(d)]
		switch {
		case !ok:
			r.Phantom++
		case acked(a):
			r.Delivered++
		default:
			r.Unconfirmed++
		}
	}
}

// lostMessages lists the acknowledged messages of topic that are not
// among firsts, by producer then Seq.
func lostMessages(topic string, msgs map[msgKey]Attempt, firsts []Delivery) []Message {
	delivered := make(map[msgKey]bool, len(firsts))
	for _, d := range firsts {
		delivered[deliveryKey(d)] = true
	}
	lost := []Message{}
	for k, a := range msgs {
		if k.topic == topic && acked(a) && !delivered[k] {
			lost = append(lost, messageOf(a))
		}
	}
	sort.Slice(lost, func(i, j int) bool {
		if lost[i].Producer != lost[j].Producer {
			return lost[i].Producer < lost[j].Producer
		}
		return lost[i].Seq < lost[j].Seq
	})
	return lost
}

// orderState holds the high-water marks of the order check.
type orderState struct {
	byProducer map[string]Message // highest Seq first-delivered, per producer
	byKey      map[string]Message // latest AckedAt first-delivered, per key
}

// checkOrder finds the first deliveries (sorted by time) that overtook
// each other and records them in r as late or out of order.
func checkOrder(firsts []Delivery, msgs map[msgKey]Attempt, faults []Fault, r *SubResult) {
	st := orderState{byProducer: map[string]Message{}, byKey: map[string]Message{}}
	for _, d := range firsts {
		m := deliveredMessage(d, msgs)
		broken := st.observe(d, m)
		if len(broken) == 0 {
			continue
		}
		if f, ok := lateFault(m, d.At, faults); ok {
			r.Late++
			r.LateMessages = append(r.LateMessages, lateReorder(broken, f))
			continue
		}
		recordOutOfOrder(broken, r)
	}
}

// observe advances the high-water marks with first delivery d of message
// m and returns the orders it broke (none, producer, key or both).
func (st orderState) observe(d Delivery, m Message) []Reorder {
	var broken []Reorder
	if prev, ok := st.byProducer[d.Producer]; ok && d.Seq < prev.Seq {
		broken = append(broken, reorder(m, d, "producer", prev))
	} else {
		st.byProducer[d.Producer] = m
	}
	if d.Key == "" || m.AckedAt.IsZero() {
		return broken // no key, or no acknowledgement to order by
	}
	if prev, ok := st.byKey[d.Key]; ok && m.AckedAt.Before(prev.AckedAt) {
		broken = append(broken, reorder(m, d, "key", prev))
	} else {
		st.byKey[d.Key] = m
	}
	return broken
}

func reorder(m Message, d Delivery, kind string, ahead Message) Reorder {
	return Reorder{Message: m, DeliveredAt: d.At, Kind: kind, Ahead: ahead}
}

// lateFault returns the first fault that message m, first delivered at
// at, was acknowledged before and delivered after the end of.
func lateFault(m Message, at time.Time, faults []Fault) (string, bool) {
	if m.AckedAt.IsZero() {
		return "", false
	}
	for _, f := range faults {
		if m.AckedAt.Before(f.At) && !f.EndAt.IsZero() && at.After(f.EndAt) {
			return f.Name, true
		}
	}
	return "", false
}

// lateReorder merges the orders a late message broke into one entry.
func lateReorder(broken []Reorder, fault string) Reorder {
	late := broken[0]
	kinds := make([]string, len(broken))
	for i, b := range broken {
		kinds[i] = b.Kind
	}
	late.Kind = strings.Join(kinds, "+")
	late.Fault = fault
	return late
}

func recordOutOfOrder(broken []Reorder, r *SubResult) {
	for _, b := range broken {
		if b.Kind == "producer" {
			r.OutOfOrderProducer++
		} else {
			r.OutOfOrderKey++
		}
		if len(r.OutOfOrderExamples) < MaxExamples {
			r.OutOfOrderExamples = append(r.OutOfOrderExamples, b)
		}
	}
}
