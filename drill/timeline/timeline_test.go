package timeline

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// typicalInput is a two-region drill: east is killed, the partition heals.
func typicalInput() Input {
	in := Input{
		Title:    "drill 7: kill east during partition",
		Duration: 60,
		Faults: []Marker{
			{T: 15, Label: "partition east|west"},
			{T: 16.5, Label: "kill region:east"},
		},
		Outages: []Interval{
			{From: 16.5, To: 20.7, Label: "produce RTO 4.2 s", Kind: "produce"},
			{From: 16.5, To: 23.1, Label: "consume RTO 6.6 s", Kind: "consume"},
		},
		Notes: []string{
			"partition: iptables owner match",
			"east restarted by the harness at t=40 s",
		},
	}
	for s := range 60 {
		t := float64(s)
		east, west := 1200, 800
		if s >= 16 && s < 40 {
			east = 0
		}
		if s >= 17 && s < 21 {
			west = 0
		}
		in.Rates = append(in.Rates,
			Rate{T: t, Region: "west", Produced: west, Consumed: west - 20},
			Rate{T: t, Region: "east", Produced: east, Consumed: max(east-30, 0)},
		)
		lagE, lagW := int64(10), int64(12)
		if s >= 15 && s < 45 {
			lagW = int64(s-15) * 900
		}
		if s >= 40 && s < 50 {
			lagE = int64(50-s) * 400
		}
		in.Lag = append(in.Lag, LagPoint{T: t, Region: "east", Entries: lagE}, LagPoint{T: t, Region: "west", Entries: lagW})
	}
	return in
}

func render(t *testing.T, in Input) string {
	t.Helper()
	var b bytes.Buffer
	if err := SVG(&b, in); err != nil {
		t.Fatalf("SVG: %v", err)
	}
	return b.String()
}

// elem is a parsed element with its attributes and direct character data.
type elem struct {
	name  string
	attrs map[string]string
	text  string
}

// parse decodes the document to EOF, failing the test if it is not
// well-formed, and returns its elements in document order.
func parse(t *testing.T, doc string) []elem {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	var out []elem
	var stack []int
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
			e := elem{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				out[stack[len(stack)-1]].text += string(tok)
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element is %q, want svg", root)
	}
	return out
}

func byClass(es []elem, name, class string) []elem {
	var out []elem
	for _, e := range es {
		if e.name == name && e.attrs["class"] == class {
			out = append(out, e)
		}
	}
	return out
}

func texts(es []elem) []string {
	var out []string
	for _, e := range es {
		if e.name == "text" || e.name == "title" {
			out = append(out, e.text)
		}
	}
	return out
}

func hasText(es []elem, want string) bool {
	for _, s := range texts(es) {
		if strings.Contains(s, want) {
			return true
		}
	}
	return false
}

func attrF(t *testing.T, e elem, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(e.attrs[name], 64)
	if err != nil {
		t.Fatalf("%s %s=%q: %v", e.name, name, e.attrs[name], err)
	}
	return v
}

func polyPoints(t *testing.T, e elem) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, p := range strings.Fields(e.attrs["points"]) {
		xs, ys, ok := strings.Cut(p, ",")
		if !ok {
			t.Fatalf("bad point %q", p)
		}
		x, err1 := strconv.ParseFloat(xs, 64)
		y, err2 := strconv.ParseFloat(ys, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad point %q", p)
		}
		out = append(out, [2]float64{x, y})
	}
	return out
}

var longFloat = regexp.MustCompile(`\d\.\d{7,}`)

// checkCompact fails on non-finite or long floats in the output.
func checkCompact(t *testing.T, doc string) {
	t.Helper()
	if m := longFloat.FindString(doc); m != "" {
		t.Errorf("output contains a long float %q", m)
	}
	for _, bad := range []string{"NaN", "Inf", "e+", "e-0"} {
		if strings.Contains(doc, bad) {
			t.Errorf("output contains %q", bad)
		}
	}
}

