package drill

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/drill/check"
	"github.com/meridian-mq/meridian/drill/timeline"
)

// Report is a drill's outcome: DIR/report.json is this, marshalled.
type Report struct {
	Drill       string    `json:"drill"`
	Description string    `json:"description,omitempty"`
	Seed        uint64    `json:"seed"`
	Started     time.Time `json:"started"`
	// WorkloadStart: time 0 of every relative time in the report.
	WorkloadStart time.Time `json:"workload_start"`
	DurationSec   float64   `json:"duration_sec"`
	// Network says how partitions were made (or "none").
	Network  string             `json:"network_faults"`
	Pass     bool               `json:"pass"`
	Verdicts []check.Verdict    `json:"expectations"`
	Result   check.Result       `json:"result"`
	Vars     map[string]float64 `json:"vars"`
	Faults   []check.Fault      `json:"faults"`
	Markers  []Marker           `json:"events"`
	Lag      []LagSample        `json:"replication_backlog"`
	// RPOEvents and RPOHolds: the RPO budget's transitions and the
	// periods its gate was closed (rpo.go); none without a budget.
	RPOEvents []RPOEvent  `json:"rpo_budget_events,omitempty"`
	RPOHolds  []RPOPeriod `json:"rpo_budget_closed,omitempty"`
	// Verify: the verify step of each replicated namespace, once the
	// drill drained (verify.go).
	Verify []Verify `json:"verify,omitempty"`
	// Switchovers: the planned switchovers the drill asked for.
	Switchovers []Switchover `json:"switchovers,omitempty"`
	// RegionSwitchovers: the region-wide ones (each namespace's part is
	// in Switchovers, with its region).
	RegionSwitchovers []RegionSwitchover `json:"region_switchovers,omitempty"`
	Notes             []string           `json:"notes,omitempty"`
	// DataDir: the deployment's data, kept when the drill failed.
	DataDir string `json:"data_dir,omitempty"`
}

// Marker is one event of the fault schedule as applied.
type Marker struct {
	T     float64 `json:"t"`
	Label string  `json:"label"`
	Err   string  `json:"error,omitempty"`
}

func (rep *Report) write(dir string, start time.Time) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(rep.Markdown()), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "timeline.svg"))
	if err != nil {
		return err
	}
	defer f.Close()
	return timeline.SVG(f, rep.timelineInput(start))
}

func (rep *Report) timelineInput(start time.Time) timeline.Input {
	in := timeline.Input{Title: "drill " + rep.Drill, Duration: rep.DurationSec}
	for _, p := range rep.Result.Series {
		in.Rates = append(in.Rates, timeline.Rate{T: p.T, Region: p.Region, Produced: p.Acked, Consumed: p.Delivered})
	}
	for _, l := range rep.Lag {
		in.Lag = append(in.Lag, timeline.LagPoint{T: l.T, Region: l.Region, Entries: l.Entries})
	}
	for _, m := range rep.Markers {
		in.Faults = append(in.Faults, timeline.Marker{T: m.T, Label: m.Label})
	}
	for _, f := range rep.Result.Faults {
		p, c := f.ProduceStallFrom.Sub(start).Seconds(), f.ConsumeStallFrom.Sub(start).Seconds()
		in.Outages = append(in.Outages,
			timeline.Interval{From: p, To: p + f.ProduceRTO, Label: fmt.Sprintf("produce RTO %.1f s", f.ProduceRTO), Kind: "produce"},
			timeline.Interval{From: c, To: c + f.ConsumeRTO, Label: fmt.Sprintf("consume RTO %.1f s", f.ConsumeRTO), Kind: "consume"})
	}
	for _, h := range rep.RPOHolds {
		in.Outages = append(in.Outages, timeline.Interval{From: h.From, To: h.To, Label: fmt.Sprintf("RPO %s %.1f s", h.Action, h.To-h.From), Kind: "rpo"})
	}
	in.Notes = append(in.Notes, "network faults: "+rep.Network, "a message's region is the one that acknowledged it (its ledger)")
	return in
}

