package check

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is t0 plus sec seconds.
func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// ackedAttempt is an acknowledged attempt sent at sent and acknowledged at ack
// (seconds since t0) by region east.
func ackedAttempt(producer, topic string, seq int64, key string, sent, ack float64) Attempt {
	return Attempt{
		Producer: producer, Topic: topic, Seq: seq, Key: key,
		SentAt: at(sent), AckedAt: at(ack),
		MsgID: fmt.Sprintf("%s:%d", producer, seq), Region: "east",
	}
}

// failedAttempt is an attempt that got an error and no receipt.
func failedAttempt(producer, topic string, seq int64, key string, sent float64) Attempt {
	return Attempt{Producer: producer, Topic: topic, Seq: seq, Key: key, SentAt: at(sent), Err: "timeout"}
}

// deliver is the delivery of attempt a to subscription s at sec.
func deliver(s Sub, a Attempt, sec float64) Delivery {
	return Delivery{
		Consumer: "c-" + s.Name, Subscription: s.Name, Topic: s.Topic,
		Producer: a.Producer, Seq: a.Seq, Key: a.Key, At: at(sec),
		MsgID: fmt.Sprintf("%s:%d", a.Producer, a.Seq), Region: "west",
	}
}

// deliverInOrder delivers as to s one by one, 0.1s after each one's ack.
func deliverInOrder(s Sub, as []Attempt) []Delivery {
	var ds []Delivery
	for _, a := range as {
		ds = append(ds, deliver(s, a, a.AckedAt.Sub(t0).Seconds()+0.1))
	}
	return ds
}

// workload is n acknowledged messages per producer on topic, one every
// 0.1s, acknowledged 0.05s after sending, keys cycling k0..k2.
func workload(topic string, producers []string, n int) []Attempt {
	var as []Attempt
	for i := 0; i < n; i++ {
		for j, p := range producers {
			sent := float64(i)*0.1 + float64(j)*0.01
			as = append(as, ackedAttempt(p, topic, int64(i), fmt.Sprintf("k%d", i%3), sent, sent+0.05))
		}
	}
	return as
}

var subA = Sub{Topic: "t", Name: "a"}

func history(as []Attempt, ds []Delivery, subs ...Sub) History {
	return History{Start: t0, End: at(100), Attempts: as, Deliveries: ds, Subscriptions: subs}
}

// assertClean fails unless r has no loss, duplicate, disorder or lateness.
func assertClean(t *testing.T, r Result) {
	t.Helper()
	if r.Lost != 0 || r.Duplicates != 0 || r.Late != 0 || r.OutOfOrderProducer != 0 || r.OutOfOrderKey != 0 || r.RPOMessages != 0 || r.RPOSeconds != 0 {
		t.Errorf("want clean result, got lost=%d dups=%d late=%d oop=%d ook=%d rpo=%d/%gs",
			r.Lost, r.Duplicates, r.Late, r.OutOfOrderProducer, r.OutOfOrderKey, r.RPOMessages, r.RPOSeconds)
	}
}

func TestCheckAllFine(t *testing.T) {
	as := workload("t", []string{"p1", "p2"}, 10)
	ds := deliverInOrder(subA, as)
	as = append(as, failedAttempt("p3", "t", 0, "k0", 5))
	r := Check(history(as, ds, subA))
	if r.Attempted != 21 || r.Acknowledged != 20 || r.Failed != 1 {
		t.Errorf("attempted/acked/failed = %d/%d/%d, want 21/20/1", r.Attempted, r.Acknowledged, r.Failed)
	}
	assertClean(t, r)
	if len(r.Subscriptions) != 1 || r.Subscriptions[0].Delivered != 20 {
		t.Fatalf("subscriptions = %+v, want one with 20 delivered", r.Subscriptions)
	}
	if r.Unconfirmed != 0 || r.Phantom != 0 {
		t.Errorf("unconfirmed=%d phantom=%d, want 0", r.Unconfirmed, r.Phantom)
	}
}

