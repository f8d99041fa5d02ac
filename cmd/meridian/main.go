// Command meridian is Meridian's single binary: one subcommand per role.
// It holds wiring only: flags and config files → Config → Run.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/meridian-mq/meridian/internal/config"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func main() {
	startPprof()
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "meridian:", err)
		os.Exit(1)
	}
}

var logLevel string

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "meridian",
		Short:         "Meridian: geo-replicated disaster-recovery messaging (Pulsar protocol, BookKeeper-style storage)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	rootFlags(root.PersistentFlags(), &logLevel)
	root.AddCommand(newEtcdCmd(), newBookieCmd(), newStandaloneCmd(), newBrokerCmd(), newUpCmd(), newAutorecoveryCmd(), newAdminCmd(), newBenchCmd())
	root.AddCommand(newProduceCmd(), newConsumeCmd(), newDrillCmd(), newHealthCmd(), newConfigDocCmd())
	return root
}

// rootFlags are the flags of every command (persistent on the root).
func rootFlags(f *pflag.FlagSet, level *string) {
	f.StringVar(level, "log-level", "info", "log level: debug, info, warn, error")
	config.Bind(f, "log-level", "log.level")
}

func logger() *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

// signalContext is cancelled on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
