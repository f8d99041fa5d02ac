// Package timeline renders a disaster drill's timeline as a self-contained
// SVG picture meant to be read by a person: per-region produce and consume
// rates, the replication backlog, the injected faults and the measured
// outage (RTO) intervals, with a legend and footnotes.
//
// The package is pure: SVG only formats its Input and writes the result to
// an io.Writer. All user-supplied text (titles, region names, labels, notes)
// is XML-escaped, and every number is formatted compactly.
package timeline

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Input is everything the picture shows. Times are seconds since the drill's start.
type Input struct {
	Title    string
	Duration float64    // seconds shown on the x axis; <= 0 means "derive from the data"
	Rates    []Rate     // per-second rates
	Lag      []LagPoint // replication backlog samples
	Faults   []Marker   // fault markers (vertical lines, labelled)
	Outages  []Interval // RTO intervals, shaded (e.g. "produce RTO 4.2s")
	Notes    []string   // footnotes printed under the chart (e.g. "partition: iptables owner match")
}

// Rate is one region's traffic during one second.
type Rate struct {
	T        float64 // second bucket start
	Region   string
	Produced int // messages acknowledged in that second in that region
	Consumed int // messages delivered (first deliveries) in that second
}

// LagPoint is one replication backlog sample.
type LagPoint struct {
	T       float64
	Region  string // the region whose replicators report it
	Entries int64  // replication backlog in entries
}

// Marker is an instant on the timeline, e.g. an injected fault.
type Marker struct {
	T     float64
	Label string // e.g. "kill region:east"
}

// Interval is a span of the timeline, e.g. an outage measured as an RTO.
type Interval struct {
	From, To float64
	Label    string // e.g. "produce RTO 4.2 s"
	Kind     string // "produce" or "consume" (different shading)
}

// SVG writes the picture to w. The only error it returns is w's.
//
// Rates are bucketed per second over [0, Duration); a second without a Rate
// for a region counts as 0 for that region. When Duration is not positive it
// is derived from the data. Very long drills (more than maxPoints seconds)
// are drawn with rates averaged over equal multi-second buckets. Markers and
// intervals outside [0, Duration] are clamped to the plot's edges.
func SVG(w io.Writer, in Input) error {
	c := layout(in)
	var b bytes.Buffer
	c.render(&b)
	_, err := w.Write(b.Bytes())
	return err
}

// Geometry, in SVG user units (pixels).
const (
	width       = 1000.0
	minHeight   = 560.0
	plotLeft    = 72.0
	plotRight   = 800.0
	legendX     = 820.0
	rightEdge   = width - 8
	topHeight   = 240.0 // rate panel
	lagHeight   = 110.0 // backlog panel
	panelGap    = 42.0  // between the panels (x tick labels of the top panel)
	fontSize    = 11.0
	labelSize   = 10.5 // fault and band labels
	rowStep     = 12.0 // vertical distance between staggered label rows
	maxFaultRow = 6    // fault label rows above the top panel
	maxBandRow  = 4    // band label rows inside the top panel
	noteChars   = 140  // footnote wrap width, in runes
	maxPoints   = 2000 // rate points per series before bucketing
	maxDuration = 1e9  // seconds; larger durations are clamped
)

// palette holds the region colours, assigned to regions sorted by name. It
// avoids red (faults), orange and the band blue so lines stay distinguishable
// from markers and bands.
var palette = []string{
	"#2ca02c", // green
	"#9467bd", // purple
	"#8c564b", // brown
	"#17becf", // teal
	"#e377c2", // pink
	"#bcbd22", // olive
	"#7f7f7f", // grey
	"#1a237e", // navy
}

const (
	colorFault       = "#d62728"
	colorProduceBand = "#ff7f0e"
	colorConsumeBand = "#1f77b4"
	colorOtherBand   = "#7f7f7f"
	colorProduceText = "#a34f00"
	colorConsumeText = "#15507d"
	colorOtherText   = "#4d4d4d"
	colorGrid        = "#e6e6e6"
	colorAxis        = "#444444"
	colorText        = "#222222"
	colorMuted       = "#777777"
	bandOpacity      = "0.18"
	dashConsume      = "6 4"
)

