package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/tools/up"
)

// GeorepOptions configures RunGeorep.
type GeorepOptions struct {
	// Out: also write the markdown table to this file ("" = stdout only).
	Out string
	// Append: append the section to Out if it exists (`bench all` writes
	// the broker section first), whatever MERIDIAN_BENCH_APPEND says.
	Append bool
	// Dir: where the deployment's data goes. Default: a temp dir under ".".
	Dir string
	// Duration of each measurement. Default 15s: the whole section then
	// takes about 2.5 minutes (7 measurements of 15 s; start-up, probe,
	// drains and settling ~40 s). At 10s it took 1m36s here.
	Duration time.Duration
	// Modes: replication modes to measure beside the single-region
	// baseline, each in its own namespace. Default async, sync.
	Modes []string
	// Size of a message's payload in bytes (at least 16: the sequence
	// number and send time travel in it). Default 1024.
	Size int
	// Producers per maximum-rate measurement, each on its own topic and
	// client connection. Default 1 (the broker bench's default: on 2 cores
	// more producers measured lower).
	Producers int
	// MaxPending: the producers' MaxPendingMessages. Default 2000.
	MaxPending int
	// MeridianBin: the meridian binary every process of the deployment
	// runs. "" = build ./cmd/meridian (run from the module root).
	MeridianBin string
	// Command: how the run was invoked, printed above the table.
	Command string
	// Peers: if set, a NATS JetStream mirror (a second domain over a
	// leafnode) is measured beside Meridian's replication: lag at
	// LagRate and the backfill of a new mirror.
	Peers *Peers
	// LagRate: the fixed rate of the replication-lag row beside the
	// JetStream mirror's (and of the mirror's publisher). Default 20,000
	// msgs/s (the target rate).
	LagRate float64
	// BackfillMessages: the messages the topic holds when the backfill row
	// adds a region to its namespace. Default: LagRate × min(Duration,
	// 10 s), as many as the mirror's backfill (200,000 in make bench).
	BackfillMessages int
	// ProfileDir: if set, CPU and allocation profiles of east's broker and
	// one of its bookies during the async max-rate row are written there.
	ProfileDir string
}

// GeorepSummary is what RunGeorep measured, for the side-by-side table.
type GeorepSummary struct {
	Section  string
	Base     Result             // single-region max rate
	Max      map[string]*geoRow // by mode
	Lag      *geoRow            // async at LagRate
	Mirror   mirrorResult
	MirrorOK bool
	MirErr   error
	Backfill backfillResult
	Profiles []*profilePair
}

// backfillResult: a region added to a namespace whose topic already holds
// N messages, until west's consumer has them all.
type backfillResult struct {
	N    int
	Time time.Duration
	Err  error
}

func (o *GeorepOptions) defaults() {
	if o.Duration == 0 {
		o.Duration = 15 * time.Second
	}
	if len(o.Modes) == 0 {
		o.Modes = []string{"async", "sync", "stretched"}
	}
	if o.Size == 0 {
		o.Size = msgSize
	}
	if o.Producers == 0 {
		o.Producers = 1
	}
	if o.MaxPending == 0 {
		o.MaxPending = 2000
	}
	if o.Command == "" {
		o.Command = "meridian bench georep"
	}
	if o.LagRate == 0 {
		o.LagRate = 20000
	}
}

// geoRow is one row of the georep table.
type geoRow struct {
	name, mode string
	na         string // "n/a" reason; the row was not measured
	r          Result // produce: rate and publish latency
	cpu        time.Duration
	lag, e2e   []time.Duration // receipt in east → received in west; send → received in west
	missing    int             // acknowledged in east, never received in west
	dups       int
	ref        *Result // the single-region row the ratios are to
	note       string
	replRate   float64 // messages received in west ÷ (last arrival − first send)
	replDuring float64 // messages received in west up to east's last receipt ÷ (last receipt − first send)
	catchUp    time.Duration
	// hists: the brokers' store-to-store and stage histograms over the
	// measurement (stages.go); empty for a binary that exports none.
	hists lagHists
}

