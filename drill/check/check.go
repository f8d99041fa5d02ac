// Package check is a Jepsen-style checker for total-queue histories
// recorded by disaster drills.
//
// A History records every message the producers tried to send, every
// message the consumers received and every fault the drill applied.
// Check judges the history: messages acknowledged but never delivered to a
// durable subscription are lost, redeliveries are duplicates, first
// deliveries that overtake each other are out of order (or late, when an
// asynchronous tail was replicated after a failback), and every fault gets
// its recovery times. Evaluate then compares the result with the bounds a
// drill file states.
//
// The package is pure: it keeps no state, reads no clock and does no I/O;
// every time comes from the history.
package check

import (
	"math"
	"sort"
	"time"
)

// Attempt is one message a producer tried to send.
type Attempt struct {
	Producer string // producer name in the drill
	Topic    string
	Seq      int64 // per producer, 0,1,2... in send order
	Key      string
	SentAt   time.Time
	AckedAt  time.Time // zero if never acknowledged (receipt)
	MsgID    string    // the id in the receipt ("" if not acknowledged)
	Region   string    // region that acknowledged it, "" if unknown
	Err      string    // the send error, if it failed
}

// Delivery is one message a consumer received (every receive, duplicates included).
type Delivery struct {
	Consumer     string
	Subscription string // topic+subscription identify a durable subscription
	Topic        string
	Producer     string
	Seq          int64
	Key          string
	At           time.Time
	MsgID        string
	Region       string // "" if unknown
}

// Fault is one fault the drill applied.
type Fault struct {
	Name  string    // e.g. "kill region:east"
	At    time.Time // when it was applied
	EndAt time.Time // when it was healed/restarted; zero if never
}

// History is everything a drill recorded: the input of Check.
type History struct {
	Start, End time.Time // workload start; end of the drain
	// StopAt: when the producers were told to stop (zero: the last send).
	// A producer blocked by a full queue sends nothing while it stalls,
	// so the last send does not mark the end of the produce window.
	StopAt     time.Time
	Attempts   []Attempt
	Deliveries []Delivery
	Faults     []Fault
	// Subscriptions lists the durable subscriptions (topic, name) whose
	// consumers must each receive every acknowledged message of their topic.
	Subscriptions []Sub
	// Readers lists the subscriptions whose consumers subscribed after
	// the faults (a drill consumer's start): judged for loss like the
	// others, but left out of the consume RTO — their first deliveries
	// are a read of the backlog, not the workload recovering.
	Readers []Sub
	// Epochs are the epochs of the drill's active-standby namespaces
	// (Cut attributes each receipt to the one in force when it came).
	Epochs []Epoch
}

// Sub names a durable subscription: a topic and a subscription name.
type Sub struct{ Topic, Name string }

// Message describes one sent message, as its attempt recorded it (or, for
// a message delivered but never attempted, as the delivery recorded it).
type Message struct {
	Producer string    `json:"producer"`
	Topic    string    `json:"topic"`
	Seq      int64     `json:"seq"`
	Key      string    `json:"key,omitempty"`
	MsgID    string    `json:"msg_id,omitempty"`
	Region   string    `json:"region,omitempty"`
	SentAt   time.Time `json:"sent_at"`
	AckedAt  time.Time `json:"acked_at"`
}

// Duplicate is one delivery beyond the first of the same (producer, seq)
// in a subscription.
type Duplicate struct {
	Producer string    `json:"producer"`
	Topic    string    `json:"topic"`
	Seq      int64     `json:"seq"`
	Key      string    `json:"key,omitempty"`
	MsgID    string    `json:"msg_id,omitempty"`
	Consumer string    `json:"consumer"`
	FirstAt  time.Time `json:"first_at"` // time of the first delivery
	At       time.Time `json:"at"`       // time of this redelivery
}