// point is a series sample in data coordinates.
type point struct{ t, v float64 }

// series is one line of the picture.
type series struct {
	region string
	kind   string // "produce", "consume" or "lag"
	color  string
	pts    []point
}

// label is a text placed next to a vertical line or band, assigned to a row
// so that labels of the same row do not overlap.
type label struct {
	text   string
	t      float64 // the marker's (or interval start's) time
	x      float64 // the line's (or band start's) x
	x2     float64 // band end (bands only)
	kind   string  // band kind (bands only)
	tx     float64 // text anchor x
	anchor string  // "start" or "end"
	lo, hi float64 // horizontal extent of the text
	row    int
}

type chart struct {
	in        Input
	dur       float64
	bucket    int // seconds per rate point
	regions   []string
	color     map[string]string
	rates     []series // produce and consume per region, region order
	lag       []series
	rateTicks []float64
	lagTicks  []float64
	xTicks    []float64
	x         linear
	yRate     linear
	yLag      linear
	faults    []label
	faultRows int
	bands     []label
	notes     []string // wrapped footnote lines
	hasOther  bool     // an interval of unknown kind exists

	titleY, topY, topB, lagY, lagB, axisTitleY, notesY, height float64
}

// linear maps the domain [d0, d1] onto the range [r0, r1].
type linear struct{ d0, d1, r0, r1 float64 }

// at returns the range position of v. A degenerate domain maps to r0.
func (s linear) at(v float64) float64 {
	if s.d1 == s.d0 {
		return s.r0
	}
	return s.r0 + (v-s.d0)/(s.d1-s.d0)*(s.r1-s.r0)
}