func TestCheckSortsDeliveriesByTime(t *testing.T) {
	as := workload("t", []string{"p"}, 5)
	ds := deliverInOrder(subA, as)
	for i, j := 0, len(ds)-1; i < j; i, j = i+1, j-1 {
		ds[i], ds[j] = ds[j], ds[i] // recorded in reverse, timestamps in order
	}
	assertClean(t, Check(history(as, ds, subA)))
}

func TestCheckLostMessageListed(t *testing.T) {
	as := workload("t", []string{"p1", "p2"}, 5)
	ds := deliverInOrder(subA, as)
	var kept []Delivery
	for _, d := range ds {
		if !(d.Producer == "p2" && d.Seq == 3) {
			kept = append(kept, d)
		}
	}
	// An unacknowledged, undelivered attempt is not lost.
	as = append(as, failedAttempt("p1", "t", 5, "k2", 1))
	r := Check(history(as, kept, subA))
	if r.Lost != 1 || r.RPOMessages != 1 || r.RPOSeconds != 0 {
		t.Fatalf("lost=%d rpo=%d/%gs, want 1, 1, 0s", r.Lost, r.RPOMessages, r.RPOSeconds)
	}
	s := r.Subscriptions[0]
	if s.Lost != 1 || s.Delivered != 9 {
		t.Errorf("sub lost=%d delivered=%d, want 1, 9", s.Lost, s.Delivered)
	}
	want := Message{Producer: "p2", Topic: "t", Seq: 3, Key: "k0", MsgID: "p2:3", Region: "east", SentAt: at(0.31), AckedAt: at(0.36)}
	if len(s.LostMessages) != 1 || !sameMessage(s.LostMessages[0], want) {
		t.Errorf("lost messages = %+v, want [%+v]", s.LostMessages, want)
	}
}

func sameMessage(a, b Message) bool {
	return a.Producer == b.Producer && a.Topic == b.Topic && a.Seq == b.Seq && a.Key == b.Key &&
		a.MsgID == b.MsgID && a.Region == b.Region && a.SentAt.Equal(b.SentAt) && a.AckedAt.Equal(b.AckedAt)
}

func TestCheckRPOSecondsIsSpanOfLostAcks(t *testing.T) {
	as := []Attempt{
		ackedAttempt("p", "t", 0, "", 1, 2),
		ackedAttempt("p", "t", 1, "", 3, 4), // lost
		ackedAttempt("p", "t", 2, "", 5, 6),
		ackedAttempt("p", "t", 3, "", 8, 9.5), // lost
		ackedAttempt("p", "t", 4, "", 9, 7),   // lost (acked out of send order)
	}
	ds := []Delivery{deliver(subA, as[0], 3), deliver(subA, as[2], 7)}
	r := Check(history(as, ds, subA))
	if r.RPOMessages != 3 || r.RPOSeconds != 5.5 {
		t.Errorf("rpo = %d msgs / %gs, want 3 / 5.5s (acks 4..9.5)", r.RPOMessages, r.RPOSeconds)
	}
	var seqs []int64
	for _, m := range r.Subscriptions[0].LostMessages {
		seqs = append(seqs, m.Seq)
	}
	if fmt.Sprint(seqs) != "[1 3 4]" {
		t.Errorf("lost seqs = %v, want [1 3 4] (sorted)", seqs)
	}
}