// Summary is the drill's outcome in one line.
func (rep *Report) Summary() string {
	r := rep.Result
	verdict := "PASS"
	if !rep.Pass {
		verdict = "FAIL"
	}
	return fmt.Sprintf("%s %s: acknowledged %d, lost %d, duplicates %d, late %d, out of order %d/%d (producer/key), RPO %d msgs %.2f s, RTO produce %.2f s, consume %.2f s",
		verdict, rep.Drill, r.Acknowledged, r.Lost, r.Duplicates, r.Late, r.OutOfOrderProducer, r.OutOfOrderKey,
		r.RPOMessages, r.RPOSeconds, r.MaxRTOProduce, r.MaxRTOConsume) + rep.verifyShort()
}

// verifyShort is the verify step's totals for the summary line.
func (rep *Report) verifyShort() string {
	if len(rep.Verify) == 0 {
		return ""
	}
	var missing, mismatched, extra uint64
	clean := true
	for _, v := range rep.Verify {
		missing, mismatched, extra = missing+v.Missing, mismatched+v.Mismatched, extra+v.Extra
		clean = clean && v.Clean && v.Error == ""
	}
	verdict := "clean"
	if !clean {
		verdict = "not clean"
	}
	return fmt.Sprintf(", verify %s (missing %d, mismatched %d, extra %d)", verdict, missing, mismatched, extra)
}