// clamped is at, limited to the range.
func (s linear) clamped(v float64) float64 {
	p := s.at(v)
	lo, hi := math.Min(s.r0, s.r1), math.Max(s.r0, s.r1)
	return math.Max(lo, math.Min(hi, p))
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func layout(in Input) *chart {
	c := &chart{in: in}
	c.dur = effectiveDuration(in)
	c.x = linear{0, c.dur, plotLeft, plotRight}

	set := map[string]bool{}
	for _, r := range in.Rates {
		set[r.Region] = true
	}
	for _, l := range in.Lag {
		set[l.Region] = true
	}
	c.regions = make([]string, 0, len(set))
	for r := range set {
		c.regions = append(c.regions, r)
	}
	sort.Strings(c.regions)
	c.color = make(map[string]string, len(c.regions))
	for i, r := range c.regions {
		c.color[r] = palette[i%len(palette)]
	}

	c.bucket, c.rates = rateSeries(in.Rates, c.dur, c.color)
	c.lag = lagSeries(in.Lag, c.dur, c.color)
	c.rateTicks = niceTicks(maxValue(c.rates), 4, true)
	c.lagTicks = niceTicks(maxValue(c.lag), 4, true)
	c.xTicks = xTicks(c.dur)

	c.faults, c.faultRows = c.placeFaults()

	// Vertical layout, top to bottom.
	c.titleY = 26
	rows := max(c.faultRows, 1)
	c.topY = 40 + rowStep*float64(rows) + 8
	c.topB = c.topY + topHeight
	c.lagY = c.topB + panelGap
	c.lagB = c.lagY + lagHeight
	c.axisTitleY = c.lagB + 30
	c.notesY = c.axisTitleY + 24
	c.yRate = linear{0, c.rateTicks[len(c.rateTicks)-1], c.topB, c.topY}
	c.yLag = linear{0, c.lagTicks[len(c.lagTicks)-1], c.lagB, c.lagY}

	c.bands = c.placeBands()
	c.notes = append(wrapNotes(in.Notes), c.unplaced()...)

	h := c.notesY
	if len(c.notes) > 0 {
		h += 16 + 14*float64(len(c.notes))
	}
	h = math.Max(h, c.legendBottom()+12)
	c.height = math.Ceil(math.Max(minHeight, h))
	return c
}

// effectiveDuration is in.Duration, or when that is not positive the extent
// of the data, or 10 s when there is no data either.
func effectiveDuration(in Input) float64 {
	if finite(in.Duration) && in.Duration > 0 {
		return math.Min(in.Duration, maxDuration)
	}
	d := 0.0
	grow := func(v float64) {
		if finite(v) && v > d {
			d = v
		}
	}
	for _, r := range in.Rates {
		grow(r.T + 1)
	}
	for _, l := range in.Lag {
		grow(l.T)
	}
	for _, m := range in.Faults {
		grow(m.T)
	}
	for _, o := range in.Outages {
		grow(o.From)
		grow(o.To)
	}
	if d <= 0 {
		return 10
	}
	return math.Min(d, maxDuration)
}

// rateSeries buckets the rates per region into dense per-second series over
// [0, dur): seconds without data count as 0. When there are more than
// maxPoints seconds, consecutive seconds are averaged into equal buckets; the
// bucket width in seconds is returned.
func rateSeries(rates []Rate, dur float64, color map[string]string) (int, []series) {
	n := int(math.Ceil(dur))
	if n < 1 {
		n = 1
	}
	bucket := 1
	if n > maxPoints {
		bucket = (n + maxPoints - 1) / maxPoints
	}
	nb := (n + bucket - 1) / bucket
	type sums struct{ prod, cons []float64 }
	by := map[string]*sums{}
	for _, r := range rates {
		s := by[r.Region]
		if s == nil {
			s = &sums{make([]float64, nb), make([]float64, nb)}
			by[r.Region] = s
		}
		if !finite(r.T) || r.T < 0 || r.T >= dur {
			continue
		}
		i := int(math.Floor(r.T)) / bucket
		if i >= nb {
			continue
		}
		s.prod[i] += float64(max(r.Produced, 0))
		s.cons[i] += float64(max(r.Consumed, 0))
	}
	regions := make([]string, 0, len(by))
	for r := range by {
		regions = append(regions, r)
	}
	sort.Strings(regions)
	out := make([]series, 0, 2*len(regions))
	for _, r := range regions {
		s := by[r]
		prod := series{region: r, kind: "produce", color: color[r], pts: make([]point, nb)}
		cons := series{region: r, kind: "consume", color: color[r], pts: make([]point, nb)}
		for i := range nb {
			secs := float64(min(bucket, n-i*bucket)) // the last bucket may be short
			t := float64(i * bucket)
			prod.pts[i] = point{t, s.prod[i] / secs}
			cons.pts[i] = point{t, s.cons[i] / secs}
		}
		out = append(out, prod, cons)
	}
	return bucket, out
}

// lagSeries groups the backlog samples per region, sorted by time. Samples
// outside [0, dur] are dropped; missing samples are not invented.
func lagSeries(lag []LagPoint, dur float64, color map[string]string) []series {
	by := map[string][]point{}
	for _, l := range lag {
		pts := by[l.Region]
		if finite(l.T) && l.T >= 0 && l.T <= dur {
			pts = append(pts, point{l.T, float64(max(l.Entries, 0))})
		}
		by[l.Region] = pts
	}
	regions := make([]string, 0, len(by))
	for r := range by {
		regions = append(regions, r)
	}
	sort.Strings(regions)
	out := make([]series, 0, len(regions))
	for _, r := range regions {
		pts := by[r]
		sort.SliceStable(pts, func(i, j int) bool { return pts[i].t < pts[j].t })
		out = append(out, series{region: r, kind: "lag", color: color[r], pts: pts})
	}
	return out
}

func maxValue(ss []series) float64 {
	m := 0.0
	for _, s := range ss {
		for _, p := range s.pts {
			m = math.Max(m, p.v)
		}
	}
	return m
}

// niceTicks returns evenly spaced round tick values 0, step, 2·step, … whose
// last value is >= maxV. The step is 1, 2, 2.5 or 5 times a power of ten,
// chosen so that there are about want intervals (fewer preferred over more).
// With integer set, steps are whole numbers and the axis spans at least
// 0..want. A non-positive or non-finite maxV yields a small default axis.
func niceTicks(maxV float64, want int, integer bool) []float64 {
	if want < 1 {
		want = 1
	}
	if !finite(maxV) || maxV <= 0 {
		maxV = 1
	}
	if integer && maxV < float64(want) {
		maxV = float64(want)
	}
	exp := math.Floor(math.Log10(maxV / float64(want)))
	best, bestScore, bestN := 0.0, math.MaxInt, 0
	for e := exp - 1; e <= exp+1; e++ {
		for _, m := range []float64{1, 2, 2.5, 5} {
			step := m * math.Pow(10, e)
			if integer && (step < 1 || step != math.Floor(step)) {
				continue
			}
			n := int(math.Ceil(maxV/step - 1e-9))
			score := want - n
			if n > want {
				score = 2 * (n - want)
			}
			if score < bestScore || (score == bestScore && step < best) {
				best, bestScore, bestN = step, score, n
			}
		}
	}
	if best == 0 { // unreachable for finite positive maxV; keep an axis anyway
		best, bestN = maxV/float64(want), want
	}
	ticks := make([]float64, bestN+1)
	for i := range ticks {
		ticks[i] = roundSig(float64(i) * best)
	}
	return ticks
}

// xTicks returns the round time ticks within [0, dur].
func xTicks(dur float64) []float64 {
	all := niceTicks(dur, 8, dur >= 8)
	out := all[:0]
	for _, t := range all {
		if t <= dur*(1+1e-9) {
			out = append(out, t)
		}
	}
	return out
}

// roundSig removes floating point noise such as 0.30000000000000004.
func roundSig(v float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	if err != nil {
		return v
	}
	return r
}

// num formats a coordinate with at most one decimal.
func num(v float64) string {
	if !finite(v) {
		return "0"
	}
	v = math.Round(v*10) / 10
	if v == 0 {
		v = 0 // no "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// plain formats a value compactly (at most 6 decimals, no exponent).
func plain(v float64) string {
	if !finite(v) {
		return "0"
	}
	v = math.Round(v*1e6) / 1e6
	if v == 0 {
		v = 0
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// tickLabel formats an axis value, with k/M/G suffixes from 10 000 on.
func tickLabel(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return plain(roundSig3(v/1e9)) + "G"
	case a >= 1e6:
		return plain(roundSig3(v/1e6)) + "M"
	case a >= 1e4:
		return plain(roundSig3(v/1e3)) + "k"
	}
	return plain(v)
}

func roundSig3(v float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	if err != nil {
		return v
	}
	return r
}

// esc XML-escapes s for text content and attribute values. Characters that
// XML cannot carry at all are replaced by U+FFFD.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // strings.Builder never fails
	return b.String()
}

// clean collapses whitespace (including newlines) and shortens s to at most
// n runes.
func clean(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimRight(string(r[:n-1]), " ") + "…"
}

// textWidth estimates the rendered width of s in a sans-serif font.
func textWidth(s string, size float64) float64 {
	return float64(utf8.RuneCountInString(s)) * size * 0.6
}

// stagger assigns rows to labels (sorted by lo in place) greedily: a label
// goes into the first row whose last label ends at least gap before it, or
// into a new row. A label that fits in none of maxRows rows gets row -1 (it
// is not drawn in the chart but listed under it, so labels never overlap).
// It returns the number of rows used.
func stagger(ls []label, gap float64, maxRows int) int {
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].lo < ls[j].lo })
	var ends []float64
	for i := range ls {
		row := -1
		for r, e := range ends {
			if ls[i].lo >= e+gap {
				row = r
				break
			}
		}
		if row < 0 && len(ends) < maxRows {
			ends = append(ends, math.Inf(-1))
			row = len(ends) - 1
		}
		ls[i].row = row
		if row >= 0 {
			ends[row] = math.Max(ends[row], ls[i].hi)
		}
	}
	return len(ends)
}

