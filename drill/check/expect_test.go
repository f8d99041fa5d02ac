package check

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// judged is a result with distinct, easily told apart figures.
func judged() Result {
	return Result{
		Lost: 2, Duplicates: 3, Late: 4, OutOfOrderProducer: 0, OutOfOrderKey: 1,
		RPOMessages: 6, RPOSeconds: 1.5,
		MaxRTOProduce: 5, MaxRTOConsume: 7.25,
		Faults: []FaultRTO{
			{Fault: "kill", ProduceRTO: 5, ProduceRecovered: true, ConsumeRTO: 7.25, ConsumeRecovered: true},
		},
		AckRateBeforeFault: 10,
	}
}

// one evaluates a single expectation against r.
func one(t *testing.T, name, expr string, r Result, vars map[string]float64) Verdict {
	t.Helper()
	vs := Evaluate([]Expectation{{Name: name, Expr: expr}}, r, vars)
	if len(vs) != 1 {
		t.Fatalf("Evaluate returned %d verdicts, want 1", len(vs))
	}
	v := vs[0]
	if v.Name != name || v.Expr != expr {
		t.Errorf("verdict names %q %q, want %q %q", v.Name, v.Expr, name, expr)
	}
	return v
}

type expectCase struct {
	name, expr string
	pass       bool
}

func runCases(t *testing.T, r Result, vars map[string]float64, cases []expectCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name+": "+c.expr, func(t *testing.T) {
			v := one(t, c.name, c.expr, r, vars)
			if v.Err != "" {
				t.Fatalf("unexpected error %q", v.Err)
			}
			if v.Pass != c.pass {
				t.Errorf("pass = %v, want %v (actual %s, bound %s)", v.Pass, c.pass, v.Actual, v.Bound)
			}
		})
	}
}