// Reorder is a first delivery that came after a message it should have
// preceded: Ahead, the message holding the high-water mark when it arrived.
type Reorder struct {
	Message
	DeliveredAt time.Time `json:"delivered_at"`
	// Kind is the order broken: "producer" (a higher Seq of the same
	// producer was already delivered) or "key" (a message of the same key
	// acknowledged later was already delivered). A late message that broke
	// both is "producer+key".
	Kind  string  `json:"kind"`
	Ahead Message `json:"ahead"`
	// Fault names, for a late message, the fault it was acknowledged
	// before and first delivered after.
	Fault string `json:"fault,omitempty"`
}

// MaxExamples bounds the example lists (duplicates, out-of-order) kept per
// subscription; the counts are always complete.
const MaxExamples = 100

// SubResult is the verdict on one durable subscription.
type SubResult struct {
	Topic string `json:"topic"`
	Name  string `json:"name"`
	// Delivered counts the distinct acknowledged messages delivered.
	Delivered int `json:"delivered"`
	// Lost counts the acknowledged messages of the topic never delivered
	// to the subscription; LostMessages lists them all, by producer and Seq.
	Lost         int       `json:"lost"`
	LostMessages []Message `json:"lost_messages"`
	// Duplicates counts the deliveries beyond the first of a message;
	// DuplicateExamples keeps the first MaxExamples, in delivery order.
	Duplicates        int         `json:"duplicates"`
	DuplicateExamples []Duplicate `json:"duplicate_examples"`
	// Unconfirmed counts the distinct delivered messages whose send was
	// attempted but never acknowledged (legal: the receipt was lost).
	Unconfirmed int `json:"unconfirmed"`
	// Phantom counts the distinct delivered messages no producer ever
	// attempted (never legal).
	Phantom int `json:"phantom"`
	// Late counts the out-of-order first deliveries explained by a fault:
	// acknowledged before it started, first delivered after it ended.
	// LateMessages lists them all, in delivery order.
	Late         int       `json:"late"`
	LateMessages []Reorder `json:"late_messages"`
	// OutOfOrderProducer and OutOfOrderKey count the other out-of-order
	// first deliveries; OutOfOrderExamples keeps the first MaxExamples of
	// either kind, in delivery order.
	OutOfOrderProducer int       `json:"out_of_order_producer"`
	OutOfOrderKey      int       `json:"out_of_order_key"`
	OutOfOrderExamples []Reorder `json:"out_of_order_examples"`
}

// FaultRTO is how long the workload took to recover from one fault.
type FaultRTO struct {
	Fault string    `json:"fault"`
	At    time.Time `json:"at"`
	// ProduceRTO is the longest stall of acknowledgements from the fault
	// to the next fault (or the last send), in seconds; ConsumeRTO the
	// same for first deliveries (to the next fault or the last first
	// delivery). Recovered: some message sent after the fault was
	// acknowledged (delivered); if none was, the RTO runs to the end of
	// the history.
	ProduceRTO       float64 `json:"produce_rto"`
	ProduceRecovered bool    `json:"produce_recovered"`
	ConsumeRTO       float64 `json:"consume_rto"`
	ConsumeRecovered bool    `json:"consume_recovered"`
	// ProduceStallFrom and ConsumeStallFrom: where the longest stall
	// starts (the fault's At when it did not recover).
	ProduceStallFrom time.Time `json:"produce_stall_from"`
	ConsumeStallFrom time.Time `json:"consume_stall_from"`
}

// Point is one cell of the timeline: in the one-second bucket starting T
// seconds after History.Start, in Region ("unknown" when not recorded),
// Acked attempts were acknowledged (by AckedAt, the acknowledging region)
// and Delivered first deliveries were made (by At, the delivering region;
// a message counts once per durable subscription). Only non-empty cells
// are listed, by T then Region.
type Point struct {
	T         float64 `json:"t"`
	Region    string  `json:"region"`
	Acked     int     `json:"acked"`
	Delivered int     `json:"delivered"`
}