func (c *chart) placeFaults() ([]label, int) {
	var ls []label
	for _, m := range c.in.Faults {
		if !finite(m.T) {
			continue
		}
		text := clean(m.Label, 48)
		if text == "" {
			text = "fault @ " + plain(m.T) + " s"
		}
		x := c.x.clamped(m.T)
		w := textWidth(text, labelSize)
		l := label{text: text, t: m.T, x: x}
		if x+3+w <= rightEdge {
			l.tx, l.anchor, l.lo, l.hi = x+3, "start", x, x+3+w
		} else {
			l.tx, l.anchor, l.lo, l.hi = x-3, "end", x-3-w, x
		}
		ls = append(ls, l)
	}
	return ls, stagger(ls, 6, maxFaultRow)
}

func (c *chart) placeBands() []label {
	var ls []label
	for _, o := range c.in.Outages {
		if !finite(o.From) || !finite(o.To) {
			continue
		}
		x1, x2 := c.x.clamped(math.Min(o.From, o.To)), c.x.clamped(math.Max(o.From, o.To))
		if x2-x1 < 1 { // keep instant outages visible
			x2 = math.Min(x1+1, plotRight)
			x1 = x2 - 1
		}
		kind := strings.ToLower(strings.TrimSpace(o.Kind))
		if kind != "produce" && kind != "consume" {
			kind = "other"
			c.hasOther = true
		}
		text := clean(o.Label, 48)
		if text == "" {
			text = kind + " outage " + plain(math.Abs(o.To-o.From)) + " s"
		}
		w := textWidth(text, labelSize)
		l := label{text: text, t: math.Min(o.From, o.To), x: x1, x2: x2, kind: kind}
		if x1+3+w <= plotRight-2 {
			l.tx, l.anchor, l.lo, l.hi = x1+3, "start", x1, x1+3+w
		} else {
			l.tx, l.anchor, l.lo, l.hi = x2-3, "end", x2-3-w, x2
			if l.lo < plotLeft+2 {
				l.tx, l.anchor, l.lo, l.hi = plotLeft+3, "start", plotLeft, plotLeft+3+w
			}
		}
		ls = append(ls, l)
	}
	stagger(ls, 6, maxBandRow)
	return ls
}

