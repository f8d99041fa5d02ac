package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/tools/up"
)

// ABOptions configures RunAB: two meridian binaries (before and after a
// change) measured side by side, alternating round by round, so a change's
// effect is a ratio from one run.
type ABOptions struct {
	A, B     string // the binaries: A before, B after
	Rounds   int    // default 3
	Duration time.Duration
	// Georep: measure a 2-region deployment (async and sync max rate,
	// async lag at LagRate) instead of the standalone.
	Georep  bool
	LagRate float64
	Dir     string
}

type abSide struct {
	batched, half, syncSend, backlog, asyncMax, syncMax, lag []Result
	lags                                                     []time.Duration
	hists                                                    lagHists // the lag rows' store-to-store and stages
	// floor: the disk alone under each lag row's entries, 2 of 3 files
	// fdatasynced (QuorumFloor): the floor of the one quorum fsync a
	// store-to-store lag holds (west's).
	floor []Result
	cpu   []time.Duration
}

// RunAB alternates A and B (A first in odd rounds, B first in even ones),
// each on a fresh standalone (or deployment), and prints each side's
// merged figures and B ÷ A.
func RunAB(ctx context.Context, o ABOptions, out io.Writer) error {
	if o.Rounds == 0 {
		o.Rounds = 3
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.LagRate == 0 {
		o.LagRate = 10000
	}
	dir, cleanup, err := workDir(o.Dir, "ab")
	if err != nil {
		return err
	}
	defer cleanup()
	sides := map[string]*abSide{"A": {hists: lagHists{}}, "B": {hists: lagHists{}}}
	bins := map[string]string{"A": o.A, "B": o.B}
	for round := range o.Rounds {
		order := []string{"A", "B"}
		if round%2 == 1 {
			order = []string{"B", "A"}
		}
		for _, k := range order {
			d := filepath.Join(dir, fmt.Sprintf("%s-%d", k, round))
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			fmt.Fprintf(out, "round %d, %s (%s)\n", round+1, k, bins[k])
			var err error
			if o.Georep {
				err = abGeorep(ctx, bins[k], d, o, sides[k], out)
			} else {
				err = abStandalone(ctx, bins[k], d, o, sides[k], out)
			}
			_ = os.RemoveAll(d)
			if err != nil {
				return fmt.Errorf("bench: ab %s round %d: %w", k, round+1, err)
			}
		}
	}
	a, b := sides["A"], sides["B"]
	line := func(name string, ra, rb []Result, lat bool) {
		if len(ra) == 0 || len(rb) == 0 {
			return
		}
		ma, mb := merge(ra), merge(rb)
		fmt.Fprintf(out, "%-44s A %8.0f msgs/s  B %8.0f msgs/s  B/A %.2f", name, ma.rate(), mb.rate(), mb.rate()/ma.rate())
		if lat {
			for _, p := range []float64{0.5, 0.99} {
				fmt.Fprintf(out, "  p%.0f A %v B %v B/A %.2f", p*100, ma.pct(p).Round(10*time.Microsecond), mb.pct(p).Round(10*time.Microsecond),
					float64(mb.pct(p))/float64(max(1, ma.pct(p))))
			}
		}
		if ma.ServerCPU > 0 && mb.ServerCPU > 0 {
			ca, cb := ma.ServerCPU.Seconds()/float64(ma.Ops)*1e6, mb.ServerCPU.Seconds()/float64(mb.Ops)*1e6
			fmt.Fprintf(out, "  CPU s/M A %.1f B %.1f B/A %.2f", ca, cb, cb/ca)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "\nA = %s\nB = %s\n%d rounds, alternating\n", o.A, o.B, o.Rounds)
	line("produce batched, unthrottled", a.batched, b.batched, true)
	line("produce batched at 50 % of A's batched rate", a.half, b.half, true)
	line("unbatched, one at a time (sync send)", a.syncSend, b.syncSend, true)
	line("consume the batched backlog (from the bookies)", a.backlog, b.backlog, false)
	line("georep async max", a.asyncMax, b.asyncMax, true)
	line("georep sync max", a.syncMax, b.syncMax, true)
	if len(a.asyncMax) > 0 && len(a.syncMax) > 0 {
		ra := merge(a.syncMax).rate() / merge(a.asyncMax).rate()
		rb := merge(b.syncMax).rate() / merge(b.asyncMax).rate()
		fmt.Fprintf(out, "%-44s A %.2f  B %.2f\n", "sync ÷ async", ra, rb)
	}
	line(fmt.Sprintf("georep async at %.0f msgs/s (publish)", o.LagRate), a.lag, b.lag, true)
	if len(a.lags) > 0 && len(b.lags) > 0 {
		for _, p := range []float64{0.5, 0.99} {
			la, lb := pctOf(a.lags, p), pctOf(b.lags, p)
			fmt.Fprintf(out, "%-44s A %v  B %v  B/A %.2f\n", fmt.Sprintf("replication lag p%.0f", p*100), la.Round(10*time.Microsecond), lb.Round(10*time.Microsecond), float64(lb)/float64(max(1, la)))
		}
		ha, hb := a.hists["s2s"], b.hists["s2s"]
		for _, p := range []float64{0.5, 0.99} {
			name := fmt.Sprintf("store-to-store lag p%.0f", p*100)
			switch {
			case ha.count() > 0 && hb.count() > 0:
				la, lb := ha.quantile(p), hb.quantile(p)
				fmt.Fprintf(out, "%-44s A %v  B %v  B/A %.2f\n", name, round10us(la), round10us(lb), float64(lb)/float64(max(1, la)))
			case hb.count() > 0:
				fmt.Fprintf(out, "%-44s A n/a  B %v\n", name, round10us(hb.quantile(p)))
			case ha.count() > 0:
				fmt.Fprintf(out, "%-44s A %v  B n/a\n", name, round10us(ha.quantile(p)))
			}
		}
		if ha.count() > 0 || hb.count() > 0 {
			fmt.Fprintf(out, "%-44s A %s\n%-44s B %s\n", "store-to-store lag", a.hists.storeToStore(), "", b.hists.storeToStore())
			fmt.Fprintf(out, "%-44s A %s\n%-44s B %s\n", "stages", a.hists.stages(), "", b.hists.stages())
		}
		for _, sd := range []struct {
			k string
			s *abSide
		}{{"A", a}, {"B", b}} {
			if len(sd.s.floor) == 0 {
				continue
			}
			fl, h := merge(sd.s.floor), sd.s.hists["s2s"]
			fmt.Fprintf(out, "%-44s %s p50 %v p99 %v  store-to-store ÷ floor: p50 %.2f p99 %.2f\n", "floor: the disk alone, 2 of 3 fdatasynced", sd.k,
				round10us(fl.pct(0.5)), round10us(fl.pct(0.99)), float64(h.quantile(0.5))/float64(max(1, fl.pct(0.5))), float64(h.quantile(0.99))/float64(max(1, fl.pct(0.99))))
		}
	}
	return nil
}

// abHalf is the paced rate of the 50 % rows: half of A's first batched
// rate, so both sides get the same offered load.
var abHalf float64

func abStandalone(ctx context.Context, bin, dir string, o ABOptions, s *abSide, out io.Writer) error {
	sa, err := startStandalone(ctx, bin, dir)
	if err != nil {
		return err
	}
	defer sa.stop()
	id := time.Now().Format("150405")
	spec := func(step string, batching bool, rate float64) loadSpec {
		return loadSpec{Topics: []string{fmt.Sprintf("persistent://public/default/ab-%s-%s", id, step)}, Batching: batching, Rate: rate,
			Duration: o.Duration, Size: msgSize, MaxPending: 2000, BatchDelay: batchDelay}
	}
	measure := func(name string, sp loadSpec, into *[]Result) error {
		settle(ctx, sa)
		s0, _ := sa.cpu()
		r, err := produce(ctx, sa.URL, sp)
		s1, _ := sa.cpu()
		r.ServerCPU = s1 - s0
		fmt.Fprintf(out, "  %-40s %8.0f msgs/s  p50 %v  p99 %v  errors %d\n", name, r.rate(), r.pct(0.5).Round(10*time.Microsecond), r.pct(0.99).Round(10*time.Microsecond), r.Errors)
		*into = append(*into, r)
		return err
	}
	if err := measure("batched", spec("b", true, 0), &s.batched); err != nil {
		return err
	}
	if abHalf == 0 {
		abHalf = s.batched[len(s.batched)-1].rate() / 2
	}
	// The batched step's messages from the start, read from the bookies
	// (the broker's tail cache holds only the last 16 MiB).
	settle(ctx, sa)
	var want atomic.Int64
	want.Store(int64(s.batched[len(s.batched)-1].Ops))
	cs := consumeSpec{Topics: spec("b", true, 0).Topics, Sub: "backlog", Earliest: true, Duration: o.Duration, Stall: 5 * time.Second}
	c, err := subscribe(sa.URL, cs)
	if err != nil {
		return err
	}
	s0, _ := sa.cpu()
	r := c.receive(ctx, cs, time.Now(), &want)
	s1, _ := sa.cpu()
	c.unsubscribe()
	r.Lat, r.ServerCPU = nil, s1-s0
	fmt.Fprintf(out, "  %-40s %8.0f msgs/s\n", "consume backlog", r.rate())
	s.backlog = append(s.backlog, r)
	if err := measure("batched at 50 %", spec("h", true, abHalf), &s.half); err != nil {
		return err
	}
	sp := spec("s", false, 0)
	sp.Sync, sp.Duration = true, o.Duration/2
	return measure("sync send", sp, &s.syncSend)
}

func abGeorep(ctx context.Context, bin, dir string, o ABOptions, s *abSide, out io.Writer) error {
	plan, err := up.NewPlan(up.Options{
		Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3,
		DataDir: filepath.Join(dir, "up"), GossipProfile: "fast",
	})
	if err != nil {
		return err
	}
	dep, err := up.Start(ctx, plan, bin, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return err
	}
	defer dep.Stop(10 * time.Second)
	g := &geoDeployment{d: dep}
	for _, r := range dep.Endpoints().Regions {
		switch r.Name {
		case "east":
			g.east = r
		case "west":
			g.west = r
		}
	}
	for _, m := range []string{"async", "sync"} {
		if err := g.createNamespace(ctx, "public/bench-"+m, []string{"east", "west"}, map[string]any{"mode": m, "failover": "active-active"}); err != nil {
			return err
		}
	}
	id := time.Now().Format("150405")
	gopt := GeorepOptions{Duration: o.Duration, Size: msgSize, Producers: 1, MaxPending: 2000}
	for _, m := range []string{"async", "sync"} {
		g.settle(ctx)
		c0 := g.cpu()
		r, err := produce(ctx, g.east.ServiceURL, loadSpec{Topics: []string{fmt.Sprintf("persistent://public/bench-%s/ab-%s-max", m, id)}, Batching: true,
			Duration: o.Duration, Size: msgSize, MaxPending: 2000, BatchDelay: batchDelay})
		r.ServerCPU = g.cpu() - c0
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %-40s %8.0f msgs/s  p50 %v  p99 %v  errors %d\n", m+" max", r.rate(), r.pct(0.5).Round(10*time.Microsecond), r.pct(0.99).Round(10*time.Microsecond), r.Errors)
		if m == "async" {
			s.asyncMax = append(s.asyncMax, r)
		} else {
			s.syncMax = append(s.syncMax, r)
		}
	}
	g.settle(ctx)
	row := &geoRow{}
	c0 := g.cpu()
	if err := g.tagged(ctx, row, []string{fmt.Sprintf("persistent://public/bench-async/ab-%s-lag", id)}, o.LagRate, gopt); err != nil {
		return err
	}
	row.r.ServerCPU = g.cpu() - c0
	fmt.Fprintf(out, "  %-40s %8.0f msgs/s  lag p50 %v p99 %v  missing %d\n", "async lag", row.r.rate(), pctOf(row.lag, 0.5).Round(10*time.Microsecond),
		pctOf(row.lag, 0.99).Round(10*time.Microsecond), row.missing)
	fmt.Fprintf(out, "  %-40s %s\n  %-40s %s\n", "store to store", row.hists.storeToStore(), "stages", row.hists.stages())
	s.lag = append(s.lag, row.r)
	s.lags = append(s.lags, row.lag...)
	s.hists.merge(row.hists)
	if n := row.hists["s2s"].count(); n > 0 && row.r.Elapsed > 0 {
		// The same entries (rate and size) on the disk alone, right after.
		fd, err := quorumFloorDir(dir)
		if err != nil {
			return err
		}
		size := max(1, int(float64(row.r.Ops)*float64(msgSize)/n))
		fl, err := QuorumFloor(fd, 3, 2, n/row.r.Elapsed.Seconds(), size, o.Duration)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %-40s %s: p50 %v p99 %v\n", "floor", fl.Name, round10us(fl.pct(0.5)), round10us(fl.pct(0.99)))
		s.floor = append(s.floor, fl)
	}
	if row.missing > 0 {
		return fmt.Errorf("%d acknowledged messages never reached west", row.missing)
	}
	return nil
}