func TestSVGWellFormed(t *testing.T) {
	nasty := `<b>&"quoted" 'x' ]]> <!-- --> ` + "\x00\x1b\n\t"
	cases := map[string]Input{
		"typical": typicalInput(),
		"empty":   {},
		"one region": {
			Title: "one", Duration: 5,
			Rates: []Rate{{T: 0, Region: "east", Produced: 3, Consumed: 3}, {T: 4, Region: "east", Produced: 1}},
			Lag:   []LagPoint{{T: 2, Region: "east", Entries: 7}},
		},
		"nasty labels": {
			Title: nasty, Duration: 10,
			Rates:   []Rate{{T: 1, Region: nasty, Produced: 5, Consumed: 4}},
			Lag:     []LagPoint{{T: 1, Region: nasty, Entries: 3}},
			Faults:  []Marker{{T: 2, Label: nasty}},
			Outages: []Interval{{From: 2, To: 4, Label: nasty, Kind: nasty}},
			Notes:   []string{nasty},
		},
		"zero duration with data": {
			Rates: []Rate{{T: 9, Region: "a", Produced: 1}},
		},
		"zero duration, markers only": {
			Faults: []Marker{{T: 0, Label: "at zero"}}, Outages: []Interval{{From: 0, To: 0, Kind: "produce"}},
		},
		"non-finite values": {
			Duration: math.NaN(),
			Rates:    []Rate{{T: math.Inf(1), Region: "a", Produced: 1}, {T: math.NaN(), Region: "a"}, {T: 1, Region: "a", Produced: -5}},
			Lag:      []LagPoint{{T: math.NaN(), Region: "a", Entries: -1}},
			Faults:   []Marker{{T: math.Inf(-1)}, {T: 3}},
			Outages:  []Interval{{From: math.NaN(), To: 1}, {From: 5, To: 2, Kind: "consume"}},
		},
		"huge values": {
			Duration: 1e300,
			Rates:    []Rate{{T: 1, Region: "a", Produced: math.MaxInt32}},
			Lag:      []LagPoint{{T: 1, Region: "a", Entries: math.MaxInt64}},
			Faults:   []Marker{{T: 1e299, Label: "late"}},
		},
		"many close faults": {
			Duration: 20,
			Faults: []Marker{
				{T: 5, Label: "one long fault label"}, {T: 5, Label: "two long fault label"},
				{T: 5.1, Label: "three long fault label"}, {T: 5.2, Label: "four"}, {T: 5.3, Label: "five"},
				{T: 5.4, Label: "six"}, {T: 5.5, Label: "seven"}, {T: 19.9, Label: "right edge label that is long"},
			},
		},
		"many regions": func() Input {
			var in Input
			for i := range 20 {
				in.Rates = append(in.Rates, Rate{T: 0, Region: "r" + strconv.Itoa(i), Produced: i})
			}
			return in
		}(),
		"long notes": {
			Notes: []string{strings.Repeat("word ", 100), strings.Repeat("x", 400), "", "  ", "short"},
		},
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			doc := render(t, in)
			parse(t, doc)
			checkCompact(t, doc)
		})
	}
}