func wrapNotes(notes []string) []string {
	var out []string
	n := 0
	for _, note := range notes {
		if strings.TrimSpace(note) == "" {
			continue
		}
		n++
		out = append(out, wrap(strconv.Itoa(n)+". ", note, noteChars)...)
	}
	return out
}

// unplaced lists, as footnote lines, the fault and band labels that did not
// fit in their rows.
func (c *chart) unplaced() []string {
	var out []string
	for _, g := range []struct {
		what string
		ls   []label
	}{{"Faults", c.faults}, {"Outages", c.bands}} {
		var items []string
		ls := append([]label(nil), g.ls...)
		sort.SliceStable(ls, func(i, j int) bool { return ls[i].t < ls[j].t })
		for _, l := range ls {
			if l.row < 0 {
				items = append(items, "t="+plain(roundSig3(l.t))+" s "+l.text+";")
			}
		}
		if len(items) > 0 {
			text := g.what + " too close together to label in the chart: " + strings.Join(items, " ")
			out = append(out, wrap("* ", strings.TrimSuffix(text, ";"), noteChars)...)
		}
	}
	return out
}

// wrap splits text at spaces into lines of at most width runes (words
// longer than a line are split). The first line starts with prefix, the
// others with as many spaces.
func wrap(prefix, text string, width int) []string {
	indent := strings.Repeat(" ", utf8.RuneCountInString(prefix))
	var out []string
	line, empty := prefix, true
	flush := func() {
		out = append(out, line)
		line, empty = indent, true
	}
	for _, word := range strings.Fields(text) {
		for {
			room := width - utf8.RuneCountInString(line)
			if !empty {
				room-- // the separating space
			}
			if n := utf8.RuneCountInString(word); n <= room {
				if !empty {
					line += " "
				}
				line, empty = line+word, false
				break
			}
			if !empty {
				flush()
				continue
			}
			r := []rune(word) // longer than a whole line: hard split
			room = max(room, 1)
			line, word = line+string(r[:room]), string(r[room:])
			flush()
		}
	}
	if !empty {
		flush()
	}
	return out
}