func TestCheckRetriedAttemptsAreOneMessage(t *testing.T) {
	// p:0 was sent four times: acknowledged at 3s, at 2s, at 4s, then
	// failed; the earliest acknowledgement stands for it.
	as := []Attempt{
		ackedAttempt("p", "t", 0, "", 1, 3),
		ackedAttempt("p", "t", 0, "", 1.5, 2),
		ackedAttempt("p", "t", 0, "", 1.7, 4),
		failedAttempt("p", "t", 0, "", 2.5),
		ackedAttempt("p", "t", 1, "", 4, 5),
	}
	r := Check(history(as, nil, subA))
	if r.Attempted != 5 || r.Acknowledged != 4 || r.Failed != 1 {
		t.Errorf("attempted/acked/failed = %d/%d/%d, want 5/4/1", r.Attempted, r.Acknowledged, r.Failed)
	}
	lost := r.Subscriptions[0].LostMessages
	if r.Lost != 2 || len(lost) != 2 || !lost[0].AckedAt.Equal(at(2)) {
		t.Fatalf("lost = %+v, want p:0 (acknowledged at 2s) and p:1", lost)
	}
	if r.RPOMessages != 2 || r.RPOSeconds != 3 {
		t.Errorf("rpo = %d/%gs, want 2/3s", r.RPOMessages, r.RPOSeconds)
	}
}

func TestCheckDuplicatesCounted(t *testing.T) {
	as := workload("t", []string{"p"}, 6)
	ds := deliverInOrder(subA, as)
	again := deliver(subA, as[2], 10) // redelivered after seq 5: not out of order
	again.Consumer = "other"
	ds = append(ds, again, deliver(subA, as[2], 11), deliver(subA, as[5], 12))
	r := Check(history(as, ds, subA))
	if r.Duplicates != 3 {
		t.Errorf("duplicates = %d, want 3", r.Duplicates)
	}
	s := r.Subscriptions[0]
	if s.Delivered != 6 || s.Lost != 0 || r.OutOfOrderProducer != 0 || r.OutOfOrderKey != 0 || r.Late != 0 {
		t.Errorf("delivered=%d lost=%d oop=%d ook=%d late=%d, want 6 0 0 0 0",
			s.Delivered, s.Lost, r.OutOfOrderProducer, r.OutOfOrderKey, r.Late)
	}
	if len(s.DuplicateExamples) != 3 {
		t.Fatalf("examples = %+v, want 3", s.DuplicateExamples)
	}
	d := s.DuplicateExamples[0]
	if d.Seq != 2 || d.Consumer != "other" || !d.At.Equal(at(10)) || !d.FirstAt.Equal(as[2].AckedAt.Add(100*time.Millisecond)) {
		t.Errorf("first example = %+v, want seq 2 to consumer other at 10s, first at ack+0.1s", d)
	}
}

func TestCheckDuplicateExamplesCapped(t *testing.T) {
	as := workload("t", []string{"p"}, 1)
	ds := deliverInOrder(subA, as)
	for i := 0; i < MaxExamples+50; i++ {
		ds = append(ds, deliver(subA, as[0], 10+float64(i)))
	}
	s := Check(history(as, ds, subA)).Subscriptions[0]
	if s.Duplicates != MaxExamples+50 || len(s.DuplicateExamples) != MaxExamples {
		t.Errorf("duplicates=%d examples=%d, want %d and %d", s.Duplicates, len(s.DuplicateExamples), MaxExamples+50, MaxExamples)
	}
}

func TestCheckReorderedPerProducer(t *testing.T) {
	// Distinct keys: only the producer order can break.
	as := []Attempt{
		ackedAttempt("p", "t", 0, "a", 0, 1),
		ackedAttempt("p", "t", 1, "b", 1, 2),
		ackedAttempt("p", "t", 2, "c", 2, 3),
		ackedAttempt("p", "t", 3, "d", 3, 4),
		ackedAttempt("q", "t", 0, "e", 0, 1), // another producer, delivered last: fine
	}
	ds := []Delivery{
		deliver(subA, as[0], 5), deliver(subA, as[2], 6), deliver(subA, as[1], 7),
		deliver(subA, as[3], 8), deliver(subA, as[4], 9),
	}
	r := Check(history(as, ds, subA))
	if r.OutOfOrderProducer != 1 || r.OutOfOrderKey != 0 || r.Late != 0 || r.Lost != 0 {
		t.Fatalf("oop=%d ook=%d late=%d lost=%d, want 1 0 0 0", r.OutOfOrderProducer, r.OutOfOrderKey, r.Late, r.Lost)
	}
	ex := r.Subscriptions[0].OutOfOrderExamples
	if len(ex) != 1 || ex[0].Kind != "producer" || ex[0].Seq != 1 || ex[0].Ahead.Seq != 2 || !ex[0].DeliveredAt.Equal(at(7)) {
		t.Errorf("examples = %+v, want seq 1 (producer) behind seq 2 at 7s", ex)
	}
}