// RunGeorep starts a 2-region deployment (east, west: 1 broker and 3
// bookies over 3 racks each, as separate processes via tools/up) and
// measures in one run, through the unmodified pulsar-client-go producing in
// east: the maximum produce rate and publish latency in a single-region
// namespace (the baseline) and in a namespace replicated to west per
// replication mode; at 50 % of the async maximum, the replication lag
// (receipt in east → received by a consumer in west) per mode; and the
// replication throughput (the rate at which west receives what east takes
// unthrottled). It prints one markdown table with ratios to the baseline.
func RunGeorep(ctx context.Context, o GeorepOptions, out io.Writer) (sum GeorepSummary, err error) {
	o.defaults()
	if o.Size < 16 {
		return sum, fmt.Errorf("bench: --size %d: at least 16 bytes (sequence number and send time)", o.Size)
	}
	for _, m := range o.Modes {
		if m != "async" && m != "sync" && m != "stretched" {
			return sum, fmt.Errorf("bench: mode %q: want async, sync or stretched", m)
		}
	}
	dir, cleanup, err := workDir(o.Dir, "georep")
	if err != nil {
		return sum, err
	}
	defer cleanup()
	bin := o.MeridianBin
	if bin == "" {
		fmt.Fprintf(out, "building meridian ...\n")
		if bin, err = buildMeridian(ctx, dir); err != nil {
			return sum, err
		}
	}
	plan, err := up.NewPlan(up.Options{
		Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3,
		DataDir: filepath.Join(dir, "up"), GossipProfile: "fast",
	})
	if err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "starting east and west (1 broker, 3 bookies over 3 racks, etcd, global-store member each; a witness), data in %s ...\n", plan.Options.DataDir)
	t0 := time.Now()
	pprofDir := ""
	if o.ProfileDir != "" {
		// The deployment's processes inherit it (cmd/meridian/pprof.go).
		pprofDir = filepath.Join(dir, "pprof")
		if err := os.MkdirAll(pprofDir, 0o755); err != nil {
			return sum, err
		}
		os.Setenv("MERIDIAN_PPROF_DIR", pprofDir)
	}
	dep, err := up.Start(ctx, plan, bin, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Unsetenv("MERIDIAN_PPROF_DIR")
	if err != nil {
		return sum, err
	}
	defer func() {
		fmt.Fprintf(out, "stopping the deployment ...\n")
		dep.Stop(10 * time.Second)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(out, "logs: %s\n", filepath.Join(plan.Options.DataDir, "logs"))
			if o.Dir == "" {
				// The temp dir goes; show the brokers' last lines first.
				for _, name := range []string{"east-broker-1", "west-broker-1"} {
					b, _ := os.ReadFile(filepath.Join(plan.Options.DataDir, "logs", name+".log"))
					if len(b) > 3000 {
						b = b[len(b)-3000:]
					}
					fmt.Fprintf(out, "---- %s ----\n%s\n", name, b)
				}
			}
		}
	}()
	g := &geoDeployment{d: dep}
	for _, r := range dep.Endpoints().Regions {
		switch r.Name {
		case "east":
			g.east = r
		case "west":
			g.west = r
		}
	}
	fmt.Fprintf(out, "deployment up in %v: east %s (admin %s), west %s (admin %s)\n", time.Since(t0).Round(100*time.Millisecond),
		g.east.ServiceURL, g.east.AdminURL, g.west.ServiceURL, g.west.AdminURL)

	runID := time.Now().Format("150405")
	topics := func(ns, step string, n int) []string {
		t := make([]string, n)
		for i := range t {
			t[i] = fmt.Sprintf("persistent://public/%s/%s-%s-p%d", ns, step, runID, i)
		}
		return t
	}
	prepare := func() {
		if w, share, ok := g.settle(ctx); !ok {
			fmt.Fprintf(out, "  (not idle after %v: %.0f %% of a core; measuring anyway)\n", w.Round(time.Second), share*100)
		}
	}
	// measured runs f, adding the deployment's CPU to its row.
	measured := func(row *geoRow, f func() error) error {
		prepare()
		c0 := g.cpu()
		err := f()
		row.cpu = g.cpu() - c0
		return err
	}
	printRow := func(row *geoRow) {
		if row.na != "" {
			fmt.Fprintf(out, "  %-62s n/a: %s\n", row.name, row.na)
			return
		}
		fmt.Fprintf(out, "  %-62s %8.0f msgs/s  p50 %v  p99 %v  errors %d", row.name, row.r.rate(),
			row.r.pct(0.5).Round(10*time.Microsecond), row.r.pct(0.99).Round(10*time.Microsecond), row.r.Errors)
		if row.replRate > 0 {
			fmt.Fprintf(out, "  west received %.0f msgs/s", row.replRate)
		}
		if len(row.lag) > 0 {
			fmt.Fprintf(out, "  lag p50 %v p99 %v  missing %d", pctOf(row.lag, 0.5).Round(10*time.Microsecond), pctOf(row.lag, 0.99).Round(10*time.Microsecond), row.missing)
		}
		fmt.Fprintln(out)
		if len(row.lag) > 0 {
			fmt.Fprintf(out, "  %-62s store to store %s\n  %-62s stages %s\n", "", row.hists.storeToStore(), "", row.hists.stages())
		}
	}
	maxSpec := func(ts []string, rate float64) loadSpec {
		return loadSpec{Topics: ts, Batching: true, Rate: rate, Duration: o.Duration, Size: o.Size, MaxPending: o.MaxPending, BatchDelay: batchDelay}
	}

	// Namespaces: the baseline lists only east; one per mode lists both.
	if err := g.createNamespace(ctx, "public/bench-local", []string{"east"}, nil); err != nil {
		return sum, fmt.Errorf("bench: single-region namespace: %w", err)
	}
	nsNA := map[string]string{}
	for _, m := range o.Modes {
		if err := g.createNamespace(ctx, "public/bench-"+m, []string{"east", "west"}, map[string]any{"mode": m, "failover": "active-active"}); err != nil {
			nsNA[m] = "namespace refused: " + err.Error()
			fmt.Fprintf(out, "  %s: %s\n", m, nsNA[m])
		}
	}

	// 1. Maximum produce rates.
	base := &geoRow{name: "produce, max rate — single region (east only): baseline", mode: "none"}
	if err := measured(base, func() error {
		r, err := produce(ctx, g.east.ServiceURL, maxSpec(topics("bench-local", "max", o.Producers), 0))
		base.r = r
		return err
	}); err != nil {
		return sum, fmt.Errorf("bench: baseline: %w", err)
	}
	base.ref = &base.r
	printRow(base)
	if base.r.Ops == 0 {
		return sum, fmt.Errorf("bench: the single-region baseline produced nothing (%v)", base.r.FirstErr)
	}
	rows := []*geoRow{base}
	maxRows := map[string]*geoRow{}
	for _, m := range o.Modes {
		row := &geoRow{name: fmt.Sprintf("produce, max rate — %s, east+west", m), mode: m, ref: &base.r, na: nsNA[m]}
		rows = append(rows, row)
		maxRows[m] = row
		if row.na == "" && m != "async" {
			prepare()
			ok, why, err := g.probeHeld(ctx, m, topics("bench-"+m, "probe", 1)[0], o.Size)
			if err != nil {
				return sum, err
			}
			fmt.Fprintf(out, "  %s probe: %s\n", m, why)
			if !ok {
				row.na = why
			}
		}
		if row.na != "" {
			printRow(row)
			continue
		}
		var profs []*profilePair
		var profWG sync.WaitGroup
		if pprofDir != "" && m == "async" {
			// East's broker and one of its bookies, under the async load.
			for _, pr := range []struct{ proc, file, name string }{
				{"east-broker-1", "east-broker", "east's broker (separate process), async replicated produce"},
				{"east-bookie-1", "east-bookie", "one of east's bookies (separate process), async replicated produce"},
			} {
				pp := &profilePair{Name: pr.name, Bin: bin, Window: max(time.Second, o.Duration-3*time.Second)}
				profs = append(profs, pp)
				pid := dep.Pid(pr.proc)
				profWG.Add(1)
				go func() {
					defer profWG.Done()
					addr, err := pprofAddr(pprofDir, pid)
					if err == nil {
						time.Sleep(2 * time.Second) // past the producer's start
						pp.CPU, pp.Allocs, err = captureProfiles(ctx, addr, o.ProfileDir, pr.file, pp.Window)
					}
					pp.Err = err
				}()
			}
		}
		if err := measured(row, func() error {
			r, err := produce(ctx, g.east.ServiceURL, maxSpec(topics("bench-"+m, "max", o.Producers), 0))
			row.r = r
			return err
		}); err != nil {
			return sum, fmt.Errorf("bench: %s max: %w", m, err)
		}
		profWG.Wait()
		sum.Profiles = append(sum.Profiles, profs...)
		if row.r.Ops == 0 {
			row.na = fmt.Sprintf("no message acknowledged (%d failed: %v)", row.r.Errors, row.r.FirstErr)
		}
		printRow(row)
	}

	// 2. At 50 % of the async maximum (of the baseline's if async is not
	// measured): publish latency in every namespace, replication lag in
	// the replicated ones.
	halfOf, halfName := base.r.rate(), "single-region"
	if a := maxRows["async"]; a != nil && a.na == "" {
		halfOf, halfName = a.r.rate(), "async"
	}
	half := halfOf / 2
	baseHalf := &geoRow{name: fmt.Sprintf("produce at 50 %% of the %s max (%.0f msgs/s) — single region: baseline", halfName, half), mode: "none"}
	if err := measured(baseHalf, func() error {
		r, err := produce(ctx, g.east.ServiceURL, maxSpec(topics("bench-local", "half", 1), half))
		baseHalf.r = r
		return err
	}); err != nil {
		return sum, fmt.Errorf("bench: baseline at 50 %%: %w", err)
	}
	baseHalf.ref = &baseHalf.r
	printRow(baseHalf)
	rows = append(rows, baseHalf)
	for _, m := range o.Modes {
		row := &geoRow{name: fmt.Sprintf("produce at 50 %% of the %s max — %s, east+west: replication lag", halfName, m), mode: m, ref: &baseHalf.r, na: maxRows[m].na}
		rows = append(rows, row)
		if row.na != "" {
			printRow(row)
			continue
		}
		if mr := maxRows[m]; mr.r.rate() < half {
			row.note = fmt.Sprintf("offered more than this mode's max (%.0f msgs/s): saturated", mr.r.rate())
		}
		if err := measured(row, func() error {
			return g.tagged(ctx, row, topics("bench-"+m, "lag", 1), half, o)
		}); err != nil {
			return sum, fmt.Errorf("bench: %s lag: %w", m, err)
		}
		printRow(row)
	}

	// 3. Replication throughput: unthrottled produce in east with a
	// consumer in west; west's receive rate vs east's receipt rate.
	replMode := ""
	for _, m := range o.Modes {
		if maxRows[m].na == "" && (replMode == "" || m == "async") {
			replMode = m
		}
	}
	var repl *geoRow
	if replMode != "" {
		repl = &geoRow{name: fmt.Sprintf("replication throughput — %s: west's receive rate, unthrottled produce in east", replMode), mode: replMode, ref: &base.r}
		var maxBacklog atomic.Int64
		maxBacklog.Store(-1)
		topic := topics("bench-"+replMode, "repl", 1)
		pollCtx, stopPoll := context.WithCancel(ctx)
		var polled sync.WaitGroup
		polled.Add(1)
		go func() {
			defer polled.Done()
			for pollCtx.Err() == nil {
				if n := g.backlog(pollCtx, topic[0]); n > maxBacklog.Load() {
					maxBacklog.Store(n)
				}
				select {
				case <-pollCtx.Done():
				case <-time.After(250 * time.Millisecond):
				}
			}
		}()
		err := measured(repl, func() error { return g.tagged(ctx, repl, topic, 0, o) })
		stopPoll()
		polled.Wait()
		if err != nil {
			return sum, fmt.Errorf("bench: replication throughput: %w", err)
		}
		if mb := maxBacklog.Load(); mb >= 0 {
			repl.note = fmt.Sprintf("east's replication backlog to west peaked at %d entries (polled every 250 ms)", mb)
		}
		printRow(repl)
	}

	// 4. Beside JetStream: async lag at a fixed rate, then a JetStream
	// mirror at the same rate and its backfill, then Meridian's backfill
	// of a newly added region.
	sum.Max, sum.Base = maxRows, base.r
	if a := maxRows["async"]; a != nil && a.na == "" {
		row := &geoRow{name: fmt.Sprintf("async at %.0f msgs/s", o.LagRate), mode: "async", ref: &baseHalf.r}
		if err := measured(row, func() error { return g.tagged(ctx, row, topics("bench-async", "lag20k", 1), o.LagRate, o) }); err != nil {
			return sum, fmt.Errorf("bench: async lag at %.0f msgs/s: %w", o.LagRate, err)
		}
		printRow(row)
		sum.Lag = row
	}
	if o.Peers != nil {
		prepare()
		fmt.Fprintf(out, "  JetStream mirror at %.0f msgs/s ...\n", o.LagRate)
		mr, err := measureMirror(ctx, *o.Peers, filepath.Join(dir, "nats-mirror"), o.LagRate, min(o.Duration, 10*time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return sum, ctx.Err()
			}
			sum.MirErr = err
			fmt.Fprintf(out, "  JetStream mirror: %v\n", err)
		} else {
			sum.Mirror, sum.MirrorOK = mr, true
			fmt.Fprintf(out, "  JetStream mirror: %.0f msgs/s, lag p50 %v p99 %v; backfill %d msgs in %v (%s)\n", mr.Rate,
				pctOf(mr.Lag, 0.5).Round(10*time.Microsecond), pctOf(mr.Lag, 0.99).Round(10*time.Microsecond), mr.BackfillN, mr.BackfillTime.Round(time.Millisecond), mr.Polls)
		}
	}
	prepare()
	n := int(o.LagRate * min(o.Duration, 10*time.Second).Seconds())
	if o.BackfillMessages > 0 {
		n = o.BackfillMessages
	}
	sum.Backfill = g.backfill(ctx, o, n)
	if err := ctx.Err(); err != nil {
		return sum, err
	}
	if b := sum.Backfill; b.Err != nil {
		fmt.Fprintf(out, "  backfill: %v\n", b.Err)
	} else {
		fmt.Fprintf(out, "  backfill: west received %d msgs %v after it was added (%.0f msgs/s)\n", b.N, b.Time.Round(time.Millisecond), float64(b.N)/b.Time.Seconds())
	}

	// The table.
	var sb strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&sb, "## Geo-replication: async vs sync vs single region\n\n")
	fmt.Fprintf(&sb, "Run %s on %s (%d cores, %s/%s, shared: read the ratios, which come from one run); `%s`, %s per measurement. "+
		"Deployment: `tools/up` (what `meridian up` runs), regions east and west on this machine, each with 1 broker, 3 bookies over 3 racks, its etcd and a global-store member, plus the witness, all separate processes, gossip profile fast, all data on the same disk. "+
		"Load: the unmodified pulsar-client-go producing in east through east's service URL, consumers in west through west's.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, o.Command, o.Duration)
	fmt.Fprintf(&sb, "| measurement | msgs/s | msgs/s ÷ single region | publish p50 | publish p99 | p50 ÷ single region | p99 ÷ single region | receipt in east → received in west p50 | p99 | send → received in west p99 | CPU s / M msgs (all processes) | notes |\n")
	fmt.Fprintf(&sb, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	ratio := func(a, b float64) string {
		if b <= 0 || a <= 0 {
			return ""
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
	for _, row := range append(rows, repl) {
		if row == nil {
			continue
		}
		if row.na != "" {
			fmt.Fprintf(&sb, "| %s | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | | %s |\n", row.name, mdEscape(row.na))
			continue
		}
		r := row.r
		var cells [10]string
		cells[0] = fmt.Sprintf("%.0f", r.rate())
		if row.ref != &row.r {
			cells[1] = ratio(r.rate(), row.ref.rate())
		}
		if row == repl {
			// The rate is west's; east's is in the notes.
			cells[0], cells[1] = fmt.Sprintf("%.0f", row.replRate), ratio(row.replRate, row.ref.rate())
		}
		if len(r.Lat) > 0 {
			cells[2], cells[3] = ms(r.pct(0.5)), ms(r.pct(0.99))
			if row.ref != &row.r {
				cells[4] = ratio(float64(r.pct(0.5)), float64(row.ref.pct(0.5)))
				cells[5] = ratio(float64(r.pct(0.99)), float64(row.ref.pct(0.99)))
			}
		}
		if len(row.lag) > 0 {
			cells[6], cells[7] = ms(pctOf(row.lag, 0.5)), ms(pctOf(row.lag, 0.99))
			cells[8] = ms(pctOf(row.e2e, 0.99))
		}
		if row.cpu > 0 && r.Ops > 0 {
			cells[9] = fmt.Sprintf("%.1f", row.cpu.Seconds()/float64(r.Ops)*1e6)
		}
		var notes []string
		if r.Errors > 0 {
			notes = append(notes, fmt.Sprintf("**%d sends failed** (%v)", r.Errors, r.FirstErr))
		}
		if row.missing > 0 {
			notes = append(notes, fmt.Sprintf("**%d acknowledged messages never reached west**", row.missing))
		}
		if row.dups > 0 {
			notes = append(notes, fmt.Sprintf("%d duplicates received in west", row.dups))
		}
		if row == repl {
			notes = append(notes, fmt.Sprintf("east took %.0f msgs/s in this step; replication ÷ local produce = %s; while east produced, west received %.0f msgs/s (%s of it), then caught up %v after east's last receipt",
				r.rate(), ratio(row.replRate, r.rate()), row.replDuring, ratio(row.replDuring, r.rate()), row.catchUp.Round(time.Millisecond)))
		}
		if h := row.hists["s2s"]; len(row.lag) > 0 && h.count() > 0 {
			notes = append(notes, fmt.Sprintf("store to store (east's quorum-confirmed add → west's): p50 %s, p99 %s, max ≤ %s; stages: %s",
				ms(h.quantile(0.5)), ms(h.quantile(0.99)), ms(h.maxBound()), row.hists.stages()))
		}
		if row.note != "" {
			notes = append(notes, row.note)
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", row.name, cells[0], cells[1], cells[2], cells[3], cells[4], cells[5],
			cells[6], cells[7], cells[8], cells[9], mdEscape(strings.Join(notes, "; ")))
	}
	fmt.Fprintf(&sb, "\nSetup: %s payloads, %d producer(s) per max-rate row (1 in the other rows), each on its own topic and client connection, MaxPendingMessages %d, SendTimeout 30 s, "+
		"batching with BatchingMaxPublishDelay %v and the client's other defaults; publish latency from the SendAsync call (which blocks while MaxPendingMessages are outstanding) to its callback. "+
		"Namespaces: public/bench-local lists only east (the baseline); public/bench-MODE lists east and west with `meridian_replication: {mode: MODE, failover: active-active}`; all keep data forever. "+
		"The max-rate rows have no consumer. The 50 %% rows are paced at half the %s max of this run; their latency ratios are to the single-region row at the same rate, the max rows' to the single-region max row. "+
		"Lag: a consumer in west (Exclusive, ReceiverQueueSize 1000, acking every message) is subscribed before the producer starts and replication is warmed up with one message first; "+
		"each payload carries a sequence number and its send time, and the lag of a message is the time from its producer receipt in east to its arrival at west's consumer (same machine, same clock; "+
		"negative when west delivers it before east's receipt comes back, as a sync receipt can). "+
		"Replication throughput: %s produced unthrottled into a replicated topic for %s with the west consumer attached; rate = messages received in west ÷ (last arrival in west − first send), "+
		"its ratio to the same step's local produce rate (acknowledged in east ÷ (last receipt − first send)) is in the notes and the Read line, with west's rate up to east's last receipt and the catch-up time after it, and east's replication backlog polled from GET /admin/v2/meridian/replication; this is bounded by the local produce rate, since replication runs beside it, and it includes west's dispatch to its consumer. "+
		"Sync (and stretched) rows run only after a probe: one message is sent while west's broker (stretched: west's bookies) is stopped with SIGSTOP for 2 s; a receipt during the stop means the mode does not hold receipts for west yet, and the row says n/a. "+
		"CPU: user+system of every process of the deployment during the measurement (the load generator not included).\n\n",
		sizeName(o.Size), o.Producers, o.MaxPending, batchDelay, halfName, replMode, o.Duration)
	fmt.Fprintf(&sb, "Read:")
	for _, m := range o.Modes {
		row := maxRows[m]
		if row.na != "" {
			fmt.Fprintf(&sb, " %s: n/a (%s).", m, row.na)
			continue
		}
		fmt.Fprintf(&sb, " %s produces %.2f× the single-region rate, publish p50 %.2f× and p99 %.2f× the single-region max row's.", m,
			row.r.rate()/base.r.rate(), float64(row.r.pct(0.5))/float64(max(1, base.r.pct(0.5))), float64(row.r.pct(0.99))/float64(max(1, base.r.pct(0.99))))
	}
	if repl != nil && repl.na == "" && repl.r.Ops > 0 {
		fmt.Fprintf(&sb, " Replication (%s) delivered %.0f msgs/s to west, first send to last arrival = %.2f× the %.0f msgs/s east took in the same step (%.2f× the single-region max); "+
			"while east produced west received %.2f× east's rate, and the rest arrived %v after east's last receipt.",
			replMode, repl.replRate, repl.replRate/repl.r.rate(), repl.r.rate(), repl.replRate/base.r.rate(), repl.replDuring/repl.r.rate(), repl.catchUp.Round(time.Millisecond))
	}
	fmt.Fprintf(&sb, "\n")
	side(&sb, &sum, o)
	fmt.Fprint(out, "\n"+sb.String())
	sum.Section = sb.String()
	if o.Out != "" {
		if o.Append {
			if _, err := os.Stat(o.Out); err == nil {
				f, err := os.OpenFile(o.Out, os.O_APPEND|os.O_WRONLY, 0o644)
				if err != nil {
					return sum, err
				}
				defer f.Close()
				_, err = f.WriteString("\n" + sb.String())
				return sum, err
			}
		}
		return sum, writeReport(o.Out, sb.String())
	}
	return sum, nil
}

// side renders the lag-at-a-fixed-rate, JetStream mirror and backfill
// measurements.
func side(sb *strings.Builder, sum *GeorepSummary, o GeorepOptions) {
	fmt.Fprintf(sb, "\n### Replication beside a JetStream mirror\n\n")
	fmt.Fprintf(sb, "| measurement | rate msgs/s | lag p50 | lag p99 | lag max | backfill msgs/s | CPU s / M msgs (all servers) | notes |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
	if l := sum.Lag; l != nil {
		if l.na != "" {
			fmt.Fprintf(sb, "| Meridian async, paced %.0f msgs/s: receipt in east → received by west's consumer | n/a | | | | | | %s |\n", o.LagRate, mdEscape(l.na))
		} else {
			var note []string
			if l.missing > 0 {
				note = append(note, fmt.Sprintf("**%d acknowledged messages never reached west**", l.missing))
			}
			if l.r.rate() < 0.95*o.LagRate {
				note = append(note, fmt.Sprintf("east took only %.0f msgs/s of the %.0f offered: saturated", l.r.rate(), o.LagRate))
			}
			lagMax := time.Duration(0)
			for _, d := range l.lag {
				lagMax = max(lagMax, d)
			}
			fmt.Fprintf(sb, "| Meridian async, paced %.0f msgs/s: receipt in east → received by west's consumer | %.0f | %s | %s | %s | | %.1f | %s |\n", o.LagRate,
				l.r.rate(), ms(pctOf(l.lag, 0.5)), ms(pctOf(l.lag, 0.99)), ms(lagMax), l.cpu.Seconds()/float64(max(1, l.r.Ops))*1e6, mdEscape(strings.Join(note, "; ")))
			if h := l.hists["s2s"]; h.count() > 0 {
				fmt.Fprintf(sb, "| Meridian async, same run: store to store — east's add confirmed by its bookies → west's add of the entry confirmed by west's (the brokers' histograms) | %.0f | %s | %s | ≤ %s | | | stages: %s |\n",
					l.r.rate(), ms(h.quantile(0.5)), ms(h.quantile(0.99)), ms(h.maxBound()), mdEscape(l.hists.stages()))
			}
		}
	}
	if sum.MirErr != nil {
		fmt.Fprintf(sb, "| JetStream mirror (domain hub → leaf over a leafnode), paced %.0f msgs/s | n/a | | | | | | %s |\n", o.LagRate, mdEscape(sum.MirErr.Error()))
	} else if sum.MirrorOK {
		m := sum.Mirror
		lagMax := time.Duration(0)
		for _, d := range m.Lag {
			lagMax = max(lagMax, d)
		}
		fmt.Fprintf(sb, "| JetStream mirror (domain hub → leaf over a leafnode, R1 file, default fsync), paced %.0f msgs/s: source store → mirror store, /jsz polled every 2 ms | %.0f | %s | %s | %s | %.0f | %.1f | backfill: a new mirror of the %d messages took %v; polls: %s |\n",
			o.LagRate, m.Rate, ms(pctOf(m.Lag, 0.5)), ms(pctOf(m.Lag, 0.99)), ms(lagMax), float64(m.BackfillN)/m.BackfillTime.Seconds(),
			m.CPU.Seconds()/float64(max(1, m.Msgs))*1e6, m.BackfillN, m.BackfillTime.Round(time.Millisecond), mdEscape(m.Polls))
	}
	if b := sum.Backfill; b.Err != nil {
		fmt.Fprintf(sb, "| Meridian backfill: region west added to a namespace whose topic holds N messages | n/a | | | | | | %s |\n", mdEscape(b.Err.Error()))
	} else if b.N > 0 {
		fmt.Fprintf(sb, "| Meridian backfill: west added to the namespace of a topic holding %d messages, until west's consumer has them all | | | | | %.0f | | took %v from the policy change |\n",
			b.N, float64(b.N)/b.Time.Seconds(), b.Time.Round(time.Millisecond))
	}
	fmt.Fprintf(sb, "\nThe two lags are not the same measure: Meridian's runs from the producer's receipt in east to the message's arrival at a consumer in west (it includes west's persistence and dispatch); "+
		"JetStream's (as peers/nats_mirror.sh measures it) from the first poll that sees a sequence in the source stream to the poll that sees it in the mirror, so it has the poll period's resolution and includes no consumer. "+
		"JetStream commands: `nats -s A stream add benchstream --subjects bench.mx --storage file --replicas 1 --defaults`, `nats -s B stream add --config mirror.json` (mirror.external.api = `$JS.hub.API`), "+
		"`nats -s A bench js pub async bench.mx --msgs N --throughput %.0f --batch 100 --size 1024 --no-progress --csv F`; backfill: a second mirror created on B once A holds the N messages, timed until its last_seq reaches N. "+
		"Meridian backfill: namespace public/bench-backfill lists only east while one producer writes N batched messages; then `POST /admin/v2/namespaces/public/bench-backfill/replication [\"east\",\"west\"]` and a consumer in west (Earliest) receives them; the time runs from the POST to the last arrival.\n",
		o.LagRate)
	if len(sum.Profiles) > 0 {
		fmt.Fprintf(sb, "\n")
	}
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s)
}

func pctOf(ds []time.Duration, p float64) time.Duration {
	return Result{Lat: ds}.pct(p)
}