// legend rows: the y of each row is legendTop + 16·i plus group spacing.
func (c *chart) legendEntries() int {
	n := 1 + max(len(c.regions), 1) // header + regions (or "none")
	n += 1 + 3                      // header + produce, consume, backlog
	n += 1 + 2                      // header + produce band, consume band
	if c.hasOther {
		n++
	}
	n++ // fault
	return n
}

func (c *chart) legendBottom() float64 {
	return c.topY + 12 + 16*float64(c.legendEntries()) + 3*8
}

// ---- rendering ----

type writer struct{ b *bytes.Buffer }

func (w writer) p(format string, args ...any) { fmt.Fprintf(w.b, format, args...) }

// text writes a text element; content is escaped here, attrs must already be safe.
func (w writer) text(x, y float64, size float64, anchor, fill, attrs, content string) {
	w.p(`<text x="%s" y="%s" font-size="%s" text-anchor="%s" fill="%s"%s>%s</text>`+"\n",
		num(x), num(y), num(size), anchor, fill, attrs, esc(content))
}

func (w writer) line(x1, y1, x2, y2 float64, stroke string, sw float64, attrs string) {
	w.p(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="%s"%s/>`+"\n",
		num(x1), num(y1), num(x2), num(y2), stroke, num(sw), attrs)
}

const halo = ` stroke="#ffffff" stroke-width="3" stroke-opacity="0.85" stroke-linejoin="round" paint-order="stroke"`

func (c *chart) render(b *bytes.Buffer) {
	w := writer{b}
	title := clean(c.in.Title, 90)
	if title == "" {
		title = "Drill timeline"
	}
	w.p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	w.p(`<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif" font-size="%s">`+"\n",
		num(width), num(c.height), num(width), num(c.height), num(fontSize))
	w.p("<title>%s</title>\n", esc(title))
	w.p(`<rect class="background" x="0" y="0" width="%s" height="%s" fill="#ffffff"/>`+"\n", num(width), num(c.height))

	w.text(plotLeft, c.titleY, 16, "start", colorText, ` font-weight="bold"`, title)
	w.text(rightEdge, c.titleY, fontSize, "end", colorMuted, "", c.summary())

	c.renderPanel(w, "rates", c.topY, c.topB, c.yRate, c.rateTicks)
	c.renderPanel(w, "backlog", c.lagY, c.lagB, c.yLag, c.lagTicks)

	// Outage bands under the lines.
	w.p(`<g class="outages">` + "\n")
	for _, l := range c.bands {
		fill := map[string]string{"produce": colorProduceBand, "consume": colorConsumeBand}[l.kind]
		if fill == "" {
			fill = colorOtherBand
		}
		w.p(`<rect class="band %s" x="%s" y="%s" width="%s" height="%s" fill="%s" fill-opacity="%s"><title>%s</title></rect>`+"\n",
			l.kind, num(l.x), num(c.topY), num(l.x2-l.x), num(c.topB-c.topY), fill, bandOpacity, esc(l.text))
		// A solid strip along the top keeps overlapping bands tellable apart
		// (produce on top, consume below it).
		strip := map[string]float64{"produce": 0, "consume": 1, "other": 2}[l.kind]
		w.p(`<rect class="band-strip" x="%s" y="%s" width="%s" height="3" fill="%s"/>`+"\n",
			num(l.x), num(c.topY+3*strip), num(l.x2-l.x), fill)
	}
	w.p("</g>\n")

	w.p(`<g class="rates">` + "\n")
	for _, s := range c.rates {
		c.renderSeries(w, s, c.yRate)
	}
	w.p("</g>\n")
	w.p(`<g class="backlog">` + "\n")
	for _, s := range c.lag {
		c.renderSeries(w, s, c.yLag)
	}
	w.p("</g>\n")

	if len(c.rates) == 0 {
		w.text((plotLeft+plotRight)/2, (c.topY+c.topB)/2, 14, "middle", colorMuted, ` class="no-data"`, "no data")
	}
	if countPoints(c.lag) == 0 {
		w.text((plotLeft+plotRight)/2, (c.lagY+c.lagB)/2+5, 14, "middle", colorMuted, ` class="no-data"`, "no data")
	}

	// Band labels, above the lines.
	for _, l := range c.bands {
		if l.row < 0 { // listed in the footnotes
			continue
		}
		fill := map[string]string{"produce": colorProduceText, "consume": colorConsumeText}[l.kind]
		if fill == "" {
			fill = colorOtherText
		}
		y := c.topY + 20 + rowStep*float64(l.row)
		w.text(l.tx, y, labelSize, l.anchor, fill, ` class="band-label"`+halo, l.text)
	}

	// Fault markers across both panels, each starting at its label's row.
	w.p(`<g class="faults">` + "\n")
	for _, l := range c.faults {
		base := 40 + rowStep*float64(l.row+1)
		if l.row < 0 { // listed in the footnotes
			base = c.topY - 1
		}
		w.p(`<line class="fault" x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1.5"><title>%s</title></line>`+"\n",
			num(l.x), num(base-9), num(l.x), num(c.lagB), colorFault, esc(l.text))
		if l.row >= 0 {
			w.text(l.tx, base, labelSize, l.anchor, colorFault, ` class="fault-label"`, l.text)
		}
	}
	w.p("</g>\n")

	// Axis titles.
	rateUnit := "msgs/s"
	if c.bucket > 1 {
		rateUnit = "msgs/s (" + strconv.Itoa(c.bucket) + " s avg)"
	}
	c.yTitle(w, (c.topY+c.topB)/2, rateUnit)
	c.yTitle(w, (c.lagY+c.lagB)/2, "backlog (entries)")
	w.text((plotLeft+plotRight)/2, c.axisTitleY, fontSize, "middle", colorText, "", "seconds since drill start")

	c.renderLegend(w)
	c.renderNotes(w)
	w.p("</svg>\n")
}