func TestCheckReorderedPerKeyOnly(t *testing.T) {
	// p and q share key k: q:0 was acknowledged after p:0 but delivered first.
	as := []Attempt{
		ackedAttempt("p", "t", 0, "k", 0, 1),
		ackedAttempt("q", "t", 0, "k", 0, 2),
		ackedAttempt("p", "t", 1, "", 3, 3.5), // no key: never out of order by key
		ackedAttempt("q", "t", 1, "", 3, 3.2),
	}
	ds := []Delivery{deliver(subA, as[1], 5), deliver(subA, as[0], 6), deliver(subA, as[2], 7), deliver(subA, as[3], 8)}
	r := Check(history(as, ds, subA))
	if r.OutOfOrderKey != 1 || r.OutOfOrderProducer != 0 || r.Late != 0 {
		t.Fatalf("ook=%d oop=%d late=%d, want 1 0 0", r.OutOfOrderKey, r.OutOfOrderProducer, r.Late)
	}
	ex := r.Subscriptions[0].OutOfOrderExamples
	if len(ex) != 1 || ex[0].Kind != "key" || ex[0].Producer != "p" || ex[0].Ahead.Producer != "q" {
		t.Errorf("examples = %+v, want p:0 (key) behind q:0", ex)
	}
}

func TestCheckLateClassification(t *testing.T) {
	// p:0..2 acknowledged before the fault (10s..20s); p:3 sent and
	// acknowledged after it; p:2, the async tail, is delivered after p:3.
	as := []Attempt{
		ackedAttempt("p", "t", 0, "k", 1, 1.1),
		ackedAttempt("p", "t", 1, "k", 2, 2.1),
		ackedAttempt("p", "t", 2, "k", 9, 9.5),
		ackedAttempt("p", "t", 3, "k", 21, 21.1),
	}
	cases := []struct {
		name       string
		start      float64 // fault At
		end        float64 // fault EndAt, 0 = never healed
		tailAt     float64 // first delivery of p:2
		late, oop  int
		ook        int
		lateFault  string
		kindOfLate string
	}{
		{name: "after heal is late", start: 10, end: 20, tailAt: 25, late: 1, lateFault: "kill region:east", kindOfLate: "producer+key"},
		{name: "before heal is out of order", start: 10, end: 30, tailAt: 25, oop: 1, ook: 1},
		{name: "never healed is out of order", start: 10, end: 0, tailAt: 25, oop: 1, ook: 1},
		{name: "acked after fault start is out of order", start: 9, end: 20, tailAt: 25, oop: 1, ook: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := Fault{Name: "kill region:east", At: at(c.start)}
			if c.end != 0 {
				f.EndAt = at(c.end)
			}
			ds := []Delivery{deliver(subA, as[0], 2), deliver(subA, as[1], 3), deliver(subA, as[3], 22), deliver(subA, as[2], c.tailAt)}
			h := history(as, ds, subA)
			h.Faults = []Fault{f}
			r := Check(h)
			if r.Late != c.late || r.OutOfOrderProducer != c.oop || r.OutOfOrderKey != c.ook {
				t.Fatalf("late=%d oop=%d ook=%d, want %d %d %d", r.Late, r.OutOfOrderProducer, r.OutOfOrderKey, c.late, c.oop, c.ook)
			}
			s := r.Subscriptions[0]
			if c.late == 0 {
				if len(s.LateMessages) != 0 || len(s.OutOfOrderExamples) != c.oop+c.ook {
					t.Errorf("late messages %+v, examples %+v", s.LateMessages, s.OutOfOrderExamples)
				}
				return
			}
			if len(s.LateMessages) != 1 || len(s.OutOfOrderExamples) != 0 {
				t.Fatalf("late messages %+v, examples %+v; want one late, no examples", s.LateMessages, s.OutOfOrderExamples)
			}
			l := s.LateMessages[0]
			if l.Seq != 2 || l.Fault != c.lateFault || l.Kind != c.kindOfLate || l.Ahead.Seq != 3 || l.MsgID != "p:2" {
				t.Errorf("late = %+v, want p:2 behind p:3, kind %s, fault %s", l, c.kindOfLate, c.lateFault)
			}
		})
	}
}