func TestSVGTypicalElements(t *testing.T) {
	in := typicalInput()
	doc := render(t, in)
	es := parse(t, doc)

	for _, c := range []struct {
		name, class string
		want        int
	}{
		{"polyline", "rate produce", 2},
		{"polyline", "rate consume", 2},
		{"polyline", "lag", 2},
		{"line", "fault", 2},
		{"text", "fault-label", 2},
		{"rect", "band produce", 1},
		{"rect", "band consume", 1},
		{"text", "note", 2},
		{"text", "no-data", 0},
	} {
		if got := len(byClass(es, c.name, c.class)); got != c.want {
			t.Errorf("%s.%s: got %d, want %d", c.name, c.class, got, c.want)
		}
	}

	// Exactly one series per (region, kind).
	seen := map[string]bool{}
	for _, e := range es {
		if e.name != "polyline" {
			continue
		}
		k := e.attrs["class"] + "/" + e.attrs["data-region"]
		if seen[k] {
			t.Errorf("duplicate series %s", k)
		}
		seen[k] = true
	}
	for _, k := range []string{"rate produce/east", "rate produce/west", "rate consume/east", "rate consume/west", "lag/east", "lag/west"} {
		if !seen[k] {
			t.Errorf("missing series %s", k)
		}
	}

	// Consume is dashed, produce solid; a region has the same colour everywhere.
	colour := map[string]string{}
	for _, e := range es {
		if e.name != "polyline" {
			continue
		}
		dashed := e.attrs["stroke-dasharray"] != ""
		if dashed != (e.attrs["class"] == "rate consume") {
			t.Errorf("%s/%s: dashed=%v", e.attrs["class"], e.attrs["data-region"], dashed)
		}
		r := e.attrs["data-region"]
		if c, ok := colour[r]; ok && c != e.attrs["stroke"] {
			t.Errorf("region %s has colours %s and %s", r, c, e.attrs["stroke"])
		}
		colour[r] = e.attrs["stroke"]
	}
	if colour["east"] == colour["west"] {
		t.Errorf("east and west share colour %s", colour["east"])
	}

	for _, s := range []string{
		in.Title, "partition east|west", "kill region:east", "produce RTO 4.2 s", "consume RTO 6.6 s",
		"1. partition: iptables owner match", "2. east restarted by the harness at t=40 s",
		"east", "west", "produce rate (solid)", "consume rate (dashed)", "produce unavailable", "consume unavailable",
		"msgs/s", "backlog (entries)",
	} {
		if !hasText(es, s) {
			t.Errorf("missing text %q", s)
		}
	}

	// Fault lines span both panels: from above the rate panel to the
	// bottom of the backlog panel.
	axes := byClass(es, "line", "axis")
	if len(axes) != 4 {
		t.Fatalf("got %d axis lines, want 4", len(axes))
	}
	top, bottom := attrF(t, axes[0], "y1"), attrF(t, axes[3], "y2")
	for _, f := range byClass(es, "line", "fault") {
		if attrF(t, f, "y1") > top || attrF(t, f, "y2") < bottom {
			t.Errorf("fault line %v does not span both panels [%v, %v]", f.attrs, top, bottom)
		}
		if attrF(t, f, "x1") != attrF(t, f, "x2") {
			t.Errorf("fault line not vertical: %v", f.attrs)
		}
	}

	// The produce band is translucent and orange-ish, the consume band another colour.
	p, c := byClass(es, "rect", "band produce")[0], byClass(es, "rect", "band consume")[0]
	if p.attrs["fill"] == c.attrs["fill"] {
		t.Errorf("produce and consume bands share fill %s", p.attrs["fill"])
	}
	for _, b := range []elem{p, c} {
		if op := attrF(t, b, "fill-opacity"); op <= 0 || op > 0.4 {
			t.Errorf("band opacity %v, want translucent", op)
		}
	}
	// Band geometry: 16.5..20.7 s on a 60 s axis.
	wantX := plotLeft + 16.5/60*(plotRight-plotLeft)
	wantW := 4.2 / 60 * (plotRight - plotLeft)
	if x, w := attrF(t, p, "x"), attrF(t, p, "width"); math.Abs(x-wantX) > 0.1 || math.Abs(w-wantW) > 0.2 {
		t.Errorf("produce band x=%v width=%v, want %v %v", x, w, wantX, wantW)
	}
}

func TestSVGEscapesLabels(t *testing.T) {
	label := `a<b & "c" > d`
	in := Input{
		Title:    "T " + label,
		Duration: 10,
		Rates:    []Rate{{T: 1, Region: "r" + label, Produced: 1}},
		Faults:   []Marker{{T: 2, Label: "F " + label}},
		Outages:  []Interval{{From: 2, To: 3, Label: "O " + label, Kind: "produce"}},
		Notes:    []string{"N " + label},
	}
	doc := render(t, in)
	es := parse(t, doc)
	for _, want := range []string{"T " + label, "F " + label, "O " + label, "1. N " + label} {
		if !hasText(es, want) {
			t.Errorf("missing decoded text %q", want)
		}
	}
	if !hasText(es, "r"+label) {
		t.Errorf("missing region name in legend")
	}
	if strings.Contains(doc, label) {
		t.Errorf("raw label appears unescaped")
	}
	if !strings.Contains(doc, "a&lt;b &amp; &#34;c&#34; &gt; d") {
		t.Errorf("escaped label not found")
	}
	if got := byClass(es, "polyline", "rate produce"); len(got) != 1 || got[0].attrs["data-region"] != "r"+label {
		t.Errorf("region attribute not round-tripped: %v", got)
	}
}

