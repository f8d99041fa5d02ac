package main

import (
	"context"
	"os"
	"time"

	"github.com/meridian-mq/meridian/tools/bench"
	"github.com/spf13/cobra"
)

// newRecoveryBenchCmd: `bench recovery`, auto-recovery after a bookie loss
// (tools/bench/recovery.go).
func newRecoveryBenchCmd() *cobra.Command {
	var o bench.RecoveryOptions
	c := benchCmd("recovery", "Auto-recovery: time to full re-replication, copy throughput with and without the throttle, publish p99 during the copy vs before", nil, &o.Command,
		func(ctx context.Context) error { return bench.RunRecovery(ctx, o, os.Stdout) })
	f := c.Flags()
	outDirFlags(f, &o.Out, &o.Dir, "for the rigs' data")
	f.IntVar(&o.DataMiB, "data-mib", 96, "MiB written into closed ledgers before the loss (the lost bookie holds about half)")
	f.IntVar(&o.EntryBytes, "entry-bytes", 16<<10, "entry size of that data")
	f.Float64Var(&o.ThrottleMiBps, "throttle-mbps", 8, "copy cap of the throttled run, MiB/s")
	f.Float64Var(&o.Rate, "rate", 300, "publishes per second during the measurement")
	f.IntVar(&o.Size, "size", 1024, "publish payload bytes")
	f.DurationVar(&o.Baseline, "baseline", 10*time.Second, "how long publish latency is measured before the loss")
	f.IntVar(&o.Rounds, "rounds", 1, "rounds (each: a throttled and an unthrottled rig, alternating order)")
	return c
}
