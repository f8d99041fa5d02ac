package drill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meridian-mq/meridian/drill/check"
	"github.com/meridian-mq/meridian/internal/procstop"
	"github.com/meridian-mq/meridian/tools/netfault"
	"github.com/meridian-mq/meridian/tools/up"
	"github.com/meridian-mq/meridian/tools/wanproxy"
)

// Options control a run.
type Options struct {
	// Out is the directory for the report, the receipt logs and (kept
	// when the drill fails) the deployment's data. Required.
	Out string
	// Seed makes the workload's choices (keys, out-of-order acks)
	// repeatable; 0 picks one (it is in the report).
	Seed uint64
	// Bin is the meridian binary the deployment runs (default: this
	// executable).
	Bin string
	// Progress receives the progress line (nil: none).
	Progress io.Writer
	// Log receives the deployment's own messages (nil: discarded).
	Log *slog.Logger
}

// regionGIDs gives the regions of a partition drill their own group ids
// (netfault's owner match).
func regionGIDs(regions []string) map[string]uint32 {
	return netfault.GIDs(append([]string{"witness"}, regions...)...)
}

// Run runs the drill and returns its report (also written to o.Out). An
// error means the drill could not run; a drill whose expectations fail
// returns a report with Pass false.
func Run(ctx context.Context, s *Scenario, o Options) (*Report, error) {
	if o.Out == "" {
		return nil, errors.New("drill: an output directory is required")
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.Bin = exe
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	r := &runner{s: s, o: o, rep: &Report{Drill: s.Name, Description: s.Description, Seed: o.Seed, Started: time.Now(), Vars: map[string]float64{}}}
	r.prog = newProgress(o.Progress, s)
	return r.run(ctx)
}

type runner struct {
	s    *Scenario
	o    Options
	rep  *Report
	dep  *up.Deployment
	adm  *admin
	net  *netfault.Filter
	w    *workload
	rec  *recorder
	prog *progress

	start   time.Time
	stopAt  time.Time // when the producers were told to stop
	mu      sync.Mutex
	ledgers ledgerRegions // (topic, ledger id) → the region whose copy holds it (sampled during the run)
	proxies []*wanproxy.Proxy
	hit     map[string][]up.ProcSpec // target → the processes its kill or stop hit
	disks   map[string]*smallDisk    // process → its small data filesystem (disk-full)
	faults  []check.Fault
	markers []Marker
	lag     []LagSample
	// The RPO budget's transitions (rpo.go): rpoSeen dedups them across
	// samples, rpoLast is each region's last answer.
	rpo     []RPOEvent
	rpoSeen map[string]bool
	rpoLast map[string]float64
	// switchovers: the planned switchovers asked (switchover.go); epochs:
	// the active-standby namespaces' epochs seen (sampled, and committed
	// by the switchovers).
	switchovers       []Switchover
	regionSwitchovers []RegionSwitchover
	epochs            []check.Epoch
}

func (r *runner) run(ctx context.Context) (*Report, error) {
	s := r.s
	dataDir := filepath.Join(r.o.Out, "data")
	os.RemoveAll(dataDir)
	opts := up.Options{Regions: s.Topology.Regions, BrokersPerRegion: s.Topology.Brokers, BookiesPerRegion: s.Topology.Bookies,
		RacksPerRegion: s.Topology.Racks, DataDir: dataDir, GossipProfile: s.Topology.GossipProfile,
		OwnershipTTL: s.Topology.OwnershipTTL, FailoverLeaseTTL: s.Topology.FailoverLeaseTTL}
	r.rep.Network = "none"
	if s.partitions() {
		if err := netfault.Available(); err != nil {
			return nil, fmt.Errorf("drill %s partitions regions: %w", s.Name, err)
		}
		opts.RegionGIDs = regionGIDs(s.Topology.Regions)
		r.rep.Network = "iptables (owner match on each region's group id; every inter-region packet dropped, gossip's UDP included)"
	}
	opts.ReplicationProxies = s.slowsLinks()
	plan, err := up.NewPlan(opts)
	if err != nil {
		return nil, err
	}
	if ts := s.powerLossTargets(); len(ts) > 0 {
		var names []string
		for _, t := range ts {
			ps := planTargets(plan, t)
			if len(ps) == 0 {
				return nil, fmt.Errorf("drill: power-loss target %s names no bookie of the topology", t)
			}
			for _, p := range ps {
				if p.Role != "bookie" {
					return nil, fmt.Errorf("drill: power-loss target %s: %s is not a bookie", t, p.Name)
				}
				for i := range plan.Procs {
					if plan.Procs[i].Name == p.Name && !slices.Contains(plan.Procs[i].Args, "--simulate-power-loss") {
						plan.Procs[i].Args = append(plan.Procs[i].Args, "--simulate-power-loss")
						names = append(names, p.Name)
					}
				}
			}
		}
		r.note("power-loss: %s run on a crash-simulating filesystem (bookie.PowerLossFS: what a bookie has not fsynced lives only in its memory), so their kill -9 loses it as a power cut would", strings.Join(names, ", "))
	}
	r.disks = map[string]*smallDisk{}
	for _, name := range s.smallDisks() {
		ps, ok := plan.Proc(name)
		if !ok || ps.Role != "bookie" {
			r.unmountDisks()
			return nil, fmt.Errorf("drill: disk-full target %s is not a bookie of the topology", name)
		}
		d, err := mountSmallDisk(ps)
		if err != nil {
			r.unmountDisks()
			return nil, err
		}
		r.disks[name] = d
	}
	defer r.unmountDisks()
	if s.slowsLinks() {
		// Every broker's inbound replication goes through a proxy that
		// delays it: each inter-region link crosses exactly one.
		for _, ps := range plan.Procs {
			if ps.ReplProxy == "" {
				continue
			}
			px, err := wanproxy.Start(ps.ReplProxy, ps.Repl)
			if err != nil {
				r.closeProxies()
				return nil, fmt.Errorf("drill: replication proxy for %s: %w", ps.Name, err)
			}
			r.proxies = append(r.proxies, px)
		}
		defer r.closeProxies()
		r.note("wan: a user-space proxy on every broker's replication (gRPC) link; gossip and the global store are not slowed")
	}
	r.prog.phase("starting the topology")
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	dep, err := up.Start(sctx, plan, r.o.Bin, r.o.Log)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("drill: starting the topology: %w", err)
	}
	r.dep, r.adm = dep, newAdmin(plan)
	kept := false
	defer func() {
		if r.net != nil {
			r.net.Close()
		}
		dep.Stop(5 * time.Second)
		if !kept {
			// Passed: the data goes, the processes' logs stay.
			entries, _ := os.ReadDir(dataDir)
			for _, e := range entries {
				if e.Name() != "logs" {
					os.RemoveAll(filepath.Join(dataDir, e.Name()))
				}
			}
		}
	}()
	if s.partitions() {
		if r.net, err = netfault.New(fmt.Sprintf("MERIDIAN-D%d", os.Getpid())); err != nil {
			return nil, err
		}
	}
	if err := r.createNamespaces(ctx); err != nil {
		return nil, err
	}
	rec, err := newRecorder(r.o.Out)
	if err != nil {
		return nil, err
	}
	defer rec.close()
	r.rec = rec
	e := dep.Endpoints()
	urls := map[string]string{"": e.ServiceURL}
	for _, re := range e.Regions {
		urls[re.Name] = re.ServiceURL
	}
	r.w = &workload{s: s, rec: rec, urls: urls, rng: rand.New(rand.NewPCG(r.o.Seed, 1)), log: r.o.Log}
	r.prog.phase("connecting clients")
	if err := r.w.open(); err != nil {
		r.w.close()
		return nil, fmt.Errorf("drill: workload: %w", err)
	}
	defer r.w.close()

	// Run: the workload, the lag sampler and the fault schedule.
	r.start = time.Now()
	r.prog.begin(r.start, rec)
	r.w.start()
	sampCtx, stopSampling := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); r.sampleLag(sampCtx) }()
	faultsDone := make(chan struct{})
	go func() { defer bg.Done(); defer close(faultsDone); r.applyFaults(sampCtx) }()
	r.prog.phase("workload")
	select {
	case <-time.After(s.Workload.Duration):
	case <-ctx.Done():
	}
	r.prog.phase("stopping producers")
	r.stopAt = time.Now()
	r.w.stopProducing(s.Workload.Client.SendTimeout)
	<-faultsDone
	r.prog.phase("draining")
	subs := r.subs()
	for deadline := time.Now().Add(s.Drain); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(500 * time.Millisecond) {
		if rec.missing(subs) == 0 {
			break
		}
	}
	if n := rec.missing(subs); n > 0 && ctx.Err() == nil {
		r.prog.phase("recording the subscriptions")
		r.dumpSubscriptions(ctx)
		r.note("the drain ended with %d deliveries missing: every live region's stats and internal stats of each topic, taken then (consumers attached), are in %s", n, filepath.Join(r.o.Out, "undelivered"))
	}
	r.w.stopConsuming()
	stopSampling()
	bg.Wait()
	end := time.Now()
	r.prog.phase("verifying replication")
	r.rep.Verify = r.verify(ctx)
	r.prog.done()
	if ctx.Err() != nil {
		kept = true
		return nil, fmt.Errorf("drill: interrupted: %w (data kept in %s)", ctx.Err(), dataDir)
	}

	// Judge.
	h := r.history(ctx, end, subs)
	res := check.Check(h)
	res.Measured = r.measured(h)
	r.judgeSwitchovers(&res)
	for k, v := range verifyFigures(r.rep.Verify) {
		if res.Measured == nil {
			res.Measured = map[string]float64{}
		}
		res.Measured[k] = v
	}
	r.rep.Result = res
	r.rep.Verdicts = check.Evaluate(check.ParseExpectations(s.Expect), res, r.rep.Vars)
	r.rep.Pass = true
	for _, v := range r.rep.Verdicts {
		r.rep.Pass = r.rep.Pass && v.Pass
	}
	r.rep.DurationSec = end.Sub(r.start).Seconds()
	r.rep.WorkloadStart = r.start
	r.rep.Faults = r.faults
	slices.SortStableFunc(r.markers, func(a, b Marker) int { return cmp.Compare(a.T, b.T) })
	r.rep.Markers = r.markers
	r.rep.Lag = r.lag
	r.rep.RPOEvents, r.rep.RPOHolds = r.rpo, rpoPeriods(r.rpo, r.rpoLast)
	r.rep.Switchovers = r.switchovers
	r.rep.RegionSwitchovers = r.regionSwitchovers
	if m := missedEpochs(h.Epochs); len(m) > 0 {
		r.note("epochs never sampled (their receipts count under the epoch before): %s", strings.Join(m, ", "))
	}
	if len(r.budgeted()) > 0 {
		closed := 0.0
		for _, p := range r.rep.RPOHolds {
			closed += p.To - p.From
		}
		r.rep.Vars["rpo_gate_closed_seconds"] = closed
		r.rep.Vars["rpo_gate_closings"] = float64(len(r.rep.RPOHolds))
	}
	if !r.rep.Pass {
		kept = true
		r.rep.DataDir = dataDir
	}
	if err := r.rep.write(r.o.Out, r.start); err != nil {
		return r.rep, err
	}
	return r.rep, nil
}