func TestSVGEmpty(t *testing.T) {
	es := parse(t, render(t, Input{}))
	if got := len(byClass(es, "text", "no-data")); got != 2 {
		t.Errorf("got %d no-data texts, want 2 (one per panel)", got)
	}
	if got := len(byClass(es, "line", "axis")); got != 4 {
		t.Errorf("got %d axis lines, want 4", got)
	}
	if len(byClass(es, "text", "ytick")) < 2*4 || len(byClass(es, "text", "xtick")) < 2*4 {
		t.Errorf("empty chart lacks tick labels")
	}
	for _, e := range es {
		if e.name == "polyline" {
			t.Errorf("unexpected series %v", e.attrs)
		}
	}
	if !hasText(es, "Drill timeline") {
		t.Errorf("default title missing")
	}
}

func TestSVGOneRegionAndGaps(t *testing.T) {
	in := Input{
		Duration: 10,
		Rates: []Rate{
			{T: 0, Region: "east", Produced: 100, Consumed: 50},
			{T: 5, Region: "east", Produced: 100, Consumed: 50},
			{T: 5.5, Region: "east", Produced: 20}, // same bucket: summed
		},
		Lag: []LagPoint{{T: 8, Region: "east", Entries: 5}, {T: 2, Region: "east", Entries: 9}},
	}
	c := layout(in)
	es := parse(t, render(t, in))
	prod := byClass(es, "polyline", "rate produce")
	if len(prod) != 1 || len(byClass(es, "polyline", "rate consume")) != 1 || len(byClass(es, "polyline", "lag")) != 1 {
		t.Fatalf("want one series of each kind")
	}
	pts := polyPoints(t, prod[0])
	if len(pts) != 10 {
		t.Fatalf("produce series has %d points, want 10 (one per second)", len(pts))
	}
	zero := c.yRate.at(0)
	for i, p := range pts {
		wantX := plotLeft + float64(i)/10*(plotRight-plotLeft)
		if math.Abs(p[0]-wantX) > 0.05 {
			t.Errorf("point %d x=%v, want %v", i, p[0], wantX)
		}
		var want float64
		switch i {
		case 0:
			want = c.yRate.at(100)
		case 5:
			want = c.yRate.at(120)
		default:
			want = zero // missing second counts as 0
		}
		if math.Abs(p[1]-want) > 0.05 {
			t.Errorf("point %d y=%v, want %v", i, p[1], want)
		}
	}
	// Lag points are sorted by time and not filled in.
	lag := polyPoints(t, byClass(es, "polyline", "lag")[0])
	if len(lag) != 2 || lag[0][0] >= lag[1][0] {
		t.Errorf("lag points %v, want 2 sorted by time", lag)
	}
	if got := len(byClass(es, "text", "no-data")); got != 0 {
		t.Errorf("got %d no-data texts, want 0", got)
	}
}

func TestSVGZeroDurationFromData(t *testing.T) {
	c := layout(Input{Rates: []Rate{{T: 29, Region: "a", Produced: 1}}, Faults: []Marker{{T: 12}}})
	if c.dur != 30 {
		t.Errorf("derived duration %v, want 30", c.dur)
	}
	if c := layout(Input{}); c.dur <= 0 || len(c.xTicks) < 2 {
		t.Errorf("empty input: duration %v ticks %v", c.dur, c.xTicks)
	}
}

func TestSVGLongDurationIsBucketed(t *testing.T) {
	in := Input{Duration: 100000}
	for s := 0; s < 100000; s += 7 {
		in.Rates = append(in.Rates, Rate{T: float64(s), Region: "a", Produced: 7})
	}
	c := layout(in)
	if c.bucket != 50 {
		t.Errorf("bucket %d s, want 50", c.bucket)
	}
	if n := len(c.rates[0].pts); n > maxPoints {
		t.Errorf("%d points, want <= %d", n, maxPoints)
	}
	// 7 messages every 7 s average to 1 msg/s.
	for _, p := range c.rates[0].pts[:len(c.rates[0].pts)-1] {
		if math.Abs(p.v-1) > 0.15 {
			t.Fatalf("bucket at %v averages %v msgs/s, want ~1", p.t, p.v)
		}
	}
	es := parse(t, render(t, in))
	if !hasText(es, "msgs/s (50 s avg)") {
		t.Errorf("bucketing not shown on the axis")
	}
}

