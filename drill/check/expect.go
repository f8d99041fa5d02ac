package check

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Expectation is one bound a drill file states, e.g. {"lost", "0"} or
// {"duplicates", "<= acks_in(300ms)"}.
//
// Names and their figures in Result: lost, duplicates, late,
// out_of_order_producer, out_of_order_key, rpo_messages,
// ack_region_switches (counts);
// rpo_seconds, rto_produce, rto_consume (seconds; the rto figures are the
// maxima over faults); topics_acked_by_two_regions_in_one_epoch (count)
// and topic_resume_produce_max, topic_resume_consume_max (seconds: the
// largest resume of one topic after any fault), from Result.Cut. Two names take words instead of a bound:
// "late: listed" always passes (late messages are listed in the result)
// and "order: per-key | per-producer | none" requires OutOfOrderKey == 0,
// OutOfOrderProducer == 0, or nothing.
//
// Expr is an optional operator (<=, <, ==, >=, >; none means ==) followed
// by one operand: a number; a duration such as 10s or 300ms (seconds
// figures only, compared in seconds); acks_in(DURATION), Result.AcksIn
// (count figures only); or the name of a variable passed to Evaluate.
// Bounds joined by " and " must all hold (">= 150ms and <= 350ms").
type Expectation struct {
	Name string `json:"name"`
	Expr string `json:"expr"`
}

// Verdict is the judgement of one Expectation. Actual is the figure as
// measured, Bound the expression with its operand resolved. Err is set
// when the expectation could not be judged (unknown name, malformed
// expression, missing variable); Pass is then false.
type Verdict struct {
	Name   string `json:"name"`
	Expr   string `json:"expr"`
	Actual string `json:"actual"`
	Bound  string `json:"bound"`
	Pass   bool   `json:"pass"`
	Err    string `json:"err,omitempty"`
}