// measured is what the drill measured besides the checker's figures:
// replication_backlog_max_during_fault, the largest replication backlog
// (all regions) sampled while the first fault lasted.
func (r *runner) measured(h check.History) map[string]float64 {
	if len(h.Faults) == 0 {
		return nil
	}
	from := h.Faults[0].At.Sub(r.start).Seconds()
	to := h.End.Sub(r.start).Seconds()
	if !h.Faults[0].EndAt.IsZero() {
		to = h.Faults[0].EndAt.Sub(r.start).Seconds()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sum := map[float64]int64{} // sample round → backlog of all regions
	var rounds []float64
	for _, l := range r.lag {
		if l.T < from || l.T > to {
			continue
		}
		k := math.Floor(l.T)
		if _, ok := sum[k]; !ok {
			rounds = append(rounds, k)
		}
		sum[k] += l.Entries
	}
	var peak int64
	for _, k := range rounds {
		peak = max(peak, sum[k])
	}
	return map[string]float64{"replication_backlog_max_during_fault": float64(peak)}
}

// createNamespaces creates the drill's namespaces (keeping everything:
// retention -1) and waits until an active region is recorded for each.
func (r *runner) createNamespaces(ctx context.Context) error {
	for _, ns := range r.s.Namespaces {
		body := map[string]any{
			"replication_clusters": ns.Regions,
			"retention_policies":   map[string]int{"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
		}
		if ns.Replication != nil {
			body["meridian_replication"] = ns.Replication
		}
		if ns.Ensemble > 0 {
			body["persistence"] = map[string]int{"bookkeeperEnsemble": ns.Ensemble, "bookkeeperWriteQuorum": ns.WriteQuorum, "bookkeeperAckQuorum": ns.AckQuorum}
		}
		if err := r.adm.call(ctx, ns.Regions[0], "PUT", "/admin/v2/namespaces/"+ns.Name, body, nil); err != nil {
			return fmt.Errorf("drill: namespace %s: %w", ns.Name, err)
		}
		if len(ns.Regions) < 2 || ns.Replication["failover"] == "active-active" {
			continue
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			a, err := r.adm.activeRegion(ctx, ns.Regions[0], ns.Name)
			if err == nil && a != "" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("drill: namespace %s has no active region after 60 s: %v", ns.Name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

func (r *runner) subs() []check.Sub {
	var out []check.Sub
	for _, c := range r.s.Workload.Consumers {
		s := check.Sub{Topic: c.Topic, Name: c.Subscription}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// LagSample is a region's replication backlog at a time of the drill.
type LagSample struct {
	T       float64 `json:"t"`
	Region  string  `json:"region"`
	Entries int64   `json:"entries"`
}

func (r *runner) sampleLag(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, region := range r.s.Topology.Regions {
			c, cancel := context.WithTimeout(ctx, time.Second)
			n, err := r.adm.backlog(c, region)
			cancel()
			if err == nil {
				r.mu.Lock()
				r.lag = append(r.lag, LagSample{T: time.Since(r.start).Seconds(), Region: region, Entries: n})
				r.mu.Unlock()
			}
		}
		r.sampleLedgers(ctx)
		r.sampleRPO(ctx)
		r.sampleEpochs(ctx)
	}
}

// sampleLedgers records which region's copy holds each ledger of the
// workload's topics: a region that dies takes its answer with it, so the
// map is filled while it lives.
func (r *runner) sampleLedgers(ctx context.Context) {
	topics := map[string]bool{}
	for _, p := range r.s.Workload.Producers {
		topics[p.Topic] = true
	}
	// A few at a time: a drill of 100 topics reads 200 answers a second.
	type job struct{ topic, region string }
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range min(8, len(topics)*len(r.s.Topology.Regions)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				c, cancel := context.WithTimeout(ctx, time.Second)
				ls, err := r.adm.ledgers(c, j.region, j.topic)
				cancel()
				if err != nil {
					continue
				}
				r.mu.Lock()
				if r.ledgers == nil {
					r.ledgers = ledgerRegions{}
				}
				r.ledgers.note(j.topic, j.region, ls)
				r.mu.Unlock()
			}
		}()
	}
	for t := range topics {
		for _, reg := range r.s.Topology.Regions {
			jobs <- job{t, reg}
		}
	}
	close(jobs)
	wg.Wait()
}

// ledgerKey is one ledger of one of the workload's topics.
type ledgerKey struct {
	topic string // as topicKey gives it
	id    int64
}

// topicKey names topic as the scenario's producers and consumers may
// spell it, with or without its scheme or tenant and namespace.
func topicKey(topic string) string {
	t := trimScheme(topic)
	if !strings.Contains(t, "/") {
		t = "public/default/" + t
	}
	return t
}

// ledgerRegions maps a topic's ledgers to the region whose copy of the
// topic holds them; "" marks an id found in two regions' copies. Ledger
// ids are the revisions of each region's own etcd, so two regions can
// hand out the same id: such a receipt's region cannot be told from its
// id, and guessing the first region seen would count region switches
// (ack_region_switches) that did not happen.
type ledgerRegions map[ledgerKey]string

// note records that region's copy of topic holds the ledgers ids.
func (m ledgerRegions) note(topic, region string, ids []int64) {
	for _, id := range ids {
		k := ledgerKey{topicKey(topic), id}
		switch had, ok := m[k]; {
		case !ok:
			m[k] = region
		case had != region:
			m[k] = ""
		}
	}
}

// applyFaults applies the schedule in order of time (faults triggered by
// a message count as soon as the count is reached).
func (r *runner) applyFaults(ctx context.Context) {
	fs := slices.Clone(r.s.Faults)
	sort.SliceStable(fs, func(i, j int) bool {
		return fs[i].AfterMessages == 0 && fs[j].AfterMessages == 0 && fs[i].At < fs[j].At
	})
	for i, f := range fs {
		for {
			if f.AfterMessages > 0 && r.rec.acked.Load() >= int64(f.AfterMessages) {
				break
			}
			if f.AfterMessages == 0 && time.Since(r.start) >= f.At {
				break
			}
			if time.Since(r.start) >= r.s.Workload.Duration {
				r.note("fault %q was not applied: the workload ended first", f.Label())
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		if i == 0 || r.rep.Vars["replication_backlog_at_fault"] == 0 {
			var total int64
			for _, region := range r.s.Topology.Regions {
				c, cancel := context.WithTimeout(ctx, time.Second)
				if n, err := r.adm.backlog(c, region); err == nil {
					total += n
				}
				cancel()
			}
			r.mu.Lock()
			r.rep.Vars["replication_backlog_at_fault"] = float64(total)
			r.mu.Unlock()
		}
		r.prog.fault(f.Label())
		at := time.Now()
		var err error
		if f.Action == "switchover" {
			err = r.switchover(ctx, f, at)
		} else {
			err = r.apply(ctx, f)
		}
		r.mu.Lock()
		m := Marker{T: at.Sub(r.start).Seconds(), Label: f.Label()}
		if err != nil {
			m.Err = err.Error()
		}
		r.markers = append(r.markers, m)
		lifts := f.Action == "wan" && f.RTT == 0 && f.BandwidthKbps == 0
		switch {
		case f.Action == "switchover":
			// A disruption the clients ride through: its RTO is the
			// pause they saw.
			r.faults = append(r.faults, check.Fault{Name: f.Label(), At: at, EndAt: time.Now()})
		case f.Action == "kill" || f.Action == "stop" || f.Action == "power-loss" || f.Action == "partition" || f.Action == "disk-full" || f.Action == "wan" && !lifts:
			r.faults = append(r.faults, check.Fault{Name: f.Label(), At: at})
		case lifts:
			for j := range r.faults {
				if strings.HasPrefix(r.faults[j].Name, "wan ") && r.faults[j].EndAt.IsZero() {
					r.faults[j].EndAt = time.Now()
				}
			}
		case f.Action == "restart" || f.Action == "cont" || f.Action == "heal":
			// Ends the latest open fault on the same target (heal: every
			// partition).
			for j := len(r.faults) - 1; j >= 0; j-- {
				of := &r.faults[j]
				if !of.EndAt.IsZero() {
					continue
				}
				_, target, _ := strings.Cut(of.Name, " ")
				if (f.Action == "heal" && (strings.HasPrefix(of.Name, "partition ") || strings.HasPrefix(of.Name, "disk-full "))) || target == f.Target {
					of.EndAt = time.Now()
				}
			}
		}
		r.mu.Unlock()
		if err != nil {
			r.note("fault %q failed: %v", f.Label(), err)
		}
	}
}

func (r *runner) unmountDisks() {
	for _, d := range r.disks {
		d.unmount()
	}
}

func (r *runner) closeProxies() {
	for _, px := range r.proxies {
		px.Close()
	}
}

func (r *runner) note(format string, a ...any) {
	r.mu.Lock()
	r.rep.Notes = append(r.rep.Notes, fmt.Sprintf(format, a...))
	r.mu.Unlock()
}

// targets lists the processes a fault's target names, in start order
// (etcds, bookies, brokers).
func (r *runner) targets(target string) []up.ProcSpec {
	kind, arg, _ := strings.Cut(target, ":")
	if kind == "owner" {
		if ps, ok := r.owner(arg); ok {
			return []up.ProcSpec{ps}
		}
		return nil
	}
	return planTargets(r.dep.Plan, target)
}

// planTargets lists the processes of plan a target (other than owner:)
// names, in start order.
func planTargets(plan *up.Plan, target string) []up.ProcSpec {
	kind, arg, _ := strings.Cut(target, ":")
	var out []up.ProcSpec
	for _, ps := range plan.Procs {
		var ok bool
		switch kind {
		case "region":
			ok = ps.Region == arg && ps.Role != "witness"
		case "rack":
			region, rack, _ := strings.Cut(arg, "/")
			ok = ps.Role == "bookie" && ps.Region == region && ps.Rack == rack
		case "process":
			ok = ps.Name == arg
		case "broker", "bookie":
			ok = ps.Role == kind && ps.Region == arg
		}
		if ok {
			out = append(out, ps)
		}
	}
	rank := map[string]int{"etcd": 0, "global-etcd": 0, "witness": 0, "bookie": 1, "broker": 2}
	sort.SliceStable(out, func(i, j int) bool { return rank[out[i].Role] < rank[out[j].Role] })
	return out
}

func (r *runner) apply(ctx context.Context, f FaultSpec) error {
	switch f.Action {
	case "partition":
		kind, arg, _ := strings.Cut(f.Target, ":")
		var a, b []string
		if kind == "region" {
			a = []string{arg}
			for _, reg := range append(slices.Clone(r.s.Topology.Regions), "witness") {
				if reg != arg {
					b = append(b, reg)
				}
			}
		} else {
			as, bs, _ := strings.Cut(arg, "|")
			a, b = strings.Split(as, ","), strings.Split(bs, ",")
		}
		return r.net.Isolate(r.dep.Plan, a, b)
	case "heal":
		var errs []error
		for _, d := range r.disks {
			errs = append(errs, d.free())
		}
		if r.net != nil {
			errs = append(errs, r.net.Heal())
		}
		return errors.Join(errs...)
	case "disk-full":
		_, name, _ := strings.Cut(f.Target, ":")
		return r.disks[name].fillUp()
	case "wan":
		for _, px := range r.proxies {
			px.SetRTT(f.RTT)
			px.SetBandwidth(f.BandwidthKbps * 1000 / 8)
		}
		return nil
	}
	// A restart or cont acts on what the kill or stop of the same target
	// hit (owner: names another broker once the topic moved).
	r.mu.Lock()
	procs, hit := r.hit[f.Target]
	r.mu.Unlock()
	hits := f.Action == "kill" || f.Action == "stop" || f.Action == "power-loss"
	if !hit || hits {
		procs = r.targets(f.Target)
	}
	if len(procs) == 0 {
		return fmt.Errorf("no process matches %q", f.Target)
	}
	if hits {
		r.mu.Lock()
		if r.hit == nil {
			r.hit = map[string][]up.ProcSpec{}
		}
		r.hit[f.Target] = procs
		r.mu.Unlock()
		names := make([]string, 0, len(procs))
		for _, ps := range procs {
			names = append(names, ps.Name)
		}
		r.note("%s %s: %s", f.Action, f.Target, strings.Join(names, ", "))
	}
	var errs []error
	for _, ps := range procs {
		pid := r.dep.Pid(ps.Name)
		switch f.Action {
		case "kill", "stop", "cont", "power-loss":
			sig := map[string]syscall.Signal{"kill": syscall.SIGKILL, "stop": syscall.SIGSTOP, "cont": syscall.SIGCONT, "power-loss": syscall.SIGKILL}[f.Action]
			if pid > 0 {
				if err := syscall.Kill(pid, sig); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", ps.Name, err))
				}
			}
		case "restart":
			c, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err := r.dep.Restart(c, ps.Name)
			cancel()
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	if f.Action == "stop" {
		// kill returns before the process has stopped: what the drill
		// measures from the fault starts once every thread is stopped.
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		for _, ps := range procs {
			if pid := r.dep.Pid(ps.Name); pid > 0 {
				if err := procstop.Wait(c, pid); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", ps.Name, err))
				}
			}
		}
		cancel()
	}
	return errors.Join(errs...)
}

// owner is the broker that serves topic (persistent://...) now: the one
// whose admin API has it loaded with a producer on it (a broker that does
// not own the topic's bundle does not load it).
func (r *runner) owner(topic string) (up.ProcSpec, bool) {
	for _, ps := range r.dep.Plan.Procs {
		if ps.Role != "broker" {
			continue
		}
		var st struct {
			Publishers []struct{ ProducerName string } `json:"publishers"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := r.adm.callOne(ctx, ps, "GET", "/admin/v2/persistent/"+trimScheme(topic)+"/stats", nil, &st)
		cancel()
		if err == nil && len(st.Publishers) > 0 {
			return ps, true
		}
	}
	return up.ProcSpec{}, false
}

// history assembles the checker's input, each message attributed to the
// region that acknowledged or delivered it (by its topic's ledger: each
// region writes its own ledgers, but numbers them itself, so an id both
// regions' copies of a topic hold says nothing and is left unknown).
func (r *runner) history(ctx context.Context, end time.Time, subs []check.Sub) check.History {
	r.sampleLedgers(ctx)
	r.sampleEpochs(ctx)
	r.mu.Lock()
	region := maps.Clone(r.ledgers)
	r.mu.Unlock()
	of := func(topic, id string) string {
		if l, ok := ledgerOf(id); ok {
			return region[ledgerKey{topicKey(topic), l}]
		}
		return ""
	}
	h := check.History{Start: r.start, End: end, StopAt: r.stopAt, Subscriptions: subs}
	for _, c := range r.s.Workload.Consumers {
		if s := (check.Sub{Topic: c.Topic, Name: c.Subscription}); c.Start > 0 && !slices.Contains(h.Readers, s) {
			h.Readers = append(h.Readers, s)
		}
	}
	r.rec.mu.Lock()
	for _, as := range r.rec.attempts {
		for _, a := range as {
			a.Region = of(a.Topic, a.MsgID)
			h.Attempts = append(h.Attempts, a)
		}
	}
	for _, d := range r.rec.deliveries {
		d.Region = of(d.Topic, d.MsgID)
		h.Deliveries = append(h.Deliveries, d)
	}
	r.rec.mu.Unlock()
	r.mu.Lock()
	h.Faults = slices.Clone(r.faults)
	h.Epochs = slices.Clone(r.epochs)
	r.mu.Unlock()
	return h
}

// judgeSwitchovers gives each switchover the pause the clients saw (its
// fault's RTO; for a namespace's part in a region-wide switchover, the
// longest stall of its own topics, since the other namespaces serve on
// meanwhile) and adds the figures an expectation can bound:
// switchovers_committed, switchovers_aborted (counts of namespaces),
// switchovers_aborted_not_in_place (aborted ones whose old region did not
// answer as still active right after),
// switchover_hold_max_ms (the largest broker-side hold of a committed
// one) and region_switchover_took_max_ms (the longest region-wide run);
// the largest hold, in seconds, also goes to the report's variables.
func (r *runner) judgeSwitchovers(res *check.Result) {
	if len(r.switchovers) == 0 && len(r.regionSwitchovers) == 0 {
		return
	}
	if res.Measured == nil {
		res.Measured = map[string]float64{}
	}
	var committed, aborted, movedAnyway, holdMax float64
	for i := range r.switchovers {
		sw := &r.switchovers[i]
		for j, f := range res.Faults {
			if !f.At.Equal(sw.at) || f.Fault == "" {
				continue
			}
			sw.ProducePause, sw.ConsumePause = f.ProduceRTO, f.ConsumeRTO
			if sw.Region != "" {
				sw.ProducePause, sw.ConsumePause = namespacePause(res.Cut, sw.Namespace, j)
			}
		}
		switch sw.State {
		case "committed":
			committed++
			holdMax = max(holdMax, float64(sw.HoldMs)/1000)
		case "aborted":
			aborted++
			if sw.ActiveAfter != sw.From {
				movedAnyway++
			}
		}
	}
	res.Measured["switchovers_committed"] = committed
	res.Measured["switchovers_aborted"] = aborted
	res.Measured["switchovers_aborted_not_in_place"] = movedAnyway
	res.Measured["switchover_hold_max_ms"] = holdMax * 1000
	r.rep.Vars["switchover_hold_max_seconds"] = holdMax
	if len(r.regionSwitchovers) > 0 {
		var took float64
		for _, rs := range r.regionSwitchovers {
			took = max(took, float64(rs.TookMs))
		}
		res.Measured["region_switchover_took_max_ms"] = took
	}
}

// namespacePause is the longest stall of receipts (produce) and of first
// deliveries (consume) of any topic of namespace ns after fault j.
func namespacePause(c check.CutResult, ns string, j int) (produce, consume float64) {
	for _, t := range c.Topics {
		if !strings.HasPrefix(strings.TrimPrefix(t.Topic, "persistent://"), ns+"/") || j >= len(t.Resume) {
			continue
		}
		produce = max(produce, t.Resume[j].ProduceSec)
		consume = max(consume, t.Resume[j].ConsumeSec)
	}
	return produce, consume
}
