package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// BrokerOptions configures RunBroker.
type BrokerOptions struct {
	// Out: also write the markdown table to this file ("" = stdout only).
	Out string
	// Dir: a directory on the disk to measure; the standalone's data and
	// the storage rig's go under it. Default: a temp dir under ".".
	Dir string
	// Duration of each measurement. Default 5s. With the defaults a run
	// takes about 4 rounds × 8 steps × 5 s plus start-up, drains and
	// settling: ~3 min.
	Duration time.Duration
	// Rounds of alternation. Default 4 (an even number: paired rows swap
	// order every other round).
	Rounds int
	// MeridianBin: the meridian binary to run as `standalone`. "" = build
	// ./cmd/meridian with `go build` (run from the module root).
	MeridianBin string
	// Producers: producers per produce measurement, each on its own topic
	// and its own client connection. Default 1: on 2 cores 2 and 4
	// producers measured lower, not higher (client and standalone share the
	// cores, and every topic's appends go through the ledger client's one
	// AddEntries stream per bookie).
	Producers int
	// MaxPending: the producers' MaxPendingMessages. Default 2000: in
	// batches of ~100 × 1 KiB that is ~20 entries in flight per producer.
	MaxPending int
	// BookieInflight: adds in flight for the bookie 1 KiB reference row.
	// Default 1000: as many as the broker keeps in flight for one unbatched
	// producer (its MaxPendingSendsPerProducer; the managed ledger
	// pipelines them all to the ledger).
	BookieInflight int
	// Disk: also measure the disk's raw fsync rate (one more row).
	Disk bool
	// Command: how the run was invoked, printed above the table.
	Command string
	// Peers: if set, NATS JetStream (R1 and R3, default fsync and
	// sync_interval: always) is measured in the same rounds, two modes a
	// round, and pulsar-client-go's perf tool once as a second load
	// generator.
	Peers *Peers
	// ProfileDir: if set, CPU and allocation profiles of the standalone
	// under the batched load of round 2 are written there.
	ProfileDir string
}

// BrokerSummary is what RunBroker measured, for the side-by-side table.
type BrokerSummary struct {
	Section                        string
	Disk, DiskSeq, Add1k, AddBatch Result
	Batched, Unbatched, Sync, Half Result
	// Floor: the disk alone, group-committing the 50 % row's entries to 3
	// files with a 2 of 3 quorum (QuorumFloor).
	Floor                         Result
	HalfRounds, FloorRounds       []Result // the 50 % row's and the floor's rounds
	Backlog, TailP, TailC         Result
	Perf                          perfResult
	JS                            map[string]*jsAgg // by jsMode.Key
	Profiles                      []*profilePair
	BatchEntrySize, BatchInflight int
	RoundsDone                    int
}

// jsAgg is one JetStream mode's runs over the rounds.
type jsAgg struct {
	Mode                 jsMode
	Async, Sync, Consume []natsBench
	Err                  error
}

const (
	msgSize    = 1024
	batchDelay = time.Millisecond
)

