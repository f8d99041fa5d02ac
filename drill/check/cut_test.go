package check

import (
	"fmt"
	"testing"
)

// cutHistory is topics t-0 … t-(n-1) of public/ps, one message a
// topic every 0.1 s from 0 to 10 s, acknowledged 0.05 s later, each
// delivered 0.1 s after its receipt to subscription s, except that topic
// i sends nothing for pause(i) steps of 0.1 s from 5 s (a switchover
// asked at 5 s holds it); region gives each receipt's region; epoch 1
// (east) since before the start, epoch 2 (west) since 5.2 s.
func cutHistory(n int, region func(topic int, sec float64) string, pause func(topic int) int) History {
	h := History{Start: at(0), End: at(12), Epochs: []Epoch{
		{Namespace: "public/ps", Epoch: 2, Active: "west", Since: at(5.2)},
		{Namespace: "public/ps", Epoch: 1, Active: "east", Since: at(-30)},
	}, Faults: []Fault{{Name: "switchover public/ps to west", At: at(5), EndAt: at(5.3)}}}
	for i := range n {
		topic := fmt.Sprintf("persistent://public/ps/t-%d", i)
		s := Sub{Topic: topic, Name: "s"}
		h.Subscriptions = append(h.Subscriptions, s)
		seq := int64(0)
		for step := range 100 {
			if step >= 50 && step < 50+pause(i) {
				continue // held
			}
			sent := float64(step) / 10
			ack := sent + 0.05
			a := ackedAttempt(fmt.Sprintf("p-%d", i), topic, seq, "k", sent, ack)
			a.Region = region(i, ack)
			seq++
			h.Attempts = append(h.Attempts, a)
			h.Deliveries = append(h.Deliveries, deliver(s, a, ack+0.1))
		}
	}
	return h
}

func eastThenWest(_ int, sec float64) string {
	if sec < 5.2 {
		return "east"
	}
	return "west"
}

// Issue 33 item 4: each topic's receipts are counted under the epoch in
// force when they came, by region; a namespace that moved at one epoch
// has every topic acknowledged by one region per epoch.
func TestCutCountsEachTopicsReceiptsByEpochAndRegion(t *testing.T) {
	h := cutHistory(3, eastThenWest, func(int) int { return 5 })
	c := Cut(h)
	if len(c.Topics) != 3 || c.TwoRegionTopics != 0 {
		t.Fatalf("topics %d, two-region topics %d; want 3 and 0", len(c.Topics), c.TwoRegionTopics)
	}
	for _, tc := range c.Topics {
		if len(tc.Epochs) != 2 {
			t.Fatalf("%s: epochs %+v, want 2", tc.Topic, tc.Epochs)
		}
		e1, e2 := tc.Epochs[0], tc.Epochs[1]
		if e1.Epoch != 1 || e1.Active != "east" || e1.Regions["east"] != 50 || len(e1.Regions) != 1 {
			t.Errorf("%s epoch 1: %+v, want east 50 only", tc.Topic, e1)
		}
		if e2.Epoch != 2 || e2.Active != "west" || e2.Regions["west"] != 45 || len(e2.Regions) != 1 {
			t.Errorf("%s epoch 2: %+v, want west 45 only", tc.Topic, e2)
		}
		if tc.TwoRegions {
			t.Errorf("%s: two regions in one epoch reported", tc.Topic)
		}
	}
}