// ParseExpectations turns a drill file's expect map into expectations,
// sorted by name for a stable report.
func ParseExpectations(m map[string]string) []Expectation {
	out := make([]Expectation, 0, len(m))
	for name, expr := range m {
		out = append(out, Expectation{Name: name, Expr: expr})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Evaluate judges each expectation against r, in order. vars holds the
// values the expressions may name (e.g. replication_backlog_at_fault).
// It never panics and never passes what it could not judge.
func Evaluate(exps []Expectation, r Result, vars map[string]float64) []Verdict {
	out := make([]Verdict, 0, len(exps))
	for _, e := range exps {
		out = append(out, evaluate(e, r, vars))
	}
	return out
}

// unit is what a figure measures.
type unit int

const (
	count   unit = iota // messages
	seconds             // seconds
)

// figure is a measured value an expectation can bound.
type figure struct {
	unit  unit
	value float64
	// unrecovered names the faults that never recovered, for the RTO
	// figures: any bound on them fails.
	unrecovered []string
}

// figureOf returns the figure named name.
func figureOf(name string, r Result) (figure, bool) {
	switch name {
	case "lost":
		return figure{unit: count, value: float64(r.Lost)}, true
	case "duplicates":
		return figure{unit: count, value: float64(r.Duplicates)}, true
	case "late":
		return figure{unit: count, value: float64(r.Late)}, true
	case "out_of_order_producer":
		return figure{unit: count, value: float64(r.OutOfOrderProducer)}, true
	case "out_of_order_key":
		return figure{unit: count, value: float64(r.OutOfOrderKey)}, true
	case "rpo_messages":
		return figure{unit: count, value: float64(r.RPOMessages)}, true
	case "ack_region_switches":
		return figure{unit: count, value: float64(r.AckRegionSwitches)}, true
	case "rpo_seconds":
		return figure{unit: seconds, value: r.RPOSeconds}, true
	case "rto_produce":
		return figure{seconds, r.MaxRTOProduce, unrecovered(r.Faults, false)}, true
	case "rto_consume":
		return figure{seconds, r.MaxRTOConsume, unrecovered(r.Faults, true)}, true
	case "topics_acked_by_two_regions_in_one_epoch":
		return figure{unit: count, value: float64(r.Cut.TwoRegionTopics)}, true
	case "topic_resume_produce_max":
		return figure{seconds, r.Cut.ResumeProduceMax, unrecoveredTopics(r.Cut, false)}, true
	case "topic_resume_consume_max":
		return figure{seconds, r.Cut.ResumeConsumeMax, unrecoveredTopics(r.Cut, true)}, true
	}
	if f, ok := publishFigure(name, r); ok {
		return f, true
	}
	if f, ok := lostInFigure(name, r); ok {
		return f, true
	}
	if v, ok := r.Measured[name]; ok {
		return figure{unit: count, value: v}, true
	}
	return figure{}, false
}

// unrecoveredTopics names, per fault, how many topics never resumed
// produce (or consume).
func unrecoveredTopics(c CutResult, consume bool) []string {
	var out []string
	for i, s := range c.Spread {
		n := 0
		for _, t := range c.Topics {
			if i >= len(t.Resume) {
				continue
			}
			ok := t.Resume[i].ProduceRecovered
			if consume {
				ok = t.Resume[i].ConsumeRecovered
			}
			if !ok {
				n++
			}
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("%s: %d topics", s.Fault, n))
		}
	}
	return out
}

// unrecovered names the faults whose produce (or consume) never recovered.
func unrecovered(fs []FaultRTO, consume bool) []string {
	var names []string
	for _, f := range fs {
		ok := f.ProduceRecovered
		if consume {
			ok = f.ConsumeRecovered
		}
		if !ok {
			names = append(names, f.Fault)
		}
	}
	return names
}

func evaluate(e Expectation, r Result, vars map[string]float64) Verdict {
	v := Verdict{Name: e.Name, Expr: e.Expr}
	expr := strings.TrimSpace(e.Expr)
	switch {
	case e.Name == "order":
		return evaluateOrder(v, expr, r)
	case e.Name == "late" && expr == "listed":
		v.Actual, v.Bound, v.Pass = strconv.Itoa(r.Late), "listed", true
		return v
	}
	fig, ok := figureOf(e.Name, r)
	if !ok {
		return failed(v, fmt.Sprintf("unknown expectation %q", e.Name))
	}
	// "A and B": both bounds hold (a range: ">= 150ms and <= 350ms").
	v.Actual = format(fig.value, fig.unit)
	v.Pass = true
	var bounds []string
	for _, part := range strings.Split(expr, " and ") {
		op, operand := splitOperator(strings.TrimSpace(part))
		bound, text, err := resolve(operand, fig.unit, r, vars)
		if err != nil {
			return failed(v, fmt.Sprintf("%s: %v", e.Name, err))
		}
		bounds = append(bounds, op+" "+text)
		v.Pass = v.Pass && compare(fig.value, op, bound)
	}
	v.Bound = strings.Join(bounds, " and ")
	if len(fig.unrecovered) > 0 {
		v.Actual += " (not recovered: " + strings.Join(fig.unrecovered, ", ") + ")"
		v.Pass = false
	}
	return v
}

// evaluateOrder judges "order: per-key | per-producer | none".
func evaluateOrder(v Verdict, expr string, r Result) Verdict {
	v.Actual = fmt.Sprintf("out_of_order_key=%d out_of_order_producer=%d", r.OutOfOrderKey, r.OutOfOrderProducer)
	v.Bound = expr
	switch expr {
	case "per-key":
		v.Pass = r.OutOfOrderKey == 0
	case "per-producer":
		v.Pass = r.OutOfOrderProducer == 0
	case "none":
		v.Pass = true
	default:
		return failed(v, fmt.Sprintf("order: want per-key, per-producer or none, got %q", expr))
	}
	return v
}

func failed(v Verdict, err string) Verdict {
	v.Pass = false
	v.Err = err
	return v
}

// splitOperator splits a leading comparison operator off expr; without
// one the operator is ==.
func splitOperator(expr string) (op, operand string) {
	for _, op := range []string{"<=", ">=", "==", "<", ">"} {
		if rest, ok := strings.CutPrefix(expr, op); ok {
			return op, strings.TrimSpace(rest)
		}
	}
	return "==", expr
}

// resolve evaluates an operand to a value in the figure's unit and a text
// for the report.
func resolve(operand string, u unit, r Result, vars map[string]float64) (float64, string, error) {
	switch {
	case operand == "":
		return 0, "", fmt.Errorf("missing operand")
	case strings.HasPrefix(operand, "acks_in("):
		return resolveAcksIn(operand, u, r)
	case startsNumber(operand):
		return resolveNumber(operand, u)
	case isIdentifier(operand):
		return resolveVar(operand, u, vars)
	}
	return 0, "", fmt.Errorf("malformed operand %q", operand)
}

func resolveAcksIn(operand string, u unit, r Result) (float64, string, error) {
	arg, ok := strings.CutSuffix(strings.TrimPrefix(operand, "acks_in("), ")")
	if !ok {
		return 0, "", fmt.Errorf("malformed %q: missing )", operand)
	}
	d, err := time.ParseDuration(strings.TrimSpace(arg))
	if err != nil {
		return 0, "", fmt.Errorf("malformed %q: %v", operand, err)
	}
	if u != count {
		return 0, "", fmt.Errorf("acks_in bounds a count, not seconds")
	}
	n := r.AcksIn(d)
	return float64(n), fmt.Sprintf("%d (%s)", n, operand), nil
}

// resolveNumber reads a plain number, or a duration for a seconds figure.
func resolveNumber(operand string, u unit) (float64, string, error) {
	if f, err := strconv.ParseFloat(operand, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, "", fmt.Errorf("malformed number %q", operand)
		}
		return f, format(f, u), nil
	}
	d, err := time.ParseDuration(operand)
	if err != nil {
		return 0, "", fmt.Errorf("malformed operand %q: not a number or duration", operand)
	}
	if u != seconds {
		return 0, "", fmt.Errorf("duration %s bounds seconds, not a count", operand)
	}
	return d.Seconds(), format(d.Seconds(), u), nil
}