func TestParseExpectationsSorted(t *testing.T) {
	got := ParseExpectations(map[string]string{"rto_produce": "<= 10s", "lost": "0", "duplicates": "<= acks_in(300ms)", "late": "listed"})
	want := []Expectation{{"duplicates", "<= acks_in(300ms)"}, {"late", "listed"}, {"lost", "0"}, {"rto_produce", "<= 10s"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestEvaluateOperators(t *testing.T) { // lost is 2
	runCases(t, judged(), nil, []expectCase{
		{"lost", "<= 2", true}, {"lost", "<= 1", false},
		{"lost", "< 3", true}, {"lost", "< 2", false},
		{"lost", "== 2", true}, {"lost", "== 1", false},
		{"lost", "2", true}, {"lost", "0", false},
		{"lost", ">= 2", true}, {"lost", ">= 3", false},
		{"lost", "> 1", true}, {"lost", "> 2", false},
		{"lost", "<=2", true}, {"lost", "  <=   1.5 ", false},
	})
}

func TestEvaluateEachFigure(t *testing.T) {
	runCases(t, judged(), nil, []expectCase{
		{"duplicates", "3", true}, {"duplicates", "2", false},
		{"late", "4", true}, {"late", "0", false},
		{"out_of_order_producer", "0", true}, {"out_of_order_producer", "> 0", false},
		{"out_of_order_key", "1", true}, {"out_of_order_key", "0", false},
		{"rpo_messages", "6", true}, {"rpo_messages", "<= 5", false},
		{"rpo_seconds", "1.5", true}, {"rpo_seconds", "< 1500ms", false},
		{"rto_produce", "5s", true}, {"rto_produce", "< 5s", false},
		{"rto_consume", "7.25", true}, {"rto_consume", "< 7s", false},
	})
}

func TestEvaluateDurations(t *testing.T) { // rto_consume is 7.25s
	runCases(t, judged(), nil, []expectCase{
		{"rto_consume", "<= 10s", true}, {"rto_consume", "<= 7s", false},
		{"rto_consume", "<= 7250ms", true}, {"rto_consume", "<= 7249ms", false},
		{"rto_consume", "<= 1m", true}, {"rto_consume", "<= 8", true}, {"rto_consume", "<= 7", false},
	})
	v := one(t, "rto_consume", "<= 10s", judged(), nil)
	if v.Actual != "7.25s" || v.Bound != "<= 10s" {
		t.Errorf("actual %q bound %q, want 7.25s and <= 10s", v.Actual, v.Bound)
	}
}

// "A and B": a range; both bounds must hold, and a malformed part fails
// the whole expectation.
func TestEvaluateRange(t *testing.T) { // rto_consume is 7.25s, lost is 2
	runCases(t, judged(), nil, []expectCase{
		{"rto_consume", ">= 7s and <= 8s", true}, {"rto_consume", ">= 7.5s and <= 8s", false},
		{"rto_consume", ">= 7s and <= 7.2s", false}, {"lost", ">= 1 and <= 2", true}, {"lost", "> 2 and < 5", false},
	})
	v := one(t, "rto_consume", ">= 7s and <= 8s", judged(), nil)
	if v.Bound != ">= 7s and <= 8s" {
		t.Errorf("bound %q", v.Bound)
	}
	if v := one(t, "rto_consume", ">= 7s and <= banana", judged(), nil); v.Pass || v.Err == "" {
		t.Errorf("a malformed second bound: %+v, want an error", v)
	}
}

func TestEvaluateUnrecoveredFaultFailsRTO(t *testing.T) {
	r := judged()
	r.Faults = append(r.Faults, FaultRTO{Fault: "partition", ProduceRTO: 3, ProduceRecovered: true, ConsumeRTO: 4})
	if v := one(t, "rto_consume", "<= 1h", r, nil); v.Pass || v.Err != "" || !strings.Contains(v.Actual, "not recovered: partition") {
		t.Errorf("rto_consume with an unrecovered fault: %+v, want a failure naming it", v)
	}
	if v := one(t, "rto_produce", "<= 1h", r, nil); !v.Pass {
		t.Errorf("rto_produce recovered everywhere: %+v, want pass", v)
	}
}

func TestEvaluateVariable(t *testing.T) { // lost is 2
	vars := map[string]float64{"replication_backlog_at_fault": 3, "small": 1}
	runCases(t, judged(), vars, []expectCase{
		{"lost", "<= replication_backlog_at_fault", true},
		{"lost", "<= small", false},
		{"lost", "== replication_backlog_at_fault", false},
	})
	v := one(t, "lost", "<= replication_backlog_at_fault", judged(), vars)
	if v.Bound != "<= 3 (replication_backlog_at_fault)" {
		t.Errorf("bound %q", v.Bound)
	}
	v = one(t, "lost", "<= replication_backlog_at_fault", judged(), nil)
	if v.Pass || !strings.Contains(v.Err, "unknown variable") {
		t.Errorf("missing variable: %+v, want failure with Err", v)
	}
}

func TestEvaluateAcksIn(t *testing.T) { // duplicates is 3, 10 acks/s
	runCases(t, judged(), nil, []expectCase{
		{"duplicates", "<= acks_in(300ms)", true},
		{"duplicates", "<= acks_in(250ms)", true}, // 2.5 rounds up to 3
		{"duplicates", "<= acks_in(200ms)", false},
		{"duplicates", "< acks_in(1s)", true},
	})
	if v := one(t, "duplicates", "<= acks_in(300ms)", judged(), nil); v.Bound != "<= 3 (acks_in(300ms))" || v.Actual != "3" {
		t.Errorf("actual %q bound %q", v.Actual, v.Bound)
	}
	if got := judged().AcksIn(300 * time.Millisecond); got != 3 {
		t.Errorf("AcksIn(300ms) = %d, want 3", got)
	}
}

func TestEvaluateLateListed(t *testing.T) {
	v := one(t, "late", "listed", judged(), nil)
	if !v.Pass || v.Err != "" || v.Actual != "4" {
		t.Errorf("late: listed = %+v, want pass with actual 4", v)
	}
	if v := one(t, "late", "0", judged(), nil); v.Pass {
		t.Errorf("late: 0 with 4 late = %+v, want failure", v)
	}
}

func TestEvaluateOrder(t *testing.T) { // 1 out of order by key, 0 by producer
	runCases(t, judged(), nil, []expectCase{
		{"order", "per-key", false},
		{"order", "per-producer", true},
		{"order", "none", true},
	})
	r := judged()
	r.OutOfOrderKey, r.OutOfOrderProducer = 0, 2
	runCases(t, r, nil, []expectCase{{"order", "per-key", true}, {"order", "per-producer", false}})
	if v := one(t, "order", "total", judged(), nil); v.Pass || v.Err == "" {
		t.Errorf("order: total = %+v, want failure with Err", v)
	}
}

func TestEvaluateUnknownName(t *testing.T) {
	v := one(t, "lots", "0", judged(), nil)
	if v.Pass || !strings.Contains(v.Err, "unknown expectation") {
		t.Errorf("unknown name = %+v, want failure with Err", v)
	}
}

func TestEvaluateMalformed(t *testing.T) {
	for _, c := range []struct{ name, expr string }{
		{"lost", ""},
		{"lost", "<="},
		{"lost", "<= ten seconds"},
		{"lost", "=< 1"},
		{"lost", "!= 1"},
		{"lost", "<= 1 2"},
		{"lost", "<= NaN"},
		{"lost", "<= +Inf"},
		{"lost", "listed"},
		{"lost", "<= 10s"}, // a duration does not bound a count
		{"rto_consume", "<= 10 s"},
		{"rto_consume", "<= acks_in(300ms)"}, // acks_in does not bound seconds
		{"duplicates", "<= acks_in(3 apples)"},
		{"duplicates", "<= acks_in(300ms"},
		{"duplicates", "<= acks_in()"},
	} {
		t.Run(c.name+": "+c.expr, func(t *testing.T) {
			v := one(t, c.name, c.expr, judged(), map[string]float64{"ten": 10})
			if v.Pass || v.Err == "" {
				t.Errorf("verdict %+v, want failure with Err", v)
			}
		})
	}
}

func TestEvaluateKeepsOrder(t *testing.T) {
	exps := []Expectation{{"rto_produce", "<= 10s"}, {"bogus", "1"}, {"lost", "2"}}
	vs := Evaluate(exps, judged(), nil)
	if len(vs) != 3 || vs[0].Name != "rto_produce" || vs[1].Name != "bogus" || vs[2].Name != "lost" {
		t.Fatalf("verdicts %+v", vs)
	}
	if !vs[0].Pass || vs[1].Pass || !vs[2].Pass {
		t.Errorf("pass = %v %v %v, want true false true", vs[0].Pass, vs[1].Pass, vs[2].Pass)
	}
}

// lost_acked_in[REGION] counts the lost messages REGION acknowledged, per
// subscription as lost does; a region that acknowledged nothing (a typo)
// is no figure and fails.
func TestEvaluateLostAckedIn(t *testing.T) {
	r := judged()
	r.Series = []Point{{T: 0, Region: "east", Acked: 5}, {T: 20, Region: "west", Acked: 5}}
	r.Subscriptions = []SubResult{
		{Name: "ex", LostMessages: []Message{{Seq: 1, Region: "east"}, {Seq: 7, Region: "west"}}},
		{Name: "ks", LostMessages: []Message{{Seq: 7, Region: "west"}, {Seq: 8}}},
	}
	runCases(t, r, nil, []expectCase{
		{"lost_acked_in[west]", "0", false},
		{"lost_acked_in[west]", "2", true},
		{"lost_acked_in[east]", "1", true},
	})
	if v := one(t, "lost_acked_in[wset]", "0", r, nil); v.Pass {
		t.Errorf("a region that acknowledged nothing: %+v, want a failure", v)
	}
}