func TestCheckLateRequiresOutOfOrder(t *testing.T) {
	// Acknowledged before the fault, first delivered after it ended, but
	// nothing overtook it: neither late nor out of order.
	as := []Attempt{ackedAttempt("p", "t", 0, "k", 1, 1.1), ackedAttempt("p", "t", 1, "k", 21, 21.1)}
	h := history(as, []Delivery{deliver(subA, as[0], 25), deliver(subA, as[1], 26)}, subA)
	h.Faults = []Fault{{Name: "f", At: at(10), EndAt: at(20)}}
	assertClean(t, Check(h))
}

func TestCheckTwoSubscriptions(t *testing.T) {
	subB := Sub{Topic: "t", Name: "b"}
	other := Sub{Topic: "u", Name: "a"} // same name, other topic: not subscribed
	as := workload("t", []string{"p"}, 4)
	as = append(as, ackedAttempt("p", "u", 100, "", 1, 2)) // topic u: nobody must get it
	dsA := deliverInOrder(subA, as[:4])
	dsB := deliverInOrder(subB, as[:4])

	t.Run("one misses", func(t *testing.T) {
		ds := append(append([]Delivery{}, dsA...), dsB[0], dsB[1], dsB[3])
		ds = append(ds, deliver(other, as[4], 50)) // a delivery on topic u does not count for t/a
		r := Check(history(as, ds, subA, subB))
		if r.Subscriptions[0].Delivered != 4 || r.Phantom != 0 {
			t.Errorf("sub a delivered=%d phantom=%d, want 4 0", r.Subscriptions[0].Delivered, r.Phantom)
		}
		if r.Subscriptions[0].Lost != 0 || r.Subscriptions[1].Lost != 1 || r.Subscriptions[1].LostMessages[0].Seq != 2 {
			t.Errorf("per-sub lost = %d, %d (%+v), want 0, 1 (seq 2)", r.Subscriptions[0].Lost, r.Subscriptions[1].Lost, r.Subscriptions[1].LostMessages)
		}
		if r.Lost != 1 || r.RPOMessages != 1 {
			t.Errorf("lost=%d rpo=%d, want 1 1", r.Lost, r.RPOMessages)
		}
		if r.Subscriptions[0].Duplicates != 0 || r.Subscriptions[1].Delivered != 3 {
			t.Errorf("sub a dups=%d, sub b delivered=%d, want 0, 3", r.Subscriptions[0].Duplicates, r.Subscriptions[1].Delivered)
		}
	})
	t.Run("both miss the same", func(t *testing.T) {
		ds := []Delivery{dsA[0], dsA[1], dsA[3], dsB[0], dsB[1], dsB[3]}
		r := Check(history(as, ds, subA, subB))
		if r.Lost != 2 || r.RPOMessages != 1 {
			t.Errorf("lost=%d rpo=%d, want 2 1", r.Lost, r.RPOMessages)
		}
	})
}

