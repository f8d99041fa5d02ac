package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/tools/bench"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Benchmarks (make bench)"}
	var o bench.StorageOptions
	storage := benchCmd("storage", "Disk fsync rate vs bookie add path through the ledger client (E=Qw=3, Qa=2)", nil, nil,
		func(ctx context.Context) error { _, err := bench.RunStorage(ctx, o, os.Stdout); return err })
	f := storage.Flags()
	outDirFlags(f, &o.Out, &o.Dir, "on the disk to measure")
	f.DurationVar(&o.Duration, "duration", 0, "duration of each measurement (default 5s)")
	f.IntVar(&o.Rounds, "rounds", 0, "alternating rounds of each measurement (default 2)")
	cmd.AddCommand(storage, newBrokerBenchCmd("broker", false), newAllBenchCmd(), newGeorepBenchCmd(), newABBenchCmd(), newScaleBenchCmd(), newRecoveryBenchCmd())
	return cmd
}

// newGeorepBenchCmd: `bench georep`, a 2-region deployment (tools/up)
// measured against a single-region namespace of the same run.
func newGeorepBenchCmd() *cobra.Command {
	var o bench.GeorepOptions
	var modes string
	c := benchCmd("georep", "Geo-replication: produce rate and latency per replication mode vs single region, replication lag and throughput, in one table",
		&o.MeridianBin, &o.Command, func(ctx context.Context) error {
			o.Modes = splitList(modes)
			_, err := bench.RunGeorep(ctx, o, os.Stdout)
			return err
		})
	f := c.Flags()
	outDirFlags(f, &o.Out, &o.Dir, "for the deployment's data")
	f.DurationVar(&o.Duration, "duration", 15*time.Second, "duration of each measurement (7 of them: about 2.5 min in all at 15s)")
	f.StringVar(&modes, "modes", "async,sync,stretched", "replication modes to measure, comma-separated (async, sync, stretched)")
	f.IntVar(&o.Size, "size", 1024, "payload bytes per message (at least 16)")
	f.IntVar(&o.Producers, "producers", 1, "producers per max-rate measurement, each on its own topic and connection")
	f.IntVar(&o.MaxPending, "max-pending", 2000, "producers' MaxPendingMessages")
	binFlag(f, &o.MeridianBin, "the deployment runs")
	f.IntVar(&o.BackfillMessages, "backfill", 0, "messages the topic holds when the backfill row adds a region (default: 20,000 per second of --duration, at most 200,000)")
	return c
}

// benchCmd is the skeleton every bench subcommand shares: its run gets a
// context cancelled by SIGINT or SIGTERM; with bin set, an empty binary
// path becomes this binary (orThisBinary); with command set, the run's
// command line is recorded there for the report.
func benchCmd(use, short string, bin, command *string, run func(context.Context) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, RunE: func(*cobra.Command, []string) error {
		ctx, stop := signalContext()
		defer stop()
		if bin != nil {
			if err := orThisBinary(bin); err != nil {
				return err
			}
		}
		if command != nil {
			*command = "meridian " + strings.Join(os.Args[1:], " ")
		}
		return run(ctx)
	}}
}

// outDirFlags are the --out and --dir flags most benches take; what
// says what the directory holds.
func outDirFlags(f *pflag.FlagSet, out, dir *string, what string) {
	f.StringVar(out, "out", "", "also write the table into this markdown file (BENCHMARKS.md)")
	f.StringVar(dir, "dir", "", "directory "+what+" (default: a temp dir under the current directory)")
}

// binFlag is --meridian-bin: the binary the bench's servers run.
func binFlag(f *pflag.FlagSet, bin *string, what string) {
	f.StringVar(bin, "meridian-bin", "", "meridian binary "+what+" (default: this binary)")
}