func (c *chart) summary() string {
	s := "duration " + plain(roundSig3(c.dur)) + " s"
	s += fmt.Sprintf(" · %d region", len(c.regions))
	if len(c.regions) != 1 {
		s += "s"
	}
	s += fmt.Sprintf(" · %d fault", len(c.faults))
	if len(c.faults) != 1 {
		s += "s"
	}
	return s
}

func countPoints(ss []series) int {
	n := 0
	for _, s := range ss {
		n += len(s.pts)
	}
	return n
}

func (c *chart) yTitle(w writer, y float64, text string) {
	w.p(`<text x="16" y="%s" font-size="%s" text-anchor="middle" fill="%s" transform="rotate(-90 16 %s)">%s</text>`+"\n",
		num(y), num(fontSize), colorText, num(y), esc(text))
}

func (c *chart) renderPanel(w writer, name string, top, bottom float64, y linear, ticks []float64) {
	w.p(`<g class="panel %s">`+"\n", name)
	for _, t := range ticks {
		py := y.at(t)
		if t != 0 {
			w.line(plotLeft, py, plotRight, py, colorGrid, 1, "")
		}
		w.line(plotLeft-4, py, plotLeft, py, colorAxis, 1, "")
		w.text(plotLeft-7, py+3.5, 10, "end", colorText, ` class="ytick"`, tickLabel(t))
	}
	for _, t := range c.xTicks {
		px := c.x.at(t)
		if t != 0 {
			w.line(px, top, px, bottom, colorGrid, 1, "")
		}
		w.line(px, bottom, px, bottom+4, colorAxis, 1, "")
		w.text(px, bottom+15, 10, "middle", colorText, ` class="xtick"`, plain(t))
	}
	w.line(plotLeft, top, plotLeft, bottom, colorAxis, 1, ` class="axis"`)
	w.line(plotLeft, bottom, plotRight, bottom, colorAxis, 1, ` class="axis"`)
	w.p("</g>\n")
}