func TestCheckUnconfirmedAndPhantom(t *testing.T) {
	as := workload("t", []string{"p"}, 2)
	// Same key as p:0, no acknowledgement: it cannot break the key order.
	lostReceipt := failedAttempt("p", "t", 2, "k0", 0.3)
	as = append(as, lostReceipt)
	ds := deliverInOrder(subA, as[:2])
	ds = append(ds, deliver(subA, lostReceipt, 1), deliver(subA, lostReceipt, 2))
	ds = append(ds, deliver(subA, Attempt{Producer: "ghost", Seq: 7}, 3))
	r := Check(history(as, ds, subA))
	s := r.Subscriptions[0]
	if r.Failed != 1 || r.Unconfirmed != 1 || r.Phantom != 1 {
		t.Errorf("failed=%d unconfirmed=%d phantom=%d, want 1 1 1", r.Failed, r.Unconfirmed, r.Phantom)
	}
	if s.Delivered != 2 || r.Lost != 0 || r.Duplicates != 1 || r.OutOfOrderKey != 0 || r.OutOfOrderProducer != 0 {
		t.Errorf("delivered=%d lost=%d dups=%d ook=%d oop=%d, want 2 0 1 0 0", s.Delivered, r.Lost, r.Duplicates, r.OutOfOrderKey, r.OutOfOrderProducer)
	}
}

// steady is a producer sending every 0.1 s from from to to (seconds),
// each acknowledged lat later unless its send falls in a stall, whose
// messages are all acknowledged at the stall's end (a reconnect).
func steady(p string, from, to, lat float64, stalls ...[2]float64) []Attempt {
	var as []Attempt
	for i := 0; ; i++ {
		sent := from + float64(i)*0.1
		if sent > to+1e-9 {
			return as
		}
		ack := sent + lat
		for _, s := range stalls {
			if sent >= s[0] && sent < s[1] || ack > s[0] && ack < s[1] {
				ack = s[1]
			}
		}
		as = append(as, ackedAttempt(p, "t", int64(i), "", sent, ack))
	}
}

// A fault's RTO is its longest stall, not the first gap: a region cut off
// keeps acknowledging until its lease lapses (fault at 10, stall 13..17),
// and each fault's window ends at the next (the stall 31..33 belongs to
// fault 2, at 30).
func TestCheckRTOIsLongestStall(t *testing.T) {
	as := steady("p", 0, 50, 0.01, [2]float64{13, 17}, [2]float64{31, 33})
	ds := deliverInOrder(subA, as)
	h := history(as, ds, subA)
	h.Faults = []Fault{{Name: "partition", At: at(10)}, {Name: "kill", At: at(30)}}
	r := Check(h)
	if len(r.Faults) != 2 {
		t.Fatalf("faults: %+v", r.Faults)
	}
	near := func(got, want float64) bool { return got > want-0.05 && got < want+0.05 }
	if f := r.Faults[0]; !near(f.ProduceRTO, 4.09) || !near(f.ConsumeRTO, 4.09) || !f.ProduceRecovered || !f.ConsumeRecovered {
		t.Errorf("partition: %+v, want produce and consume RTO 4.09 s (the last ack 12.91, the next at the stall's end, 17)", f)
	}
	if f := r.Faults[0]; !near(f.ProduceStallFrom.Sub(t0).Seconds(), 12.91) {
		t.Errorf("partition: stall from %v, want 12.91 s", f.ProduceStallFrom.Sub(t0))
	}
	if f := r.Faults[1]; !near(f.ProduceRTO, 2.09) || !near(f.ConsumeRTO, 2.09) {
		t.Errorf("kill: %+v, want 2.09 s (30.91 → 33)", f)
	}
	if !near(r.MaxRTOProduce, 4.09) || !near(r.MaxRTOConsume, 4.09) {
		t.Errorf("max rto = %g/%g, want 4.09/4.09", r.MaxRTOProduce, r.MaxRTOConsume)
	}
	// The quiet after the producers stop is no stall.
	h.Faults = []Fault{{Name: "late", At: at(45)}}
	if r := Check(h); !near(r.MaxRTOProduce, 0.1) {
		t.Errorf("a fault near the end: produce RTO %g, want the send interval", r.MaxRTOProduce)
	}
}