// A topic the old region still acknowledged after the new epoch (a split)
// is reported, and only that topic; receipts of an unknown region (an id
// in a ledger both copies hold) do not make a split.
func TestCutReportsATopicAcknowledgedByTwoRegionsInOneEpoch(t *testing.T) {
	h := cutHistory(4, func(topic int, sec float64) string {
		switch {
		case topic == 2 && sec < 7:
			return "east" // east kept acknowledging t-2 in epoch 2
		case topic == 3 && sec >= 5.2 && sec < 6:
			return "" // unknown
		}
		return eastThenWest(topic, sec)
	}, func(int) int { return 5 })
	c := Cut(h)
	if c.TwoRegionTopics != 1 {
		t.Fatalf("two-region topics %d, want 1 (t-2)", c.TwoRegionTopics)
	}
	for _, tc := range c.Topics {
		want := tc.Topic == "persistent://public/ps/t-2"
		if tc.TwoRegions != want {
			t.Errorf("%s: two regions %v, want %v (%+v)", tc.Topic, tc.TwoRegions, want, tc.Epochs)
		}
	}
	if got := c.Topics[3].Epochs[1].Regions["unknown"]; got == 0 {
		t.Errorf("t-3's unknown receipts not counted: %+v", c.Topics[3].Epochs)
	}
	r := Check(h)
	v := Evaluate([]Expectation{{Name: "topics_acked_by_two_regions_in_one_epoch", Expr: "0"}}, r, nil)
	if v[0].Pass || v[0].Actual != "1" {
		t.Errorf("expectation on a split: %+v, want a failure with 1", v[0])
	}
}

// Each topic's resume is its own longest stall after the fault; the
// spread gives min, median and max over the topics, and the max is the
// figure topic_resume_produce_max.
func TestCutSpreadsTheTopicsResume(t *testing.T) {
	pauses := []int{5, 15, 10, 30} // topic i's pause, in steps of 0.1 s
	h := cutHistory(len(pauses), eastThenWest, func(i int) int { return pauses[i] })
	c := Cut(h)
	if len(c.Spread) != 1 {
		t.Fatalf("spread %+v, want one fault", c.Spread)
	}
	s := c.Spread[0]
	// A pause of k steps: from the fault at 5 s to the next receipt at
	// 5+k/10+0.05 s; consume from the delivery at 5.05 s to 5.15+k/10 s.
	near := func(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }
	if s.Topics != 4 || !near(s.ProduceMin, 0.55) || !near(s.ProduceMedian, 1.3) || !near(s.ProduceMax, 3.05) || s.NotRecovered != 0 {
		t.Errorf("spread %+v, want 4 topics, produce 0.55 / 1.3 / 3.05 s", s)
	}
	if !near(s.ConsumeMax, 3.1) {
		t.Errorf("consume max %.3f, want 3.1", s.ConsumeMax)
	}
	r := Check(h)
	v := Evaluate([]Expectation{{Name: "topic_resume_produce_max", Expr: "<= 2s"}, {Name: "topic_resume_produce_max", Expr: "<= 4s"}}, r, nil)
	if v[0].Pass || !v[1].Pass {
		t.Errorf("topic_resume_produce_max 3.05 s: <= 2s %v, <= 4s %v; want fail, pass", v[0].Pass, v[1].Pass)
	}
}

// A topic that never resumed is counted, not hidden in the figures, and
// fails a bound on the resume.
func TestCutCountsATopicThatNeverResumed(t *testing.T) {
	h := cutHistory(2, eastThenWest, func(i int) int { return []int{5, 100}[i] })
	c := Cut(h)
	if s := c.Spread[0]; s.NotRecovered != 1 || s.Topics != 2 {
		t.Fatalf("spread %+v, want 1 of 2 topics not resumed", s)
	}
	v := Evaluate([]Expectation{{Name: "topic_resume_produce_max", Expr: "<= 100s"}}, Check(h), nil)
	if v[0].Pass {
		t.Errorf("a topic that never resumed passed %+v", v[0])
	}
}

func TestMinMedianMax(t *testing.T) {
	for _, c := range []struct {
		in          []float64
		lo, med, hi float64
	}{
		{nil, 0, 0, 0},
		{[]float64{2}, 2, 2, 2},
		{[]float64{3, 1, 2}, 1, 2, 3},
		{[]float64{4, 1, 3, 2}, 1, 2.5, 4},
	} {
		lo, med, hi := minMedianMax(c.in)
		if lo != c.lo || med != c.med || hi != c.hi {
			t.Errorf("%v: %v %v %v, want %v %v %v", c.in, lo, med, hi, c.lo, c.med, c.hi)
		}
	}
}