// Markdown is DIR/report.md.
func (rep *Report) Markdown() string {
	var b strings.Builder
	r := rep.Result
	fmt.Fprintf(&b, "# Drill %s\n\n", rep.Drill)
	if rep.Description != "" {
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(rep.Description))
	}
	fmt.Fprintf(&b, "**%s** — started %s, %.1f s, seed %d. Network faults: %s.\n\n", map[bool]string{true: "PASS", false: "FAIL"}[rep.Pass],
		rep.Started.UTC().Format(time.RFC3339), rep.DurationSec, rep.Seed, rep.Network)
	b.WriteString("![timeline](timeline.svg)\n\n## Expectations\n\n| figure | expected | actual | |\n|---|---|---|---|\n")
	for _, v := range rep.Verdicts {
		mark := "pass"
		if !v.Pass {
			mark = "**FAIL**"
			if v.Err != "" {
				mark += " (" + v.Err + ")"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", v.Name, v.Expr, v.Actual, mark)
	}
	fmt.Fprintf(&b, "\n## Figures\n\n| | |\n|---|---|\n")
	rows := [][2]string{
		{"sends attempted / acknowledged / failed", fmt.Sprintf("%d / %d / %d", r.Attempted, r.Acknowledged, r.Failed)},
		{"lost (acknowledged, never delivered)", fmt.Sprint(r.Lost)},
		{"late (async-tail orphans delivered after failback)", fmt.Sprint(r.Late)},
		{"duplicates", fmt.Sprint(r.Duplicates)},
		{"out of order per producer / per key", fmt.Sprintf("%d / %d", r.OutOfOrderProducer, r.OutOfOrderKey)},
		{"RPO", fmt.Sprintf("%d messages, %.3f s", r.RPOMessages, r.RPOSeconds)},
		{"replication verify (after the drain)", rep.verifySummary()},
		{"acknowledgement rate before the first fault", fmt.Sprintf("%.0f msgs/s", r.AckRateBeforeFault)},
		{"changes of acknowledging region (most for one producer)", fmt.Sprint(r.AckRegionSwitches)},
	}
	for k, v := range rep.Vars {
		rows = append(rows, [2]string{k, fmt.Sprint(v)})
	}
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], row[1])
	}
	if len(r.Faults) > 0 {
		b.WriteString("\n## RTO per fault\n\n| fault | at | produce | consume |\n|---|---|---|---|\n")
		for _, f := range r.Faults {
			rto := func(v float64, ok bool) string {
				if !ok {
					return fmt.Sprintf("not recovered (%.1f s)", v)
				}
				return fmt.Sprintf("%.2f s", v)
			}
			fmt.Fprintf(&b, "| %s | %.1f s | %s | %s |\n", f.Fault, f.At.Sub(rep.WorkloadStart).Seconds(), rto(f.ProduceRTO, f.ProduceRecovered), rto(f.ConsumeRTO, f.ConsumeRecovered))
		}
	}
	b.WriteString("\n## Events\n\n")
	for _, m := range rep.Markers {
		fmt.Fprintf(&b, "- %.1f s: %s", m.T, m.Label)
		if m.Err != "" {
			fmt.Fprintf(&b, " — error: %s", m.Err)
		}
		b.WriteString("\n")
	}
	if len(rep.RPOHolds) > 0 || len(rep.RPOEvents) > 0 {
		b.WriteString("\n## RPO budget\n\n| region | topic | gate | from | to |\n|---|---|---|---|---|\n")
		for _, h := range rep.RPOHolds {
			to := fmt.Sprintf("%.2f s", h.To)
			if h.Open {
				to += " (still closed at the region's last answer)"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.2f s | %s |\n", h.Region, h.Topic, h.Action, h.From, to)
		}
		b.WriteString("\nRegions' states under the budget:\n\n")
		for _, e := range rep.RPOEvents {
			if e.Remote != "" {
				fmt.Fprintf(&b, "- %.2f s: %s, %s → %s: %s\n", e.T, e.Topic, e.Region, e.Remote, e.State)
			}
		}
	}
	if len(rep.RegionSwitchovers) > 0 {
		b.WriteString("\n## Region-wide switchovers\n\n| region → to | asked | ended | state | took (broker) | moved | not started |\n|---|---|---|---|---|---|---|\n")
		for _, rs := range rep.RegionSwitchovers {
			state := rs.State
			if rs.Error != "" {
				state += " (" + rs.Error + ")"
			}
			fmt.Fprintf(&b, "| %s → %s | %.2f s | %.2f s | %s | %d ms | %d | %d |\n", rs.Region, rs.To, rs.AskedAt, rs.EndedAt, state, rs.TookMs, rs.Moved, rs.NotStarted)
		}
	}
	if len(rep.Switchovers) > 0 {
		b.WriteString("\n## Planned switchovers\n\n| namespace | from → to | asked | committed / aborted | epoch | hold (broker) | drain (broker) | produce pause | consume pause |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, sw := range rep.Switchovers {
			end := fmt.Sprintf("%s at %.2f s", sw.State, sw.EndedAt)
			if sw.State == "committed" {
				end = fmt.Sprintf("committed at %.2f s", sw.CommittedAt)
			}
			if sw.Error != "" {
				end += " (" + sw.Error + ")"
			}
			name := sw.Namespace
			if sw.Region != "" {
				name += fmt.Sprintf(" (region %s, call %d ms)", sw.Region, sw.TookMs)
			}
			fmt.Fprintf(&b, "| %s | %s → %s | %.2f s | %s | %d | %d ms | %d ms | %.2f s | %.2f s |\n", name, sw.From, sw.To, sw.AskedAt, end, sw.Epoch, sw.HoldMs, sw.DrainMs, sw.ProducePause, sw.ConsumePause)
		}
	}
	rep.cutMarkdown(&b)
	list := func(title string, ms []check.Message) {
		if len(ms) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n## %s (%d)\n\n| producer | seq | key | id | region | acknowledged |\n|---|---|---|---|---|---|\n", title, len(ms))
		for i, m := range ms {
			if i == 200 {
				fmt.Fprintf(&b, "| … %d more in report.json | | | | | |\n", len(ms)-i)
				break
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", m.Producer, m.Seq, m.Key, m.MsgID, m.Region, m.AckedAt.UTC().Format("15:04:05.000"))
		}
	}
	for _, s := range r.Subscriptions {
		list("Lost in "+s.Topic+" / "+s.Name, s.LostMessages)
		late := make([]check.Message, 0, len(s.LateMessages))
		for _, m := range s.LateMessages {
			late = append(late, m.Message)
		}
		list("Late in "+s.Topic+" / "+s.Name, late)
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range rep.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	if rep.DataDir != "" {
		fmt.Fprintf(&b, "\nThe deployment's data is kept in `%s` (replay with `--seed %d`).\n", rep.DataDir, rep.Seed)
	}
	return b.String()
}

// cutMarkdown is the report's "one cut across topics" section (issue 33
// item 4): the spread of the topics' resume per fault, then per topic the
// region of its receipts in each epoch.
func (rep *Report) cutMarkdown(b *strings.Builder) {
	c := rep.Result.Cut
	if len(c.Topics) < 2 {
		return
	}
	fmt.Fprintf(b, "\n## One cut across topics\n\n%d topics; acknowledged by two regions in one epoch: **%d**.\n\n", len(c.Topics), c.TwoRegionTopics)
	if len(c.Spread) > 0 {
		b.WriteString("Resume per topic (its longest stall from the fault to the next), over the topics:\n\n| fault | topics | produce min / median / max | consume min / median / max | not resumed |\n|---|---|---|---|---|\n")
		for _, s := range c.Spread {
			fmt.Fprintf(b, "| %s | %d | %.2f / %.2f / %.2f s | %.2f / %.2f / %.2f s | %d |\n", s.Fault, s.Topics, s.ProduceMin, s.ProduceMedian, s.ProduceMax, s.ConsumeMin, s.ConsumeMedian, s.ConsumeMax, s.NotRecovered)
		}
	}
	b.WriteString("\nReceipts per topic by epoch (the epoch in force when the receipt came; region by the ledger of its id, unknown when both regions' copies hold that ledger id):\n\n| topic | receipts by epoch | resume produce / consume per fault |\n|---|---|---|\n")
	for _, t := range c.Topics {
		var eps, res []string
		for _, e := range t.Epochs {
			regions := make([]string, 0, len(e.Regions))
			for r := range e.Regions {
				regions = append(regions, r)
			}
			slices.Sort(regions)
			var parts []string
			for _, r := range regions {
				parts = append(parts, fmt.Sprintf("%s %d", r, e.Regions[r]))
			}
			label := "—"
			if e.Active != "" {
				label = fmt.Sprintf("%d (%s)", e.Epoch, e.Active)
			}
			eps = append(eps, label+": "+strings.Join(parts, ", "))
		}
		for _, r := range t.Resume {
			res = append(res, fmt.Sprintf("%.2f / %.2f s", r.ProduceSec, r.ConsumeSec))
		}
		name := t.Topic
		if t.TwoRegions {
			name = "**" + name + " (two regions in one epoch)**"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", name, strings.Join(eps, "; "), strings.Join(res, "; "))
	}
}

// verifySummary is the verify step in a line, beside the RPO.
func (rep *Report) verifySummary() string {
	if len(rep.Verify) == 0 {
		return "not run (no replicated namespace)"
	}
	var parts []string
	for _, v := range rep.Verify {
		if v.Error != "" {
			parts = append(parts, fmt.Sprintf("%s: not answered (%s)", v.Namespace, v.Error))
			continue
		}
		verdict := "clean"
		if !v.Clean {
			verdict = "NOT CLEAN"
		}
		parts = append(parts, fmt.Sprintf("%s: %s — %d topics, %d compared, %d missing, %d mismatched, %d extra, %d trimmed, %d not replicated, %d topics with a region not read (%.1f s, asked in %s)",
			v.Namespace, verdict, v.Topics, v.Compared, v.Missing, v.Mismatched, v.Extra, v.Trimmed, v.NotReplicated, v.Unreachable, v.Seconds, v.Region))
	}
	return strings.Join(parts, "; ")
}