// A producer blocked by a full queue stops sending: the stall runs to
// when the workload stopped it (StopAt), not to its last send (an
// owner-broker-crash run reported 5 s for a 25 s stall).
func TestCheckRTOBlockedProducer(t *testing.T) {
	as := steady("p", 0, 15, 0.01, [2]float64{10, 39.6})
	h := history(as, deliverInOrder(subA, as), subA)
	h.StopAt = at(35)
	h.Faults = []Fault{{Name: "kill owner", At: at(10)}}
	r := Check(h)
	if f := r.Faults[0]; f.ProduceRTO < 24.9 {
		t.Errorf("blocked producer: produce RTO %g s, want the stall up to StopAt (about 25 s)", f.ProduceRTO)
	}
}

// A fault after which no message sent later is ever acknowledged (or
// delivered) has not recovered: its RTO runs to the end of the history.
func TestCheckRTONotRecovered(t *testing.T) {
	as := steady("p", 0, 10, 0.01)
	as = append(as, failedAttempt("p", "t", 200, "", 12), failedAttempt("p", "t", 201, "", 20))
	h := history(as, deliverInOrder(subA, as[:len(as)-2]), subA)
	h.End = at(60)
	h.Faults = []Fault{{Name: "kill", At: at(11)}}
	r := Check(h)
	f := r.Faults[0]
	if f.ProduceRecovered || f.ConsumeRecovered || f.ProduceRTO != 49 || f.ConsumeRTO != 49 {
		t.Errorf("unrecovered fault: %+v, want not recovered, RTO 49 s", f)
	}
}

func TestCheckAcksIn(t *testing.T) {
	var as []Attempt
	for i := 0; i < 100; i++ { // 100 acks in [0, 10): 10/s
		as = append(as, ackedAttempt("p", "t", int64(i), "", float64(i)*0.1, float64(i)*0.1))
	}
	for i := 100; i < 150; i++ { // after the fault: not counted
		as = append(as, ackedAttempt("p", "t", int64(i), "", 10+float64(i-100)*0.01, 10+float64(i-100)*0.01))
	}
	h := history(as, nil)
	h.Faults = []Fault{{Name: "late", At: at(40)}, {Name: "first", At: at(10)}}
	r := Check(h)
	if r.AckRateBeforeFault != 10 {
		t.Fatalf("rate = %g, want 10 (the earliest fault bounds the window)", r.AckRateBeforeFault)
	}
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{300 * time.Millisecond, 3}, {250 * time.Millisecond, 3}, {time.Second, 10}, {0, 0}} {
		if got := r.AcksIn(c.d); got != c.want {
			t.Errorf("AcksIn(%v) = %d, want %d", c.d, got, c.want)
		}
	}
	h.Faults = nil // whole run [0, 100): 150 acks
	if r := Check(h); r.AckRateBeforeFault != 1.5 {
		t.Errorf("rate without faults = %g, want 1.5", r.AckRateBeforeFault)
	}
	// 25 × 0.28 is 7.000000000000001 in floating point.
	if got := (Result{AckRateBeforeFault: 25}).AcksIn(280 * time.Millisecond); got != 7 {
		t.Errorf("25/s over 280ms = %d, want 7 (no float round-up)", got)
	}
}

func TestCheckSeries(t *testing.T) {
	a0 := ackedAttempt("p", "t", 0, "", 0.2, 0.5)
	a1 := ackedAttempt("p", "t", 1, "", 0.6, 1.2)
	a1.Region = ""
	a2 := ackedAttempt("p", "t", 2, "", 0.7, 1.9)
	ds := []Delivery{deliver(subA, a0, 1.5), deliver(subA, a1, 1.7), deliver(subA, a1, 1.8), deliver(subA, a2, 2.5)}
	ds[1].Region = ""
	r := Check(history([]Attempt{a0, a1, a2}, ds, subA))
	want := []Point{
		{T: 0, Region: "east", Acked: 1},
		{T: 1, Region: "east", Acked: 1},
		{T: 1, Region: "unknown", Acked: 1, Delivered: 1},
		{T: 1, Region: "west", Delivered: 1}, // the redelivery at 1.8 does not count
		{T: 2, Region: "west", Delivered: 1},
	}
	if fmt.Sprint(r.Series) != fmt.Sprint(want) {
		t.Errorf("series = %+v\nwant     %+v", r.Series, want)
	}
}