func TestColoursStableBySortedRegion(t *testing.T) {
	a := layout(Input{Rates: []Rate{{Region: "west"}, {Region: "east"}, {Region: "central"}}})
	b := layout(Input{Rates: []Rate{{Region: "central"}}, Lag: []LagPoint{{Region: "east"}, {Region: "west"}}})
	for i, r := range []string{"central", "east", "west"} {
		if a.color[r] != palette[i] || b.color[r] != palette[i] {
			t.Errorf("region %s: colours %s, %s; want %s", r, a.color[r], b.color[r], palette[i])
		}
	}
	if got := a.regions; strings.Join(got, ",") != "central,east,west" {
		t.Errorf("regions %v not sorted", got)
	}
}

func TestNiceTicks(t *testing.T) {
	cases := []struct {
		max     float64
		integer bool
		want    []float64
	}{
		{1234, true, []float64{0, 500, 1000, 1500}},
		{1000, true, []float64{0, 250, 500, 750, 1000}},
		{100, true, []float64{0, 25, 50, 75, 100}},
		{300, true, []float64{0, 100, 200, 300}},
		{0, true, []float64{0, 1, 2, 3, 4}},
		{-5, true, []float64{0, 1, 2, 3, 4}},
		{math.NaN(), true, []float64{0, 1, 2, 3, 4}},
		{0, false, []float64{0, 0.25, 0.5, 0.75, 1}},
		{0.3, false, []float64{0, 0.1, 0.2, 0.3}},
		{45000, true, []float64{0, 20000, 40000, 60000}},
	}
	for _, c := range cases {
		got := niceTicks(c.max, 4, c.integer)
		if !equalF(got, c.want) {
			t.Errorf("niceTicks(%v, 4, %v) = %v, want %v", c.max, c.integer, got, c.want)
		}
	}

	// Properties over many maxima.
	for _, integer := range []bool{true, false} {
		for m := 0.37; m < 5e9; m *= 1.37 {
			ticks := niceTicks(m, 4, integer)
			if len(ticks) < 3 || len(ticks) > 6 {
				t.Errorf("niceTicks(%v): %d ticks %v", m, len(ticks), ticks)
			}
			if ticks[0] != 0 || ticks[len(ticks)-1] < m {
				t.Errorf("niceTicks(%v) = %v does not cover [0, max]", m, ticks)
			}
			step := ticks[1]
			if !isRound(step) || (integer && step != math.Floor(step)) {
				t.Errorf("niceTicks(%v): step %v is not round", m, step)
			}
			for i := range ticks {
				if math.Abs(ticks[i]-float64(i)*step) > step*1e-9 {
					t.Errorf("niceTicks(%v) = %v not evenly spaced", m, ticks)
				}
				if s := tickLabel(ticks[i]); len(s) > 7 {
					t.Errorf("tick label %q too long", s)
				}
			}
		}
	}
}

func TestXTicks(t *testing.T) {
	for _, c := range []struct {
		dur  float64
		want []float64
	}{
		{60, []float64{0, 10, 20, 30, 40, 50, 60}},
		{30, []float64{0, 5, 10, 15, 20, 25, 30}},
		{10.5, []float64{0, 2, 4, 6, 8, 10}},
		{1, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
	} {
		if got := xTicks(c.dur); !equalF(got, c.want) {
			t.Errorf("xTicks(%v) = %v, want %v", c.dur, got, c.want)
		}
	}
}

func isRound(step float64) bool {
	m := step / math.Pow(10, math.Floor(math.Log10(step)))
	for _, r := range []float64{1, 2, 2.5, 5} {
		if math.Abs(m-r) < 1e-9 {
			return true
		}
	}
	return false
}

func equalF(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9 {
			return false
		}
	}
	return true
}

