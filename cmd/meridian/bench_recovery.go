package main

import (
	"os"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/bench"
	"github.com/spf13/cobra"
)

// newRecoveryBenchCmd: `bench recovery`, auto-recovery after a bookie loss
// (internal/bench/recovery.go).
func newRecoveryBenchCmd() *cobra.Command {
	var o bench.RecoveryOptions
	c := &cobra.Command{
		Use:   "recovery",
		Short: "Auto-recovery: time to full re-replication, copy throughput with and without the throttle, publish p99 during the copy vs before",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			o.Command = "meridian " + strings.Join(os.Args[1:], " ")
			return bench.RunRecovery(ctx, o, os.Stdout)
		},
	}
	f := c.Flags()
	f.StringVar(&o.Out, "out", "", "also write the table into this markdown file (BENCHMARKS.md)")
	f.StringVar(&o.Dir, "dir", "", "directory for the rigs' data (default: a temp dir under the current directory)")
	f.IntVar(&o.DataMiB, "data-mib", 96, "MiB written into closed ledgers before the loss (the lost bookie holds about half)")
	f.IntVar(&o.EntryBytes, "entry-bytes", 16<<10, "entry size of that data")
	f.Float64Var(&o.ThrottleMiBps, "throttle-mbps", 8, "copy cap of the throttled run, MiB/s")
	f.Float64Var(&o.Rate, "rate", 300, "publishes per second during the measurement")
	f.IntVar(&o.Size, "size", 1024, "publish payload bytes")
	f.DurationVar(&o.Baseline, "baseline", 10*time.Second, "how long publish latency is measured before the loss")
	f.IntVar(&o.Rounds, "rounds", 1, "rounds (each: a throttled and an unthrottled rig, alternating order)")
	return c
}