func TestResultJSONSnakeCase(t *testing.T) {
	as := workload("t", []string{"p"}, 2)
	h := history(as, deliverInOrder(subA, as[:1]), subA)
	h.Faults = []Fault{{Name: "f", At: at(0.05)}}
	b, err := json.Marshal(Check(h))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"out_of_order_producer":`, `"rpo_messages":`, `"max_rto_consume":`, `"ack_rate_before_fault":`,
		`"lost_messages":[{"producer":"p"`, `"msg_id":"p:1"`, `"produce_recovered":`, `"series":[{"t":0`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("report json lacks %s: %s", k, b)
		}
	}
}

// A failover moves one producer's acknowledgements from east to west
// once; two regions acknowledging at the same time interleave. Unknown
// regions and unacknowledged attempts do not count; producers are
// counted apart and the figure is their maximum.
func TestCheckAckRegionSwitches(t *testing.T) {
	as := workload("t", []string{"p", "q"}, 20)
	for i := range as {
		if as[i].Producer == "p" && as[i].Seq >= 10 {
			as[i].Region = "west" // p fails over once at seq 10
		}
		if as[i].Producer == "q" && as[i].Seq == 5 {
			as[i].Region = "" // unknown: skipped
		}
	}
	as = append(as, failedAttempt("p", "t", 20, "k0", 2.5))
	r := Check(History{Start: t0, End: at(10), Attempts: as})
	if r.AckRegionSwitches != 1 {
		t.Fatalf("one failover: %d switches, want 1", r.AckRegionSwitches)
	}
	// Split brain: q's acknowledgements alternate between the regions.
	for i := range as {
		if as[i].Producer == "q" && as[i].Seq >= 10 && as[i].Seq%2 == 0 {
			as[i].Region = "west"
		}
	}
	r = Check(History{Start: t0, End: at(10), Attempts: as})
	if r.AckRegionSwitches != 10 {
		t.Fatalf("interleaved acknowledgements: %d switches, want 10", r.AckRegionSwitches)
	}
	if v := Evaluate([]Expectation{{Name: "ack_region_switches", Expr: "<= 1"}}, r, nil)[0]; v.Pass || v.Actual != "10" {
		t.Fatalf("ack_region_switches <= 1 with 10 switches: %+v", v)
	}
}

// A reader (a subscription made after the fault) reads the backlog in a
// burst: its deliveries count for loss, not for the consume RTO.
func TestCheckReadersLeftOutOfConsumeRTO(t *testing.T) {
	subB := Sub{Topic: "t", Name: "b"}
	as := steady("p", 0, 50, 0.01, [2]float64{13, 17})
	ds := deliverInOrder(subA, as)
	for _, a := range as[:len(as)/2] {
		ds = append(ds, deliver(subB, a, 15)) // the reader's backlog read, inside the stall
	}
	h := history(as, ds, subA, subB)
	h.Faults = []Fault{{Name: "kill", At: at(10)}}
	near := func(got, want float64) bool { return got > want-0.05 && got < want+0.05 }
	if r := Check(h); near(r.MaxRTOConsume, 4.09) {
		t.Fatalf("without Readers the reader's burst should split the stall: consume RTO %g", r.MaxRTOConsume)
	}
	h.Readers = []Sub{subB}
	r := Check(h)
	if !near(r.MaxRTOConsume, 4.09) {
		t.Errorf("consume RTO %g, want 4.09 s (the live subscription's stall)", r.MaxRTOConsume)
	}
	if r.Lost != len(as)-len(as)/2 {
		t.Errorf("lost %d, want the %d messages the reader never got", r.Lost, len(as)-len(as)/2)
	}
}