// orThisBinary sets an empty binary path to this binary's, which has the
// standalone, broker, bookie and etcd commands too.
func orThisBinary(path *string) error {
	if *path != "" {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	*path = exe
	return nil
}

// newBrokerBenchCmd: `bench broker`, the broker vs the bookie add path.
func newBrokerBenchCmd(use string, disk bool) *cobra.Command {
	o := bench.BrokerOptions{Disk: disk}
	c := benchCmd(use, "Broker (meridian standalone via pulsar-client-go) vs the bookie add path, in one table", &o.MeridianBin, &o.Command,
		func(ctx context.Context) error { _, err := bench.RunBroker(ctx, o, os.Stdout); return err })
	f := c.Flags()
	outDirFlags(f, &o.Out, &o.Dir, "on the disk to measure")
	f.DurationVar(&o.Duration, "duration", 0, "duration of each measurement (default 5s)")
	f.IntVar(&o.Rounds, "rounds", 0, "alternating rounds of each measurement (default 4)")
	binFlag(f, &o.MeridianBin, "to run as the standalone")
	f.IntVar(&o.Producers, "producers", 0, "producers per produce measurement, each on its own topic and connection (default 1)")
	f.IntVar(&o.MaxPending, "max-pending", 0, "producers' MaxPendingMessages (default 2000)")
	f.IntVar(&o.BookieInflight, "bookie-inflight", 0, "adds in flight for the bookie 1 KiB reference row (default 1000)")
	return c
}

// newAllBenchCmd: `bench all` (make bench): the peers installed, then
// storage, broker and JetStream, geo-replication and a JetStream mirror,
// profiles, and one report leading with the side-by-side ratios.
func newAllBenchCmd() *cobra.Command {
	var o bench.AllOptions
	c := benchCmd("all", "make bench: Meridian side by side with NATS JetStream and the machine's limits, in one run and one report", &o.MeridianBin, &o.Command,
		func(ctx context.Context) error { return bench.RunAll(ctx, o, os.Stdout) })
	f := c.Flags()
	f.StringVar(&o.Out, "out", "", "write the report into this markdown file (BENCHMARKS.md)")
	f.StringVar(&o.Dir, "dir", "", "directory for every server's data (default: temp dirs under the current directory)")
	f.StringVar(&o.GoBin, "gobin", "", "where the peers are installed with go install (default bin/peers)")
	f.StringVar(&o.ProfileDir, "profile-dir", "", "where the CPU and allocation profiles go (default bin/bench-profiles)")
	f.DurationVar(&o.Duration, "duration", 0, "duration of each storage and broker measurement (default 5s)")
	f.IntVar(&o.Rounds, "rounds", 0, "alternating rounds of the broker section (default 4)")
	f.DurationVar(&o.GeorepDuration, "georep-duration", 10*time.Second, "duration of each geo-replication measurement")
	f.BoolVar(&o.NoPeers, "no-peers", false, "skip NATS JetStream and pulsar-perf-go (nothing installed)")
	binFlag(f, &o.MeridianBin, "the servers run")
	return c
}

// newABBenchCmd: `bench ab`, two binaries side by side (a change's
// before/after ratio from one run).
func newABBenchCmd() *cobra.Command {
	var o bench.ABOptions
	c := benchCmd("ab", "Two meridian binaries (before, after a change) measured alternating round by round; prints B ÷ A", nil, nil,
		func(ctx context.Context) error {
			if o.A == "" || o.B == "" {
				return fmt.Errorf("bench ab: --a and --b are required")
			}
			return bench.RunAB(ctx, o, os.Stdout)
		})
	f := c.Flags()
	f.StringVar(&o.A, "a", "", "the binary before the change")
	f.StringVar(&o.B, "b", "", "the binary after the change")
	f.IntVar(&o.Rounds, "rounds", 3, "rounds (each runs A and B, the order swapped every other round)")
	f.DurationVar(&o.Duration, "duration", 5*time.Second, "duration of each measurement")
	f.BoolVar(&o.Georep, "georep", false, "measure a 2-region deployment (async and sync max, async lag) instead of the standalone")
	f.Float64Var(&o.LagRate, "lag-rate", 10000, "msgs/s of the georep lag measurement")
	f.StringVar(&o.Dir, "dir", "", "data directory (default: a temp dir under the current directory)")
	return c
}

// newScaleBenchCmd: `bench scale` (make bench-scale): one broker holding
// many topics.
func newScaleBenchCmd() *cobra.Command {
	var o bench.ScaleOptions
	c := benchCmd("scale", "One broker holding --topics topics (each a ledger and a subscription), created over raw Pulsar-protocol connections: memory, lookups, etcd size", &o.MeridianBin, &o.Command,
		func(ctx context.Context) error { return bench.RunScale(ctx, o, os.Stdout) })
	f := c.Flags()
	f.StringVar(&o.Out, "out", "", "write the report into this markdown file")
	f.StringVar(&o.Dir, "dir", "", "data directory (default: a temp dir under the current directory)")
	f.IntVar(&o.Topics, "topics", 100000, "topics to create")
	f.IntVar(&o.Conns, "conns", 64, "raw protocol connections creating topics in parallel")
	f.DurationVar(&o.TimeBox, "time-box", 25*time.Minute, "stop creating after this long")
	f.StringVar(&o.ProfileDir, "profile-dir", "bin/bench-profiles", "where the idle broker's CPU and allocation profiles go")
	binFlag(f, &o.MeridianBin, "the deployment runs")
	return c
}
