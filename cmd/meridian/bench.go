package main

import (
	"os"

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
	cmd.AddCommand(storage)
	return cmd
}
