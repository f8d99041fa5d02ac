package main

import (
	"os"
	"strings"

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
	cmd.AddCommand(storage, newBrokerBenchCmd("broker", false), newBrokerBenchCmd("all", true))
	return cmd
}

// newBrokerBenchCmd: `bench broker` (broker vs the bookie add path) and
// `bench all` (the same plus the disk's fsync rate: one table).
func newBrokerBenchCmd(use string, disk bool) *cobra.Command {
	o := bench.BrokerOptions{Disk: disk}
	short := "Broker (meridian standalone via pulsar-client-go) vs the bookie add path, in one table"
	if disk {
		short = "Disk fsync rate, bookie add path and broker side by side, in one table (make bench)"
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
			return bench.RunBroker(ctx, o, os.Stdout)
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
	return c
}