// Result is the verdict on a history; it goes into report.json.
type Result struct {
	// Attempted counts the attempts, Acknowledged those with an AckedAt,
	// Failed those with an Err and no AckedAt.
	Attempted    int `json:"attempted"`
	Acknowledged int `json:"acknowledged"`
	Failed       int `json:"failed"`

	// Subscriptions holds one verdict per History.Subscriptions entry, in
	// the same order; the figures below are their sums.
	Subscriptions      []SubResult `json:"subscriptions"`
	Lost               int         `json:"lost"`
	Duplicates         int         `json:"duplicates"`
	Unconfirmed        int         `json:"unconfirmed"`
	Phantom            int         `json:"phantom"`
	Late               int         `json:"late"`
	OutOfOrderProducer int         `json:"out_of_order_producer"`
	OutOfOrderKey      int         `json:"out_of_order_key"`

	// RPOMessages counts the distinct acknowledged messages lost in at
	// least one subscription; RPOSeconds is the span (latest minus
	// earliest AckedAt) of those messages, 0 if fewer than two.
	RPOMessages int     `json:"rpo_messages"`
	RPOSeconds  float64 `json:"rpo_seconds"`

	// Faults holds one recovery per History.Faults entry, in the same
	// order; MaxRTOProduce and MaxRTOConsume are their maxima (0 if no
	// fault), recovered or not.
	Faults        []FaultRTO `json:"faults"`
	MaxRTOProduce float64    `json:"max_rto_produce"`
	MaxRTOConsume float64    `json:"max_rto_consume"`

	// AckRateBeforeFault is the number of acknowledgements with AckedAt in
	// [Start, first fault's At) divided by that period, in messages per
	// second; without faults the period is [Start, End). 0 if the period
	// is empty.
	AckRateBeforeFault float64 `json:"ack_rate_before_fault"`

	// AckRegionSwitches is the largest number, over producers, of changes
	// of region between consecutive acknowledgements (in AckedAt order;
	// acknowledgements of an unknown region skipped). An active-standby
	// namespace that fails over once has 1; two regions acknowledging at
	// the same time (split brain) interleave and have many.
	AckRegionSwitches int `json:"ack_region_switches"`

	// Series is the timeline, see Point.
	Series []Point `json:"series"`

	// Publish is each producer's publish latency before the first fault
	// and while it lasted.
	Publish []Publish `json:"publish_latency"`

	// Cut is each topic's receipts by epoch and resume per fault (cut.go).
	Cut CutResult `json:"cut"`

	// Measured holds figures the drill measured itself (counts, e.g.
	// replication_backlog_max_during_fault); expectations can bound them
	// by name.
	Measured map[string]float64 `json:"measured,omitempty"`
}

// AcksIn returns how many acknowledgements the workload made in d at its
// rate before the first fault: AckRateBeforeFault × d, rounded up. It is
// the bound in "duplicates: <= acks_in(300ms)". Rounding forgives a
// floating-point excess of 1e-9 so that 100/s × 300ms is 30, not 31.
func (r Result) AcksIn(d time.Duration) int {
	n := r.AckRateBeforeFault * d.Seconds()
	if n <= 0 {
		return 0
	}
	return int(math.Ceil(n - 1e-9))
}

// Check judges a history. Messages are identified by (Producer, Topic,
// Seq); when several attempts share an identity the acknowledged one with
// the earliest AckedAt stands for the message. Deliveries of a topic or
// subscription not in h.Subscriptions are only used for the consume RTO.
func Check(h History) Result {
	msgs := indexAttempts(h.Attempts)
	r := countAttempts(h.Attempts)
	lost := map[msgKey]time.Time{} // lost anywhere -> AckedAt
	var firsts []Delivery
	for _, s := range h.Subscriptions {
		sr, f := checkSub(s, h, msgs)
		for _, m := range sr.LostMessages {
			lost[msgKey{m.Producer, m.Topic, m.Seq}] = m.AckedAt
		}
		firsts = append(firsts, f...)
		r.Subscriptions = append(r.Subscriptions, sr)
		addTotals(&r, sr)
	}
	r.RPOMessages, r.RPOSeconds = rpo(lost)
	r.Faults = faultRTOs(h, msgs)
	r.MaxRTOProduce, r.MaxRTOConsume = maxRTOs(r.Faults)
	r.AckRateBeforeFault = ackRateBeforeFault(h)
	r.AckRegionSwitches = ackRegionSwitches(h.Attempts)
	r.Series = series(h.Start, h.Attempts, firsts)
	r.Publish = publishLatency(h)
	r.Cut = Cut(h)
	return r
}