func (c *chart) renderSeries(w writer, s series, y linear) {
	if len(s.pts) == 0 {
		return
	}
	var pts strings.Builder
	for i, p := range s.pts {
		if i > 0 {
			pts.WriteByte(' ')
		}
		pts.WriteString(num(c.x.at(p.t)))
		pts.WriteByte(',')
		pts.WriteString(num(y.at(p.v)))
	}
	dash := ""
	if s.kind == "consume" {
		dash = ` stroke-dasharray="` + dashConsume + `"`
	}
	class := "rate " + s.kind
	if s.kind == "lag" {
		class = "lag"
	}
	w.p(`<polyline class="%s" data-region="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round"%s points="%s"><title>%s</title></polyline>`+"\n",
		class, esc(s.region), s.color, dash, pts.String(), esc(regionName(s.region)+" "+s.kind))
	if len(s.pts) == 1 { // a single sample draws no line; show a dot
		p := s.pts[0]
		w.p(`<circle class="point" cx="%s" cy="%s" r="2.5" fill="%s"/>`+"\n", num(c.x.at(p.t)), num(y.at(p.v)), s.color)
	}
}

func regionName(r string) string {
	r = clean(r, 22)
	if r == "" {
		return "(no region)"
	}
	return r
}

func (c *chart) renderLegend(w writer) {
	x := legendX
	y := c.topY + 12
	w.p(`<g class="legend">` + "\n")
	header := func(s string) {
		w.text(x, y, fontSize, "start", colorText, ` font-weight="bold"`, s)
		y += 16
	}
	swatchLine := func(stroke, dash string, sw float64, s string) {
		attrs := ""
		if dash != "" {
			attrs = ` stroke-dasharray="` + dash + `"`
		}
		w.line(x, y-4, x+24, y-4, stroke, sw, attrs)
		w.text(x+30, y, fontSize, "start", colorText, "", s)
		y += 16
	}
	swatchBand := func(fill, s string) {
		w.p(`<rect x="%s" y="%s" width="24" height="10" fill="%s" fill-opacity="%s"/>`+"\n",
			num(x), num(y-9), fill, bandOpacity)
		w.p(`<rect x="%s" y="%s" width="24" height="3" fill="%s"/>`+"\n", num(x), num(y-9), fill)
		w.text(x+30, y, fontSize, "start", colorText, "", s)
		y += 16
	}

	header("Regions")
	if len(c.regions) == 0 {
		w.text(x, y, fontSize, "start", colorMuted, "", "none")
		y += 16
	}
	for _, r := range c.regions {
		swatchLine(c.color[r], "", 3, regionName(r))
	}
	y += 8
	header("Lines")
	swatchLine(colorAxis, "", 1.6, "produce rate (solid)")
	swatchLine(colorAxis, dashConsume, 1.6, "consume rate (dashed)")
	swatchLine(colorAxis, "", 1.6, "backlog (lower panel)")
	y += 8
	header("Outages (RTO)")
	swatchBand(colorProduceBand, "produce unavailable")
	swatchBand(colorConsumeBand, "consume unavailable")
	if c.hasOther {
		swatchBand(colorOtherBand, "other")
	}
	y += 8
	swatchLine(colorFault, "", 1.5, "fault injected")
	w.p("</g>\n")
}

func (c *chart) renderNotes(w writer) {
	if len(c.notes) == 0 {
		return
	}
	w.p(`<g class="notes">` + "\n")
	y := c.notesY
	w.text(plotLeft, y, fontSize, "start", colorText, ` font-weight="bold"`, "Notes")
	for _, n := range c.notes {
		y += 14
		w.text(plotLeft, y, fontSize, "start", colorText, ` class="note" xml:space="preserve"`, n)
	}
	w.p("</g>\n")
}