func resolveVar(name string, u unit, vars map[string]float64) (float64, string, error) {
	f, ok := vars[name]
	if !ok {
		return 0, "", fmt.Errorf("unknown variable %q", name)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, "", fmt.Errorf("variable %q is %v", name, f)
	}
	return f, fmt.Sprintf("%s (%s)", format(f, u), name), nil
}

// startsNumber reports whether s begins like a number or a duration.
func startsNumber(s string) bool {
	c := s[0]
	return c >= '0' && c <= '9' || c == '.' || c == '-' || c == '+'
}

// isIdentifier reports whether s is a variable name: [A-Za-z_][A-Za-z0-9_]*.
func isIdentifier(s string) bool {
	for i, c := range s {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}

func compare(actual float64, op string, bound float64) bool {
	switch op {
	case "<=":
		return actual <= bound
	case "<":
		return actual < bound
	case ">=":
		return actual >= bound
	case ">":
		return actual > bound
	}
	return actual == bound
}

// format renders a value of unit u: "3" or "2.5s" (seconds to the
// millisecond).
func format(f float64, u unit) string {
	if u == seconds {
		return strconv.FormatFloat(math.Round(f*1000)/1000, 'f', -1, 64) + "s"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// lostInFigure is lost_acked_in[REGION]: the lost messages (counted per
// subscription, as lost is) that REGION acknowledged — by the ledger of
// their receipt. A region that acknowledged nothing is no figure: a typo
// must not pass.
func lostInFigure(name string, r Result) (figure, bool) {
	region, ok := strings.CutPrefix(name, "lost_acked_in[")
	if !ok || !strings.HasSuffix(region, "]") {
		return figure{}, false
	}
	region = strings.TrimSuffix(region, "]")
	if !slices.ContainsFunc(r.Series, func(p Point) bool { return p.Region == region && p.Acked > 0 }) {
		return figure{}, false
	}
	n := 0
	for _, s := range r.Subscriptions {
		for _, m := range s.LostMessages {
			if m.Region == region {
				n++
			}
		}
	}
	return figure{unit: count, value: float64(n)}, true
}