// msgKey identifies a message.
type msgKey struct {
	producer, topic string
	seq             int64
}

func attemptKey(a Attempt) msgKey   { return msgKey{a.Producer, a.Topic, a.Seq} }
func deliveryKey(d Delivery) msgKey { return msgKey{d.Producer, d.Topic, d.Seq} }

func acked(a Attempt) bool { return !a.AckedAt.IsZero() }

// indexAttempts maps each message to the attempt that stands for it.
func indexAttempts(as []Attempt) map[msgKey]Attempt {
	m := make(map[msgKey]Attempt, len(as))
	for _, a := range as {
		k := attemptKey(a)
		if prev, ok := m[k]; !ok || preferred(a, prev) {
			m[k] = a
		}
	}
	return m
}

// preferred reports whether attempt a should stand for its message rather
// than b: an acknowledgement beats none, an earlier one beats a later one.
func preferred(a, b Attempt) bool {
	if !acked(a) {
		return false
	}
	return !acked(b) || a.AckedAt.Before(b.AckedAt)
}

func countAttempts(as []Attempt) Result {
	r := Result{Attempted: len(as)}
	for _, a := range as {
		switch {
		case acked(a):
			r.Acknowledged++
		case a.Err != "":
			r.Failed++
		}
	}
	return r
}

func addTotals(r *Result, s SubResult) {
	r.Lost += s.Lost
	r.Duplicates += s.Duplicates
	r.Unconfirmed += s.Unconfirmed
	r.Phantom += s.Phantom
	r.Late += s.Late
	r.OutOfOrderProducer += s.OutOfOrderProducer
	r.OutOfOrderKey += s.OutOfOrderKey
}

func messageOf(a Attempt) Message {
	return Message{
		Producer: a.Producer, Topic: a.Topic, Seq: a.Seq, Key: a.Key,
		MsgID: a.MsgID, Region: a.Region, SentAt: a.SentAt, AckedAt: a.AckedAt,
	}
}

// deliveredMessage describes a delivered message: from its attempt when
// there is one, else from the delivery itself.
func deliveredMessage(d Delivery, msgs map[msgKey]Attempt) Message {
	if a, ok := msgs[deliveryKey(d)]; ok {
		return messageOf(a)
	}
	return Message{
		Producer: d.Producer, Topic: d.Topic, Seq: d.Seq, Key: d.Key,
		MsgID: d.MsgID, Region: d.Region,
	}
}

// rpo returns the number of lost messages and the span of their AckedAt.
func rpo(lost map[msgKey]time.Time) (int, float64) {
	var first, last time.Time
	for _, t := range lost {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if last.IsZero() || t.After(last) {
			last = t
		}
	}
	return len(lost), last.Sub(first).Seconds()
}

// ackRegionSwitches returns Result.AckRegionSwitches.
func ackRegionSwitches(as []Attempt) int {
	byProducer := map[string][]Attempt{}
	for _, a := range as {
		if acked(a) && a.Region != "" {
			byProducer[a.Producer] = append(byProducer[a.Producer], a)
		}
	}
	most := 0
	for _, acks := range byProducer {
		sort.SliceStable(acks, func(i, j int) bool { return acks[i].AckedAt.Before(acks[j].AckedAt) })
		n := 0
		for i := 1; i < len(acks); i++ {
			if acks[i].Region != acks[i-1].Region {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}