func (o *BrokerOptions) defaults() {
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.Rounds == 0 {
		o.Rounds = 4
	}
	if o.Producers == 0 {
		o.Producers = 1
	}
	if o.MaxPending == 0 {
		o.MaxPending = 2000
	}
	if o.BookieInflight == 0 {
		o.BookieInflight = 1000
	}
	if o.Command == "" {
		o.Command = "meridian bench broker"
	}
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// settle waits until both processes are quiet (under 10 % of a core each
// over 300 ms: the previous step's flushes and compactions done), at most
// 5 s, so each measurement starts from a quiet machine. It returns how
// long it waited and, if they never went quiet, their last CPU shares.
func settle(ctx context.Context, sa *standaloneProc) (waited time.Duration, saShare, selfShare float64, ok bool) {
	const window = 300 * time.Millisecond
	start := time.Now()
	for time.Since(start) < 5*time.Second && ctx.Err() == nil {
		s0, _ := sa.cpu()
		c0 := selfCPU()
		time.Sleep(window)
		s1, _ := sa.cpu()
		ds, dc := s1-s0, selfCPU()-c0
		saShare, selfShare = ds.Seconds()/window.Seconds(), dc.Seconds()/window.Seconds()
		if ds < window/10 && dc < window/10 {
			return time.Since(start), saShare, selfShare, true
		}
	}
	return time.Since(start), saShare, selfShare, false
}

// RunBroker measures, side by side in one run and alternating round by
// round: (optionally) the disk's fsync rate and sequential write rate; the
// bookie add path through the ledger client in this process (the storage
// layer's raw add rate, with 1 KiB entries and with entries the size of
// the broker's batches); `meridian standalone`, run as a separate process,
// through the unmodified pulsar-client-go: produce batched and unbatched
// unthrottled, unbatched one message at a time (sync), batched at 50 % of
// the batched rate, consume of a backlog and tailing; and with o.Peers,
// NATS JetStream in four modes (two a round) and pulsar-client-go's perf
// tool. It prints one markdown table with the broker's rates as ratios of
// the bookie add rate, and returns everything for the side-by-side table.
//
// Each consume step deletes its subscription afterwards: a durable
// subscription left with a backlog and no permits (no consumer, or a full
// receiver queue) makes the broker's Subscription.run loop spin a core
// (ml.Notify of an already-written position fires at once), which would slow
// every later step.
func RunBroker(ctx context.Context, o BrokerOptions, out io.Writer) (sum BrokerSummary, err error) {
	o.defaults()
	dir, cleanup, err := workDir(o.Dir, "broker")
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
	rigDir := filepath.Join(dir, "rig")
	if err := os.MkdirAll(rigDir, 0o755); err != nil {
		return sum, err
	}
	rig, err := startRig(ctx, rigDir)
	if err != nil {
		return sum, err
	}
	defer func() {
		if rig != nil {
			rig.close()
		}
	}()
	sa, err := startStandalone(ctx, bin, dir)
	if err != nil {
		return sum, err
	}
	defer func() {
		if sa != nil {
			sa.stop()
		}
	}()
	// afresh replaces the rig and the standalone by new ones on empty data
	// directories, before every round but the first. Bookies do not
	// collect deleted ledgers' data yet (bookie/doc.go), and a round writes
	// 5-8 GB: on this machine's disk (a bookie counts used = total -
	// available: 85 % before a run) the third round took every bookie past
	// its 95 % disk-usage threshold, they all turned read-only at once, and
	// the run ended with "not enough bookies: 0 usable" (twice, rounds 3
	// and 4, after 8-10 minutes of measurements).
	afresh := func() error {
		rig.close()
		sa.stop()
		for _, d := range []string{rigDir, filepath.Join(dir, "standalone")} {
			if err := os.RemoveAll(d); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(rigDir, 0o755); err != nil {
			return err
		}
		if rig, err = startRig(ctx, rigDir); err != nil {
			return err
		}
		if sa, err = startStandalone(ctx, bin, dir); err != nil {
			return err
		}
		fmt.Fprintf(out, "  (a fresh rig and standalone on empty disks: standalone pid %d at %s)\n", sa.cmd.Process.Pid, sa.URL)
		return nil
	}
	fmt.Fprintf(out, "standalone pid %d at %s (admin %s), log %s\n", sa.cmd.Process.Pid, sa.URL, sa.AdminURL, sa.LogPath)

	runID := time.Now().Format("150405")
	topics := func(step string, round int) []string {
		t := make([]string, o.Producers)
		for i := range t {
			t[i] = fmt.Sprintf("persistent://public/default/bench-%s-%s-r%d-p%d", runID, step, round, i)
		}
		return t
	}
	// onBroker measures f with the standalone's CPU (server) and this
	// process's (client: pulsar-client-go; the idle rig costs ~nothing),
	// the bookies' group commits, reads and bytes, and the disks' flushes.
	onBroker := func(name string, f func() (Result, error)) (Result, error) {
		if err := sa.exited(); err != nil {
			return Result{}, err
		}
		s0, _ := sa.cpu()
		c0 := selfCPU()
		b0, fl0 := sa.bookies(), diskFlushes()
		r, err := f()
		s1, _ := sa.cpu()
		b := sa.bookies().sub(b0)
		r.ServerCPU, r.ClientCPU = s1-s0, selfCPU()-c0
		r.Fsyncs, r.FsyncedOps = uint64(b.Commits), uint64(b.Entries)
		r.BookieReads, r.BookieBytes, r.DiskFlushes = b.Reads, b.BytesWritten, diskFlushes()-fl0
		r.Name = name
		fmt.Fprintf(out, "  %-58s %9.0f msgs/s  p50 %v  p99 %v  errors %d  fsyncs/s %.0f  bookie reads %.0f\n", name, r.rate(),
			r.pct(0.5).Round(time.Microsecond), r.pct(0.99).Round(time.Microsecond), r.Errors, float64(r.Fsyncs)/r.Elapsed.Seconds(), r.BookieReads)
		return r, err
	}
	// onRig measures a bookie run: server CPU is this whole process
	// (bookies, ledger client and the adds loop; the broker's counterpart is
	// the standalone's bookies, managed ledger and broker).
	onRig := func(f func() (Result, error)) (Result, error) {
		c0 := selfCPU()
		fl0 := diskFlushes()
		r, err := f()
		r.ServerCPU = selfCPU() - c0
		r.DiskFlushes = diskFlushes() - fl0
		fmt.Fprintf(out, "  %-58s %9.0f ops/s   p50 %v  p99 %v\n", r.Name, r.rate(), r.pct(0.5).Round(time.Microsecond), r.pct(0.99).Round(time.Microsecond))
		return r, err
	}
	spec := func(ts []string, batching bool, rate float64) loadSpec {
		return loadSpec{Topics: ts, Batching: batching, Rate: rate, Duration: o.Duration, Size: msgSize, MaxPending: o.MaxPending, BatchDelay: batchDelay}
	}

	var (
		disk, diskSeq, add1k, addBatch                []Result
		prodB, prodU, prodS, prodHalf, backlog, tailC []Result
		tailP, floor                                  []Result
		batchEntrySize, batchInflight                 int // of the batched broker row's entries, fixed after round 1
	)
	js := map[string]*jsAgg{}
	for _, m := range jsModes {
		js[m.Key] = &jsAgg{Mode: m}
	}
	var round int
	steps := map[string]func() error{
		"disk": func() error {
			r, err := onRig(func() (Result, error) { return DiskFsync(rigDir, o.Duration) })
			r.ServerCPU = 0
			disk = append(disk, r)
			if err != nil {
				return err
			}
			// Twice: the first write after idle meets cold guest memory
			// (peers/README.md); the second is the disk's rate.
			if _, err := DiskSeq(rigDir, 256); err != nil {
				return err
			}
			sr, err := DiskSeq(rigDir, 256)
			diskSeq = append(diskSeq, sr)
			return err
		},
		"add1k": func() error {
			r, err := onRig(func() (Result, error) { return rig.LedgerAdds(ctx, msgSize, o.BookieInflight, o.Duration) })
			add1k = append(add1k, r)
			return err
		},
		"addBatch": func() error {
			if batchEntrySize == 0 {
				return nil
			}
			r, err := onRig(func() (Result, error) { return rig.LedgerAdds(ctx, batchEntrySize, batchInflight, o.Duration) })
			addBatch = append(addBatch, r)
			return err
		},
		// Profiles of the standalone under batched unthrottled load, in
		// round 2 only, in a step of its own (not in the table: the
		// profiler costs a few per cent): 10 s of load, 8 s profiled.
		"profile": func() error {
			if o.ProfileDir == "" || round != 1 {
				return nil
			}
			prof := &profilePair{Name: "meridian standalone (broker, 3 bookies, etcd in one process), batched unthrottled produce", Bin: bin, Window: 8 * time.Second}
			profDone := make(chan struct{})
			go func() {
				defer close(profDone)
				addr, err := pprofAddr(sa.PprofDir, sa.cmd.Process.Pid)
				if err == nil {
					time.Sleep(time.Second) // past the producer's start
					prof.CPU, prof.Allocs, err = captureProfiles(ctx, addr, o.ProfileDir, "standalone", prof.Window)
				}
				prof.Err = err
			}()
			sp := spec(topics("profile", round), true, 0)
			sp.Duration = 10 * time.Second
			r, err := produce(ctx, sa.URL, sp)
			<-profDone
			sum.Profiles = append(sum.Profiles, prof)
			fmt.Fprintf(out, "  %-58s %9.0f msgs/s (profiled: %v)\n", "broker produce, batched, profiled", r.rate(), prof.Err)
			return err
		},
		// Batched, unthrottled; its topics are the backlog step's.
		"batched": func() error {
			r, err := onBroker(fmt.Sprintf("broker produce 1 KiB, batched, unthrottled, %d producer(s)", o.Producers), func() (Result, error) {
				return produce(ctx, sa.URL, spec(topics("batched", round), true, 0))
			})
			prodB = append(prodB, r)
			if batchEntrySize == 0 && r.Entries > 0 {
				// The entries' payload, to the KiB (the batch's metadata adds
				// a few bytes per message), and as many in flight as the
				// broker had: MaxPendingMessages / messages per entry.
				batchEntrySize = max(1, int((r.Bytes/r.Entries+512)/1024)) * 1024
				batchInflight = max(1, int(float64(o.MaxPending)*float64(r.Entries)/float64(r.Ops)+0.5))
			}
			return err
		},
		"unbatched": func() error {
			r, err := onBroker(fmt.Sprintf("broker produce 1 KiB, unbatched, unthrottled, %d producer(s)", o.Producers), func() (Result, error) {
				return produce(ctx, sa.URL, spec(topics("unbatched", round), false, 0))
			})
			prodU = append(prodU, r)
			return err
		},
		// One message at a time, as `nats bench js pub sync`.
		"sync": func() error {
			r, err := onBroker("broker produce 1 KiB, unbatched, one at a time (sync send)", func() (Result, error) {
				sp := spec(topics("sync", round)[:1], false, 0)
				sp.Sync, sp.Duration = true, o.Duration/2
				return produce(ctx, sa.URL, sp)
			})
			prodS = append(prodS, r)
			return err
		},
		"half": func() error {
			half := prodB[len(prodB)-1].rate() / 2
			r, err := onBroker("broker produce 1 KiB, batched, at 50 % of the batched rate", func() (Result, error) {
				return produce(ctx, sa.URL, spec(topics("half", round), true, half))
			})
			prodHalf = append(prodHalf, r)
			return err
		},
		// The disk alone under the 50 % row's entries, right after it.
		"floor": func() error {
			if len(prodHalf) == 0 || prodHalf[len(prodHalf)-1].Entries == 0 {
				return nil // no 50 % row measured yet
			}
			h := prodHalf[len(prodHalf)-1]
			fd, err := quorumFloorDir(rigDir)
			if err != nil {
				return err
			}
			size := max(1, int(h.Bytes/h.Entries))
			r, err := QuorumFloor(fd, 3, 2, float64(h.Entries)/h.Elapsed.Seconds(), size, o.Duration)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "  %-58s %9.0f entries/s  p50 %v  p99 %v  p99.9 %v\n", "the disk alone, the 50 % row's entries, 2 of 3 synced", r.rate(),
				r.pct(0.5).Round(time.Microsecond), r.pct(0.99).Round(time.Microsecond), r.pct(0.999).Round(time.Microsecond))
			floor = append(floor, r)
			return nil
		},
		// The batched step's messages from the start: read from the bookies
		// (the broker's tail cache holds only the last 16 MiB).
		"backlog": func() error {
			var want atomic.Int64
			want.Store(int64(prodB[len(prodB)-1].Ops))
			r, err := onBroker("broker consume backlog (batched 1 KiB, from the bookies)", func() (Result, error) {
				cs := consumeSpec{Topics: topics("batched", round), Sub: "backlog", Earliest: true, Duration: o.Duration, Stall: 5 * time.Second}
				c, err := subscribe(sa.URL, cs)
				if err != nil {
					return Result{}, err
				}
				defer c.unsubscribe()
				r := c.receive(ctx, cs, time.Now(), &want)
				r.Lat = nil // publish → receive is only the backlog's age here
				return r, nil
			})
			backlog = append(backlog, r)
			return err
		},
		// Tailing: consumers subscribed first, producers batched and
		// unthrottled; the consume rate runs to the last receipt.
		"tail": func() error {
			tTopics := topics("tail", round)
			cs := consumeSpec{Topics: tTopics, Sub: "tail", Stall: 5 * time.Second}
			c, err := subscribe(sa.URL, cs)
			if err != nil {
				return err
			}
			var tailWant atomic.Int64
			resCh := make(chan Result, 1)
			s0, _ := sa.cpu()
			c0 := selfCPU()
			start := time.Now()
			go func() { resCh <- c.receive(ctx, cs, start, &tailWant) }()
			p, err := onBroker("broker produce 1 KiB, batched, unthrottled, while tailed", func() (Result, error) {
				return produce(ctx, sa.URL, spec(tTopics, true, 0))
			})
			tailWant.Store(int64(max(1, p.Ops)))
			tr := <-resCh
			c.unsubscribe()
			if err != nil {
				return err
			}
			s1, _ := sa.cpu()
			tr.Name = "broker consume tailing (latency: publish → receive)"
			tr.ServerCPU, tr.ClientCPU = s1-s0, selfCPU()-c0
			// The bookies' reads over the whole step (the producer's
			// window and the consumer's tail after it).
			tr.BookieReads = p.BookieReads
			if tr.Ops < p.Ops {
				tr.Errors = p.Ops - tr.Ops // not received within the stall window
			}
			fmt.Fprintf(out, "  %-58s %9.0f msgs/s  p50 %v  p99 %v  missing %d  bookie reads %.0f\n", tr.Name, tr.rate(), tr.pct(0.5).Round(time.Millisecond), tr.pct(0.99).Round(time.Millisecond), tr.Errors, tr.BookieReads)
			tailP = append(tailP, p)
			tailC = append(tailC, tr)
			return nil
		},
		// JetStream, two of its four modes per round (each mode twice
		// in four rounds).
		"js": func() error {
			if o.Peers == nil {
				return nil
			}
			for _, m := range []jsMode{jsModes[(2*round)%4], jsModes[(2*round+1)%4]} {
				a := js[m.Key]
				var prev *jsResult
				if n := len(a.Async); n > 0 {
					prev = &jsResult{Async: a.Async[n-1], Sync: a.Sync[n-1]}
				}
				r, err := measureJS(ctx, *o.Peers, filepath.Join(dir, "nats"), m, o.Duration, prev)
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					fmt.Fprintf(out, "  %s: %v\n", m.Name, err)
					a.Err = err
					continue
				}
				a.Async, a.Sync, a.Consume = append(a.Async, r.Async), append(a.Sync, r.Sync), append(a.Consume, r.Consume)
				fmt.Fprintf(out, "  %-58s %9.0f msgs/s async (batch 500), sync p50 %v, consume %.0f msgs/s, server CPU %.1f s/M msgs\n", m.Name,
					r.Async.MsgsPerS, r.Sync.P50.Round(time.Microsecond), r.Consume.MsgsPerS, r.Async.ServerCPU.Seconds()/float64(max(1, r.Async.Msgs))*1e6)
			}
			return nil
		},
		// pulsar-client-go's own perf tool against the standalone, once
		// (round 2): it prints its rate every 10 s, so it runs 21 s and the
		// second window (after start-up) is taken.
		"perf": func() error {
			if o.Peers == nil || round != 1 {
				return nil
			}
			r, err := runPulsarPerf(ctx, o.Peers.PulsarPerf, sa.URL, topics("perf", round)[0], o.MaxPending)
			if err != nil {
				fmt.Fprintf(out, "  pulsar-perf-go: %v\n", err)
				sum.Perf.Err = err
				return nil
			}
			sum.Perf = r
			fmt.Fprintf(out, "  %-58s %9.0f msgs/s  p50 %v  p99 %v\n", "pulsar-perf-go produce (batched, 1 KiB)", r.Rate, r.P50, r.P99)
			return nil
		},
	}
	// Each broker row and the bookie row it is compared with run back to
	// back, in swapped order every other round (a heavy write step leaves
	// flushes and compactions behind that slow whatever runs next); the
	// first round measures the batched size before the bookie row at it.
	// JetStream runs between Meridian's rows, in the middle of each round.
	orders := [2][]string{
		{"disk", "add1k", "unbatched", "batched", "addBatch", "js", "sync", "half", "floor", "backlog", "perf", "tail", "profile"},
		{"disk", "unbatched", "add1k", "addBatch", "batched", "sync", "js", "floor", "half", "perf", "backlog", "tail", "profile"},
	}
	for round = range o.Rounds {
		fmt.Fprintf(out, "round %d/%d ...\n", round+1, o.Rounds)
		if round > 0 {
			if err := afresh(); err != nil {
				return sum, fmt.Errorf("bench: round %d: %w", round+1, err)
			}
		}
		for _, name := range orders[round%2] {
			if name == "disk" && !o.Disk {
				continue
			}
			if w, a, b, ok := settle(ctx, sa); !ok {
				fmt.Fprintf(out, "  (not idle after %v: standalone %.0f %%, bench %.0f %% of a core; measuring anyway)\n", w.Round(time.Second), a*100, b*100)
			} else if w > 2*time.Second {
				fmt.Fprintf(out, "  (waited %v for both processes to go idle)\n", w.Round(100*time.Millisecond))
			}
			if err := steps[name](); err != nil {
				return sum, fmt.Errorf("bench: %s, round %d: %w", name, round+1, err)
			}
		}
	}
	sum.RoundsDone = o.Rounds
	sum.JS = js

	// The table.
	ref := merge(add1k)
	var refBatch Result
	if len(addBatch) > 0 {
		refBatch = merge(addBatch)
	}
	var sb strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&sb, "## Broker vs its storage\n\n")
	fmt.Fprintf(&sb, "Run %s on %s (%d cores, %s/%s); `%s`, %d alternating rounds of %s per measurement, all data on the same disk. "+
		"The broker is `meridian standalone` (embedded etcd, 3 bookies, broker) in its own process, driven through the unmodified pulsar-client-go; "+
		"the bookie rows are 3 bookies and the ledger client in the bench process.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, o.Command, o.Rounds, o.Duration)
	fmt.Fprintf(&sb, "| measurement | msgs/s | MB/s | entries/s | msgs/entry | p50 | p99 | p99.9 | fsyncs/s (3 bookies) | entries per fsync | bookie reads/s | server CPU s / M msgs | client CPU s / M msgs | msgs/s ÷ bookie 1 KiB adds/s | entries/s ÷ bookie adds/s, same entry size |\n")
	fmt.Fprintf(&sb, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	row := func(r Result, entryRef *Result, msRound, withRatio bool) {
		if len(r.Lat) == 0 && r.Ops == 0 {
			return
		}
		ent, per, cpuS, cpuC, ratio, ratioE, fs, fper, reads := "", "", "", "", "", "", "", "", ""
		if r.Entries > 0 {
			ent = fmt.Sprintf("%.0f", float64(r.Entries)/r.Elapsed.Seconds())
			per = fmt.Sprintf("%.1f", float64(r.Ops)/float64(r.Entries))
		}
		if r.Fsyncs > 0 {
			fs = fmt.Sprintf("%.0f", float64(r.Fsyncs)/r.Elapsed.Seconds())
			fper = fmt.Sprintf("%.1f", float64(r.FsyncedOps)/float64(r.Fsyncs))
		}
		if strings.HasPrefix(r.Name, "broker") {
			reads = fmt.Sprintf("%.0f", r.BookieReads/r.Elapsed.Seconds())
		}
		if r.ServerCPU > 0 && r.Ops > 0 {
			cpuS = fmt.Sprintf("%.1f", r.ServerCPU.Seconds()/float64(r.Ops)*1e6)
		}
		if r.ClientCPU > 0 && r.Ops > 0 {
			cpuC = fmt.Sprintf("%.1f", r.ClientCPU.Seconds()/float64(r.Ops)*1e6)
		}
		if withRatio && ref.rate() > 0 {
			ratio = fmt.Sprintf("%.2f", r.rate()/ref.rate())
		}
		if entryRef != nil && entryRef.rate() > 0 && r.Entries > 0 {
			ratioE = fmt.Sprintf("%.2f", float64(r.Entries)/r.Elapsed.Seconds()/entryRef.rate())
		}
		q := time.Microsecond
		if msRound {
			q = time.Millisecond
		}
		name := r.Name
		if r.Errors > 0 {
			name += fmt.Sprintf(" (**%d failed**)", r.Errors)
		}
		lat := [3]string{}
		if len(r.Lat) > 0 {
			for i, p := range []float64{0.50, 0.99, 0.999} {
				lat[i] = r.pct(p).Round(q).String()
			}
		}
		fmt.Fprintf(&sb, "| %s | %.0f | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, r.rate(), r.mbps(), ent, per,
			lat[0], lat[1], lat[2], fs, fper, reads, cpuS, cpuC, ratio, ratioE)
	}
	if len(disk) > 0 {
		d := merge(disk)
		d.Entries = 0
		row(d, nil, false, false)
		sum.Disk, sum.DiskSeq = d, merge(diskSeq)
		fmt.Fprintf(&sb, "| %s | | %.0f | | | | | | | | | | | | |\n", sum.DiskSeq.Name, sum.DiskSeq.mbps())
	}
	row(ref, &ref, false, true)
	if len(addBatch) > 0 {
		row(refBatch, &refBatch, false, false)
	}
	pb, pu, ps := merge(prodB), merge(prodU), merge(prodS)
	row(pb, &refBatch, false, true)
	row(pu, &ref, false, true)
	row(ps, nil, false, false)
	half, bl := merge(prodHalf), merge(backlog)
	row(half, nil, false, true)
	if len(floor) > 0 {
		sum.Floor = merge(floor)
		sum.HalfRounds, sum.FloorRounds = prodHalf, floor
		row(sum.Floor, nil, false, false)
	}
	row(bl, nil, false, true)
	tp, tc := merge(tailP), merge(tailC)
	row(tp, nil, false, true)
	row(tc, nil, true, true)
	sum.Add1k, sum.AddBatch, sum.Batched, sum.Unbatched, sum.Sync, sum.Half, sum.Backlog, sum.TailP, sum.TailC = ref, refBatch, pb, pu, ps, half, bl, tp, tc
	sum.BatchEntrySize, sum.BatchInflight = batchEntrySize, batchInflight

	fmt.Fprintf(&sb, "\nSetup: the msgs/s column is writes/s in the disk row and adds/s in bookie rows (no client CPU there). 1 KiB payloads; %d producer(s) per measurement, each on its own topic and client connection, MaxPendingMessages %d, "+
		"SendTimeout 30 s; batching with BatchingMaxPublishDelay %v and the client's other defaults (1000 messages or 128 KiB per batch); "+
		"latency from the SendAsync call (which blocks while MaxPendingMessages are outstanding) to its callback; the sync row sends one message at a time (Send, latency = its duration); the 50 %% row is paced at half of "+
		"the same round's batched rate. Consumers: Exclusive, ReceiverQueueSize 1000, every message acked (the client groups acks); "+
		"the disk-alone row writes the 50 %% row's entries (its entries/s, their average size) with nothing of Meridian on the path: three files in the bookies' directory, each appended to by its own group committer (write what has arrived, fdatasync), an entry done when two of the three synced it, latency from its arrival (bench.QuorumFloor): this disk's floor for that row's p99; "+
		"the backlog row reads the batched row's messages from the start (capped at %s); the tailing row's latency is from the message's publish "+
		"time (set by the client when its batch opens; ms resolution) to its receipt, and its bookie reads/s are over the tailed producer's window. Entries are counted from the send receipts' message ids (a batch's messages share one entry). "+
		"fsyncs/s: group commits of the standalone's three bookies (each one Pebble commit with fsync), from their metrics; entries per fsync: adds per group commit (a broker entry is written to 3 bookies). "+
		"CPU: user+system of the standalone process (server) and of the bench process (client: pulsar-client-go) during the measurement; "+
		"for bookie rows server CPU is the bench process (3 bookies, ledger client and the adds loop). The bookie 1 KiB reference row has %d adds in flight "+
		"(the broker keeps up to 1000 sends per producer in flight: its MaxPendingSendsPerProducer), the batched-size row %d (MaxPendingMessages ÷ the batched row's messages per entry). "+
		"Each broker produce row runs back to back with its bookie row, in swapped order every other round, and every measurement starts once both processes are idle "+
		"(under 10 %% of a core: the previous step's flushes and compactions done; at most 5 s).\n\n",
		o.Producers, o.MaxPending, batchDelay, o.Duration, o.BookieInflight, batchInflight)
	if ref.rate() > 0 {
		fmt.Fprintf(&sb, "Read: unbatched, the broker turns %.2f× the bookie add path's 1 KiB entries/s into messages/s (each message one entry); "+
			"batched, it delivers %.1f× as many messages/s as the storage adds 1 KiB entries/s", pu.rate()/ref.rate(), pb.rate()/ref.rate())
		if refBatch.rate() > 0 && pb.Entries > 0 {
			fmt.Fprintf(&sb, ", writing %.2f× the entries/s the storage adds at the same entry size (%s)", float64(pb.Entries)/pb.Elapsed.Seconds()/refBatch.rate(), sizeName(batchEntrySize))
		}
		fmt.Fprintf(&sb, ".")
		perEntry := func(r Result) float64 { return r.ServerCPU.Seconds() / float64(max(1, r.Entries)) }
		if ref.Entries > 0 && pu.Entries > 0 {
			fmt.Fprintf(&sb, " Server CPU per entry, broker ÷ bookie path: unbatched %.2f×", perEntry(pu)/perEntry(ref))
			if refBatch.Entries > 0 && pb.Entries > 0 {
				fmt.Fprintf(&sb, ", batched %.2f×", perEntry(pb)/perEntry(refBatch))
			}
			fmt.Fprintf(&sb, " (the standalone also runs etcd; both include the bookies' flushes and compactions that fall in the window).")
		}
		fmt.Fprintf(&sb, "\n")
	}
	if o.Peers != nil {
		jsSection(&sb, js, sum.Perf)
	}
	fmt.Fprint(out, "\n"+sb.String())
	sum.Section = sb.String()

	if lines := sa.logLines(); len(lines) > 0 {
		fmt.Fprintf(out, "\nthe standalone logged %d warning/error lines (%s); first:\n  %s\n", len(lines), sa.LogPath, strings.Join(lines[:min(5, len(lines))], "\n  "))
	}
	if o.Out != "" {
		return sum, writeReport(o.Out, sb.String())
	}
	return sum, nil
}