func TestLinearScale(t *testing.T) {
	const top, bottom = 58.0, 298.0
	y := linear{0, 1500, bottom, top}
	if got := y.at(1500); got != top {
		t.Errorf("max maps to %v, want top %v", got, top)
	}
	if got := y.at(0); got != bottom {
		t.Errorf("0 maps to %v, want bottom %v", got, bottom)
	}
	if got := y.at(750); got != (top+bottom)/2 {
		t.Errorf("half maps to %v, want %v", got, (top+bottom)/2)
	}
	if got := y.at(300); math.Abs(got-(bottom-0.2*(bottom-top))) > 1e-9 {
		t.Errorf("300/1500 maps to %v", got)
	}
	x := linear{0, 60, plotLeft, plotRight}
	if got := x.at(15); math.Abs(got-(plotLeft+(plotRight-plotLeft)/4)) > 1e-9 {
		t.Errorf("x.at(15) = %v", got)
	}
	if got := x.clamped(120); got != plotRight {
		t.Errorf("clamped beyond the end = %v, want %v", got, plotRight)
	}
	if got := x.clamped(-1); got != plotLeft {
		t.Errorf("clamped before the start = %v, want %v", got, plotLeft)
	}
	if got := (linear{5, 5, 10, 20}).at(5); got != 10 {
		t.Errorf("degenerate domain maps to %v, want 10", got)
	}

	// In the rendered chart, the rate series maximum sits on the top of the
	// plot area when it equals the top tick.
	in := Input{Duration: 4, Rates: []Rate{{T: 0, Region: "a", Produced: 1500}, {T: 1, Region: "a", Produced: 750}}}
	c := layout(in)
	if top := c.rateTicks[len(c.rateTicks)-1]; top != 1500 {
		t.Fatalf("top tick %v, want 1500", top)
	}
	pts := polyPoints(t, byClass(parse(t, render(t, in)), "polyline", "rate produce")[0])
	if pts[0][1] != c.topY || pts[1][1] != (c.topY+c.topB)/2 || pts[2][1] != c.topB {
		t.Errorf("points %v, want y %v, %v, %v", pts, c.topY, (c.topY+c.topB)/2, c.topB)
	}
}

