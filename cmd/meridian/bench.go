package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/bench"
	"github.com/spf13/cobra"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Benchmarks (make bench)"}
	var o bench.StorageOptions
	storage := &cobra.Command{
		Use:   "storage",
		Short: "Disk fsync rate vs bookie add path through the ledger client (E=Qw=3, Qa=2)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			return bench.RunStorage(ctx, o, os.Stdout)
		},
	}
	f := storage.Flags()
	f.StringVar(&o.Out, "out", "", "also write the table into this markdown file (BENCHMARKS.md)")
	f.StringVar(&o.Dir, "dir", "", "directory on the disk to measure (default: a temp dir under the current directory)")
	f.DurationVar(&o.Duration, "duration", 0, "duration of each measurement (default 5s)")
	f.IntVar(&o.Rounds, "rounds", 0, "alternating rounds of each measurement (default 2)")
	cmd.AddCommand(storage, newBrokerBenchCmd("broker", false), newBrokerBenchCmd("all", true), newGeorepBenchCmd())
	return cmd
}

// newGeorepBenchCmd: `bench georep`, a 2-region deployment (internal/up)
// measured against a single-region namespace of the same run.
func newGeorepBenchCmd() *cobra.Command {
	var o bench.GeorepOptions
	var modes string
	c := &cobra.Command{
		Use:   "georep",
		Short: "Geo-replication: produce rate and latency per replication mode vs single region, replication lag and throughput, in one table",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			if o.MeridianBin == "" {
				// This binary has the broker, bookie and etcd commands too.
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				o.MeridianBin = exe
			}
			o.Modes = splitModes(modes)
			o.Command = "meridian " + strings.Join(os.Args[1:], " ")
			return bench.RunGeorep(ctx, o, os.Stdout)
		},
	}
	f := c.Flags()
	f.StringVar(&o.Out, "out", "", "also write the table into this markdown file (BENCHMARKS.md)")
	f.StringVar(&o.Dir, "dir", "", "directory for the deployment's data (default: a temp dir under the current directory)")
	f.DurationVar(&o.Duration, "duration", 15*time.Second, "duration of each measurement (7 of them: about 2.5 min in all at 15s)")
	f.StringVar(&modes, "modes", "async,sync,stretched", "replication modes to measure, comma-separated (async, sync, stretched)")
	f.IntVar(&o.Size, "size", 1024, "payload bytes per message (at least 16)")
	f.IntVar(&o.Producers, "producers", 1, "producers per max-rate measurement, each on its own topic and connection")
	f.IntVar(&o.MaxPending, "max-pending", 2000, "producers' MaxPendingMessages")
	f.StringVar(&o.MeridianBin, "meridian-bin", "", "meridian binary the deployment runs (default: this binary)")
	return c
}

func splitModes(s string) []string {
	var out []string
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// newBrokerBenchCmd: `bench broker` (broker vs the bookie add path) and
// `bench all` (the same plus the disk's fsync rate: one table; then the
// geo-replication section).
func newBrokerBenchCmd(use string, disk bool) *cobra.Command {
	o := bench.BrokerOptions{Disk: disk}
	var georepDuration time.Duration
	short := "Broker (meridian standalone via pulsar-client-go) vs the bookie add path, in one table"
	if disk {
		short = "Disk fsync rate, bookie add path and broker side by side in one table, then the georep section (make bench)"
	}
	c := &cobra.Command{
		Use:   use,
		Short: short,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			if o.MeridianBin == "" {
				// This binary has the standalone command too.
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				o.MeridianBin = exe
			}
			o.Command = "meridian " + strings.Join(os.Args[1:], " ")
			if err := bench.RunBroker(ctx, o, os.Stdout); err != nil || !disk {
				return err
			}
			// `bench all`: the geo-replication section after the others,
			// appended to the same file.
			g := bench.GeorepOptions{Out: o.Out, Append: o.Out != "", Duration: georepDuration, MeridianBin: o.MeridianBin, Command: o.Command}
			if o.Dir != "" {
				g.Dir = filepath.Join(o.Dir, "georep")
			}
			fmt.Fprintf(os.Stdout, "\ngeo-replication ...\n")
			return bench.RunGeorep(ctx, g, os.Stdout)
		},
	}
	f := c.Flags()
	f.StringVar(&o.Out, "out", "", "also write the table into this markdown file (BENCHMARKS.md)")
	f.StringVar(&o.Dir, "dir", "", "directory on the disk to measure (default: a temp dir under the current directory)")
	f.DurationVar(&o.Duration, "duration", 0, "duration of each measurement (default 5s)")
	f.IntVar(&o.Rounds, "rounds", 0, "alternating rounds of each measurement (default 4)")
	f.StringVar(&o.MeridianBin, "meridian-bin", "", "meridian binary to run as the standalone (default: this binary)")
	f.IntVar(&o.Producers, "producers", 0, "producers per produce measurement, each on its own topic and connection (default 1)")
	f.IntVar(&o.MaxPending, "max-pending", 0, "producers' MaxPendingMessages (default 2000)")
	f.IntVar(&o.BookieInflight, "bookie-inflight", 0, "adds in flight for the bookie 1 KiB reference row (default 1000)")
	if disk {
		f.DurationVar(&georepDuration, "georep-duration", 15*time.Second, "duration of each geo-replication measurement")
	}
	return c
}