func TestStagger(t *testing.T) {
	ls := []label{
		{text: "c", lo: 300, hi: 350},
		{text: "a", lo: 100, hi: 200},
		{text: "b", lo: 150, hi: 250},
		{text: "d", lo: 210, hi: 260},
		{text: "e", lo: 400, hi: 420},
	}
	rows := stagger(ls, 6, 3)
	got := map[string]int{}
	for _, l := range ls {
		got[l.text] = l.row
	}
	want := map[string]int{"a": 0, "b": 1, "d": 0, "c": 0, "e": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s in row %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if rows != 2 {
		t.Errorf("rows = %d, want 2", rows)
	}
	// Row limit reached: the labels that do not fit get row -1.
	many := make([]label, 10)
	for i := range many {
		many[i] = label{lo: float64(i), hi: 100}
	}
	if rows := stagger(many, 6, 3); rows != 3 {
		t.Errorf("rows = %d, want 3", rows)
	}
	for i, l := range many {
		if want := i; i >= 3 && l.row != -1 || i < 3 && l.row != want {
			t.Errorf("label %d in row %d", i, l.row)
		}
	}
}

// Close faults must get labels that do not overlap in the picture; labels
// that do not fit above the chart are listed under it.
func TestSVGFaultLabelsDoNotOverlap(t *testing.T) {
	spread := []Marker{
		{T: 10, Label: "partition east|west"},
		{T: 10.5, Label: "kill region:east"},
		{T: 11, Label: "kill bookie-3"},
		{T: 40, Label: "heal"},
		{T: 59.5, Label: "restart region:east at the very end"},
	}
	var crowded []Marker
	for i := range 12 {
		crowded = append(crowded, Marker{T: 20 + float64(i)/10, Label: "fault number " + strconv.Itoa(i)})
	}
	for name, faults := range map[string][]Marker{"spread": spread, "crowded": crowded} {
		t.Run(name, func(t *testing.T) {
			es := parse(t, render(t, Input{Duration: 60, Faults: faults}))
			if got := len(byClass(es, "line", "fault")); got != len(faults) {
				t.Errorf("got %d fault lines, want %d", got, len(faults))
			}
			type box struct{ lo, hi, y float64 }
			var boxes []box
			for _, e := range byClass(es, "text", "fault-label") {
				x, y := attrF(t, e, "x"), attrF(t, e, "y")
				w := textWidth(e.text, labelSize)
				b := box{x, x + w, y}
				if e.attrs["text-anchor"] == "end" {
					b = box{x - w, x, y}
				}
				if b.lo < 0 || b.hi > width {
					t.Errorf("label %q outside the picture: %v", e.text, b)
				}
				boxes = append(boxes, b)
			}
			for i := range boxes {
				for j := i + 1; j < len(boxes); j++ {
					a, b := boxes[i], boxes[j]
					if a.y == b.y && a.lo < b.hi && b.lo < a.hi {
						t.Errorf("fault labels %d and %d overlap: %v %v", i, j, a, b)
					}
				}
			}
			// Every label is shown: above the chart or in the footnotes.
			notes := strings.Join(strings.Fields(strings.Join(texts(byClass(es, "text", "note")), " ")), " ") // wrapped lines rejoined
			for _, f := range faults {
				if !hasTextIn(byClass(es, "text", "fault-label"), f.Label) && !strings.Contains(notes, f.Label) {
					t.Errorf("label %q is shown nowhere", f.Label)
				}
			}
			if name == "spread" && len(boxes) != len(faults) {
				t.Errorf("got %d labels above the chart, want %d", len(boxes), len(faults))
			}
			if name == "crowded" && !strings.Contains(notes, "Faults too close together") {
				t.Errorf("crowded faults not listed in the notes:\n%s", notes)
			}
		})
	}
}

func hasTextIn(es []elem, want string) bool {
	for _, e := range es {
		if e.text == want {
			return true
		}
	}
	return false
}

func TestSVGCrowdedBandLabels(t *testing.T) {
	in := Input{Duration: 60}
	for i := range 8 {
		in.Outages = append(in.Outages, Interval{From: 10, To: 12 + float64(i), Label: "RTO " + strconv.Itoa(i), Kind: "consume"})
	}
	es := parse(t, render(t, in))
	if got := len(byClass(es, "rect", "band consume")); got != 8 {
		t.Errorf("got %d bands, want 8", got)
	}
	shown := len(byClass(es, "text", "band-label"))
	if shown != maxBandRow {
		t.Errorf("got %d band labels in the chart, want %d", shown, maxBandRow)
	}
	notes := strings.Join(strings.Fields(strings.Join(texts(byClass(es, "text", "note")), " ")), " ") // wrapped lines rejoined
	for i := shown; i < 8; i++ {
		if !strings.Contains(notes, "RTO "+strconv.Itoa(i)) {
			t.Errorf("band label %d neither in the chart nor in the notes:\n%s", i, notes)
		}
	}
}

func TestFormatting(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{1.0 / 3, "0.3"}, {-0.01, "0"}, {2, "2"}, {0.1 + 0.2, "0.3"}, {math.NaN(), "0"}, {math.Inf(1), "0"}, {123.456, "123.5"},
	} {
		if got := num(c.v); got != c.want {
			t.Errorf("num(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {0.25, "0.25"}, {0.1 + 0.2, "0.3"}, {1500, "1500"}, {15000, "15k"}, {12500, "12.5k"},
		{2500000, "2.5M"}, {3e9, "3G"},
	} {
		if got := tickLabel(c.v); got != c.want {
			t.Errorf("tickLabel(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	doc := render(t, typicalInput())
	checkCompact(t, doc)
}

func TestWrapNotes(t *testing.T) {
	got := wrapNotes([]string{"a  b\nc", "", strings.Repeat("w ", 100), strings.Repeat("x", 300)})
	if got[0] != "1. a b c" {
		t.Errorf("first note %q", got[0])
	}
	if len(got) < 3 || !strings.HasPrefix(got[1], "2. ") || !strings.HasPrefix(got[2], "   w") {
		t.Errorf("wrapped notes %q", got)
	}
	if last := got[len(got)-1]; !strings.HasPrefix(got[len(got)-3], "3. xxx") || !strings.HasPrefix(last, "   xxx") {
		t.Errorf("long word not split: %q", got)
	}
	for _, l := range got {
		if n := len([]rune(l)); n > noteChars {
			t.Errorf("line of %d runes: %q", n, l)
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestSVGReturnsWriteError(t *testing.T) {
	if err := SVG(failWriter{}, typicalInput()); err == nil || err.Error() != "disk full" {
		t.Errorf("err = %v, want disk full", err)
	}
}
